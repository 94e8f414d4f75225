//! The choices among named values that `lexlip train` takes (`clap` value enums, recorded in
//! `train.json` by name): tower presets, head initialisation, the objective, the dense loss and
//! token objectives, vocabulary biases, the saved dtype.

use serde::{Deserialize, Serialize};

/// Size presets of a tower trained from scratch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Text: BERT 2 × 128 (tiny SPLADE's shape). Image: BEiT 4 × 128, 64 px, patch 8.
    Tiny,
    /// Text: BERT 4 × 256. Image: BEiT 6 × 256, 64 px, patch 8.
    Small,
    /// Text: BERT-base (12 × 768). Image: BEiT-B/16 at 224 px.
    Base,
}

/// Where the image tower's MLM head starts when the image model has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum HeadInit {
    /// The image model's own head, else the text head's when the sizes match, else random.
    ///
    /// For an image tower from scratch: a copy of the text head when the hidden sizes match,
    /// otherwise random with the text head's vocabulary bias.
    Auto,
    /// A copy of the text tower's MLM head (LexLIP's recipe; needs equal hidden sizes).
    Text,
    /// Random weights.
    Random,
}

/// What a run trains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// LexLIP: lexicon towers with MLM heads (--phase 1 / 2); writes a LexLIP directory.
    #[default]
    Lexlip,
    /// A CLIP-style dense dual encoder on the same towers; writes a dense model.
    ///
    /// [CLS] → linear projection to --dense-dim → L2 norm, symmetric in-batch InfoNCE at
    /// --tau; writes a dense model directory lexlip loads as --dense-model or --model.
    Dense,
    /// A MaskVLM re-ranker over the lexicon model given as --init (--rerank-model).
    ///
    /// The lexicon model's towers stay frozen: a fusion encoder trained with ITM against the
    /// lexicon model's own top-k hard negatives plus masked text and image reconstruction;
    /// writes a directory `lexlip serve --rerank-model` and `lexlip eval --rerank-model` load.
    Rerank,
    /// Lexicon heads (D2S) over a frozen dense model given as --backbone.
    ///
    /// The backbone: lexlip's dense dual encoder, CLIP, SigLIP or MobileCLIP. Every image,
    /// caption and vocabulary word is encoded once into an embedding cache, then an image head
    /// and a text head (linear onto the vocabulary, starting from the backbone's own word
    /// embeddings) train on it with sparse InfoNCE, distillation of the dense model's
    /// similarities, FLOPS, top-K and grounding; writes a model directory (dense/ + heads/)
    /// that every lexlip command loads.
    Heads,
    /// A pretrained --image-backbone projected beside a dense teacher (LiT).
    ///
    /// The teacher (--backbone) and the tower (--image-backbone,
    /// scripts/fetch-image-backbone.sh) stay frozen and an MLP learns to project the teacher's
    /// image embedding and the tower's features, cached once, onto the teacher's caption
    /// embeddings (in-batch InfoNCE at --tau); writes a dense model directory that --backbone
    /// of --objective heads, --mode dense and --dense-model load.
    Adapter,
}

/// The dense objective's in-batch contrastive loss.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum DenseLoss {
    /// CLIP's symmetric InfoNCE.
    #[default]
    Infonce,
    /// ConLIP's decoupled contrastive loss: the positive leaves the denominator.
    Dcl,
}

/// ConLIP's token-level objectives for the dense objective (ConLIP, EMNLP 2022 Findings,
/// sec. 3.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum DenseToken {
    /// The contrastive loss alone.
    #[default]
    None,
    /// Masked text and image modelling, each head attending to the other side's complete
    /// states.
    Vanilla,
    /// ConMLM and ConMIM: against the other side's masked states and its `[CLS]`.
    ///
    /// Each head attends to the other side's masked states plus its complete `[CLS]`, so the
    /// instance representation carries what reconstruction needs.
    Conditioned,
}

/// What happens to the vocabulary bias of the MLM heads (`cls.predictions.bias`), the one
/// part of a head that raises a term for every input alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum VocabBias {
    /// Both heads train theirs (LexLIP's recipe).
    Train,
    /// The image head has none and the text head keeps its initial one.
    ///
    /// The image head's is zero, never trained: no term can become common to every image or
    /// caption through a bias.
    #[default]
    Fixed,
}

/// The dtype of the saved model weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum SaveDtype {
    F32,
    F16,
}
