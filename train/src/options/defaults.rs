//! What each objective takes for the options a command line leaves out, a run's options built
//! in code ([`TrainOptions::new`]), and the part of them that identifies a run for resume.

use super::*;

/// What `--objective heads` uses for the options a command line leaves at their defaults,
/// which are the tower objectives': the heads' recipe measured on the emoji corpus
/// (`docs/journal/benchmarks-2026-11-to-12.md`, "Lexicon heads over a frozen dense model").
/// At the towers' τ 0.05 and learning rate 1e-4 the heads barely move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadsDefaults {
    pub tau: f64,
    pub lr: f64,
    pub batch_size: usize,
    pub epochs: f64,
    pub flops_lambda: f64,
    pub grounding: f64,
    pub caption_words: f64,
    pub caption_words_text: f64,
}

/// The heads' defaults (see [`HeadsDefaults`]).
pub const HEADS_DEFAULTS: HeadsDefaults = HeadsDefaults {
    tau: 0.5,
    lr: 1e-2,
    batch_size: 128,
    epochs: 2.5,
    flops_lambda: 0.01,
    grounding: 1.0,
    caption_words: 1.0,
    caption_words_text: 0.3,
};

/// `--objective adapter`'s defaults (the probe's, `scripts/probe_image_backbone.py`): learning
/// rate, batch size and epochs; τ stays the towers' 0.05.
pub const ADAPTER_DEFAULTS: (f64, usize, f64) = (1e-3, 256, 10.0);

impl TrainOptions {
    /// Gives the objective its own defaults where they differ from the towers' (`--objective
    /// heads`, [`HEADS_DEFAULTS`]; `--objective adapter`, [`ADAPTER_DEFAULTS`]). `given(id)`
    /// says whether the command line set the option whose clap id (its field name, e.g.
    /// `batch_size`) is `id`; what it set stays.
    pub fn apply_objective_defaults(&mut self, given: impl Fn(&str) -> bool) {
        fn unless<T>(given: bool, slot: &mut T, value: T) {
            if !given {
                *slot = value;
            }
        }
        if self.method.objective == Objective::Adapter {
            let (lr, batch_size, epochs) = ADAPTER_DEFAULTS;
            unless(given("lr"), &mut self.optim.lr, lr);
            unless(given("batch_size"), &mut self.optim.batch_size, batch_size);
            unless(given("epochs"), &mut self.optim.epochs, epochs);
            return;
        }
        if self.method.objective != Objective::Heads {
            return;
        }
        let d = HEADS_DEFAULTS;
        unless(given("tau"), &mut self.method.tau, d.tau);
        unless(
            given("flops_lambda"),
            &mut self.method.flops_lambda,
            d.flops_lambda,
        );
        unless(given("lr"), &mut self.optim.lr, d.lr);
        unless(
            given("batch_size"),
            &mut self.optim.batch_size,
            d.batch_size,
        );
        unless(given("epochs"), &mut self.optim.epochs, d.epochs);
        unless(given("grounding"), &mut self.lexicon.grounding, d.grounding);
        unless(
            given("caption_words"),
            &mut self.lexicon.caption_words,
            d.caption_words,
        );
        unless(
            given("caption_words_text"),
            &mut self.lexicon.caption_words_text,
            d.caption_words_text,
        );
    }

    /// Options with the defaults above (for library callers and tests).
    pub fn new(out: impl Into<PathBuf>) -> Self {
        Self {
            data: DataOptions {
                tsv: None,
                images_root: None,
                manifest: None,
                webdataset: Vec::new(),
                max_length: 40,
                crop_scale: 0.8,
                color_jitter: 0.1,
                hflip: false,
                style_augment: 0.0,
                rotate: 0.0,
                hue_jitter: 0.0,
            },
            model: ModelOptions {
                init: None,
                text_init: None,
                image_init: None,
                tokenizer: None,
                text_config: Preset::Tiny,
                image_config: Preset::Small,
                image_size: None,
                patch_size: None,
                image_head_init: HeadInit::Auto,
                backbone: None,
                cache: None,
                image_backbone: None,
                image_backbone_size: None,
                image_views: 0,
            },
            method: MethodOptions {
                objective: Objective::Lexlip,
                dense_loss: DenseLoss::Infonce,
                dense_momentum: false,
                dense_token: DenseToken::None,
                dense_dim: default_dense_dim(),
                fusion_layers: default_fusion_layers(),
                rerank_negatives: default_rerank_negatives(),
                rerank_hard: default_rerank_hard(),
                image_mask_rate: default_image_mask_rate(),
                rerank_mlm: 1.0,
                rerank_itc: 1.0,
                rerank_mim: 1.0,
                phase: 1,
                mask_rate: 0.3,
                decoder_mask_rate: 0.5,
                decoder_layers: 2,
                tau: 0.05,
                flops_lambda: 0.002,
                momentum: 0.99,
                queue_size: 1024,
                itc_consistency: 0.0,
                image_contrastive: 0.0,
                shared_layers: None,
                text_contrastive: 0.0,
                freeze_text: false,
            },
            lexicon: LexiconOptions {
                flops_image: None,
                flops_text: None,
                flops_warmup: DEFAULT_FLOPS_WARMUP,
                image_top_k: DEFAULT_IMAGE_TOP_K,
                grounding: DEFAULT_GROUNDING,
                grounding_max_df: MAX_TARGET_DF,
                grounding_words: Vec::new(),
                caption_words: 0.0,
                caption_words_text: 0.0,
                caption_words_tau: DEFAULT_CAPTION_WORDS_TAU,
                vocab_bias: VocabBias::Fixed,
                text_top_k: DEFAULT_TEXT_TOP_K,
                query_expansion: None,
                template_words: Vec::new(),
                own_floor: None,
                distill: 1.0,
                teacher_tau: 0.05,
            },
            optim: OptimOptions {
                batch_size: 32,
                sampler: Sampler::Random,
                group_size: default_group_size(),
                steps: None,
                epochs: 10.0,
                lr: 1e-4,
                text_lr: None,
                warmup: 0.1,
                weight_decay: 0.01,
                clip_grad: 1.0,
                dropout: 0.1,
                seed: 42,
            },
            run: RunOptions {
                out: out.into(),
                checkpoint_every: 500,
                keep_checkpoints: 2,
                stop_at: None,
                log_every: 10,
                json: false,
                save_dtype: SaveDtype::F32,
                restart: false,
                gpu: false,
            },
        }
    }

    /// The options that change what a run computes (a checkpoint resumes only a run with the
    /// same ones): everything except where and how often it reports and saves.
    pub fn fingerprint_json(&self) -> serde_json::Value {
        let mut o = self.clone();
        o.run.checkpoint_every = 0;
        o.run.keep_checkpoints = 0;
        o.run.stop_at = None;
        o.run.log_every = 0;
        o.run.json = false;
        o.run.save_dtype = SaveDtype::F32;
        o.run.restart = false;
        o.run.gpu = false;
        o.run.out = PathBuf::new();
        let mut v = serde_json::to_value(&o).unwrap_or_default();
        let Some(m) = v.as_object_mut() else {
            return v;
        };
        let objective = self.method.objective;
        let no_dense_token = self.method.dense_token == DenseToken::None;
        // Keys left out of the hash where they are not set, each with when.
        let unset: [(bool, &[&str]); 12] = [
            // LexLIP runs hash as they did before the dense objective existed, so their
            // checkpoints still resume.
            (objective == Objective::Lexlip, &["objective", "dense_dim"]),
            // The heads' own options hash for heads runs only (the backbone for the adapter's
            // too), so other runs' checkpoints resume.
            (
                !matches!(objective, Objective::Heads | Objective::Adapter),
                &["backbone"],
            ),
            (
                objective != Objective::Heads,
                &[
                    "text_top_k",
                    "distill",
                    "teacher_tau",
                    "caption_words",
                    "caption_words_text",
                    "caption_words_tau",
                ],
            ),
            // The cache's place changes nothing the run computes.
            (true, &["cache"]),
            // The lexicon options shape LexLIP's lexicons and the heads' only.
            (
                !matches!(objective, Objective::Lexlip | Objective::Heads),
                &[
                    "flops_image",
                    "flops_text",
                    "flops_warmup",
                    "image_top_k",
                    "grounding",
                    "grounding_max_df",
                    "grounding_words",
                    "vocab_bias",
                ],
            ),
            (
                objective != Objective::Rerank,
                &[
                    "fusion_layers",
                    "rerank_negatives",
                    "rerank_hard",
                    "rerank_mlm",
                    "rerank_itc",
                    "rerank_mim",
                ],
            ),
            (
                objective != Objective::Rerank && no_dense_token,
                &["image_mask_rate"],
            ),
            // Options added later hash only when set, so older runs' checkpoints still resume.
            (
                self.method.dense_loss == DenseLoss::Infonce,
                &["dense_loss"],
            ),
            (!self.method.dense_momentum, &["dense_momentum"]),
            (no_dense_token, &["dense_token"]),
            (
                self.optim.sampler == Sampler::Random,
                &["sampler", "group_size"],
            ),
            (self.lexicon.vocab_bias == VocabBias::Train, &["vocab_bias"]),
        ];
        for (_, keys) in unset.iter().filter(|(unset, _)| *unset) {
            for key in *keys {
                m.remove(*key);
            }
        }
        for (key, v) in [
            ("itc_consistency", self.method.itc_consistency),
            ("image_contrastive", self.method.image_contrastive),
            ("text_contrastive", self.method.text_contrastive),
            ("flops_warmup", self.lexicon.flops_warmup),
            ("image_top_k", self.lexicon.image_top_k as f64),
            ("grounding", self.lexicon.grounding),
        ] {
            if v == 0.0 {
                m.remove(key);
            }
        }
        v
    }
}
