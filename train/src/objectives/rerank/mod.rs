//! MaskVLM re-ranker training (`lexlip train --objective rerank --init LEXICON_MODEL`).
//!
//! The lexicon model's towers stay frozen; a small fusion encoder on top of their hidden states
//! learns (MaskVLM sec. 3.2, eq. 1):
//! - **ITC**: the tower states, through the projections the fusion encoder reads, pooled and
//!   contrasted in the batch (aligns the fusion's inputs, which frozen towers leave apart);
//! - **ITM**: whether a text and an image belong together, against hard negatives drawn from the
//!   lexicon model's own top-k (the mistakes the re-ranker exists to fix);
//! - **MLM**: the masked tokens of a caption (30 %, `[MASK]` only) from the unmasked image;
//! - **MIM**: the raw pixels of masked patches (60 %) from the unmasked caption (L1).
//!
//! The towers being frozen keeps a step cheap on a CPU (their passes need no gradients) and
//! keeps the re-ranker reading exactly the states the lexicon model produces.
//!
//! Files: [`model`] (the fusion encoder, its heads and the step's losses), [`batch`] (masking
//! and the batches), [`negatives`] (hard negatives from the lexicon model); this one runs it
//! on the training loop and exports the result.

pub mod batch;
pub mod model;
pub mod negatives;

pub use batch::{mask_text, masked_image, patch_pixels};
pub use model::{
    Fused, ITC_TAU, RerankBatch, RerankLosses, RerankModel, Weights, fusion_init, step_losses,
};
pub use negatives::{HardNegatives, distinct_captions};

use std::path::Path;

use lexlip_model::rerank::{FORMAT, FusionConfig, RerankConfig, Towers};
use lexlip_model::{Encoders, LoadOptions, PreprocessedImage};
use rayon::prelude::*;

use crate::checkpoint;
use crate::data::{self, Order};
use crate::error::{Result, TrainError};
use crate::observe::{Observer, RunControl, Summary};
use crate::options::TrainOptions;
use crate::params::Source;
use crate::rng::key;
use crate::steps::{Computed, Losses, Trained};
use crate::text::TextTokenizer;
use batch::RerankBatches;

/// What `--objective rerank` reads from a lexicon model directory.
fn lexicon_dirs(init: Option<&Path>) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let Some(dir) = init else {
        return Err(TrainError::invalid(
            "--objective rerank trains on top of a lexicon model: give it as --init (e.g. \
             --init models/emoji-tiny)",
        ));
    };
    let (text, image) = (dir.join("text"), dir.join("image"));
    if !text.join("config.json").is_file() || !image.join("config.json").is_file() {
        return Err(TrainError::invalid(format!(
            "{}: --objective rerank needs a lexicon model directory with text/ and image/ \
             towers (what `lexlip train` writes, e.g. models/emoji-tiny)",
            dir.display()
        )));
    }
    Ok((text, image))
}

/// Trains a re-ranker into `opts.out` (checkpoints, resume and Ctrl-C as `lexlip train`).
pub fn train(
    opts: &TrainOptions,
    control: &RunControl,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let (text_dir, image_dir) = lexicon_dirs(opts.model.init.as_deref())?;
    let init = opts.model.init.clone().unwrap_or_default();
    let (started, input, device) = crate::steps::begin(opts)?;
    let tokenizer = TextTokenizer::load(
        &lexlip_model::vocab::tokenizer_json(&text_dir),
        opts.data.max_length,
    )?;
    let encoders = Encoders::load_with(
        &init,
        &device,
        &LoadOptions {
            max_length: Some(opts.data.max_length),
            image_size: opts.model.image_size,
            ..Default::default()
        },
    )?;
    let image_size = encoders.image()?.image_size();
    let towers = Towers::load(
        &text_dir,
        &image_dir,
        image_size,
        opts.data.max_length,
        &device,
    )?;
    let corpus = data::load(&input, &tokenizer, &mut |d, t| observer.checking(d, t))?;
    for e in &corpus.examples {
        observer.message(&format!("skipped {e}"));
    }
    if corpus.pairs.len() < opts.optim.batch_size || corpus.images.len() < 2 {
        return Err(TrainError::Corpus(format!(
            "{} usable pairs over {} images; a re-ranker needs at least one batch \
             (--batch-size {}) and two images",
            corpus.pairs.len(),
            corpus.images.len(),
            opts.optim.batch_size
        )));
    }
    // Every image once, preprocessed (the towers are frozen: no augmentation).
    let processor = towers.image_encoder().processor().clone();
    let images: Vec<PreprocessedImage> = corpus
        .images
        .par_iter()
        .map(|r| {
            let bytes = data::read_image(r).map_err(|(_, m)| TrainError::Corpus(m))?;
            Ok(processor.preprocess(&bytes)?)
        })
        .collect::<Result<_>>()?;
    // Hard negatives from the lexicon model's ranking of the whole training set.
    observer.message(&format!(
        "ranking {} images and their captions with the lexicon model {} for hard negatives",
        images.len(),
        init.display()
    ));
    let (distinct, caption_of_pair) = distinct_captions(&corpus);
    let image_vectors = {
        let enc = encoders.image()?;
        let mut out = Vec::with_capacity(images.len());
        for (k, chunk) in images.chunks(64).enumerate() {
            out.extend(enc.encode(chunk)?);
            observer.encoding(
                (k * 64 + chunk.len()) as u64,
                (images.len() + distinct.len()) as u64,
            );
        }
        out
    };
    let caption_vectors = {
        let enc = encoders.text()?;
        let mut out = Vec::with_capacity(distinct.len());
        for chunk in distinct.chunks(256) {
            out.extend(enc.encode_ids(chunk)?);
            observer.encoding(
                (images.len() + out.len()) as u64,
                (images.len() + distinct.len()) as u64,
            );
        }
        out
    };
    let negatives = HardNegatives::mine(
        &corpus,
        &image_vectors,
        &caption_vectors,
        caption_of_pair,
        opts.method.rerank_negatives,
    );
    drop(encoders);
    let patch = towers.image_encoder().patch_size();
    let patches = (image_size / patch) * (image_size / patch);
    let h = towers.text_hidden_size();
    let heads = towers.text_config().num_attention_heads;
    let config = FusionConfig {
        hidden_size: h,
        num_hidden_layers: opts.method.fusion_layers,
        num_attention_heads: heads,
        intermediate_size: 4 * h,
    };
    let words = lexlip_model::Weights::from_safetensors_dir(&text_dir)?;
    let word_embeddings = words
        .get("bert.embeddings.word_embeddings.weight")
        .ok_or_else(|| TrainError::invalid("the text tower has no word embeddings"))?
        .to_device(&device)?;
    // The fusion layers start as copies of the text tower's layers (ALBEF and MaskVLM start
    // their cross-modality encoders from a pre-trained text encoder); the rest is random.
    let start_from = fusion_init(&words, opts.method.fusion_layers);
    let model = RerankModel::new(
        config,
        h,
        towers.image_hidden_size(),
        word_embeddings,
        3 * patch * patch,
        Source::WeightsOr(&start_from, opts.optim.seed ^ key("rerank")),
        &device,
    )?;
    let weights = Weights {
        mlm: opts.method.rerank_mlm,
        mim: opts.method.rerank_mim,
        itc: opts.method.rerank_itc,
    };
    let params = model.params(weights);
    let order = Order::new(opts.optim.seed, corpus.pairs.len(), opts.optim.batch_size);
    let fingerprint = crate::fingerprint::sha256_json(&serde_json::json!({
        "options": opts.fingerprint_json(),
        "input": input.signature()?,
        "init": init,
    }));
    let trained = Trained::new(&model.store, "rerank", &params, &order);
    let mut trainer = trained.resume(opts, control, started, fingerprint, &corpus, observer)?;
    observer.message(&format!(
        "re-ranker: fusion {} layers × {h} over the frozen towers of {}; ITM with negatives \
         {:.0} % from the lexicon top-{}, ITC ×{}, MLM ×{} (mask {}), MIM ×{} (mask {})",
        opts.method.fusion_layers,
        init.display(),
        100.0 * opts.method.rerank_hard,
        opts.method.rerank_negatives,
        weights.itc,
        weights.mlm,
        opts.method.mask_rate,
        weights.mim,
        opts.method.image_mask_rate
    ));
    let batches = RerankBatches {
        corpus: &corpus,
        images: &images,
        negatives: &negatives,
        tokenizer: &tokenizer,
        order,
        patch,
        patches,
        opts,
    };
    let mut objective = RerankSteps {
        model: &model,
        towers: &towers,
        weights,
    };
    trainer.steps(&mut objective, batches, observer)?;
    trainer.finish(
        &opts.run.out.join("rerank.json"),
        || export(&model, &text_dir, &image_dir, image_size, opts),
        || Ok(serde_json::json!({ "init": init })),
    )
}

/// Re-ranker steps over the frozen towers.
struct RerankSteps<'a> {
    model: &'a RerankModel,
    towers: &'a Towers,
    weights: Weights,
}

impl Losses for RerankSteps<'_> {
    type Batch = RerankBatch;

    fn losses(&mut self, _step: u64, batch: RerankBatch) -> Result<Computed> {
        let losses = step_losses(self.model, self.towers, &batch, self.weights)?;
        Ok(Computed {
            figures: vec![("itm_accuracy", losses.itm_accuracy)],
            ..Computed::new(losses.total, losses.parts)
        })
    }
}

/// Copies the towers, writes the fusion weights, then `rerank.json` (last: its presence says
/// the directory is complete).
fn export(
    model: &RerankModel,
    text_dir: &Path,
    image_dir: &Path,
    image_size: usize,
    opts: &TrainOptions,
) -> Result<()> {
    for (from, name) in [(text_dir, "text"), (image_dir, "image")] {
        crate::export::copy_part(from, &opts.run.out.join(name))?;
    }
    crate::export::save_part(
        &opts.run.out.join("fusion"),
        model.served_tensors()?,
        opts.run.save_dtype,
    )?;
    let config = RerankConfig {
        format: FORMAT.into(),
        image_size,
        max_length: opts.data.max_length,
        fusion: model.config,
        source: Some("lexlip train --objective rerank".into()),
    };
    let mut text =
        serde_json::to_string_pretty(&config).map_err(|e| TrainError::invalid(e.to_string()))?;
    text.push('\n');
    checkpoint::write_atomic(&opts.run.out.join("rerank.json"), text.as_bytes())
}
