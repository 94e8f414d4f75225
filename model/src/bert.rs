//! lexlip's own post-norm BERT layer (Hugging Face `BertLayer` names), written once for the
//! re-ranker's fusion encoder (served and trained) and the trainable text tower and decoders of
//! `lexlip-train`. The served text towers run candle-transformers' BERT, which the training
//! tower is parity-tested against.

use candle_core::{Module, Tensor};
use candle_nn::Activation;

use crate::nn::{LayerNorm, Linear, Mode, Params, attend};

/// The shape of one layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerShape {
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub eps: f64,
    pub act: Activation,
}

/// What follows the attention in a post-norm BERT layer: the attention output projection,
/// residual and layer norm (`{attention}.output.*`), then the feed-forward block, residual and
/// layer norm (`intermediate.*`, `output.*`). Shared by self- and cross-attention layers.
#[derive(Debug, Clone)]
pub struct PostNorm {
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
    act: Activation,
}

impl PostNorm {
    /// `pb`: the layer; `attention`: its attention block (`attention` or `crossattention`).
    pub fn new<P: Params>(pb: &P, attention: &P, shape: &LayerShape) -> Result<Self, P::Error> {
        let (h, eps) = (shape.hidden, shape.eps);
        let out = attention.pp("output");
        Ok(Self {
            attn_out: Linear::new(&out.pp("dense"), h, h, true)?,
            attn_norm: LayerNorm::new(&out.pp("LayerNorm"), h, eps)?,
            intermediate: Linear::new(
                &pb.pp("intermediate").pp("dense"),
                h,
                shape.intermediate,
                true,
            )?,
            output: Linear::new(&pb.pp("output").pp("dense"), shape.intermediate, h, true)?,
            out_norm: LayerNorm::new(&pb.pp("output").pp("LayerNorm"), h, eps)?,
            act: shape.act,
        })
    }

    /// The layer's output from the attention context `ctx` and the attention's input `xs`.
    pub fn forward(
        &self,
        ctx: &Tensor,
        xs: &Tensor,
        mode: &dyn Mode,
    ) -> candle_core::Result<Tensor> {
        let att = mode.dropout(&self.attn_out.forward(ctx)?)?;
        let xs = self.attn_norm.forward(&(att + xs)?, mode)?;
        let mlp = self
            .output
            .forward(&self.act.forward(&self.intermediate.forward(&xs)?)?)?;
        self.out_norm.forward(&(mode.dropout(&mlp)? + xs)?, mode)
    }
}

/// One post-norm BERT layer with self-attention.
#[derive(Debug, Clone)]
pub struct BertLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    post: PostNorm,
    heads: usize,
}

impl BertLayer {
    pub fn new<P: Params>(pb: &P, shape: &LayerShape) -> Result<Self, P::Error> {
        let h = shape.hidden;
        let att = pb.pp("attention");
        let s = att.pp("self");
        Ok(Self {
            query: Linear::new(&s.pp("query"), h, h, true)?,
            key: Linear::new(&s.pp("key"), h, h, true)?,
            value: Linear::new(&s.pp("value"), h, h, true)?,
            post: PostNorm::new(pb, &att, shape)?,
            heads: shape.heads,
        })
    }

    /// `xs: (batch, tokens, hidden)`, `bias`: the additive attention mask.
    pub fn forward(
        &self,
        xs: &Tensor,
        bias: &Tensor,
        mode: &dyn Mode,
    ) -> candle_core::Result<Tensor> {
        let ctx = attend(
            &self.query.forward(xs)?,
            &self.key.forward(xs)?,
            &self.value.forward(xs)?,
            self.heads,
            &[bias],
            mode,
        )?;
        self.post.forward(&ctx, xs, mode)
    }
}

/// The layers `layer.0 …` under `pb`, as one stack.
pub fn layers<P: Params>(
    pb: &P,
    count: usize,
    shape: &LayerShape,
) -> Result<Vec<BertLayer>, P::Error> {
    (0..count)
        .map(|i| BertLayer::new(&pb.pp("layer").pp(i), shape))
        .collect()
}
