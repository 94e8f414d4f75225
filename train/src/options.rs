//! Everything `lexlip train` can be told, with LexLIP's defaults (LexLIP, ICCV 2023, sec. 4:
//! τ = 0.05, λ = 0.002, 30 % / 50 % masking, EMA 0.99, 10 % warm-up). The struct is the `clap`
//! argument group of the command and is recorded in `train.json`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::sampler::Sampler;

/// Everything `lexlip train` can be told, in groups a library user fills without `clap`
/// ([`TrainOptions::new`] gives the defaults). Serialized flat (the keys of `train.json` and of
/// the resume fingerprint are the fields' names, whatever their group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct TrainOptions {
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(flatten)]
    pub data: DataOptions,
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(flatten)]
    pub model: ModelOptions,
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(flatten)]
    pub method: MethodOptions,
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(flatten)]
    pub lexicon: LexiconOptions,
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(flatten)]
    pub optim: OptimOptions,
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(flatten)]
    pub run: RunOptions,
}

/// What a run reads and how its pairs are prepared (corpus, caption length, augmentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct DataOptions {
    // ---- data
    /// Caption TSV `title<TAB>filepath<TAB>image_id`, with a header.
    ///
    /// Plain or gzip; every caption is one (image, caption) pair.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Data"))]
    pub tsv: Option<PathBuf>,
    /// Root of the TSV's image paths (default: the TSV's directory).
    #[cfg_attr(
        feature = "cli",
        arg(long, requires = "tsv", value_name = "DIR", help_heading = "Data")
    )]
    pub images_root: Option<PathBuf>,
    /// JSONL manifest, `{"id", "image", "text"}` per line.
    ///
    /// Plain or gzip.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE", help_heading = "Data"))]
    pub manifest: Option<PathBuf>,
    /// img2dataset WebDataset shards: files, directories or patterns.
    ///
    /// Patterns such as `'shards/*.tar'` or `'shards/{00000..00009}.tar'`. Images stay in the
    /// shards, read when a batch needs them.
    #[cfg_attr(feature = "cli", arg(long, num_args = 1.., value_name = "SHARDS", help_heading = "Data"))]
    pub webdataset: Vec<PathBuf>,
    /// Tokens per caption, special tokens included.
    ///
    /// Longer captions are truncated.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 40, value_name = "N", help_heading = "Data")
    )]
    pub max_length: usize,
    /// Random resized crop: least share of the image kept.
    ///
    /// 1 = no crop: resize and centre-crop as at inference.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 0.8, value_name = "F", help_heading = "Data")
    )]
    pub crop_scale: f64,
    /// Colour jitter strength (0 = off).
    ///
    /// Brightness, contrast and saturation factors are drawn from [1 - s, 1 + s]; hue is
    /// --hue-jitter's.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 0.1, value_name = "S", help_heading = "Data")
    )]
    pub color_jitter: f64,
    /// Flip images horizontally half of the time.
    ///
    /// Off by default: captions such as "arrow pointing left" are direction-specific.
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Data"))]
    pub hflip: bool,
    /// Chance to redraw an image in a flat style (0 = off).
    ///
    /// A probability. A blur of 0.3-1 px, then 3-6 levels per colour channel, so that the image
    /// tower learns shapes and colours rather than the shading of the art styles it trains on.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 0.0, value_name = "P", help_heading = "Data")
    )]
    #[serde(default, skip_serializing_if = "is_zero")]
    pub style_augment: f64,
    /// Turn images by up to this many degrees (0 = off).
    ///
    /// Either way, 0-180; the corners are filled white.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "DEGREES",
            default_value_t = 0.0,
            help_heading = "Data"
        )
    )]
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rotate: f64,
    /// Turn hue by up to this share of the colour wheel.
    ///
    /// Either way, 0-0.5 (0 = off); greys and white stay.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "F", default_value_t = 0.0, help_heading = "Data")
    )]
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hue_jitter: f64,
}

/// Where the towers start and their shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ModelOptions {
    // ---- model
    /// Initialise both towers from a model (or `hf:OWNER/NAME`).
    ///
    /// A LexLIP directory, a LexLIP Lightning checkpoint (.ckpt, with --tokenizer), or a single
    /// BERT masked-LM / BEiT + MLM head directory; `hf:OWNER/NAME` downloads one.
    #[cfg_attr(feature = "cli", arg(long, value_name = "M", help_heading = "Model"))]
    pub init: Option<PathBuf>,
    /// Initialise the text tower from a BERT masked-LM directory.
    ///
    /// Or from a LexLIP directory's text tower.
    #[cfg_attr(feature = "cli", arg(long, value_name = "M", help_heading = "Model"))]
    pub text_init: Option<PathBuf>,
    /// Initialise the image tower from a BEiT + MLM head directory.
    ///
    /// Or from a LexLIP directory's image tower.
    #[cfg_attr(feature = "cli", arg(long, value_name = "M", help_heading = "Model"))]
    pub image_init: Option<PathBuf>,
    /// tokenizer.json, when no initial model carries one.
    ///
    /// The vocabulary both towers score.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "FILE", help_heading = "Model")
    )]
    pub tokenizer: Option<PathBuf>,
    /// Size of a text tower trained from scratch.
    ///
    /// Ignored with an initial text model.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = Preset::Tiny, value_name = "SIZE", help_heading = "Model"))]
    pub text_config: Preset,
    /// Size of an image tower trained from scratch.
    ///
    /// Ignored with an initial image model.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = Preset::Small, value_name = "SIZE", help_heading = "Model"))]
    pub image_config: Preset,
    /// Image side of a tower from scratch (default: the preset's).
    ///
    /// In pixels: 64 for tiny and small, 224 for base.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PX", help_heading = "Model"))]
    pub image_size: Option<usize>,
    /// Patch side of a tower from scratch (default: the preset's).
    ///
    /// In pixels: 8 for tiny and small, 16 for base.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PX", help_heading = "Model"))]
    pub patch_size: Option<usize>,
    /// Initial image MLM head when the image model has none.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = HeadInit::Auto, value_name = "FROM", help_heading = "Model"))]
    pub image_head_init: HeadInit,
    /// Heads: the frozen dense model they read; adapter: the teacher.
    ///
    /// --objective heads: a dense dual-encoder directory from `lexlip train --objective dense`
    /// or `--objective adapter`, a CLIP, SigLIP or MobileCLIP directory, a model directory with
    /// dense/, or `hf:OWNER/NAME`. The lexicon vocabulary is its tokenizer.json when that is a
    /// word-piece one, else give --tokenizer. --objective adapter: the dense teacher (from
    /// `--objective dense`).
    #[cfg_attr(feature = "cli", arg(long, value_name = "M", help_heading = "Model"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backbone: Option<PathBuf>,
    /// Heads and adapter: embedding cache (default: OUT/cache).
    ///
    /// Where the backbone's embeddings are cached: built once, resumed if interrupted, reused by
    /// later runs over the same backbone and corpus.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR", help_heading = "Model"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<PathBuf>,
    /// Adapter: the pretrained image tower beside the teacher.
    ///
    /// Projected beside the teacher: a MobileNetV2 directory, from scripts/fetch-image-backbone.sh.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR", help_heading = "Model"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_backbone: Option<PathBuf>,
    /// Adapter: the image side the tower reads (default: 224).
    ///
    /// In pixels; 224 is its ImageNet resolution. 128 encodes pictures 2-3× faster on a CPU; on
    /// the emoji it cost 1-2 points of R@10, and 5 on an art style never trained on.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PX", help_heading = "Model"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_backbone_size: Option<usize>,
    /// Adapter or heads: augmented views per picture.
    ///
    /// Drawn with --crop-scale, --color-jitter, --hflip, --rotate, --hue-jitter and
    /// --style-augment, cached beside the picture, each a training pair with its captions (0 =
    /// none). Views of one style teach the projection or the heads to look past it; each costs
    /// one more pass of every picture through the image encoder.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "N", default_value_t = 0, help_heading = "Model")
    )]
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub image_views: usize,
}

/// What is trained and with which losses: the objective, its phase, masking, temperatures, momentum, and the options of the dense and re-rank objectives and the seed methods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct MethodOptions {
    // ---- objectives
    /// What to train.
    ///
    /// lexlip: the lexicon model; dense: the CLIP-style dense baseline on the same towers;
    /// rerank: a re-ranker for a lexicon model; heads: lexicon heads over a frozen dense model;
    /// adapter: a pretrained image tower projected beside a dense teacher. Each writes a model
    /// directory (docs/cli.md, *Training options*).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = Objective::Lexlip, help_heading = "Objectives"))]
    #[serde(default)]
    pub objective: Objective,
    /// The dense objective's contrastive loss.
    ///
    /// infonce (CLIP) or dcl (the decoupled contrastive loss of ConLIP, EMNLP 2022 Findings,
    /// eq. 10-12, in-batch: the positive pair is left out of the denominator).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = DenseLoss::Infonce, value_name = "LOSS", help_heading = "Objectives"))]
    #[serde(default)]
    pub dense_loss: DenseLoss,
    /// ConLIP's MoCo queues for the dense objective.
    ///
    /// ConLIP (EMNLP 2022 Findings), sec. 3.3: momentum copies of the towers (EMA at
    /// --momentum) encode each batch as keys; embeddings are contrasted against them and
    /// queues of the last --queue-size keys per modality. See docs/cli.md.
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Objectives"))]
    #[serde(default)]
    pub dense_momentum: bool,
    /// ConLIP's token-level objectives for the dense objective.
    ///
    /// ConLIP (EMNLP 2022 Findings), sec. 3.2. Each adds a masked text pass (--mask-rate) and a
    /// masked image pass (--image-mask-rate) to the step; the heads are dropped at export.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = DenseToken::None, value_name = "KIND", help_heading = "Objectives"))]
    #[serde(default)]
    pub dense_token: DenseToken,
    /// Dimension of the dense objective's projections.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 256,
            value_name = "N",
            help_heading = "Objectives"
        )
    )]
    #[serde(default = "default_dense_dim")]
    pub dense_dim: usize,
    /// Re-ranker: fusion encoder layers.
    ///
    /// BERT layers as wide as the text tower.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 2,
            value_name = "N",
            help_heading = "Objectives"
        )
    )]
    #[serde(default = "default_fusion_layers")]
    pub fusion_layers: usize,
    /// Re-ranker: draw hard negatives from the first N hits.
    ///
    /// The lexicon model's top N for each caption and each image (MaskVLM and ALBEF draw them from
    /// in-batch similarities).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 16,
            value_name = "N",
            help_heading = "Objectives"
        )
    )]
    #[serde(default = "default_rerank_negatives")]
    pub rerank_negatives: usize,
    /// Re-ranker: share of ITM negatives from those N.
    ///
    /// The rest are any other image or caption (all-hard negatives from the start leave ITM
    /// stuck at the base rate).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.5,
            value_name = "F",
            help_heading = "Objectives"
        )
    )]
    #[serde(default = "default_rerank_hard")]
    pub rerank_hard: f64,
    /// Image masking rate (re-ranker's MIM, --dense-token).
    ///
    /// The share of image patches masked. MaskVLM (ICLR 2023) masks 0.6, ConLIP 0.5; --mask-rate is
    /// the text's (MaskVLM: 0.3, ConLIP: 0.15).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.6,
            value_name = "F",
            help_heading = "Objectives"
        )
    )]
    #[serde(default = "default_image_mask_rate")]
    pub image_mask_rate: f64,
    /// Re-ranker: weight of masked text reconstruction (MLM).
    ///
    /// 0 = ITM without it.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 1.0,
            value_name = "W",
            help_heading = "Objectives"
        )
    )]
    #[serde(default = "default_one")]
    pub rerank_mlm: f64,
    /// Re-ranker: weight of image-text contrast (ITC).
    ///
    /// On the fusion encoder's projected inputs; 0 = off.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 1.0,
            value_name = "W",
            help_heading = "Objectives"
        )
    )]
    #[serde(default = "default_one")]
    pub rerank_itc: f64,
    /// Re-ranker: weight of masked image reconstruction (MIM).
    ///
    /// L1 on pixels; 0 = off.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 1.0,
            value_name = "W",
            help_heading = "Objectives"
        )
    )]
    #[serde(default = "default_one")]
    pub rerank_mim: f64,
    /// 1 (lexicon-bottlenecked) or 2 (momentum contrastive).
    ///
    /// Phase 1: SelfMLM + LexMLM + BaCo; phase 2: momentum lexicon-contrastive pre-training
    /// (MoCo queues, EMA encoders).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2), value_name = "N", help_heading = "Objectives"))]
    pub phase: u8,
    /// Masking rate of the text encoder's input (SelfMLM).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.3,
            value_name = "F",
            help_heading = "Objectives"
        )
    )]
    pub mask_rate: f64,
    /// Masking rate of the decoders' input (LexMLM).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.5,
            value_name = "F",
            help_heading = "Objectives"
        )
    )]
    pub decoder_mask_rate: f64,
    /// Transformer layers of each weakened LexMLM decoder.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 2,
            value_name = "N",
            help_heading = "Objectives"
        )
    )]
    pub decoder_layers: usize,
    /// Contrastive temperature τ (heads: 0.5 unless given).
    ///
    /// BaCo and MoCo, and the dense objective's InfoNCE.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.05,
            value_name = "T",
            help_heading = "Objectives"
        )
    )]
    pub tau: f64,
    /// FLOPS sparsity weight λ (heads: 0.01 unless given).
    ///
    /// Both sides, unless --flops-image / --flops-text say otherwise.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.002,
            value_name = "W",
            help_heading = "Objectives"
        )
    )]
    pub flops_lambda: f64,
    /// EMA decay m of the momentum encoders.
    ///
    /// Phase 2 and --dense-momentum.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.99,
            value_name = "M",
            help_heading = "Objectives"
        )
    )]
    pub momentum: f64,
    /// Momentum keys kept per modality as negatives.
    ///
    /// Phase 2 and --dense-momentum; a multiple of --batch-size.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 1024,
            value_name = "N",
            help_heading = "Objectives"
        )
    )]
    pub queue_size: usize,
    /// Weight of GRIT-VLP's ITC consistency loss (0 = off).
    ///
    /// λ_cons of GRIT-VLP (ECCV 2022), eq. 6 (0.2 there): each pair's image→text and
    /// text→image in-batch distributions are pulled together. Phase 1 and the dense objective;
    /// see docs/cli.md.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.0,
            value_name = "W",
            help_heading = "Objectives"
        )
    )]
    #[serde(default)]
    pub itc_consistency: f64,
    /// Weight of COOKIE's visual contrastive loss (0 = off).
    ///
    /// COOKIE (ICCV 2021), sec. 3.3: two augmented views of every image are contrasted at
    /// --tau, so image→image search is trained for; costs a second image forward pass. Phase 1
    /// and the dense objective; see docs/cli.md.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.0,
            value_name = "W",
            help_heading = "Objectives"
        )
    )]
    #[serde(default)]
    pub image_contrastive: f64,
    /// Weight of COOKIE's textual contrastive loss (0 = off).
    ///
    /// Each caption against its masked copy (the SelfMLM input, --mask-rate), symmetric
    /// in-batch InfoNCE at --tau, so text→text search is trained for. Needs a trained text
    /// tower (not --freeze-text).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.0,
            value_name = "W",
            help_heading = "Objectives"
        )
    )]
    #[serde(default)]
    pub text_contrastive: f64,
    /// COOKIE's weight-sharing layers over both towers (default: --init's).
    ///
    /// COOKIE (ICCV 2021), sec. 3.1: N layers with one set of weights between each tower and
    /// its lexicon head. The towers must be equally wide; trained even with --freeze-text.
    /// Default: what --init has (none). See docs/cli.md.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "N", help_heading = "Objectives")
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_layers: Option<usize>,
    /// Keep the text tower as initialised (no updates, no dropout).
    ///
    /// The image tower learns to meet the text model's lexicon, as LiT locks one tower.
    /// SelfMLM and the text→image LexMLM, which only train the text side, are skipped, so a
    /// step costs about half. The choice for a small corpus and a pre-trained text model (e.g.
    /// a SPLADE model).
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Objectives"))]
    pub freeze_text: bool,
}

fn is_zero_usize(x: &usize) -> bool {
    *x == 0
}

/// How the parameters are updated: batches and their order, steps, learning rates, regularisation, the seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct OptimOptions {
    // ---- optimisation
    /// Pairs per step (heads: 128 unless given).
    ///
    /// --objective adapter: 256 unless given.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 32,
            value_name = "N",
            help_heading = "Optimisation"
        )
    )]
    pub batch_size: usize,
    /// How each epoch's mini-batches are drawn.
    ///
    /// random: a fresh permutation. grouped: GRIT-VLP (ECCV 2022): from the second epoch on,
    /// pairs whose representations were similar in the previous epoch share a mini-batch, so
    /// in-batch negatives are hard; no extra forward pass. Heads and adapter: every epoch,
    /// by the cached embeddings (the adapter's: the teacher's), views included.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = Sampler::Random, value_name = "HOW", help_heading = "Optimisation"))]
    #[serde(default)]
    pub sampler: Sampler,
    /// Pairs per grouped-sampler search space (GRIT-VLP's M).
    ///
    /// GRIT-VLP found 960-1,920 enough at batch 128: larger finds harder negatives, costs O(M)
    /// per pair at each epoch's end.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 1024,
            value_name = "M",
            help_heading = "Optimisation"
        )
    )]
    #[serde(default = "default_group_size")]
    pub group_size: usize,
    /// Optimisation steps (default: --epochs passes over the pairs).
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "N", help_heading = "Optimisation")
    )]
    pub steps: Option<u64>,
    /// Passes over the pairs (heads: 2.5 unless given).
    ///
    /// When --steps is not given.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 10.0,
            value_name = "F",
            help_heading = "Optimisation"
        )
    )]
    pub epochs: f64,
    /// Peak learning rate (heads: 1e-2 unless given).
    ///
    /// AdamW, linear decay after warm-up. --objective adapter: 1e-3 unless given.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 1e-4, help_heading = "Optimisation")
    )]
    pub lr: f64,
    /// Peak learning rate of the text tower (default: --lr).
    ///
    /// E.g. lower for a pre-trained one.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "LR", help_heading = "Optimisation")
    )]
    pub text_lr: Option<f64>,
    /// Share of the steps spent warming the learning rate up.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.1,
            value_name = "F",
            help_heading = "Optimisation"
        )
    )]
    pub warmup: f64,
    /// AdamW decoupled weight decay.
    ///
    /// Not on biases, norms, position tables.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.01,
            value_name = "W",
            help_heading = "Optimisation"
        )
    )]
    pub weight_decay: f64,
    /// Clip gradients to this global L2 norm (0 = off).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 1.0,
            value_name = "NORM",
            help_heading = "Optimisation"
        )
    )]
    pub clip_grad: f64,
    /// Dropout on embeddings and residual branches.
    ///
    /// Of both towers and the decoders.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.1,
            value_name = "P",
            help_heading = "Optimisation"
        )
    )]
    pub dropout: f64,
    /// Seed of everything random.
    ///
    /// Initial weights, data order, masks, augmentation, dropout.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 42, help_heading = "Optimisation")
    )]
    pub seed: u64,
}

/// Where the run writes and how it reports, checkpoints and stops; none of these changes what it computes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RunOptions {
    // ---- run
    /// Output directory: the model, train.json and checkpoints/.
    ///
    /// The trained LexLIP model (lexlip.json, text/, image/), train.json and checkpoints/. A
    /// run whose checkpoint is here resumes from it.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR", help_heading = "Run"))]
    pub out: PathBuf,
    /// Write a checkpoint every N steps (and at the end).
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 500, value_name = "N", help_heading = "Run")
    )]
    pub checkpoint_every: u64,
    /// Checkpoints kept (older ones are deleted).
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 2, value_name = "N", help_heading = "Run")
    )]
    pub keep_checkpoints: usize,
    /// Stop after this global step, with a checkpoint.
    ///
    /// The same command resumes.
    #[cfg_attr(feature = "cli", arg(long, value_name = "STEP", help_heading = "Run"))]
    pub stop_at: Option<u64>,
    /// Log (progress line, --json object) every N steps.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = 10, value_name = "N", help_heading = "Run")
    )]
    pub log_every: u64,
    /// One JSON object per logged step on stdout, no progress bar.
    ///
    /// And a summary object last.
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Run"))]
    pub json: bool,
    /// Dtype of the saved model's weights.
    ///
    /// Checkpoints are always f32.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = SaveDtype::F32, value_name = "DTYPE", help_heading = "Run"))]
    pub save_dtype: SaveDtype,
    /// Ignore (delete) the checkpoints in --out and start again.
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Run"))]
    pub restart: bool,
    /// Train on the GPU (build with --features cuda).
    #[cfg_attr(feature = "cli", arg(long, help_heading = "Run"))]
    pub gpu: bool,
}

fn default_dense_dim() -> usize {
    256
}

fn default_fusion_layers() -> usize {
    2
}

fn default_rerank_negatives() -> usize {
    16
}

fn default_rerank_hard() -> f64 {
    0.5
}

fn default_image_mask_rate() -> f64 {
    0.6
}

fn default_one() -> f64 {
    1.0
}

fn default_group_size() -> usize {
    1024
}

mod choices;
pub mod defaults;
mod lexicon;
mod validate;

pub use choices::{DenseLoss, DenseToken, HeadInit, Objective, Preset, SaveDtype, VocabBias};
use lexicon::is_zero;
pub use lexicon::{
    DEFAULT_CAPTION_WORDS_TAU, DEFAULT_FLOPS_WARMUP, DEFAULT_GROUNDING, DEFAULT_IMAGE_TOP_K,
    DEFAULT_TEXT_TOP_K, LexiconOptions, MAX_TARGET_DF,
};

#[cfg(test)]
mod tests;
