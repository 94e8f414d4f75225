//! Lexicon heads over a frozen dense model (`lexlip train --objective heads --backbone DIR`;
//! D2S, Nguyen et al., ECIR 2024). The backbone (lexlip's own dense dual encoder, CLIP or
//! SigLIP) encodes every image, caption and vocabulary word once into the [`cache`]; the two
//! heads of [`lexlip_model::heads`] then train on cached embeddings only, which is minutes on
//! a CPU.
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
//! batch's caption bags ([`grounding`]) and `CW` is the caption words' likelihood under a
//! softmax of a head's logits (`z_v = W_v (x_v − c_v) + b_v`, `z_l` likewise) over the allowed
//! words ([`caption_words`]; `--caption-words`, `--caption-words-text`): on the logits, because
//! a word the relu zeroes gets no gradient through the lexicon, so a caption word that starts
//! below 0 for its item would never rise.
//!
//! Both heads start as the backbone's own text embedding of every vocabulary word (scaled by
//! [`INIT_SCALE`]): before any step, an image's lexicon is the words the dense model finds
//! nearest to it — for words no training caption has too, which is what lets a lexicon name
//! concepts the heads were never trained on.

pub mod cache;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use lexlip_model::heads::{ALLOWED, HeadsConfig, IMAGE_HEAD, MODEL_TYPE, TEXT_HEAD};
use lexlip_model::{DenseEncoder, Encoders, LoadOptions};
use rayon::prelude::*;

use crate::checkpoint;
use crate::data::{self, Corpus, Order};
use crate::error::{Result, TrainError};
use crate::expansion::{expansion_control, own_words, template_ids, words_without};
use crate::export::{copy_files, json_bytes, save_weights};
use crate::lexicon::{
    FlopsSchedule, Idf, caption_words, content_words, grounding, grounding_targets,
};
use crate::losses::{flops, in_batch};
use crate::nn::log_softmax;
use crate::observe::{Observer, RunControl, Summary};
use crate::optim::Param;
use crate::options::{Sampler, TrainOptions, VocabBias};
use crate::params::snapshot;
use crate::sampler::{Collected, FEATURE_TERMS, SparseRow, grouped_order};
use crate::steps::{Batches, Computed, Objective, Span};
use crate::text::TextTokenizer;
use crate::views::{ViewSpec, batch_rows, drawn};
use cache::{CacheMeta, EmbeddingCache, Section};

/// Cache sections.
const IMAGES: &str = "images";
const TEXTS: &str = "texts";
const WORDS: &str = "words";

/// The heads' starting scale: a term's logit is 5 × the cosine between the input and the
/// word, so a word at cosine 0.3 (a close one, for a dense model trained at τ 0.05) starts
/// near weight 1 (`log(1 + 1.5)`) and a lexicon pair's dot product near the tens, where the
/// in-batch softmax at τ ~0.5 is neither flat nor saturated.
pub const INIT_SCALE: f64 = 5.0;

/// Terms a lexicon starts with on either side without a top-K, halved.
const DEFAULT_START_TERMS: usize = 64;

/// Images per backbone pass while caching.
const IMAGE_CHUNK: usize = 64;
const TEXT_CHUNK: usize = 256;

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
    let own = backbone.join("tokenizer.json");
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

/// A word piece as text the backbone can embed (`##ing` → `ing`).
fn word_text(token: &str) -> &str {
    token.strip_prefix("##").unwrap_or(token)
}

/// The terms a lexicon may hold: content words ([`content_words`]) that are whole words (no
/// `##` continuation pieces, which read as fragments: "##ump", "##fly"), of two or more
/// characters unless a digit ("t" and "k" name nothing; "1" names a keycap).
fn allowed_terms(tokenizer: &TextTokenizer) -> Vec<f32> {
    content_words(tokenizer)
        .into_iter()
        .enumerate()
        .map(|(t, content)| {
            let readable = tokenizer.token(t as u32).is_some_and(|w| {
                !w.starts_with("##")
                    && (w.chars().count() >= 2 || w.chars().all(|c| c.is_ascii_digit()))
            });
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
    let started = Instant::now();
    let Some(backbone_arg) = opts.model.backbone.clone() else {
        return Err(TrainError::invalid(
            "--objective heads trains lexicon heads over a frozen dense model: give it as \
             --backbone (a dense dual encoder from `lexlip train --objective dense`, a CLIP, \
             SigLIP or MobileCLIP directory)",
        ));
    };
    crate::run::prepare_out(&opts.run.out)?;
    let input = data::input(opts)?;
    let device = lexlip_model::device(opts.run.gpu)?;
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
    let (mut corpus, corpus_key) =
        cached_corpus(opts, &input, &tokenizer, &tokenizer_path, observer)?;
    let corpus_key = crate::run::sha256_json(&corpus_key);
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
        crate::views::cache(
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
    let idf = Idf::of_corpus((0..rows.len()).map(|p| rows.tokens(p)), &tokenizer);
    let params = model.params(opts.lexicon.vocab_bias);
    let mut adam = crate::steps::optimizer(opts);
    let order = Order::new(
        opts.optim.seed,
        rows.len() * (view_count + 1),
        opts.optim.batch_size,
    );
    let steps_per_epoch = order.steps_per_epoch();
    let total = crate::steps::total_steps(opts, steps_per_epoch);
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
    let fingerprint = crate::run::sha256_json(&key);
    let start = crate::steps::resume_store(
        opts,
        &fingerprint,
        &model.store,
        "heads",
        &mut adam,
        &params,
        total,
        observer,
    )?;
    let stop_at = opts.run.stop_at.unwrap_or(total).min(total);
    let mut summary = Summary::starting(opts, 1, start, total, &corpus);
    summary.images = image_count;
    summary.pairs = rows.len() * (view_count + 1);
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
        crate::views::pairs_note(view_count),
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
        grouping: (opts.optim.sampler == Sampler::Grouped).then_some(Grouping {
            cache: &cache,
            seed: opts.optim.seed,
            batch: opts.optim.batch_size,
            space: opts.optim.group_size,
        }),
    };
    let mut objective = HeadsSteps {
        model: &model,
        cache: &cache,
        views: views.as_ref(),
        params: &params,
        idf: idf.to_tensor(&device)?,
        words: match opts.lexicon.query_expansion {
            Some(_) => Some(words_without(
                &model.allowed,
                &template_ids(&tokenizer, &opts.lexicon.template_words)?,
            )?),
            None => None,
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
        device: device.clone(),
    };
    let span = Span {
        start,
        end: stop_at,
        total,
        steps_per_epoch,
    };
    crate::steps::run(
        opts,
        control,
        &fingerprint,
        &mut objective,
        batches,
        &mut adam,
        span,
        observer,
        &mut summary,
    )?;
    crate::steps::write_out(
        opts,
        &mut summary,
        started,
        span,
        &opts.run.out.join("heads").join("config.json"),
        || export(&model, &backbone_path, &tokenizer_path, dim, opts),
        |summary| write_record(opts, control, summary, &fingerprint, &backbone_path),
    )?;
    Ok(summary)
}

/// The corpus of a run over cached embeddings, with its captions (the skipped items said), and
/// what identifies it for a cache: the input, the tokenizer and the counts. At least one batch.
pub(crate) fn cached_corpus(
    opts: &TrainOptions,
    input: &lexlip_corpus::Input,
    tokenizer: &TextTokenizer,
    tokenizer_path: &Path,
    observer: &mut dyn Observer,
) -> Result<(Corpus, serde_json::Value)> {
    let corpus = data::load_with_texts(input, tokenizer, &mut |d, t| observer.checking(d, t))?;
    for e in &corpus.examples {
        observer.message(&format!("skipped {e}"));
    }
    if corpus.pairs.len() < opts.optim.batch_size {
        return Err(TrainError::Corpus(format!(
            "{} usable (image, caption) pairs but --batch-size is {}: the corpus must hold at \
             least one batch",
            corpus.pairs.len(),
            opts.optim.batch_size
        )));
    }
    let key = serde_json::json!({
        "input": input.signature()?,
        "tokenizer": crate::run::sha256_file(tokenizer_path)?,
        "pairs": corpus.pairs.len(),
        "images": corpus.images.len(),
    });
    Ok((corpus, key))
}

/// `--cache`, or `OUT/cache`.
pub(crate) fn cache_dir(opts: &TrainOptions) -> PathBuf {
    opts.model
        .cache
        .clone()
        .unwrap_or_else(|| opts.run.out.join("cache"))
}

/// Encodes what the cache lacks: every image, every pair's caption, every vocabulary word.
fn build_cache(
    dir: &Path,
    backbone_path: &Path,
    backbone: &dyn DenseEncoder,
    corpus: &Corpus,
    tokenizer: &TextTokenizer,
    corpus_key: String,
    observer: &mut dyn Observer,
) -> Result<EmbeddingCache> {
    let texts = corpus
        .texts
        .as_ref()
        .ok_or_else(|| TrainError::invalid("the corpus was read without its captions"))?;
    let words: Vec<String> = (0..tokenizer.vocab as u32)
        .map(|t| {
            tokenizer
                .token(t)
                .map(|w| word_text(&w).to_string())
                .unwrap_or_default()
        })
        .collect();
    let meta = CacheMeta::new(
        backbone_path,
        corpus_key,
        backbone.dim(),
        &[
            (IMAGES, corpus.images.len()),
            (TEXTS, texts.len()),
            (WORDS, words.len()),
        ],
    )?;
    observer.message(&format!(
        "embedding cache {}: {} images, {} captions, {} vocabulary words",
        dir.display(),
        corpus.images.len(),
        texts.len(),
        words.len()
    ));
    let encode_texts = |rows: &[String]| text_rows(rows, |t| backbone.encode_texts(t));
    let sections = vec![
        Section {
            name: IMAGES,
            rows: corpus.images.len(),
            encode: Box::new(|start, end| {
                image_rows(
                    &corpus.images[start..end],
                    IMAGE_CHUNK,
                    |bytes, name| Ok(backbone.preprocess_image(bytes, name)?),
                    |images| Ok(flat(backbone.encode_images(images)?)),
                )
            }),
        },
        Section {
            name: TEXTS,
            rows: texts.len(),
            encode: Box::new(|start, end| encode_texts(&texts[start..end])),
        },
        Section {
            name: WORDS,
            rows: words.len(),
            encode: Box::new(|start, end| encode_texts(&words[start..end])),
        },
    ];
    EmbeddingCache::build(dir, meta, sections, &mut |d, t| observer.encoding(d, t))
}

/// A cache section's rows for `images`: each read and preprocessed in parallel by `preprocess`
/// (its bytes and name), `chunk` at a time, then `encode`d together; rows in input order.
pub(crate) fn image_rows<P: Send>(
    images: &[lexlip_corpus::ImageRef],
    chunk: usize,
    preprocess: impl Fn(&[u8], &str) -> Result<P> + Sync,
    encode: impl Fn(&[P]) -> Result<Vec<f32>>,
) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for part in images.chunks(chunk) {
        let pre = part
            .par_iter()
            .map(|r| {
                let bytes = data::read_image(r).map_err(|(_, m)| TrainError::Corpus(m))?;
                preprocess(&bytes, &r.name())
            })
            .collect::<Result<Vec<_>>>()?;
        out.extend(encode(&pre)?);
    }
    Ok(out)
}

/// A cache section's rows for `texts`, encoded [`TEXT_CHUNK`] at a time.
pub(crate) fn text_rows(
    texts: &[String],
    encode: impl Fn(&[&str]) -> lexlip_model::Result<Vec<lexlip_proto::DenseVector>>,
) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for chunk in texts.chunks(TEXT_CHUNK) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        out.extend(flat(encode(&refs)?));
    }
    Ok(out)
}

/// Embeddings as cache rows, one after another.
fn flat(v: Vec<lexlip_proto::DenseVector>) -> Vec<f32> {
    v.into_iter().flat_map(|d| d.as_slice().to_vec()).collect()
}

/// The two heads' parameters.
pub struct HeadsModel {
    pub store: VarMap,
    /// `(vocab, dim)` and `(vocab)` per side.
    pub image_weight: Var,
    pub image_bias: Var,
    pub text_weight: Var,
    pub text_bias: Var,
    /// `(dim)` per side: the mean input, subtracted before the head (fixed).
    pub image_center: Tensor,
    pub text_center: Tensor,
    /// `(vocab)`, 1 where a term may carry weight.
    pub allowed: Tensor,
}

impl HeadsModel {
    /// Both heads start as the backbone's embeddings of the vocabulary's words (the cache's
    /// `words`), scaled by [`INIT_SCALE`], each with one bias for all terms: minus the scaled
    /// cosine of an input's `2K`-th nearest allowed word (mean over a sample of the side's
    /// inputs), so a lexicon starts with about `2K` terms whatever the cosines' level.
    ///
    /// Why per side: dense dual encoders leave images and texts in separate cones (the
    /// modality gap), so an image's cosine to every word's text embedding can be negative while
    /// its ranking of the words is right; a zero bias would then start every image lexicon
    /// empty, and relu passes no gradient to an empty lexicon.
    pub fn init(
        cache: &EmbeddingCache,
        allowed: &[f32],
        keep: [usize; 2],
        device: &Device,
    ) -> Result<Self> {
        let vocab = cache.len(WORDS);
        if allowed.len() != vocab {
            return Err(TrainError::invalid(format!(
                "the cache holds {vocab} vocabulary words but the vocabulary has {}",
                allowed.len()
            )));
        }
        let all: Vec<usize> = (0..vocab).collect();
        let unit = cache.rows(WORDS, &all, device)?;
        let allowed_ids: Vec<usize> = (0..vocab).filter(|&t| allowed[t] > 0.0).collect();
        let (image_center, text_center) = (
            mean_row(cache, IMAGES, device)?,
            mean_row(cache, TEXTS, device)?,
        );
        let bias = |section: &str, center: &Tensor, k: usize| -> Result<Tensor> {
            let cut = nearest_cosine(cache, section, center, &unit, &allowed_ids, k, device)?;
            Ok(Tensor::full((-INIT_SCALE * cut) as f32, vocab, device)?)
        };
        let image_bias = bias(IMAGES, &image_center, keep[0])?;
        let text_bias = bias(TEXTS, &text_center, keep[1])?;
        let words = (&unit * INIT_SCALE)?;
        Self::from_tensors(
            [words.clone(), image_bias, words, text_bias],
            [image_center, text_center],
            Tensor::from_slice(allowed, vocab, device)?,
        )
    }

    /// Heads with the given starting weights (image weight and bias, text weight and bias),
    /// fixed centres (image, text) and allowed terms.
    pub fn from_tensors(start: [Tensor; 4], centers: [Tensor; 2], allowed: Tensor) -> Result<Self> {
        let store = VarMap::new();
        let var = |name: String, t: Tensor| -> Result<Var> {
            let v = Var::from_tensor(&t)?;
            store
                .data()
                .lock()
                .map_err(|_| TrainError::invalid("parameter store poisoned"))?
                .insert(name, v.clone());
            Ok(v)
        };
        let [iw, ib, tw, tb] = start;
        Ok(Self {
            image_weight: var(format!("{IMAGE_HEAD}.weight"), iw)?,
            image_bias: var(format!("{IMAGE_HEAD}.bias"), ib)?,
            text_weight: var(format!("{TEXT_HEAD}.weight"), tw)?,
            text_bias: var(format!("{TEXT_HEAD}.bias"), tb)?,
            image_center: centers[0].clone(),
            text_center: centers[1].clone(),
            allowed,
            store,
        })
    }

    /// The parameters the optimizer updates: both heads' weights, and their biases unless
    /// `bias` is [`VocabBias::Fixed`].
    ///
    /// Why a fixed bias: the inputs are centred on the training set's mean, so with one
    /// shared bias every term's mean logit over the training items is that bias, and a term
    /// can lead only the items its weight row points at. A trained per-term bias is a term's
    /// prior instead: measured on `train.tsv`, the clip-art category words (`signs`, `places`,
    /// `computer`) rose 1.8 above the median and `computer` led the lexicons of a quarter of
    /// the unseen concepts' images.
    pub fn params(&self, bias: VocabBias) -> Vec<Param> {
        crate::params::sorted_vars(&self.store)
            .into_iter()
            .filter(|(name, _)| bias == VocabBias::Train || !name.ends_with(".bias"))
            .map(|(name, var)| Param::new(name, var, 1.0))
            .collect()
    }

    /// `(batch, vocab)` lexicons of `(batch, dim)` embeddings through one head, cut to `k`.
    pub fn lexicons(&self, x: &Tensor, image: bool, k: usize) -> Result<Tensor> {
        crate::lexicon::top_k(&self.full_lexicons(x, image)?, k)
    }

    /// The lexicons before the top-K cut `(batch, vocab)`: what grounding trains, so that a
    /// caption word outside an item's K strongest terms still gets the gradient that lifts it
    /// in (after the cut only the K kept terms get any).
    pub fn full_lexicons(&self, x: &Tensor, image: bool) -> Result<Tensor> {
        self.lexicons_of_logits(&self.logits(x, image)?)
    }

    /// The head's logits `W·(x − c) + b` `(batch, vocab)`, before the relu that zeroes (and
    /// stops the gradient of) every term below 0.
    pub fn logits(&self, x: &Tensor, image: bool) -> Result<Tensor> {
        let (w, b, c) = if image {
            (&self.image_weight, &self.image_bias, &self.image_center)
        } else {
            (&self.text_weight, &self.text_bias, &self.text_center)
        };
        Ok(lexlip_model::heads::head_logits(
            x,
            c,
            w.as_tensor(),
            b.as_tensor(),
        )?)
    }

    /// The lexicons `(batch, vocab)` of a head's [`Self::logits`], before the top-K cut.
    pub fn lexicons_of_logits(&self, logits: &Tensor) -> Result<Tensor> {
        Ok(lexlip_model::heads::weights_of_logits(
            logits,
            &self.allowed,
        )?)
    }
}

/// Inputs sampled per side to set the starting biases.
const BIAS_SAMPLE: usize = 512;

/// Rows of `section` read at once.
const CHUNK_ROWS: usize = 4096;

/// The mean row of `section` `(dim)`.
fn mean_row(cache: &EmbeddingCache, section: &str, device: &Device) -> Result<Tensor> {
    let n = cache.len(section);
    let mut sum = Tensor::zeros(cache.meta.dim, DType::F64, device)?;
    for start in (0..n).step_by(CHUNK_ROWS) {
        let rows: Vec<usize> = (start..(start + CHUNK_ROWS).min(n)).collect();
        let part = cache.rows(section, &rows, device)?.to_dtype(DType::F64)?;
        sum = (sum + part.sum(0)?)?;
    }
    Ok((sum / n.max(1) as f64)?.to_dtype(DType::F32)?)
}

/// The mean, over up to [`BIAS_SAMPLE`] evenly spaced rows of `section` less `center`, of a
/// row's dot product with its `k`-th nearest word among `allowed` (`words`: unit rows
/// `(vocab, dim)`).
fn nearest_cosine(
    cache: &EmbeddingCache,
    section: &str,
    center: &Tensor,
    words: &Tensor,
    allowed: &[usize],
    k: usize,
    device: &Device,
) -> Result<f64> {
    let n = cache.len(section);
    if n == 0 || allowed.is_empty() {
        return Ok(0.0);
    }
    let take = n.min(BIAS_SAMPLE);
    let rows: Vec<usize> = (0..take).map(|i| i * n / take).collect();
    let sims = cache
        .rows(section, &rows, device)?
        .broadcast_sub(center)?
        .matmul(&words.t()?)?
        .to_vec2::<f32>()?;
    let k = k.clamp(1, allowed.len());
    let mut sum = 0.0;
    for row in sims {
        let mut v: Vec<f32> = allowed.iter().map(|&t| row[t]).collect();
        let (_, kth, _) = v.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        sum += f64::from(*kth);
    }
    Ok(sum / take as f64)
}

/// What a step needs of each pair once the cache holds the embeddings: its image's row and
/// its caption's tokens, packed in three arrays (about 4 bytes per token and 8 per pair; a
/// `Pair` with its own token vector, image reference and id took about 260 bytes per pair,
/// which made the heads' memory grow with the corpus).
pub struct PairRows {
    images: Vec<u32>,
    tokens: Vec<u32>,
    /// Pair `p`'s tokens are `tokens[ends[p - 1]..ends[p]]` (from 0 for the first).
    ends: Vec<u64>,
}

impl PairRows {
    /// Packs the corpus's pairs and empties it (pairs, captions' text, image references and
    /// ids), so their memory goes back before the steps start.
    pub fn take(corpus: &mut Corpus) -> Self {
        let pairs = std::mem::take(&mut corpus.pairs);
        corpus.texts = None;
        corpus.images = Vec::new();
        corpus.image_ids = Vec::new();
        let mut rows = Self {
            images: Vec::with_capacity(pairs.len()),
            tokens: Vec::with_capacity(pairs.iter().map(|p| p.tokens.len()).sum()),
            ends: Vec::with_capacity(pairs.len()),
        };
        for pair in pairs {
            rows.images.push(pair.image);
            rows.tokens.extend_from_slice(&pair.tokens);
            rows.ends.push(rows.tokens.len() as u64);
        }
        release_freed_memory();
        rows
    }

    pub fn len(&self) -> usize {
        self.images.len()
    }

    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// Pair `p`'s image row in the cache.
    pub fn image(&self, p: usize) -> u32 {
        self.images[p]
    }

    /// Pair `p`'s caption tokens.
    pub fn tokens(&self, p: usize) -> &[u32] {
        let start = if p == 0 { 0 } else { self.ends[p - 1] as usize };
        &self.tokens[start..self.ends[p] as usize]
    }
}

/// Hands freed heap pages back to the system. `lexlip train` keeps freed memory in the heap
/// (no trimming, so the steps' large tensors reuse it); the corpus's millions of small
/// allocations, freed, would otherwise stay resident under the steps' tensors, and the heads'
/// memory would grow with the corpus (measured: +18 % from 10k to 1M pairs).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's heaps to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Each step's pair indices, in the run's order.
struct PairIndices<'a> {
    order: Order,
    rows: &'a PairRows,
    /// `--sampler grouped`: each epoch's order groups pairs the backbone finds alike.
    grouping: Option<Grouping<'a>>,
}

/// GRIT-VLP's grouped mini-batches ([`crate::sampler`]) with the backbone's embeddings as the
/// representations. They never change, so every epoch is grouped, the first one too, from the
/// seed and the epoch alone: a resumed run draws the same order without a checkpointed one.
struct Grouping<'a> {
    cache: &'a EmbeddingCache,
    seed: u64,
    batch: usize,
    space: usize,
}

impl Grouping<'_> {
    /// Epoch `epoch`'s order: the pairs a uniform permutation trains this epoch, grouped into
    /// search spaces of `space` pairs by a walk over their embeddings' similarities, then
    /// [`separate_repeats`].
    fn order(&self, rows: &PairRows, epoch: u64) -> Result<Vec<u32>> {
        let pairs = rows.len();
        let steps = pairs / self.batch;
        let trained: Vec<usize> =
            crate::rng::Rng::new(&[self.seed, crate::rng::key("order"), epoch])
                .permutation(pairs)
                .into_iter()
                .take(steps * self.batch)
                .collect();
        let mut collected = Vec::with_capacity(trained.len());
        for chunk in trained.chunks(4096) {
            let images: Vec<usize> = chunk.iter().map(|&p| rows.image(p) as usize).collect();
            let image = self.cache.rows(IMAGES, &images, &Device::Cpu)?;
            let text = self.cache.rows(TEXTS, chunk, &Device::Cpu)?;
            let image = SparseRow::rows_of(&image, FEATURE_TERMS)?;
            let text = SparseRow::rows_of(&text, FEATURE_TERMS)?;
            for ((&pair, image), text) in chunk.iter().zip(image).zip(text) {
                collected.push(Collected {
                    pair: pair as u32,
                    image,
                    text,
                });
            }
        }
        let mut rng = crate::rng::Rng::new(&[self.seed, crate::rng::key("group"), epoch]);
        let mut order = grouped_order(&collected, pairs, self.batch, self.space, &mut rng)?;
        separate_repeats(&mut order, self.batch, rows);
        Ok(order)
    }
}

/// Moves apart pairs of one mini-batch that share their picture or their caption's tokens
/// (a picture's other captions, one caption over several art styles). Grouping puts them side
/// by side, the most alike of all, and in-batch InfoNCE would push each away from the other as
/// a negative. A repeat swaps places with the first pair of a later mini-batch (wrapping
/// around) that repeats nothing in either; the order stays a permutation of the same pairs.
fn separate_repeats(order: &mut [u32], batch: usize, rows: &PairRows) {
    use std::collections::HashSet;
    let batches = order.len() / batch.max(1);
    if batches < 2 {
        return;
    }
    // A pair's picture and caption tokens: what a mini-batch must not hold twice.
    let key = |p: u32| (rows.image(p as usize), rows.tokens(p as usize));
    let members = |order: &[u32], b: usize| -> (HashSet<u32>, HashSet<&[u32]>) {
        order[b * batch..(b + 1) * batch]
            .iter()
            .map(|&p| key(p))
            .unzip()
    };
    for b in 0..batches {
        let (mut images, mut captions) = (HashSet::new(), HashSet::new());
        for i in b * batch..(b + 1) * batch {
            let (image, caption) = key(order[i]);
            if !images.contains(&image) && !captions.contains(caption) {
                images.insert(image);
                captions.insert(caption);
                continue;
            }
            // A partner from a later mini-batch that fits here, and where this pair fits.
            let mut swapped = false;
            'search: for step in 1..batches {
                let other = (b + step) % batches;
                let (o_images, o_captions) = members(order, other);
                if o_images.contains(&image) || o_captions.contains(caption) {
                    continue;
                }
                for j in other * batch..(other + 1) * batch {
                    let (oi, oc) = key(order[j]);
                    if !images.contains(&oi) && !captions.contains(oc) {
                        order.swap(i, j);
                        images.insert(oi);
                        captions.insert(oc);
                        swapped = true;
                        break 'search;
                    }
                }
            }
            if !swapped {
                // Nowhere to go (a corpus of a few repeated items): the repeat stays.
                images.insert(image);
                captions.insert(caption);
            }
        }
    }
}

/// A batch: pair indices, their images' indices, which of each image's views it reads (0:
/// the picture itself) and their captions' tokens.
struct HeadsBatch {
    pairs: Vec<usize>,
    images: Vec<usize>,
    views: Vec<usize>,
    tokens: Vec<Vec<u32>>,
}

impl Batches for PairIndices<'_> {
    type Batch = HeadsBatch;

    fn batch(&mut self, step: u64) -> Result<HeadsBatch> {
        if let Some(grouping) = &self.grouping {
            let epoch = step / self.order.steps_per_epoch().max(1);
            if !self.order.has(epoch) {
                let order = grouping.order(self.rows, epoch)?;
                self.order.set(epoch, &order);
            }
        }
        let (pairs, views, images) = drawn(self.order.batch(step), self.rows);
        let tokens = pairs
            .iter()
            .map(|&p| self.rows.tokens(p).to_vec())
            .collect();
        Ok(HeadsBatch {
            pairs,
            images,
            views,
            tokens,
        })
    }
}

/// The inputs of one step's losses.
pub struct StepInputs<'a> {
    /// `(batch, dim)` unit-length backbone embeddings.
    pub image: &'a Tensor,
    pub text: &'a Tensor,
    /// Grounding targets ([`grounding_targets`]).
    pub bags: &'a Tensor,
    pub has: &'a Tensor,
    /// With expansion control: each caption's own words ([`crate::expansion::own_words`]) and
    /// the terms that may weigh at all.
    pub own: Option<(&'a Tensor, &'a Tensor)>,
}

/// The weights of one step's losses.
#[derive(Debug, Clone, Copy)]
pub struct StepWeights {
    pub image_k: usize,
    pub text_k: usize,
    /// Expansion control's E on the text side (`--query-expansion`), instead of `text_k`.
    pub text_expansion: Option<usize>,
    pub tau: f64,
    pub teacher_tau: f64,
    pub distill: f64,
    pub flops_image: f64,
    pub flops_text: f64,
    pub grounding: f64,
    /// Weights (image, text side) and temperature of the caption-word likelihood.
    pub caption_words: f64,
    pub caption_words_text: f64,
    pub caption_words_tau: f64,
}

/// KL(softmax(teacher) ‖ softmax(student)) per row, mean over rows: the student's in-batch
/// ranking pulled toward the dense model's.
pub fn distillation(teacher: &Tensor, student: &Tensor) -> Result<Tensor> {
    let t = log_softmax(teacher)?.detach();
    let s = log_softmax(student)?;
    Ok(t.exp()?.mul(&(&t - &s)?)?.sum(1)?.mean_all()?)
}

/// One step's losses.
pub struct HeadsLosses {
    /// What the gradients come from.
    pub total: Tensor,
    /// Its named parts.
    pub parts: Vec<(&'static str, Tensor)>,
    /// Mean non-zero terms per image and per text lexicon.
    pub nnz: (f64, f64),
}

/// One step's losses (see the module's doc).
pub fn step_losses(model: &HeadsModel, x: &StepInputs<'_>, w: StepWeights) -> Result<HeadsLosses> {
    let (logits_v, logits_l) = (model.logits(x.image, true)?, model.logits(x.text, false)?);
    let (full_v, full_l) = (
        model.lexicons_of_logits(&logits_v)?,
        model.lexicons_of_logits(&logits_l)?,
    );
    let pv = crate::lexicon::top_k(&full_v, w.image_k)?;
    let pl = match (w.text_expansion, x.own) {
        (Some(e), Some((own, words))) => expansion_control(&full_l, own, words, e)?,
        (Some(_), None) => {
            return Err(TrainError::invalid(
                "expansion control needs the captions' own words",
            ));
        }
        (None, _) => crate::lexicon::top_k(&full_l, w.text_k)?,
    };
    let (i2t, t2i) = in_batch(&pv, &pl, w.tau)?;
    let student = (pv.matmul(&pl.t()?)? / w.tau)?;
    let teacher = (x.image.matmul(&x.text.t()?)? / w.teacher_tau)?;
    let kd = ((distillation(&teacher, &student)?
        + distillation(&teacher.t()?.contiguous()?, &student.t()?.contiguous()?)?)?
        * 0.5)?;
    let (fv, fl) = (flops(&pv)?, flops(&pl)?);
    let mut total = (((&i2t + &t2i)? * 0.5)? + (&kd * w.distill)?)?;
    total = ((total + (&fv * w.flops_image)?)? + (&fl * w.flops_text)?)?;
    let mut parts = vec![
        ("i2t", i2t),
        ("t2i", t2i),
        ("distill", kd),
        ("flops_image", fv),
        ("flops_text", fl),
    ];
    if w.grounding > 0.0 {
        let gv = grounding(&full_v, x.bags, x.has, w.tau)?;
        let gl = grounding(&full_l, x.bags, x.has, w.tau)?;
        total = (total + ((&gv + &gl)? * w.grounding)?)?;
        parts.push(("ground_image", gv));
        parts.push(("ground_text", gl));
    }
    for (name, logits, weight) in [
        ("caption_words", &logits_v, w.caption_words),
        ("caption_words_text", &logits_l, w.caption_words_text),
    ] {
        if weight > 0.0 {
            let cw = caption_words(logits, &model.allowed, x.bags, x.has, w.caption_words_tau)?;
            total = (total + (&cw * weight)?)?;
            parts.push((name, cw));
        }
    }
    let nnz = (
        crate::losses::mean_nonzero(&pv)?,
        crate::losses::mean_nonzero(&pl)?,
    );
    Ok(HeadsLosses { total, parts, nnz })
}

struct HeadsSteps<'a> {
    model: &'a HeadsModel,
    cache: &'a EmbeddingCache,
    /// `--image-views`: the pictures' augmented views' embeddings.
    views: Option<&'a EmbeddingCache>,
    params: &'a [Param],
    idf: Tensor,
    /// With `--query-expansion`: the terms a caption's lexicon may hold (allowed, no template
    /// words).
    words: Option<Tensor>,
    pad: u32,
    flops: FlopsSchedule,
    /// The run's loss weights; the FLOPS ones follow `flops` step by step.
    weights: StepWeights,
    device: Device,
}

impl Objective for HeadsSteps<'_> {
    type Batch = HeadsBatch;

    fn params(&self) -> &[Param] {
        self.params
    }

    fn losses(&mut self, step: u64, batch: HeadsBatch) -> Result<Computed> {
        let image = batch_rows(
            self.cache,
            IMAGES,
            self.views,
            &batch.images,
            &batch.views,
            &self.device,
        )?;
        let text = self.cache.rows(TEXTS, &batch.pairs, &self.device)?;
        let rows: Vec<&[u32]> = batch.tokens.iter().map(Vec::as_slice).collect();
        let (ids, mask, width) = data::padded(&rows, self.pad);
        let ids = Tensor::from_vec(ids, (rows.len(), width), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows.len(), width), &self.device)?;
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
            total,
            parts,
            figures: Vec::new(),
            nnz_image: Some(nnz_image),
            nnz_text: Some(nnz_text),
        })
    }

    fn checkpoint(&self) -> Result<(HashMap<String, Tensor>, (usize, usize))> {
        Ok((
            crate::steps::store_tensors(&self.model.store, "heads")?,
            (0, 0),
        ))
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
    copy_files(backbone, &out.join("dense"))?;
    // A fused backbone's parts are directories.
    for part in lexlip_model::fused::PARTS {
        if backbone.join(part).is_dir() {
            copy_files(&backbone.join(part), &out.join("dense").join(part))?;
        }
    }
    let heads = out.join("heads");
    std::fs::create_dir_all(&heads).map_err(|e| TrainError::io(&heads, e))?;
    let dest = heads.join("tokenizer.json");
    std::fs::copy(tokenizer, &dest).map_err(|e| TrainError::io(&dest, e))?;
    let mut tensors = snapshot(&model.store)?;
    for (name, c) in [
        (IMAGE_HEAD, &model.image_center),
        (TEXT_HEAD, &model.text_center),
    ] {
        tensors.insert(format!("{name}.center"), c.clone());
    }
    // Exactly 0 or 1: f16 keeps it.
    tensors.insert(ALLOWED.into(), model.allowed.clone());
    save_weights(
        tensors,
        opts.run.save_dtype,
        &heads.join("model.safetensors"),
    )?;
    let config = HeadsConfig {
        model_type: MODEL_TYPE.into(),
        dim,
        vocab_size: model.allowed.dims()[0],
        image_top_k: opts.lexicon.image_top_k,
        text_top_k: opts.lexicon.text_top_k,
    };
    let config = serde_json::to_value(&config).map_err(|e| TrainError::invalid(e.to_string()))?;
    checkpoint::write_atomic(&heads.join("config.json"), &json_bytes(&config))?;
    let mut meta = serde_json::json!({
        "format": "lexlip",
        "source": "lexlip train --objective heads",
        "image_top_k": opts.lexicon.image_top_k,
    });
    if let Some(e) = opts.lexicon.query_expansion {
        let terms =
            lexlip_model::text::TextTerms::expansion(e, opts.lexicon.template_words.clone());
        meta["text_terms"] =
            serde_json::to_value(&terms).map_err(|e| TrainError::invalid(e.to_string()))?;
    }
    checkpoint::write_atomic(&out.join("lexlip.json"), &json_bytes(&meta))
}

fn write_record(
    opts: &TrainOptions,
    control: &RunControl,
    summary: &Summary,
    fingerprint: &str,
    backbone: &Path,
) -> Result<()> {
    let doc = serde_json::json!({
        "status": if summary.interrupted { "interrupted" } else { "complete" },
        "command": control.command_line,
        "seed": opts.optim.seed,
        "fingerprint": fingerprint,
        "options": opts,
        "backbone": backbone,
        "backbone_sha256": cache::fingerprint_dir(backbone)?,
        "summary": summary,
    });
    let mut text =
        serde_json::to_string_pretty(&doc).map_err(|e| TrainError::invalid(e.to_string()))?;
    text.push('\n');
    checkpoint::write_atomic(&opts.run.out.join("train.json"), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::{PairRows, separate_repeats};
    use crate::data::{Corpus, Pair};
    use proptest::prelude::*;

    fn rows_of(pairs: &[(u32, u32)]) -> PairRows {
        let mut corpus = Corpus {
            pairs: pairs
                .iter()
                .map(|&(image, caption)| Pair {
                    image,
                    tokens: vec![101, caption, 102],
                })
                .collect(),
            ..Corpus::default()
        };
        PairRows::take(&mut corpus)
    }

    /// Mini-batches holding a picture or a caption twice.
    fn repeats(order: &[u32], batch: usize, rows: &PairRows) -> usize {
        order
            .chunks_exact(batch)
            .map(|b| {
                let images: std::collections::HashSet<u32> =
                    b.iter().map(|&p| rows.image(p as usize)).collect();
                let captions: std::collections::HashSet<&[u32]> =
                    b.iter().map(|&p| rows.tokens(p as usize)).collect();
                usize::from(images.len() < b.len() || captions.len() < b.len())
            })
            .sum()
    }

    proptest! {
        /// The repaired order is a permutation of the same pairs, and no mini-batch repeats a
        /// picture or a caption when the corpus has few enough repeats to spread them (each
        /// picture and caption at most twice, with four or more mini-batches).
        #[test]
        fn separated_orders_keep_their_pairs_and_repeat_nothing(
            images in 8u32..40,
            twice in proptest::collection::vec(any::<bool>(), 40),
            batch in 2usize..5,
            seed in any::<u64>(),
        ) {
            // Pairs (picture, caption): every picture has a caption of its own, some a second.
            let mut pairs: Vec<(u32, u32)> = (0..images).map(|i| (i, 1000 + i)).collect();
            for i in 0..images {
                if twice[i as usize] {
                    pairs.push((i, 2000 + i));
                }
            }
            let rows = rows_of(&pairs);
            let n = (pairs.len() / batch) * batch;
            prop_assume!(n / batch >= 4);
            // The worst order: each picture's pairs side by side.
            let mut order: Vec<u32> = (0..pairs.len() as u32).collect();
            order.sort_by_key(|&p| (pairs[p as usize].0, seed.rotate_left(p)));
            let mut repaired = order.clone();
            separate_repeats(&mut repaired, batch, &rows);
            let mut sorted = repaired.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..pairs.len() as u32).collect::<Vec<_>>());
            prop_assert_eq!(repeats(&repaired[..n], batch, &rows), 0);
        }
    }

    /// One caption shared by two pictures (one concept in two art styles) counts as a repeat too.
    #[test]
    fn a_shared_caption_is_separated() {
        let rows = rows_of(&[(0, 7), (1, 7), (2, 8), (3, 9), (4, 10), (5, 11)]);
        let mut order: Vec<u32> = (0..6).collect();
        assert_eq!(repeats(&order, 2, &rows), 1);
        separate_repeats(&mut order, 2, &rows);
        assert_eq!(repeats(&order, 2, &rows), 0, "{order:?}");
    }

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
