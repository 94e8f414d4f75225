//! The BERT masked-LM head (`cls.predictions.*`): transform (dense, activation, layer norm), then
//! a projection onto the vocabulary. The text tower ties the projection to its word embeddings
//! (as `BertForMaskedLM` does); the image head (LexLIP's copy of BERT's `cls`) owns one.

use candle_core::Tensor;

use crate::error::Result;
use crate::nn::{Act, Differentiable, INIT_STD, LayerNorm, Linear, linear};
use crate::params::{Init, ParamBuilder};

#[derive(Debug, Clone)]
pub struct MlmHead {
    dense: Linear,
    act: Act,
    norm: LayerNorm,
    /// `(vocab, hidden)`.
    decoder: Tensor,
    bias: Tensor,
}

impl MlmHead {
    /// `pb` is rooted at `cls`. `tied`: the word embeddings to project with (no
    /// `predictions.decoder.weight` parameter is created then).
    pub fn new(
        pb: &ParamBuilder,
        hidden: usize,
        vocab: usize,
        act: Act,
        eps: f64,
        tied: Option<&Tensor>,
    ) -> Result<Self> {
        let p = pb.pp("predictions");
        let t = p.pp("transform");
        let decoder = match tied {
            Some(w) => w.clone(),
            None => p.get(&[vocab, hidden], "decoder.weight", Init::Normal(INIT_STD))?,
        };
        Ok(Self {
            dense: Linear::new(&t.pp("dense"), hidden, hidden, true)?,
            act,
            norm: LayerNorm::new(&t.pp("LayerNorm"), hidden, eps)?,
            decoder,
            bias: p.get(&[vocab], "bias", Init::Const(0.0))?,
        })
    }

    /// Hidden states `(…, hidden)` → logits `(…, vocab)`.
    pub fn forward(&self, hidden: &Tensor) -> Result<Tensor> {
        let x = self.norm.forward(
            &self.act.forward(&self.dense.forward(hidden)?)?,
            &Differentiable,
        )?;
        Ok(linear(&x, &self.decoder, Some(&self.bias))?)
    }
}
