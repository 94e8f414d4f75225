//! What makes an image lexicon a lexicon: few terms, and the strongest ones words of what the
//! picture shows (issue 35). Three pieces on top of the paper's objectives:
//!
//! - [`top_k`] (`lexlip_model::pooling::top_k`, which the encoders apply too): top-K pooling. Only the K largest weights of each image lexicon survive, in
//!   training as at indexing, so the vector the index stores is the one that was trained.
//! - [`grounding`]: caption-word grounding (STAIR, EMNLP 2023, its first stage): the image
//!   lexicons are contrasted with the batch's captions taken as bags of words (IDF-weighted,
//!   [`Idf`]), so an image's strongest terms become the words that tell its caption from the
//!   others.
//! - [`FlopsSchedule`] and [`TopKSchedule`]: a FLOPS weight per side, with SPLADE's quadratic
//!   warm-up, and a top-K that narrows from the whole vocabulary to K over the same warm-up, so
//!   sparsity is asked for once the lexicons mean something (cut to K from the first step, every
//!   image keeps the same K terms and the towers never learn to tell images apart).
//!
//! ```text
//! pooled logits m ──▶ p = log(1 + relu(m)) ──┬─▶ top_k(p, K) ──▶ contrastive (BaCo / MoCo) + λ_v FLOPS
//!                                           └─▶ contrastive vs IDF bags of caption words (grounding)
//! ```
//!
//! Grounding reads the lexicon before the cut: after it only the K kept terms get a gradient,
//! so a caption word outside them could never rise in (measured on a GPU: grounding stayed
//! near chance for 1,000 steps and the strongest terms were noise).

use candle_core::{Device, Tensor};

use crate::error::Result;
use crate::nn::{l2_normalize, log_softmax};
use crate::text::TextTokenizer;

/// `(batch, vocab)` weights cut to the `k` largest per row; see
/// [`lexlip_model::pooling::top_k`].
pub fn top_k(p: &Tensor, k: usize) -> Result<Tensor> {
    Ok(lexlip_model::pooling::top_k(p, k)?)
}

/// Which common terms are no grounding targets: those in more than `max_df` of the captions
/// (a corpus's templates), but for the `kept` ids (common words that tell pictures apart).
#[derive(Debug, Clone, PartialEq)]
pub struct DfCap {
    pub max_df: f64,
    pub kept: Vec<u32>,
}

/// Inverse document frequency of every vocabulary term over a corpus's captions,
/// `ln(N / df)`, and zero for the terms that are never grounding targets: special tokens,
/// pieces without a letter or digit (punctuation), terms in more than a share of the captions,
/// and terms no caption has.
#[derive(Debug, Clone, PartialEq)]
pub struct Idf {
    pub weights: Vec<f32>,
}

impl Idf {
    /// `captions` are token-id rows (with `[CLS]`/`[SEP]`) over a vocabulary of `vocab`
    /// terms, each term counted once per caption; `is_word(t)` tells the terms that can be
    /// targets ([`TextTokenizer::is_word_piece`]); terms in more than `cap.max_df` of the
    /// captions get 0 unless `cap.kept` lists them.
    pub fn from_captions<'a>(
        captions: impl IntoIterator<Item = &'a [u32]>,
        vocab: usize,
        cap: &DfCap,
        is_word: impl Fn(u32) -> bool,
    ) -> Self {
        let mut df = vec![0u32; vocab];
        let mut n = 0u32;
        let mut seen: Vec<u32> = Vec::new();
        for row in captions {
            n += 1;
            seen.clear();
            seen.extend(row.iter().copied().filter(|&t| (t as usize) < vocab));
            seen.sort_unstable();
            seen.dedup();
            for &t in &seen {
                df[t as usize] += 1;
            }
        }
        let weights = (0..vocab)
            .map(|t| {
                let share = f64::from(df[t]) / f64::from(n.max(1));
                let common = share > cap.max_df && !cap.kept.contains(&(t as u32));
                if df[t] == 0 || common || !is_word(t as u32) {
                    0.0
                } else {
                    (f64::from(n) / f64::from(df[t])).ln() as f32
                }
            })
            .collect();
        Self { weights }
    }

    /// [`Idf::from_captions`] with the tokenizer's vocabulary and word pieces without the
    /// function words `lexlip eval` does not count as caption words either
    /// (`lexlip_model::vocab::STOPWORDS`), and terms in more than `max_df` of the captions
    /// ([`crate::options::MAX_TARGET_DF`] by default) left out, but for the pieces of `kept`.
    pub fn of_corpus<'a>(
        captions: impl IntoIterator<Item = &'a [u32]>,
        tokenizer: &TextTokenizer,
        max_df: f64,
        kept: &[String],
    ) -> Result<Self> {
        let content = content_words(tokenizer);
        let cap = DfCap {
            max_df,
            kept: crate::expansion::word_ids(tokenizer, kept)?,
        };
        Ok(Self::from_captions(captions, tokenizer.vocab, &cap, |t| {
            content[t as usize]
        }))
    }

    pub fn to_tensor(&self, device: &Device) -> Result<Tensor> {
        Ok(Tensor::from_slice(
            &self.weights,
            self.weights.len(),
            device,
        )?)
    }
}

/// For every vocabulary id, whether it is a content word: a word piece with a letter or digit
/// ([`TextTokenizer::is_word_piece`]) that is no function word (`lexlip_model::vocab::STOPWORDS`,
/// which `lexlip eval` does not count as caption words either).
pub fn content_words(tokenizer: &TextTokenizer) -> Vec<bool> {
    let stop: std::collections::HashSet<&str> =
        lexlip_model::vocab::STOPWORDS.iter().copied().collect();
    (0..tokenizer.vocab as u32)
        .map(|t| {
            tokenizer.is_word_piece(t)
                && !tokenizer
                    .token(t)
                    .is_some_and(|w| stop.contains(w.as_str()))
        })
        .collect()
}

/// The grounding targets of a batch: each caption's bag of target words, every occurrence
/// weighted by the term's IDF (`idf`, `(vocab)`; 0 for words that are no targets), scaled to
/// unit length → `(batch, vocab)`, and `(batch)` 1 where a caption has any target word (0: the
/// row is left out).
///
/// Unit length keeps the grounding's similarities on the scale of the lexicon weights: raw
/// IDF bags (weights of 3-9 per word) made them ten times BaCo's, and their gradient kept the
/// image tower from learning BaCo at all (measured: BaCo at chance for 900 steps on a GPU).
pub fn grounding_targets(ids: &Tensor, mask: &Tensor, idf: &Tensor) -> Result<(Tensor, Tensor)> {
    let (b, t) = ids.dims2()?;
    let (vocab, dtype) = (idf.dim(0)?, idf.dtype());
    let w = idf
        .index_select(&ids.flatten_all()?, 0)?
        .reshape((b, t))?
        .mul(&mask.to_dtype(dtype)?)?;
    let bag = Tensor::zeros((b, vocab), dtype, ids.device())?.scatter_add(
        &ids.contiguous()?,
        &w.contiguous()?,
        1,
    )?;
    let has = bag.sum(1)?.gt(0.0)?.to_dtype(dtype)?;
    Ok((l2_normalize(&bag)?, has))
}

/// Caption-word grounding, STAIR's first stage: the image lexicons `p` `(batch, vocab)` against
/// the batch's caption bags of words `bags` ([`grounding_targets`]) in a symmetric in-batch
/// contrastive loss at `tau` (image `i`'s caption is its positive, the others' are negatives),
/// mean over the rows with targets (`has`). A word only earns weight where it tells an image's
/// caption from the others: one that many captions share ("with", "hand") raises the
/// negatives' scores as much as the positive's, so an image learns its own words rather than
/// the corpus's most frequent ones.
pub fn grounding(p: &Tensor, bags: &Tensor, has: &Tensor, tau: f64) -> Result<Tensor> {
    let b = p.dim(0)?;
    let sim = (p.matmul(&bags.t()?)? / tau)?;
    let diag = Tensor::arange(0u32, b as u32, p.device())?.unsqueeze(1)?;
    let own = |logits: &Tensor| -> Result<Tensor> {
        Ok(log_softmax(logits)?.gather(&diag, 1)?.squeeze(1)?.neg()?)
    };
    let per_row = (own(&sim)? + own(&sim.t()?.contiguous()?)?)?;
    let rows = (has.sum_all()? * 2.0)?.maximum(1.0)?;
    Ok((per_row * has)?.sum_all()?.div(&rows)?)
}

/// Caption-word likelihood over the vocabulary: `−Σ_w q_w · log softmax(z / tau)_w` per row,
/// the softmax over the `allowed` words only, `q` the caption's allowed target words as a
/// distribution (the IDF bag of [`grounding_targets`] over its sum), mean over the rows with
/// such words (`has`, and at least one allowed target).
///
/// `z` are a head's logits, before its relu: a word below 0 there has weight 0 and, through
/// the lexicon, no gradient, so a caption word that starts below 0 for its image (measured: the
/// Noto dog face's `dog` at −0.7, rank 1,014 of the vocabulary, after training on its own
/// captions) would never rise. Why beside [`grounding`]: grounding contrasts an image with the
/// *batch's* caption bags, so a word that is in none of them (a neighbour concept, a style
/// word such as "hair" on the held-out drawings) costs only FLOPS; here every allowed word of
/// the vocabulary competes with the caption's own.
pub fn caption_words(
    z: &Tensor,
    allowed: &Tensor,
    bags: &Tensor,
    has: &Tensor,
    tau: f64,
) -> Result<Tensor> {
    let allowed = allowed.to_dtype(z.dtype())?;
    // Words that may not carry weight leave the softmax (−10⁴ / τ: exp underflows to 0).
    let masked = z
        .broadcast_mul(&allowed)?
        .broadcast_add(&((&allowed - 1.0)? * 1e4)?)?;
    let bags = bags.broadcast_mul(&allowed)?;
    let mass = bags.sum_keepdim(1)?;
    let has = (has * mass.squeeze(1)?.gt(0.0)?.to_dtype(z.dtype())?)?;
    let q = bags.broadcast_div(&mass.maximum(1e-12)?)?;
    let per_row = (q * log_softmax(&(masked / tau)?)?)?.sum(1)?.neg()?;
    let rows = has.sum_all()?.maximum(1.0)?;
    Ok((per_row * has)?.sum_all()?.div(&rows)?)
}

/// FLOPS weights per side at a step: `λ · min(1, (step / warmup_steps)²)` (SPLADE's quadratic
/// warm-up; no warm-up when `warmup_steps` is 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlopsSchedule {
    pub image: f64,
    pub text: f64,
    pub warmup_steps: u64,
}

/// FLOPS weights of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flops {
    pub image: f64,
    pub text: f64,
}

impl Flops {
    /// The same weight on both sides (the paper's single λ).
    pub const fn both(lambda: f64) -> Self {
        Self {
            image: lambda,
            text: lambda,
        }
    }
}

impl FlopsSchedule {
    /// The run's schedule: `--flops-image` / `--flops-text` (else `--flops-lambda`), warming
    /// up over `--flops-warmup` of its `total` steps.
    pub fn of(opts: &crate::options::TrainOptions, total: u64) -> Self {
        Self {
            image: opts.lexicon.flops_image.unwrap_or(opts.method.flops_lambda),
            text: opts.lexicon.flops_text.unwrap_or(opts.method.flops_lambda),
            warmup_steps: (opts.lexicon.flops_warmup * total as f64).round() as u64,
        }
    }

    pub fn at(&self, step: u64) -> Flops {
        let ramp = if self.warmup_steps == 0 || step >= self.warmup_steps {
            1.0
        } else {
            (step as f64 / self.warmup_steps as f64).powi(2)
        };
        Flops {
            image: self.image * ramp,
            text: self.text * ramp,
        }
    }
}

/// The top-K of image lexicons at a step: every term at step 0, then geometrically fewer,
/// `K · (vocab / K)^(1 - step / warmup_steps)`, down to `K` at the end of the warm-up and after.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopKSchedule {
    /// The final K (0: no cut at any step).
    pub k: usize,
    pub vocab: usize,
    pub warmup_steps: u64,
}

impl TopKSchedule {
    pub fn at(&self, step: u64) -> usize {
        if self.k == 0 || self.k >= self.vocab || step >= self.warmup_steps {
            return self.k;
        }
        let left = 1.0 - step as f64 / self.warmup_steps as f64;
        let k = self.k as f64 * (self.vocab as f64 / self.k as f64).powf(left);
        (k.round() as usize).clamp(self.k, self.vocab)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IDF by hand: 4 captions over 6 terms; 0 and 1 play [CLS]/[SEP] (no words); term 5 is
    /// a word no caption has.
    #[test]
    fn idf_counts_each_caption_once() {
        let captions: Vec<Vec<u32>> = vec![
            vec![0, 2, 3, 2, 1],
            vec![0, 2, 1],
            vec![0, 4, 1],
            vec![0, 3, 9, 1], // 9 is outside the vocabulary: ignored
        ];
        let cap = |max_df, kept: &[u32]| DfCap {
            max_df,
            kept: kept.to_vec(),
        };
        let idf = Idf::from_captions(captions.iter().map(Vec::as_slice), 6, &cap(1.0, &[]), |t| {
            t >= 2
        });
        let ln = |x: f64| x.ln() as f32;
        assert_eq!(
            idf.weights,
            vec![0.0, 0.0, ln(4.0 / 2.0), ln(4.0 / 2.0), ln(4.0), 0.0]
        );
        // Terms 2 and 3 are in half the captions: above a 30 % cap, no targets.
        let capped =
            Idf::from_captions(captions.iter().map(Vec::as_slice), 6, &cap(0.3, &[]), |t| {
                t >= 2
            });
        assert_eq!(capped.weights, vec![0.0, 0.0, 0.0, 0.0, ln(4.0), 0.0]);
        // … unless kept: term 3 stays a target at its IDF; a kept id that is no word does not.
        let kept = Idf::from_captions(
            captions.iter().map(Vec::as_slice),
            6,
            &cap(0.3, &[3, 1]),
            |t| t >= 2,
        );
        assert_eq!(kept.weights, vec![0.0, 0.0, 0.0, ln(2.0), ln(4.0), 0.0]);
    }

    /// Bags by hand: IDF 3 and 4 on terms 2 and 3 make a bag of length 5; a caption of
    /// special tokens only has no targets and stays all zero (no division by zero).
    #[test]
    fn grounding_bags_have_unit_length() {
        let dev = Device::Cpu;
        let idf = Tensor::new(&[0f32, 0.0, 3.0, 4.0], &dev).unwrap();
        let ids = Tensor::new(&[[0u32, 2, 3, 1], [0, 1, 0, 0]], &dev).unwrap();
        let mask = Tensor::new(&[[1u32, 1, 1, 1], [1, 1, 0, 0]], &dev).unwrap();
        let (bags, has) = grounding_targets(&ids, &mask, &idf).unwrap();
        assert_eq!(
            bags.to_vec2::<f32>().unwrap(),
            vec![vec![0.0, 0.0, 0.6, 0.8], vec![0.0; 4]]
        );
        assert_eq!(has.to_vec1::<f32>().unwrap(), vec![1.0, 0.0]);
    }

    #[test]
    fn top_k_narrows_geometrically_to_k() {
        let s = TopKSchedule {
            k: 64,
            vocab: 65_536,
            warmup_steps: 100,
        };
        assert_eq!(s.at(0), 65_536);
        assert_eq!(s.at(50), 2_048); // 64 · 1024^0.5
        assert_eq!(s.at(100), 64);
        assert_eq!(s.at(1_000), 64);
        assert_eq!(TopKSchedule { k: 0, ..s }.at(0), 0);
        assert_eq!(
            TopKSchedule {
                warmup_steps: 0,
                ..s
            }
            .at(0),
            64
        );
    }

    #[test]
    fn flops_warm_up_is_quadratic() {
        let s = FlopsSchedule {
            image: 0.4,
            text: 0.1,
            warmup_steps: 10,
        };
        assert_eq!(
            s.at(0),
            Flops {
                image: 0.0,
                text: 0.0
            }
        );
        let half = s.at(5);
        assert!((half.image - 0.1).abs() < 1e-12 && (half.text - 0.025).abs() < 1e-12);
        assert_eq!(
            s.at(10),
            Flops {
                image: 0.4,
                text: 0.1
            }
        );
        assert_eq!(
            s.at(99),
            Flops {
                image: 0.4,
                text: 0.1
            }
        );
        let none = FlopsSchedule {
            warmup_steps: 0,
            ..s
        };
        assert_eq!(
            none.at(0),
            Flops {
                image: 0.4,
                text: 0.1
            }
        );
    }
}
