//! ConLIP's token-level objectives for the dense objective (EMNLP 2022 Findings, sec. 3.1-3.2,
//! `--dense-token`): two pre-training heads, each one transformer layer whose queries
//! cross-attend to the other modality, dropped after training.
//!
//! - **MLM**: the states of the masked caption (the SelfMLM input, `--mask-rate`) attend to image
//!   states and predict the masked tokens through the text tower's (tied) word embeddings.
//! - **MIM**: the states of the masked image (`--image-mask-rate` of its patch embeddings replaced
//!   by a learnable mask token, as SimMIM does) attend to text states and reconstruct the masked
//!   patches' pixels, L1 (SimMIM).
//!
//! What the heads attend to is the difference between the two variants:
//!
//! - `vanilla`: every state of the *complete* other side. The masked tokens can be read off the
//!   aligned tokens, and the instance representation (`[CLS]`) is mostly ignored (ConLIP Table 2).
//! - `conditioned` (ConMLM eq. 5, ConMIM eq. 6): the other side's `[CLS]` state from its
//!   *complete* input, followed by its *masked* input's token states, so the `[CLS]` — the state
//!   the dense embedding is projected from — is the only place that still holds everything, and
//!   the towers learn to put there what the heads need.
//!
//! Each head is a post-norm cross-attention block (attention, residual, layer norm, then a
//! feed-forward block), named as Hugging Face's BERT names its cross-attention
//! (`crossattention.*`, `intermediate.*`, `output.*`). ConLIP's heads have no self-attention of
//! their own: the towers already gave every query its context.

use candle_core::Tensor;

use crate::bert::{BertConfig, LayerShape, PostNorm};
use lexlip_model::beit::Config as BeitConfig;

use crate::error::Result;
use crate::head::MlmHead;
use crate::losses::{cross_entropy, l1};
use crate::nn::{Act, Dropout, INIT_STD, Linear, attend, attention_bias, gather_rows};
use crate::nn::{Differentiable, tower_act};
use crate::options::DenseToken;
use crate::params::{Init, ParamBuilder};

/// Which image patches a batch masks, on the device: `keep` is `(batch, grid²)` with 1 on kept
/// and 0 on masked patches (the patches [`TokenHeads::mask_token`] replaces), `rows` the masked
/// ones flattened as `image · grid² + k`, and `state_rows` the same patches in image tower
/// states flattened as `image · (1 + grid²) + 1 + k` (each image's `[CLS]` comes first).
#[derive(Debug, Clone)]
pub struct PatchMask {
    pub grid: usize,
    pub keep: Tensor,
    pub rows: Tensor,
    pub state_rows: Tensor,
}

impl PatchMask {
    /// The masked patches' pixels `(rows, 3·p·p)`, each in `(channel, row, col)` order.
    pub fn targets(&self, pixels: &Tensor) -> Result<Tensor> {
        let (b, c, size, _) = pixels.dims4()?;
        let (g, p) = (self.grid, size / self.grid);
        Ok(pixels
            .reshape((b, c, g, p, g, p))?
            .permute((0, 2, 4, 1, 3, 5))?
            .reshape((b * g * g, c * p * p))?
            .index_select(&self.rows, 0)?
            .detach())
    }
}

/// A post-norm cross-attention block: `queries` attend to `context` (another width), then a
/// feed-forward block.
#[derive(Debug, Clone)]
pub struct CrossLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    post: PostNorm,
    heads: usize,
}

/// The shape of one head: the width of its queries, of what they attend to, and the
/// feed-forward width, heads and activation of the tower whose states are the queries.
#[derive(Debug, Clone, Copy)]
pub struct CrossShape {
    pub hidden: usize,
    pub context: usize,
    pub intermediate: usize,
    pub heads: usize,
    pub eps: f64,
    pub act: Act,
}

impl CrossLayer {
    pub fn new(pb: &ParamBuilder, s: CrossShape) -> Result<Self> {
        let att = pb.pp("crossattention");
        let q = att.pp("self");
        let h = s.hidden;
        Ok(Self {
            query: Linear::new(&q.pp("query"), h, h, true)?,
            key: Linear::new(&q.pp("key"), s.context, h, true)?,
            value: Linear::new(&q.pp("value"), s.context, h, true)?,
            post: PostNorm::new(
                pb,
                &att,
                &LayerShape {
                    hidden: h,
                    heads: s.heads,
                    intermediate: s.intermediate,
                    eps: s.eps,
                    act: s.act.into(),
                },
            )?,
            heads: s.heads,
        })
    }

    /// `queries: (batch, n, hidden)`, `context: (batch, m, context)`; `bias` the additive mask
    /// of the context (`None`: all of it is attended to).
    pub fn forward(
        &self,
        queries: &Tensor,
        context: &Tensor,
        bias: Option<&Tensor>,
        drop: &Dropout,
    ) -> Result<Tensor> {
        let biases: Vec<&Tensor> = bias.into_iter().collect();
        let ctx = attend(
            &self.query.forward(queries)?,
            &self.key.forward(context)?,
            &self.value.forward(context)?,
            self.heads,
            &biases,
            drop,
        )?;
        Ok(self.post.forward(&ctx, queries, drop)?)
    }
}

/// The two heads: `text.*` and `cls.*` (MLM), `image.*` and `mim.*` (MIM), and the embedding
/// that stands for a masked patch in the image tower (`mask_token`).
#[derive(Debug, Clone)]
pub struct TokenHeads {
    /// `(image hidden)`, replaces masked patch embeddings ([`crate::beit::BeitEncoder::hidden_masked`]).
    pub mask_token: Tensor,
    text: CrossLayer,
    mlm: MlmHead,
    image: CrossLayer,
    mim: Linear,
}

/// One batch's tower states and targets.
pub struct TokenInputs<'a> {
    /// `(batch, tokens, text hidden)` states of the complete and of the masked captions, and
    /// their attention mask `(batch, tokens)`.
    pub text: &'a Tensor,
    pub text_masked: &'a Tensor,
    pub mask: &'a Tensor,
    /// `(batch, 1 + patches, image hidden)` states of the complete and of the masked images.
    pub image: &'a Tensor,
    pub image_masked: &'a Tensor,
    /// Masked caption positions (flattened `b · tokens + t`) and their original ids.
    pub text_rows: &'a Tensor,
    pub text_targets: &'a Tensor,
    /// Masked patches in image states (flattened `b · (1 + patches) + 1 + k`) and their pixels.
    pub patch_rows: &'a Tensor,
    pub patch_targets: &'a Tensor,
}

impl TokenHeads {
    /// Heads for a text tower `text` with word embeddings `word` and an image tower `image`.
    pub fn new(
        pb: &ParamBuilder,
        text: &BertConfig,
        image: &BeitConfig,
        word: &Tensor,
    ) -> Result<Self> {
        let (ht, hi) = (text.hidden_size, image.hidden_size);
        let text_shape = CrossShape {
            hidden: ht,
            context: hi,
            intermediate: text.intermediate_size,
            heads: text.num_attention_heads,
            eps: text.layer_norm_eps,
            act: text.act()?,
        };
        let image_shape = CrossShape {
            hidden: hi,
            context: ht,
            intermediate: image.intermediate_size,
            heads: image.num_attention_heads,
            eps: image.layer_norm_eps,
            act: tower_act(image)?,
        };
        let pixels = image.num_channels * image.patch_size * image.patch_size;
        Ok(Self {
            mask_token: pb.get(&[hi], "mask_token", Init::Normal(INIT_STD))?,
            text: CrossLayer::new(&pb.pp("text"), text_shape)?,
            mlm: MlmHead::new(
                &pb.pp("cls"),
                ht,
                text.vocab_size,
                text_shape.act.into(),
                text.layer_norm_eps,
                Some(word),
            )?,
            image: CrossLayer::new(&pb.pp("image"), image_shape)?,
            mim: Linear::new(&pb.pp("mim"), hi, pixels, true)?,
        })
    }

    /// The MLM and MIM losses of `x` (`kind` says what the heads attend to; see the module
    /// docs). `kind` must not be [`DenseToken::None`].
    pub fn losses(
        &self,
        x: &TokenInputs<'_>,
        kind: DenseToken,
        drop: &Dropout,
    ) -> Result<(Tensor, Tensor)> {
        let (image_context, text_context) = match kind {
            DenseToken::Conditioned => (
                with_cls_of(x.image, x.image_masked)?,
                with_cls_of(x.text, x.text_masked)?,
            ),
            _ => (x.image.clone(), x.text.clone()),
        };
        let fused = self
            .text
            .forward(x.text_masked, &image_context, None, drop)?;
        let logits = self
            .mlm
            .forward(&gather_rows(&fused, x.text_rows)?, &Differentiable)?;
        let mlm = cross_entropy(&logits, x.text_targets)?;
        let bias = attention_bias(x.mask, text_context.dtype())?;
        let fused = self
            .image
            .forward(x.image_masked, &text_context, Some(&bias), drop)?;
        let pixels = self.mim.forward(&gather_rows(&fused, x.patch_rows)?)?;
        let mim = l1(&pixels, x.patch_targets)?;
        Ok((mlm, mim))
    }
}

/// `masked`'s states with position 0 (`[CLS]`) taken from `complete`.
fn with_cls_of(complete: &Tensor, masked: &Tensor) -> Result<Tensor> {
    let n = masked.dim(1)?;
    Ok(Tensor::cat(
        &[&complete.narrow(1, 0, 1)?, &masked.narrow(1, 1, n - 1)?],
        1,
    )?)
}
