//! The lexicon options of `lexlip train` (LexLIP's and the heads'): FLOPS per side, top-K
//! pooling, caption-word grounding and likelihood, vocabulary biases, the text side's cut
//! (top-k or expansion control) and the heads' distillation.

use serde::{Deserialize, Serialize};

use super::choices::VocabBias;

/// The lexicon recipe's defaults (issue 35; measured in docs/benchmarks.md, "Sparse, grounded
/// image lexicons").
pub const DEFAULT_IMAGE_TOP_K: usize = 64;
pub const DEFAULT_GROUNDING: f64 = 0.5;
pub const DEFAULT_FLOPS_WARMUP: f64 = 0.3;

/// Terms in more than this share of the captions are no grounding targets (unless
/// `--grounding-max-df` says otherwise): they are a corpus's templates ("emoji", "clip art",
/// "skin tone"), which every image of a kind would learn alike, making all of them look the
/// same; it is also the share above which `lexlip eval` reports a term as common to too many
/// items.
pub const MAX_TARGET_DF: f64 = 0.05;

/// Runs recorded before the lexicon options trained the bias.
fn legacy_vocab_bias() -> VocabBias {
    VocabBias::Train
}

/// Whether a weight is off (left out of `train.json` then, as runs before it recorded).
pub(super) fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// How sparse and grounded the lexicons are (LexLIP only): FLOPS per side, top-K pooling, caption-word grounding, vocabulary biases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct LexiconOptions {
    /// FLOPS weight of the image lexicons (default: --flops-lambda).
    #[cfg_attr(feature = "cli", arg(long, value_name = "W", help_heading = "Lexicon"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops_image: Option<f64>,
    /// FLOPS weight of the text lexicons (default: --flops-lambda).
    #[cfg_attr(feature = "cli", arg(long, value_name = "W", help_heading = "Lexicon"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops_text: Option<f64>,
    /// Share of the steps over which sparsity sets in.
    ///
    /// The FLOPS weights rise quadratically from 0 (SPLADE's warm-up) and the image top-K
    /// narrows from the whole vocabulary to --image-top-k; 0 = both in full from the first
    /// step.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_FLOPS_WARMUP, value_name = "F", help_heading = "Lexicon"))]
    #[serde(default)]
    pub flops_warmup: f64,
    /// Terms each image lexicon keeps (0 = every term).
    ///
    /// Top-K pooling, in training and in the exported model (recorded in lexlip.json, applied
    /// by every encoder), so the index stores exactly what was trained.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_IMAGE_TOP_K, value_name = "K", help_heading = "Lexicon"))]
    #[serde(default)]
    pub image_top_k: usize,
    /// Caption-word grounding (heads: 1 unless given).
    ///
    /// The weight of STAIR's grounding (0 = off): each image's lexicon is contrasted with the
    /// batch's captions as bags of words, so its strongest terms are words that tell its caption
    /// from the others. See docs/cli.md.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_GROUNDING, value_name = "W", help_heading = "Lexicon"))]
    #[serde(default)]
    pub grounding: f64,
    /// Largest share of the captions a grounding target may be in.
    ///
    /// Words in more captions are no targets of the grounding and caption-word losses (a
    /// corpus's templates: "emoji", "skin tone"). Raise it when words that tell pictures apart
    /// are common ("man", "woman", "person" and "flag" are each in 7-12 % of the emoji
    /// captions).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = MAX_TARGET_DF, value_name = "SHARE", help_heading = "Lexicon", hide_short_help = true))]
    #[serde(
        default = "default_grounding_max_df",
        skip_serializing_if = "is_default_grounding_max_df"
    )]
    pub grounding_max_df: f64,
    /// Words that stay grounding targets above --grounding-max-df.
    ///
    /// Common words that tell pictures apart, where the corpus's templates are as common (in
    /// the emoji captions "man", "woman", "person" and "flag" are in 7-11 %, the skin-tone
    /// words "light" and "dark" in 13 %): e.g. man,woman,person,flag.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_delimiter = ',',
            value_name = "WORDS",
            help_heading = "Lexicon",
            hide_short_help = true
        )
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grounding_words: Vec<String>,
    /// Heads: image caption-word likelihood (1 unless given).
    ///
    /// The caption's own words are raised against every allowed word in a softmax of the
    /// head's logits at --caption-words-tau; weight on words no caption of the image has
    /// costs. 0 = off; see docs/cli.md.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.0,
            value_name = "W",
            help_heading = "Lexicon"
        )
    )]
    #[serde(default, skip_serializing_if = "is_zero")]
    pub caption_words: f64,
    /// Heads: the same for the text head (0.3 unless given).
    ///
    /// The caption-word likelihood on the text head's logits: the query side, with
    /// --caption-words-tau; it keeps one term from leading most queries. 0 = off.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.0,
            value_name = "W",
            help_heading = "Lexicon"
        )
    )]
    #[serde(default, skip_serializing_if = "is_zero")]
    pub caption_words_text: f64,
    /// Heads: temperature of the caption-word softmax.
    ///
    /// Both sides. Lower: the caption's words must stand further above the rest.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_CAPTION_WORDS_TAU, value_name = "T", help_heading = "Lexicon"))]
    #[serde(
        default = "default_caption_words_tau",
        skip_serializing_if = "is_default_caption_words_tau"
    )]
    pub caption_words_tau: f64,
    /// Whether the MLM heads' vocabulary bias trains.
    ///
    /// fixed: the image head has none, the text head keeps its initial one (--objective heads:
    /// each head keeps its one shared starting bias); train: both learn a bias per term, and a
    /// learned bias lets one term top every lexicon.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = VocabBias::Fixed, value_name = "HOW", help_heading = "Lexicon"))]
    #[serde(default = "legacy_vocab_bias")]
    pub vocab_bias: VocabBias,
    /// Heads: terms a text lexicon keeps (0 = every term).
    ///
    /// Top-K pooling of the text lexicons, as --image-top-k is the images'.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_TEXT_TOP_K, value_name = "K", help_heading = "Lexicon"))]
    #[serde(
        default = "default_text_top_k",
        skip_serializing_if = "is_default_text_top_k"
    )]
    pub text_top_k: usize,
    /// Heads: queries keep their own words and at most E other terms.
    ///
    /// D2S's query mask, instead of --text-top-k: a caption's lexicon keeps its own content
    /// words, weighted by the text head, and the E strongest others; in training and in the
    /// exported model (`text_terms` in its lexlip.json).
    #[cfg_attr(feature = "cli", arg(long, value_name = "E", help_heading = "Lexicon"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_expansion: Option<usize>,
    /// With --query-expansion: template words, which never weigh.
    ///
    /// The training captions' words that name no picture in particular (e.g. emoji,clip,art);
    /// they never weigh in a caption's or a query's lexicon (recorded in lexlip.json).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_delimiter = ',',
            value_name = "WORDS",
            requires = "query_expansion",
            help_heading = "Lexicon"
        )
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template_words: Vec<String>,
    /// Heads: a caption's own words the text head weighs 0 still weigh this share (0-1).
    ///
    /// Of the caption's strongest own word, as a query keeps them with `own_floor` in a model's
    /// `text_terms`: the text encoder may not tell "man cook" from "cook", so the user's word
    /// "man" only counts if the query keeps it, and the image head then learns to say it.
    /// Content words only; with --query-expansion, recorded in the model's lexlip.json, for
    /// queries (`own_floor`) and stored captions (`document_floor`) alike.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "SHARE",
            help_heading = "Lexicon",
            hide_short_help = true
        )
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_floor: Option<f64>,
    /// Heads: weight of distilling the dense similarities.
    ///
    /// The dense model's in-batch similarities into the sparse ones (KL both ways).
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 1.0,
            value_name = "W",
            help_heading = "Lexicon"
        )
    )]
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub distill: f64,
    /// Heads: temperature of the dense similarities.
    ///
    /// The dense model's, in the distillation: lexlip's dense objective trains at 0.05; CLIP's
    /// logit scale 100 is 0.01.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            default_value_t = 0.05,
            value_name = "T",
            help_heading = "Lexicon"
        )
    )]
    #[serde(
        default = "default_teacher_tau",
        skip_serializing_if = "is_default_teacher_tau"
    )]
    pub teacher_tau: f64,
}

/// Query terms the heads keep by default (issue 37: at most 32 per query).
pub const DEFAULT_TEXT_TOP_K: usize = 32;

fn default_text_top_k() -> usize {
    DEFAULT_TEXT_TOP_K
}

fn one() -> f64 {
    1.0
}

fn default_teacher_tau() -> f64 {
    0.05
}

// The heads' options serialize only when set, so `train.json` and the options of runs made
// before them read as they were.
fn is_default_text_top_k(k: &usize) -> bool {
    *k == DEFAULT_TEXT_TOP_K
}

/// --caption-words-tau's default, measured on the emoji corpus
/// (docs/journal/benchmarks-2026-11-to-12.md, "The caption words on the heads' logits"): at 0.1
/// the held-out style's T2I recall fell 1.8 points, at 1.0 category words topped a fifth of its
/// images; 0.3 kept recall and the sharpest lexicons.
pub const DEFAULT_CAPTION_WORDS_TAU: f64 = 0.3;

fn default_grounding_max_df() -> f64 {
    MAX_TARGET_DF
}

fn is_default_grounding_max_df(x: &f64) -> bool {
    *x == MAX_TARGET_DF
}

fn default_caption_words_tau() -> f64 {
    DEFAULT_CAPTION_WORDS_TAU
}

fn is_default_caption_words_tau(x: &f64) -> bool {
    *x == DEFAULT_CAPTION_WORDS_TAU
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

fn is_default_teacher_tau(x: &f64) -> bool {
    *x == default_teacher_tau()
}
