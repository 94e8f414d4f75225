//! BLIP's image tower (`vision_model.*`, transformers' `BlipVisionModel`): a ViT whose patches
//! are embedded by a stride-`patch` convolution, behind a learned class token and learned
//! position embeddings, through pre-norm layers, with a final layer norm (`post_layernorm`) on
//! the last hidden state. The contrastive head reads that state's class token.

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

use super::config::VisionConfig;
use crate::fast::layers::{LayerNorm, Linear, SelfAttention};
use crate::fast::vit::{PreNormBlock, patches, pooled};

/// One layer of the tower, under BLIP's names.
fn layer(vb: &VarBuilder, c: &VisionConfig) -> candle_core::Result<PreNormBlock> {
    let (h, eps) = (c.hidden_size, c.layer_norm_eps);
    let attn = vb.pp("self_attn");
    Ok(PreNormBlock {
        norm1: LayerNorm::load(&vb.pp("layer_norm1"), h, eps)?,
        attention: SelfAttention::new(
            Linear::load(&attn.pp("qkv"), h, 3 * h)?,
            Linear::load(&attn.pp("projection"), h, h)?,
            c.num_attention_heads,
        )?,
        norm2: LayerNorm::load(&vb.pp("layer_norm2"), h, eps)?,
        fc1: Linear::load(&vb.pp("mlp").pp("fc1"), h, c.intermediate_size)?,
        fc2: Linear::load(&vb.pp("mlp").pp("fc2"), c.intermediate_size, h)?,
        act: c.hidden_act,
    })
}

/// The image tower up to its final layer norm.
#[derive(Debug, Clone)]
pub struct VisionTower {
    /// `(hidden,)`.
    class_embedding: Tensor,
    /// The convolution as a matrix over flattened `(channel, row, column)` patches.
    patch_embedding: Linear,
    /// `(1, positions, hidden)`.
    position_embedding: Tensor,
    layers: Vec<PreNormBlock>,
    post_layernorm: LayerNorm,
    image_size: usize,
    patch_size: usize,
    hidden: usize,
}

impl VisionTower {
    /// `vb`: the tower (`vision_model`), in the dtype it is to run in.
    pub fn load(vb: &VarBuilder, c: &VisionConfig) -> candle_core::Result<Self> {
        let (h, p) = (c.hidden_size, c.patch_size);
        let emb = vb.pp("embeddings");
        let patch = emb.pp("patch_embedding");
        let patch_embedding = Linear::from_tensors(
            patch.get((h, 3, p, p), "weight")?.reshape((h, 3 * p * p))?,
            patch.get(h, "bias")?,
        );
        let layers = (0..c.num_hidden_layers)
            .map(|i| layer(&vb.pp("encoder").pp("layers").pp(i), c))
            .collect::<candle_core::Result<_>>()?;
        Ok(Self {
            class_embedding: emb.get((1, 1, h), "class_embedding")?.reshape(h)?,
            patch_embedding,
            position_embedding: emb.get((1, c.positions(), h), "position_embedding")?,
            layers,
            post_layernorm: LayerNorm::load(&vb.pp("post_layernorm"), h, c.layer_norm_eps)?,
            image_size: c.image_size,
            patch_size: p,
            hidden: h,
        })
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }

    pub fn dtype(&self) -> DType {
        self.class_embedding.dtype()
    }

    /// Class token, patch embeddings and positions of `(batch, 3, size, size)` pixels:
    /// `(batch, 1 + patches, hidden)`.
    fn embed(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let b = pixels.dim(0)?;
        let pixels = pixels.to_dtype(self.dtype())?;
        let patches = patches(
            &pixels,
            &self.patch_embedding,
            self.image_size,
            self.patch_size,
        )?;
        let class = self
            .class_embedding
            .reshape((1, 1, self.hidden))?
            .broadcast_as((b, 1, self.hidden))?;
        Tensor::cat(&[&class, &patches], 1)?.broadcast_add(&self.position_embedding)
    }

    /// The last hidden state (after `post_layernorm`), `(batch, 1 + patches, hidden)`: every
    /// position, as transformers returns it.
    pub fn last_hidden_state(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = self.embed(pixels)?;
        for layer in &self.layers {
            x = layer.forward(&x)?;
        }
        self.post_layernorm.forward(&x)
    }

    /// The last hidden state's class token, `(batch, hidden)`, computed without the parts of
    /// the last layer that only other positions need (its queries, attention rows, output
    /// projection and MLP there).
    pub fn class_token(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.embed(pixels)?;
        let first = vec![0; x.dim(0)?];
        let x = pooled(&self.layers, x, &first, false)?;
        self.post_layernorm.forward(&x)?.squeeze(1)
    }
}
