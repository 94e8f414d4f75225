//! BLIP's text tower as its contrastive head reads it (`text_encoder.*`, transformers'
//! `BlipTextModel` called without image states): word plus position embeddings (BLIP has no
//! token types) under a layer norm, then post-norm BERT layers with self-attention only. The
//! checkpoint's cross-attention (`crossattention.*`, for image-text matching) is not loaded.
//!
//! Padding is masked as transformers masks it outside a decoder, bidirectionally (no causal
//! mask): no query attends to a padded key (transformers adds `f32::MIN` to their scores, which
//! gives them a weight of exactly 0).

use candle_core::Tensor;
use candle_nn::VarBuilder;

use super::config::{Activation, TextConfig};
use super::layers::{LayerNorm, Linear, SelfAttention, first};

/// One post-norm layer: `norm(x + attn(x))`, then `norm(x + ffn(x))`.
#[derive(Debug, Clone)]
struct Layer {
    attention: SelfAttention,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
    act: Activation,
}

impl Layer {
    fn load(vb: &VarBuilder, c: &TextConfig) -> candle_core::Result<Self> {
        let (h, eps) = (c.hidden_size, c.layer_norm_eps);
        let att = vb.pp("attention");
        let s = att.pp("self");
        Ok(Self {
            attention: SelfAttention::from_parts(
                Linear::load(&s.pp("query"), h, h)?,
                Linear::load(&s.pp("key"), h, h)?,
                Linear::load(&s.pp("value"), h, h)?,
                Linear::load(&att.pp("output").pp("dense"), h, h)?,
                c.num_attention_heads,
            )?,
            attention_norm: LayerNorm::load(&att.pp("output").pp("LayerNorm"), h, eps)?,
            intermediate: Linear::load(&vb.pp("intermediate").pp("dense"), h, c.intermediate_size)?,
            output: Linear::load(&vb.pp("output").pp("dense"), c.intermediate_size, h)?,
            output_norm: LayerNorm::load(&vb.pp("output").pp("LayerNorm"), h, eps)?,
            act: c.hidden_act,
        })
    }

    /// `norm(x + ffn(x))`.
    fn feed_forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.intermediate.forward_act(x, self.act)?;
        self.output_norm.forward(&self.output.forward_add(&y, x)?)
    }

    fn forward(&self, x: &Tensor, lengths: Option<&[usize]>) -> candle_core::Result<Tensor> {
        let a = self.attention.forward(x, lengths, x)?;
        self.feed_forward(&self.attention_norm.forward(&a)?)
    }

    /// The layer's output at `[CLS]` only, `(batch, 1, hidden)`.
    fn forward_first(&self, x: &Tensor, lengths: Option<&[usize]>) -> candle_core::Result<Tensor> {
        let a = self.attention.forward_first(x, lengths, &first(x)?)?;
        self.feed_forward(&self.attention_norm.forward(&a)?)
    }
}

/// The text tower (self-attention only).
#[derive(Debug, Clone)]
pub struct TextTower {
    /// `(vocab, hidden)`.
    word_embeddings: Tensor,
    /// `(max positions, hidden)`.
    position_embeddings: Tensor,
    embeddings_norm: LayerNorm,
    layers: Vec<Layer>,
}

impl TextTower {
    /// `vb`: the tower (`text_encoder`).
    pub fn load(vb: &VarBuilder, c: &TextConfig) -> candle_core::Result<Self> {
        let h = c.hidden_size;
        let emb = vb.pp("embeddings");
        let layers = (0..c.num_hidden_layers)
            .map(|i| Layer::load(&vb.pp("encoder").pp("layer").pp(i), c))
            .collect::<candle_core::Result<_>>()?;
        Ok(Self {
            word_embeddings: emb.get((c.vocab_size, h), "word_embeddings.weight")?,
            position_embeddings: emb
                .get((c.max_position_embeddings, h), "position_embeddings.weight")?,
            embeddings_norm: LayerNorm::load(&emb.pp("LayerNorm"), h, c.layer_norm_eps)?,
            layers,
        })
    }

    /// Tokens a text may have, special tokens included.
    pub fn max_positions(&self) -> usize {
        self.position_embeddings.dims()[0]
    }

    /// Embeddings of `(batch, tokens)` ids at positions `0 .. tokens`.
    fn embed(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let (b, n) = ids.dims2()?;
        if n > self.max_positions() {
            candle_core::bail!(
                "{n} tokens exceed the text tower's {} positions",
                self.max_positions()
            );
        }
        let h = self.word_embeddings.dims()[1];
        let words = self
            .word_embeddings
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, n, h))?;
        let x = words.broadcast_add(&self.position_embeddings.narrow(0, 0, n)?)?;
        self.embeddings_norm.forward(&x)
    }

    /// The last hidden state `(batch, tokens, hidden)` of right-padded ids, input `i` having
    /// `lengths[i]` real tokens (`None`: no padding).
    pub fn last_hidden_state(
        &self,
        ids: &Tensor,
        lengths: Option<&[usize]>,
    ) -> candle_core::Result<Tensor> {
        let mut x = self.embed(ids)?;
        for layer in &self.layers {
            x = layer.forward(&x, lengths)?;
        }
        Ok(x)
    }

    /// The last hidden state at `[CLS]`, `(batch, hidden)`, computed without the parts of the
    /// last layer that only other positions need.
    pub fn class_token(
        &self,
        ids: &Tensor,
        lengths: Option<&[usize]>,
    ) -> candle_core::Result<Tensor> {
        let Some((last, rest)) = self.layers.split_last() else {
            candle_core::bail!("the text tower has no layers")
        };
        let mut x = self.embed(ids)?;
        for layer in rest {
            x = layer.forward(&x, lengths)?;
        }
        last.forward_first(&x, lengths)?.squeeze(1)
    }
}
