//! VDR's image tower: OpenAI CLIP's vision transformer without its class token and output
//! projection (every patch stays: the lexicon is a max over patches), tensor names as the
//! reference's `VDRImageEncoder` (`encoder_p.conv1`, `encoder_p.transformer.resblocks.N.*`, …),
//! run by the pre-norm blocks of [`crate::fast`].

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

use crate::fast::Activation;
use crate::fast::layers::{LayerNorm, Linear, SelfAttention};
use crate::fast::vit::{PreNormBlock, patches};

/// The shape of the tower: what `encoder_p` of the checkpoint's `config.json` says, checked
/// against the tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisionShape {
    pub resolution: usize,
    pub patch_size: usize,
    pub width: usize,
    pub layers: usize,
    pub heads: usize,
}

impl VisionShape {
    /// Patches per side.
    pub fn grid(&self) -> usize {
        self.resolution / self.patch_size
    }
}

/// PyTorch's `nn.LayerNorm` default, which the reference's layer norms keep.
const EPS: f64 = 1e-5;

/// One residual block under the reference's names: `nn.MultiheadAttention`'s packed
/// projection (`in_proj_weight`, queries then keys then values) and a QuickGELU MLP.
fn block(vb: &VarBuilder, s: &VisionShape) -> candle_core::Result<PreNormBlock> {
    let w = s.width;
    let attn = vb.pp("attn");
    Ok(PreNormBlock {
        norm1: LayerNorm::load(&vb.pp("ln_1"), w, EPS)?,
        attention: SelfAttention::new(
            Linear::from_tensors(
                attn.get((3 * w, w), "in_proj_weight")?,
                attn.get(3 * w, "in_proj_bias")?,
            ),
            Linear::load(&attn.pp("out_proj"), w, w)?,
            s.heads,
        )?,
        norm2: LayerNorm::load(&vb.pp("ln_2"), w, EPS)?,
        fc1: Linear::load(&vb.pp("mlp").pp("c_fc"), w, 4 * w)?,
        fc2: Linear::load(&vb.pp("mlp").pp("c_proj"), 4 * w, w)?,
        act: Activation::QuickGelu,
    })
}

/// Pixels `(batch, 3, resolution, resolution)` → patch states `(batch, grid², width)` after
/// `ln_post`.
#[derive(Debug, Clone)]
pub struct Vision {
    /// `conv1` (no bias) as a matrix over flattened patches.
    patch_embedding: Linear,
    positional_embedding: Tensor,
    ln_pre: LayerNorm,
    blocks: Vec<PreNormBlock>,
    ln_post: LayerNorm,
    shape: VisionShape,
    dtype: DType,
}

impl Vision {
    /// Loads the tower from `vb` rooted at `encoder_p.`.
    pub fn load(vb: &VarBuilder, shape: VisionShape) -> candle_core::Result<Self> {
        let s = &shape;
        let p = s.patch_size;
        let conv = vb.get((s.width, 3, p, p), "conv1.weight")?;
        let blocks = (0..s.layers)
            .map(|i| block(&vb.pp("transformer").pp("resblocks").pp(i), s))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            patch_embedding: Linear::from_tensors(
                conv.reshape((s.width, 3 * p * p))?,
                Tensor::zeros(s.width, conv.dtype(), conv.device())?,
            ),
            positional_embedding: vb.get((s.grid() * s.grid(), s.width), "positional_embedding")?,
            ln_pre: LayerNorm::load(&vb.pp("ln_pre"), s.width, EPS)?,
            blocks,
            ln_post: LayerNorm::load(&vb.pp("ln_post"), s.width, EPS)?,
            dtype: conv.dtype(),
            shape,
        })
    }

    pub fn shape(&self) -> &VisionShape {
        &self.shape
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let s = &self.shape;
        let pixels = pixels.to_dtype(self.dtype)?;
        let x = patches(&pixels, &self.patch_embedding, s.resolution, s.patch_size)?
            .broadcast_add(&self.positional_embedding)?;
        let mut x = self.ln_pre.forward(&x)?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        self.ln_post.forward(&x)
    }
}
