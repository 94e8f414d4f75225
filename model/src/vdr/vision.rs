//! VDR's image tower: OpenAI CLIP's vision transformer without its class token and output
//! projection (every patch stays: the lexicon is a max over patches), tensor names as the
//! reference's `VDRImageEncoder` (`encoder_p.conv1`, `encoder_p.transformer.resblocks.N.*`, …),
//! run by the pre-norm blocks of [`crate::fast`].

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

use crate::fast::Activation;
use crate::fast::layers::{LayerNorm, Linear};
use crate::fast::vit::{PreNormBlock, open_clip_block, patches};

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

/// One residual block under the reference's names, with a QuickGELU MLP four times as wide.
fn block(vb: &VarBuilder, s: &VisionShape) -> candle_core::Result<PreNormBlock> {
    open_clip_block(vb, s.width, 4 * s.width, s.heads, Activation::QuickGelu)
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
            patch_embedding: Linear::without_bias(conv.reshape((s.width, 3 * p * p))?)?,
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
