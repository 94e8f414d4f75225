//! A BERT encoder as the published text towers run it (no pooler): word, position and (where
//! the checkpoint has them) token-type embeddings under a layer norm, then post-norm layers
//! with self-attention only. BLIP's text tower (no token types; its cross-attention is not
//! loaded) and VDR's BERT-base are this encoder under their own tensor prefixes.
//!
//! Padding is masked as transformers masks it outside a decoder: no query attends to a padded
//! key (transformers adds `f32::MIN` to their scores, which gives them a weight of exactly 0);
//! padded positions still get hidden states, which some towers read (VDR max-pools them).

use candle_core::Tensor;
use candle_nn::VarBuilder;
use serde::Deserialize;

use super::layers::{Activation, LayerNorm, Linear, SelfAttention, first};

/// The shape of a BERT encoder, under the keys of Hugging Face's `BertConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct BertShape {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub max_position_embeddings: usize,
    pub layer_norm_eps: f64,
    pub hidden_act: Activation,
    /// Token types the checkpoint embeds (0: none, as BLIP). Every token is of type 0.
    #[serde(default)]
    pub type_vocab_size: usize,
}

impl BertShape {
    /// Every tensor the encoder reads, under `prefix` (its `embeddings.*` and
    /// `encoder.layer.N.*`): what a checkpoint must hold.
    pub fn tensor_names(&self, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = ["word_embeddings", "position_embeddings", "LayerNorm"]
            .iter()
            .map(|m| format!("{prefix}embeddings.{m}.weight"))
            .collect();
        names.push(format!("{prefix}embeddings.LayerNorm.bias"));
        if self.type_vocab_size > 0 {
            names.push(format!("{prefix}embeddings.token_type_embeddings.weight"));
        }
        for i in 0..self.num_hidden_layers {
            for m in [
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
                "attention.output.LayerNorm",
                "intermediate.dense",
                "output.dense",
                "output.LayerNorm",
            ] {
                for p in ["weight", "bias"] {
                    names.push(format!("{prefix}encoder.layer.{i}.{m}.{p}"));
                }
            }
        }
        names
    }
}

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
    fn load(vb: &VarBuilder, c: &BertShape) -> candle_core::Result<Self> {
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

    /// The layer's output at the first token only, `(batch, 1, hidden)`.
    fn forward_first(&self, x: &Tensor, lengths: Option<&[usize]>) -> candle_core::Result<Tensor> {
        let a = self.attention.forward_first(x, lengths, &first(x)?)?;
        self.feed_forward(&self.attention_norm.forward(&a)?)
    }
}

/// The encoder.
#[derive(Debug, Clone)]
pub struct Bert {
    /// `(vocab, hidden)`.
    word_embeddings: Tensor,
    /// `(max positions, hidden)`, with token type 0's embedding added where there is one.
    position_embeddings: Tensor,
    embeddings_norm: LayerNorm,
    layers: Vec<Layer>,
}

impl Bert {
    /// `vb`: the encoder (`embeddings.*`, `encoder.layer.N.*` under it).
    pub fn load(vb: &VarBuilder, c: &BertShape) -> candle_core::Result<Self> {
        let h = c.hidden_size;
        let emb = vb.pp("embeddings");
        let layers = (0..c.num_hidden_layers)
            .map(|i| Layer::load(&vb.pp("encoder").pp("layer").pp(i), c))
            .collect::<candle_core::Result<_>>()?;
        let mut positions =
            emb.get((c.max_position_embeddings, h), "position_embeddings.weight")?;
        if c.type_vocab_size > 0 {
            // Every token is of type 0: its embedding is one more row added at every position.
            let types = emb.get((c.type_vocab_size, h), "token_type_embeddings.weight")?;
            positions = positions.broadcast_add(&types.narrow(0, 0, 1)?)?;
        }
        Ok(Self {
            word_embeddings: emb.get((c.vocab_size, h), "word_embeddings.weight")?,
            position_embeddings: positions,
            embeddings_norm: LayerNorm::load(&emb.pp("LayerNorm"), h, c.layer_norm_eps)?,
            layers,
        })
    }

    /// Tokens a text may have, special tokens included.
    pub fn max_positions(&self) -> usize {
        self.position_embeddings.dims()[0]
    }

    /// `(vocab, hidden)`: what a tower that scores the vocabulary projects onto.
    pub fn word_embeddings(&self) -> &Tensor {
        &self.word_embeddings
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

    /// The last hidden state at the first token (`[CLS]`), `(batch, hidden)`, computed without
    /// the parts of the last layer that only other positions need.
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
