//! CLIP's two towers under Hugging Face's tensor names (`CLIPModel`: `text_model.*`,
//! `vision_model.*`, `text_projection`, `visual_projection`), run by the pre-norm blocks of
//! [`crate::fast`]: the text tower's layers behind a causal mask, pooled at its end-of-text
//! token; the vision tower's at its class token. The last layer of each is computed at the
//! pooled position only, all the projection reads.

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;

use crate::fast::Activation;
use crate::fast::layers::{LayerNorm, Linear, SelfAttention};
use crate::fast::vit::{PreNormBlock, patches};

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
    let weight = vb.get((dim, hidden), &format!("{name}.weight"))?;
    let bias = Tensor::zeros(dim, weight.dtype(), weight.device())?;
    Ok(Linear::from_tensors(weight, bias))
}

/// Everything but the last block, then the last at the pooled positions only.
fn split_last(blocks: &[PreNormBlock]) -> candle_core::Result<(&PreNormBlock, &[PreNormBlock])> {
    match blocks.split_last() {
        Some(split) => Ok(split),
        None => candle_core::bail!("a CLIP tower needs at least one layer"),
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

    /// The position HF's `CLIPTextTransformer` pools in one text's ids.
    fn pooled_at(&self, ids: &[u32]) -> usize {
        if self.eos == 2 {
            // The first of the largest, as `argmax` picks.
            let max = ids.iter().copied().max().unwrap_or(0);
            ids.iter().position(|&t| t == max).unwrap_or(0)
        } else {
            ids.iter().position(|&t| t == self.eos).unwrap_or(0)
        }
    }

    /// `ids` (one row per text, any lengths up to the position table's) → `(batch, dim)`.
    pub fn features(&self, ids: &[Vec<u32>], device: &Device) -> candle_core::Result<Tensor> {
        let at: Vec<usize> = ids.iter().map(|row| self.pooled_at(row)).collect();
        let n = ids.iter().map(Vec::len).max().unwrap_or(0).max(1);
        if n > self.position_embedding.dim(0)? {
            candle_core::bail!(
                "a text of {n} tokens is longer than the model's {} positions",
                self.position_embedding.dim(0)?
            );
        }
        // Right-padding: behind the causal mask no pooled token sees it.
        let flat: Vec<u32> = ids
            .iter()
            .flat_map(|row| {
                row.iter()
                    .copied()
                    .chain(std::iter::repeat_n(0, n - row.len()))
            })
            .collect();
        let b = ids.len();
        let index = Tensor::from_vec(flat, b * n, device)?;
        let hidden = self.token_embedding.dim(1)?;
        let mut x = self
            .token_embedding
            .index_select(&index, 0)?
            .reshape((b, n, hidden))?
            .broadcast_add(&self.position_embedding.narrow(0, 0, n)?)?;
        let (last, rest) = split_last(&self.blocks)?;
        for block in rest {
            x = block.forward_causal(&x)?;
        }
        let pooled = self
            .final_layer_norm
            .forward(&last.forward_at(&x, &at, true)?)?;
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
            patch_embedding: Linear::from_tensors(
                conv.reshape((h, 3 * p * p))?,
                Tensor::zeros(h, conv.dtype(), conv.device())?,
            ),
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
        let mut x = self.pre_layrnorm.forward(&x)?;
        let (last, rest) = split_last(&self.blocks)?;
        for block in rest {
            x = block.forward(&x)?;
        }
        let pooled = self.post_layernorm.forward(&last.forward_first(&x)?)?;
        self.projection.forward(&pooled.squeeze(1)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-layer text tower over a vocabulary of 10 whose pooling rule is under test only.
    fn pooling(eos: u32) -> TextTower {
        let dev = Device::Cpu;
        let z =
            |shape: (usize, usize)| Tensor::zeros(shape, candle_core::DType::F32, &dev).unwrap();
        TextTower {
            token_embedding: z((10, 4)),
            position_embedding: z((8, 4)),
            blocks: Vec::new(),
            final_layer_norm: LayerNorm::load(
                &VarBuilder::zeros(candle_core::DType::F32, &dev),
                4,
                1e-5,
            )
            .unwrap(),
            projection: Linear::from_tensors(
                z((2, 4)),
                Tensor::zeros(2, candle_core::DType::F32, &dev).unwrap(),
            ),
            eos,
        }
    }

    /// HF's rule: eos 2 pools at the (first) largest id; any other eos at its first place.
    #[test]
    fn pools_where_the_reference_does() {
        assert_eq!(pooling(2).pooled_at(&[8, 3, 9, 0, 9]), 2);
        assert_eq!(pooling(7).pooled_at(&[8, 7, 9, 7]), 1);
        assert_eq!(pooling(7).pooled_at(&[8, 9]), 0);
        assert_eq!(pooling(2).pooled_at(&[]), 0);
    }
}
