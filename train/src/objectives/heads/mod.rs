//! Lexicon heads over a frozen dense model (`lexlip train --objective heads --backbone DIR`;
//! D2S, Nguyen et al., ECIR 2024). The backbone (lexlip's own dense dual encoder, CLIP or
//! SigLIP) encodes every image, caption and vocabulary word once into the
//! [`cache`](crate::cache); the two heads of [`lexlip_model::heads`] then train on cached
//! embeddings only, which is minutes on a CPU.
//!
//! A step, for a batch of pairs with backbone embeddings `x_v`, `x_l`:
//! ```text
//! p_v = top_K(log(1 + relu(W_v (x_v − c_v) + b_v)) ⊙ allowed)   image lexicons (K = --image-top-k)
//! p_l = top_k(log(1 + relu(W_l (x_l − c_l) + b_l)) ⊙ allowed)   caption lexicons (k = --text-top-k)
//! loss = InfoNCE(p_v·p_l / τ)                                  the sparse sides meet
//!      + distill · KL(softmax(x_v·x_l / τ_teacher) ‖ softmax(p_v·p_l / τ))   the dense model's ranking
//!      + λ_v FLOPS(p_v) + λ_l FLOPS(p_l)                       few terms, with warm-up
//!      + grounding · (G(l_v, bags) + G(l_l, bags))             caption words on top (STAIR)
//!      + cw_v · CW(z_v, bags) + cw_l · CW(z_l, bags)          …and above every other word
//! ```
//! where `l_v`, `l_l` are the lexicons before their top-K cut (a caption word outside the K
//! kept terms still gets the gradient that lifts it in), `G` contrasts a lexicon with the
//! batch's caption bags ([`crate::lexicon::grounding`]) and `CW` is the caption words' likelihood under a
//! softmax of a head's logits (`z_v = W_v (x_v − c_v) + b_v`, `z_l` likewise) over the allowed
//! words ([`crate::lexicon::caption_words`]; `--caption-words`, `--caption-words-text`): on the logits, because
//! a word the relu zeroes gets no gradient through the lexicon, so a caption word that starts
//! below 0 for its item would never rise.
//!
//! Both heads start as the backbone's own text embedding of every vocabulary word (scaled by
//! [`INIT_SCALE`]): before any step, an image's lexicon is the words the dense model finds
//! nearest to it — for words no training caption has too, which is what lets a lexicon name
//! concepts the heads were never trained on.

pub mod model;
pub mod step;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use lexlip_model::heads::{ALLOWED, HeadsConfig, IMAGE_HEAD, MODEL_TYPE, TEXT_HEAD};
use lexlip_model::vocab::is_whole_word;
use lexlip_model::{Encoders, LoadOptions};

use crate::cache::rows::{IMAGE_CHUNK, PairRows, build_cache, cache_dir, cached_corpus, flat};
use crate::cache::views::{Drawn, PairInputs, ViewSpec, drawn};
use crate::data::{self, Order};
use crate::error::{Result, TrainError};
use crate::expansion::{own_words, word_ids, words_without};
use crate::export::{copy_file, copy_files, copy_part, save_part, write_json};
use crate::grouping::Grouping;
use crate::lexicon::{FlopsSchedule, Idf, content_words, grounding_targets};
use crate::observe::{Observer, RunControl, Summary};
use crate::options::{TrainOptions, VocabBias};
use crate::params::snapshot;
use crate::steps::{Batches, Computed, Losses, Trained};
use crate::text::TextTokenizer;
pub use model::{HeadsModel, INIT_SCALE};
pub use step::{HeadsLosses, StepInputs, StepWeights, distillation, step_losses};

/// Terms a lexicon starts with on either side without a top-K, halved.
const DEFAULT_START_TERMS: usize = 64;

/// The dense model directory a `--backbone` path names: a LexLIP directory's `dense/`, or the
/// directory itself.
pub(crate) fn backbone_dir(path: &Path) -> PathBuf {
    let sub = path.join("dense");
    if lexlip_model::lexlip::has_model_config(&sub) {
        sub
    } else {
        path.to_path_buf()
    }
}

/// The vocabulary's `tokenizer.json`: `--tokenizer`, else the backbone's own when it is a
/// word-piece vocabulary (lexlip's dense dual encoder).
fn vocabulary_tokenizer(opts: &TrainOptions, backbone: &Path) -> Result<PathBuf> {
    if let Some(t) = &opts.model.tokenizer {
        return Ok(t.clone());
    }
    let own = lexlip_model::vocab::tokenizer_json(backbone);
    let word_pieces = std::fs::read_to_string(&own)
        .map(|t| t.contains("\"WordPiece\""))
        .unwrap_or(false);
    if word_pieces {
        return Ok(own);
    }
    Err(TrainError::invalid(format!(
        "{}: the backbone has no word-piece tokenizer.json to take the lexicon vocabulary \
         from; give the vocabulary the index will store as --tokenizer (e.g. a BERT \
         tokenizer.json such as a SPLADE model's)",
        backbone.display()
    )))
}

/// The terms a lexicon may hold: content words ([`content_words`]) that are whole words
/// ([`is_whole_word`]).
fn allowed_terms(tokenizer: &TextTokenizer) -> Vec<f32> {
    content_words(tokenizer)
        .into_iter()
        .enumerate()
        .map(|(t, content)| {
            let readable = tokenizer.token(t as u32).is_some_and(|w| is_whole_word(&w));
            if content && readable { 1.0 } else { 0.0 }
        })
        .collect()
}

/// Trains lexicon heads into `opts.out` (checkpoints, resume and Ctrl-C as `lexlip train`).
pub fn train(
    opts: &TrainOptions,
    control: &RunControl,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let Some(backbone_arg) = opts.model.backbone.clone() else {
        return Err(TrainError::invalid(
            "--objective heads trains lexicon heads over a frozen dense model: give it as \
             --backbone (a dense dual encoder from `lexlip train --objective dense`, a CLIP, \
             SigLIP or MobileCLIP directory)",
        ));
    };
    let (started, input, device) = crate::steps::begin(opts)?;
    let backbone_path = backbone_dir(&backbone_arg);
    let encoders = Encoders::load_with(&backbone_path, &device, &LoadOptions::default())?;
    let backbone = encoders.dense().ok_or_else(|| {
        TrainError::invalid(format!(
            "{}: not a dense model lexlip can load as a backbone (a dense dual encoder, CLIP, \
             SigLIP or MobileCLIP directory)",
            backbone_arg.display()
        ))
    })?;
    let dim = backbone.dim();
    let tokenizer_path = vocabulary_tokenizer(opts, &backbone_path)?;
    let tokenizer = TextTokenizer::load(&tokenizer_path, opts.data.max_length)?;
    observer.message(&format!(
        "backbone: {} ({dim} dims, frozen); lexicon vocabulary: {} ({} terms)",
        backbone_path.display(),
        tokenizer_path.display(),
        tokenizer.vocab
    ));
    let (mut corpus, corpus_key) = cached_corpus(&input, &tokenizer, &tokenizer_path, observer)?;
    let fitted = opts.fit_batch(corpus.pairs.len(), &mut |note| observer.message(note))?;
    let opts = fitted.as_ref().unwrap_or(opts);
    let corpus_key = crate::fingerprint::sha256_json(&corpus_key);
    let cache_dir = cache_dir(opts);
    let cache = build_cache(
        &cache_dir,
        &backbone_path,
        backbone,
        &corpus,
        &tokenizer,
        corpus_key,
        observer,
    )?;
    let view_count = opts.model.image_views;
    let views = ViewSpec::of(
        opts,
        backbone.image_processor(),
        serde_json::json!({ "corpus": cache.meta.corpus }),
        &backbone_path,
        dim,
        IMAGE_CHUNK,
    )
    .map(|spec| {
        crate::cache::views::cache(
            &cache_dir,
            &corpus.images,
            &spec,
            |images| Ok(flat(backbone.encode_images(images)?)),
            observer,
        )
    })
    .transpose()?;
    // The steps read the cache, each pair's image row and its caption's tokens: the rest of
    // the corpus (captions' text, image references and ids) goes, and the tokens are packed.
    let image_count = corpus.images.len();
    let rows = PairRows::take(&mut corpus);
    let allowed = allowed_terms(&tokenizer);
    let keep = |k: usize| {
        if k == 0 {
            2 * DEFAULT_START_TERMS
        } else {
            2 * k
        }
    };
    let model = HeadsModel::init(
        &cache,
        &allowed,
        [
            keep(opts.lexicon.image_top_k),
            keep(opts.lexicon.text_top_k),
        ],
        &device,
    )?;
    drop(encoders);
    let idf = Idf::of_corpus(
        (0..rows.len()).map(|p| rows.tokens(p)),
        &tokenizer,
        opts.lexicon.grounding_max_df,
        &opts.lexicon.grounding_words,
    )?;
    let params = model.params(opts.lexicon.vocab_bias);
    let order = Order::new(
        opts.optim.seed,
        rows.len() * (view_count + 1),
        opts.optim.batch_size,
    );
    let mut key = serde_json::json!({
        "options": opts.fingerprint_json(),
        "cache": cache.meta,
    });
    if let Some(views) = &views {
        key["views"] =
            serde_json::to_value(&views.meta).map_err(|e| TrainError::invalid(e.to_string()))?;
    }
    // Heads trained their biases whatever --vocab-bias said until they honoured it: a run
    // from then, recorded as `fixed`, must not resume with biases held still.
    if opts.lexicon.vocab_bias == VocabBias::Fixed {
        key["bias"] = serde_json::json!("shared");
    }
    let fingerprint = crate::fingerprint::sha256_json(&key);
    let trained = Trained::new(&model.store, "heads", &params, &order);
    let mut trainer = trained.resume(opts, control, started, fingerprint, &corpus, observer)?;
    let total = trainer.span.total;
    trainer.summary.images = image_count;
    trainer.summary.pairs = rows.len() * (view_count + 1);
    let flops = FlopsSchedule::of(opts, total);
    observer.message(&format!(
        "heads: image top-{} and text top-{}, τ {}, distillation ×{} (teacher τ {}), \
         grounding ×{}, caption words ×{} / ×{} (image / text, τ {}); {} pairs{}, {} steps",
        opts.lexicon.image_top_k,
        opts.lexicon.text_top_k,
        opts.method.tau,
        opts.lexicon.distill,
        opts.lexicon.teacher_tau,
        opts.lexicon.grounding,
        opts.lexicon.caption_words,
        opts.lexicon.caption_words_text,
        opts.lexicon.caption_words_tau,
        rows.len(),
        crate::cache::views::pairs_note(view_count),
        total
    ));
    if opts.method.tau < 0.1 || opts.optim.lr < 1e-3 {
        observer.message(&format!(
            "note: --tau {} and --lr {} are far from what the heads were measured with \
             (--tau 0.5 --lr 1e-2 --batch-size 128, their defaults; docs/training.md)",
            opts.method.tau, opts.optim.lr
        ));
    }
    let batches = PairIndices {
        order,
        rows: &rows,
        grouping: Grouping::asked(
            opts,
            PairInputs::new(&cache, views.as_ref(), &cache, &Device::Cpu),
            None,
            rows.len() * (view_count + 1),
        ),
    };
    let mut objective = HeadsSteps {
        model: &model,
        inputs: PairInputs::new(&cache, views.as_ref(), &cache, &device),
        idf: idf.to_tensor(&device)?,
        words: if opts.lexicon.query_expansion.is_some() || opts.lexicon.own_floor.is_some() {
            Some(words_without(
                &model.allowed,
                &word_ids(&tokenizer, &opts.lexicon.template_words)?,
            )?)
        } else {
            None
        },
        pad: tokenizer.pad,
        flops,
        weights: StepWeights {
            // The heads' lexicons mean something from the first step (they start as the
            // backbone's word embeddings), so they are cut to K from the first step, not
            // narrowed from the whole vocabulary as the towers' are (that would start with ten
            // thousand terms per side).
            image_k: opts.lexicon.image_top_k,
            text_k: opts.lexicon.text_top_k,
            text_expansion: opts.lexicon.query_expansion,
            own_floor: opts.lexicon.own_floor,
            tau: opts.method.tau,
            teacher_tau: opts.lexicon.teacher_tau,
            distill: opts.lexicon.distill,
            // Set each step from `flops`.
            flops_image: 0.0,
            flops_text: 0.0,
            grounding: opts.lexicon.grounding,
            caption_words: opts.lexicon.caption_words,
            caption_words_text: opts.lexicon.caption_words_text,
            caption_words_tau: opts.lexicon.caption_words_tau,
        },
    };
    trainer.steps(&mut objective, batches, observer)?;
    trainer.finish(
        &opts.run.out.join("heads").join("config.json"),
        || export(&model, &backbone_path, &tokenizer_path, dim, opts),
        || {
            Ok(serde_json::json!({
                "backbone": backbone_path,
                "backbone_sha256": crate::cache::fingerprint_dir(&backbone_path)?,
            }))
        },
    )
}

/// Each step's pair indices, in the run's order.
struct PairIndices<'a> {
    order: Order,
    rows: &'a PairRows,
    /// `--sampler grouped`: each epoch's order groups pairs (and views) the backbone finds
    /// alike.
    grouping: Option<Grouping<'a>>,
}

/// A batch: pair indices, their images' indices, which of each image's views it reads (0:
/// the picture itself) and their captions' tokens.
struct HeadsBatch {
    pairs: Drawn,
    tokens: Vec<Vec<u32>>,
}

impl Batches for PairIndices<'_> {
    type Batch = HeadsBatch;

    fn batch(&mut self, step: u64) -> Result<HeadsBatch> {
        if let Some(grouping) = &self.grouping {
            grouping.refresh(&mut self.order, self.rows, step)?;
        }
        let pairs = drawn(self.order.batch(step), self.rows);
        let tokens = pairs
            .pairs
            .iter()
            .map(|&p| self.rows.tokens(p).to_vec())
            .collect();
        Ok(HeadsBatch { pairs, tokens })
    }
}

struct HeadsSteps<'a> {
    model: &'a HeadsModel,
    /// The pairs' rows: the cache's, and with `--image-views` their pictures' views'.
    inputs: PairInputs<'a>,
    idf: Tensor,
    /// With `--query-expansion` or `--own-floor`: the terms a caption's lexicon may hold
    /// (allowed, no template words).
    words: Option<Tensor>,
    pad: u32,
    flops: FlopsSchedule,
    /// The run's loss weights; the FLOPS ones follow `flops` step by step.
    weights: StepWeights,
}

impl Losses for HeadsSteps<'_> {
    type Batch = HeadsBatch;

    fn losses(&mut self, step: u64, batch: HeadsBatch) -> Result<Computed> {
        let (image, text) = self.inputs.rows(&batch.pairs)?;
        let device = &self.inputs.device;
        let rows: Vec<&[u32]> = batch.tokens.iter().map(Vec::as_slice).collect();
        let (ids, mask, width) = data::padded(&rows, self.pad);
        let ids = Tensor::from_vec(ids, (rows.len(), width), device)?;
        let mask = Tensor::from_vec(mask, (rows.len(), width), device)?;
        let (bags, has) = grounding_targets(&ids, &mask.to_dtype(DType::F32)?, &self.idf)?;
        let own = match &self.words {
            Some(words) => Some(own_words(&ids, &mask, words)?),
            None => None,
        };
        let flops = self.flops.at(step);
        let HeadsLosses {
            total,
            parts,
            nnz: (nnz_image, nnz_text),
        } = step_losses(
            self.model,
            &StepInputs {
                image: &image,
                text: &text,
                bags: &bags,
                has: &has,
                own: own.as_ref().zip(self.words.as_ref()),
            },
            StepWeights {
                flops_image: flops.image,
                flops_text: flops.text,
                ..self.weights
            },
        )?;
        Ok(Computed {
            nnz_image: Some(nnz_image),
            nnz_text: Some(nnz_text),
            ..Computed::new(total, parts)
        })
    }
}

/// Writes the model directory: `dense/` (the backbone's files), `heads/` (weights, config, the
/// vocabulary's tokenizer) and `lexlip.json`; `heads/config.json` last of the heads' files.
fn export(
    model: &HeadsModel,
    backbone: &Path,
    tokenizer: &Path,
    dim: usize,
    opts: &TrainOptions,
) -> Result<()> {
    let out = &opts.run.out;
    // The copies read their vocabulary on their own, also where the backbone shares its model's.
    let dense = out.join("dense");
    copy_part(backbone, &dense)?;
    // A fused backbone's parts are directories; of them, only its teacher reads a vocabulary.
    let [teacher, tower, adapter] = lexlip_model::fused::PARTS;
    if backbone.join(teacher).is_dir() {
        copy_part(&backbone.join(teacher), &dense.join(teacher))?;
    }
    for part in [tower, adapter] {
        if backbone.join(part).is_dir() {
            copy_files(&backbone.join(part), &dense.join(part))?;
        }
    }
    let heads = out.join("heads");
    let mut tensors = snapshot(&model.store)?;
    for (name, c) in [
        (IMAGE_HEAD, &model.image_center),
        (TEXT_HEAD, &model.text_center),
    ] {
        tensors.insert(format!("{name}.center"), c.clone());
    }
    // Exactly 0 or 1: f16 keeps it.
    tensors.insert(ALLOWED.into(), model.allowed.clone());
    save_part(&heads, tensors, opts.run.save_dtype)?;
    copy_file(tokenizer, &heads.join("tokenizer.json"))?;
    let config = HeadsConfig {
        model_type: MODEL_TYPE.into(),
        dim,
        vocab_size: model.allowed.dims()[0],
        image_top_k: opts.lexicon.image_top_k,
        text_top_k: opts.lexicon.text_top_k,
    };
    write_json(&heads.join("config.json"), &config)?;
    let mut meta = serde_json::json!({
        "format": "lexlip",
        "source": "lexlip train --objective heads",
        "image_top_k": opts.lexicon.image_top_k,
    });
    if let Some(e) = opts.lexicon.query_expansion {
        let mut terms =
            lexlip_model::text::TextTerms::expansion(e, opts.lexicon.template_words.clone());
        terms.own_floor = opts.lexicon.own_floor.map(|s| s as f32);
        // Stored captions meet the image head as training's captions did: lifted.
        terms.document_floor = terms.own_floor;
        meta["text_terms"] =
            serde_json::to_value(&terms).map_err(|e| TrainError::invalid(e.to_string()))?;
    }
    write_json(&out.join("lexlip.json"), &meta)
}

#[cfg(test)]
mod tests {
    use crate::cache::rows::PairRows;
    use crate::data::{Corpus, Pair};

    /// Packed rows give back every pair's image and tokens (empty captions included), and the
    /// corpus they came from is emptied.
    #[test]
    fn pair_rows_give_back_what_was_packed() {
        let pairs = vec![
            Pair {
                image: 3,
                tokens: vec![101, 7, 8, 102],
            },
            Pair {
                image: 0,
                tokens: vec![],
            },
            Pair {
                image: 3,
                tokens: vec![101, 9, 102],
            },
        ];
        let mut corpus = Corpus {
            pairs: pairs.clone(),
            texts: Some(vec!["a".into(), "".into(), "b".into()]),
            image_ids: vec!["x".into(); 4],
            ..Corpus::default()
        };
        let rows = PairRows::take(&mut corpus);
        assert_eq!(rows.len(), 3);
        for (p, pair) in pairs.iter().enumerate() {
            assert_eq!(rows.image(p), pair.image);
            assert_eq!(rows.tokens(p), pair.tokens.as_slice());
        }
        assert!(corpus.pairs.is_empty() && corpus.texts.is_none() && corpus.image_ids.is_empty());
    }
}
