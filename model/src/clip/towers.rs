//! CLIP's two towers under Hugging Face's tensor names (`CLIPModel`: `text_model.*`,
//! `vision_model.*`, `text_projection`, `visual_projection`), run by the pre-norm blocks of
//! [`crate::fast`]: the text tower's layers behind a causal mask, pooled at its end-of-text
//! token; the vision tower's at its class token. The last layer of each is computed at the
//! pooled position only, all the projection reads.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::fast::Activation;
use crate::fast::layers::{LayerNorm, Linear, SelfAttention};
use crate::fast::vit::{PreNormBlock, embed_tokens, first_largest, patches, pooled};

/// What one tower's layers are: its `text_config` or `vision_config`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TowerShape {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub eps: f64,
    pub act: Activation,
}

/// `encoder.layers.{i}` of either tower: `self_attn.{q,k,v,out}_proj`, `layer_norm1/2`,
/// `mlp.fc1/2`.
fn blocks(vb: &VarBuilder, s: &TowerShape) -> candle_core::Result<Vec<PreNormBlock>> {
    let h = s.hidden;
    (0..s.layers)
        .map(|i| {
            let vb = vb.pp("encoder").pp("layers").pp(i);
            let attn = vb.pp("self_attn");
            let proj = |name: &str| Linear::load(&attn.pp(name), h, h);
            Ok(PreNormBlock {
                norm1: LayerNorm::load(&vb.pp("layer_norm1"), h, s.eps)?,
                attention: SelfAttention::from_parts(
                    proj("q_proj")?,
                    proj("k_proj")?,
                    proj("v_proj")?,
                    proj("out_proj")?,
                    s.heads,
                )?,
                norm2: LayerNorm::load(&vb.pp("layer_norm2"), h, s.eps)?,
                fc1: Linear::load(&vb.pp("mlp").pp("fc1"), h, s.intermediate)?,
                fc2: Linear::load(&vb.pp("mlp").pp("fc2"), s.intermediate, h)?,
                act: s.act,
            })
        })
        .collect()
}

/// A projection without bias (`text_projection`, `visual_projection`): `(dim, hidden)`.
fn projection(
    vb: &VarBuilder,
    name: &str,
    hidden: usize,
    dim: usize,
) -> candle_core::Result<Linear> {
    Linear::without_bias(vb.get((dim, hidden), &format!("{name}.weight"))?)
}

/// The position HF's `CLIPTextTransformer` pools in one text's ids for `text_config.eos_token_id`
/// `eos`: with the legacy 2, the largest id's (OpenAI's end-of-text token); else `eos`'s first.
fn pooled_at(ids: &[u32], eos: u32) -> usize {
    if eos == 2 {
        first_largest(ids)
    } else {
        ids.iter().position(|&t| t == eos).unwrap_or(0)
    }
}

/// Token ids → `(batch, dim)` text features.
#[derive(Debug, Clone)]
pub struct TextTower {
    token_embedding: Tensor,
    position_embedding: Tensor,
    blocks: Vec<PreNormBlock>,
    final_layer_norm: LayerNorm,
    projection: Linear,
    /// `text_config.eos_token_id`: where the pooled token is (2, the legacy value: at the
    /// largest id, the end-of-text token of OpenAI's vocabulary; else at its first occurrence).
    eos: u32,
}

/// The shape of the text tower beyond its layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextSize {
    pub vocab: usize,
    pub positions: usize,
    pub dim: usize,
    pub eos: u32,
}

impl TextTower {
    /// `vb` at the model's root.
    pub fn load(vb: &VarBuilder, s: &TowerShape, size: TextSize) -> candle_core::Result<Self> {
        let t = vb.pp("text_model");
        let e = t.pp("embeddings");
        Ok(Self {
            token_embedding: e.get((size.vocab, s.hidden), "token_embedding.weight")?,
            position_embedding: e.get((size.positions, s.hidden), "position_embedding.weight")?,
            blocks: blocks(&t, s)?,
            final_layer_norm: LayerNorm::load(&t.pp("final_layer_norm"), s.hidden, s.eps)?,
            projection: projection(vb, "text_projection", s.hidden, size.dim)?,
            eos: size.eos,
        })
    }

    /// `ids` (one row per text, any lengths up to the position table's) → `(batch, dim)`.
    pub fn features(&self, ids: &[Vec<u32>]) -> candle_core::Result<Tensor> {
        let at: Vec<usize> = ids.iter().map(|row| pooled_at(row, self.eos)).collect();
        // Right-padding: behind the causal mask no pooled token sees it.
        let x = embed_tokens(&self.token_embedding, &self.position_embedding, ids)?;
        let pooled = self
            .final_layer_norm
            .forward(&pooled(&self.blocks, x, &at, true)?)?;
        self.projection.forward(&pooled.squeeze(1)?)
    }
}

/// Pixels `(batch, 3, size, size)` → `(batch, dim)` image features.
#[derive(Debug, Clone)]
pub struct VisionTower {
    /// `patch_embedding` (a convolution without bias) as a matrix over flattened patches.
    patch_embedding: Linear,
    class_embedding: Tensor,
    position_embedding: Tensor,
    pre_layrnorm: LayerNorm,
    blocks: Vec<PreNormBlock>,
    post_layernorm: LayerNorm,
    projection: Linear,
    size: usize,
    patch: usize,
}

/// The shape of the vision tower beyond its layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisionSize {
    pub image: usize,
    pub patch: usize,
    pub channels: usize,
    pub dim: usize,
}

impl VisionTower {
    /// `vb` at the model's root.
    pub fn load(vb: &VarBuilder, s: &TowerShape, size: VisionSize) -> candle_core::Result<Self> {
        let v = vb.pp("vision_model");
        let e = v.pp("embeddings");
        let (h, p) = (s.hidden, size.patch);
        if size.channels != 3 || p == 0 || !size.image.is_multiple_of(p) {
            candle_core::bail!(
                "a CLIP vision tower reads 3 channels in whole patches, not {} channels of {} px in {p} px patches",
                size.channels,
                size.image
            );
        }
        let grid = size.image / p;
        let conv = e.get((h, 3, p, p), "patch_embedding.weight")?;
        Ok(Self {
            patch_embedding: Linear::without_bias(conv.reshape((h, 3 * p * p))?)?,
            class_embedding: e.get(h, "class_embedding")?,
            position_embedding: e.get((grid * grid + 1, h), "position_embedding.weight")?,
            pre_layrnorm: LayerNorm::load(&v.pp("pre_layrnorm"), h, s.eps)?,
            blocks: blocks(&v, s)?,
            post_layernorm: LayerNorm::load(&v.pp("post_layernorm"), h, s.eps)?,
            projection: projection(vb, "visual_projection", h, size.dim)?,
            size: size.image,
            patch: p,
        })
    }

    pub fn features(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let b = pixels.dim(0)?;
        let patches = patches(pixels, &self.patch_embedding, self.size, self.patch)?;
        let class = self.class_embedding.reshape((1, 1, ()))?.broadcast_as((
            b,
            1,
            self.class_embedding.dim(0)?,
        ))?;
        let x = Tensor::cat(&[&class, &patches], 1)?.broadcast_add(&self.position_embedding)?;
        let x = self.pre_layrnorm.forward(&x)?;
        let pooled = self
            .post_layernorm
            .forward(&pooled(&self.blocks, x, &vec![0; b], false)?)?;
        self.projection.forward(&pooled.squeeze(1)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HF's rule: eos 2 pools at the (first) largest id; any other eos at its first place.
    #[test]
    fn pools_where_the_reference_does() {
        assert_eq!(pooled_at(&[8, 3, 9, 0, 9], 2), 2);
        assert_eq!(pooled_at(&[8, 7, 9, 7], 7), 1);
        assert_eq!(pooled_at(&[8, 9], 7), 0);
        assert_eq!(pooled_at(&[], 2), 0);
    }
}
