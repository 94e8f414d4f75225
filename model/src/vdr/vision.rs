//! VDR's image tower: OpenAI CLIP's vision transformer without its class token and output
//! projection (every patch stays: the lexicon is a max over patches), tensor names as the
//! reference's `VDRImageEncoder` (`encoder_p.conv1`, `encoder_p.transformer.resblocks.N.*`, …).

use candle_core::{D, DType, Tensor};
use candle_nn::VarBuilder;

use crate::nn::{Inference, LayerNorm, Linear, attend};

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

/// One residual block: attention and a QuickGELU MLP, each behind a pre-norm.
#[derive(Debug, Clone)]
struct Block {
    ln_1: LayerNorm,
    /// `nn.MultiheadAttention`'s packed query/key/value projection `(3·width, width)`.
    in_proj: Linear,
    out_proj: Linear,
    ln_2: LayerNorm,
    c_fc: Linear,
    c_proj: Linear,
    heads: usize,
}

impl Block {
    fn load(vb: &VarBuilder, s: &VisionShape) -> candle_core::Result<Self> {
        let w = s.width;
        let attn = vb.pp("attn");
        Ok(Self {
            ln_1: LayerNorm::new(&vb.pp("ln_1"), w, EPS)?,
            in_proj: Linear {
                weight: attn.get((3 * w, w), "in_proj_weight")?,
                bias: Some(attn.get(3 * w, "in_proj_bias")?),
            },
            out_proj: Linear::new(&attn.pp("out_proj"), w, w, true)?,
            ln_2: LayerNorm::new(&vb.pp("ln_2"), w, EPS)?,
            c_fc: Linear::new(&vb.pp("mlp").pp("c_fc"), w, 4 * w, true)?,
            c_proj: Linear::new(&vb.pp("mlp").pp("c_proj"), 4 * w, w, true)?,
            heads: s.heads,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = self.ln_1.forward(x, &Inference)?;
        let qkv = self.in_proj.forward(&h)?;
        let w = x.dim(D::Minus1)?;
        let (q, k, v) = (
            qkv.narrow(D::Minus1, 0, w)?,
            qkv.narrow(D::Minus1, w, w)?,
            qkv.narrow(D::Minus1, 2 * w, w)?,
        );
        let a = attend(&q, &k, &v, self.heads, &[], &Inference)?;
        let x = (x + self.out_proj.forward(&a)?)?;
        let h = self.c_fc.forward(&self.ln_2.forward(&x, &Inference)?)?;
        // QuickGELU: x·σ(1.702·x), as OpenAI's CLIP (not the erf GELU).
        let h = (&h * candle_nn::ops::sigmoid(&(&h * 1.702)?)?)?;
        x + self.c_proj.forward(&h)?
    }
}

/// Pixels `(batch, 3, resolution, resolution)` → patch states `(batch, grid², width)` after
/// `ln_post`.
#[derive(Debug, Clone)]
pub struct Vision {
    conv1: Tensor,
    positional_embedding: Tensor,
    ln_pre: LayerNorm,
    blocks: Vec<Block>,
    ln_post: LayerNorm,
    shape: VisionShape,
}

impl Vision {
    /// Loads the tower from `vb` rooted at `encoder_p.`.
    pub fn load(vb: &VarBuilder, shape: VisionShape) -> candle_core::Result<Self> {
        let s = &shape;
        let blocks = (0..s.layers)
            .map(|i| Block::load(&vb.pp("transformer").pp("resblocks").pp(i), s))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            conv1: vb.get((s.width, 3, s.patch_size, s.patch_size), "conv1.weight")?,
            positional_embedding: vb.get((s.grid() * s.grid(), s.width), "positional_embedding")?,
            ln_pre: LayerNorm::new(&vb.pp("ln_pre"), s.width, EPS)?,
            blocks,
            ln_post: LayerNorm::new(&vb.pp("ln_post"), s.width, EPS)?,
            shape,
        })
    }

    pub fn shape(&self) -> &VisionShape {
        &self.shape
    }

    pub fn dtype(&self) -> DType {
        self.conv1.dtype()
    }

    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let pixels = pixels.to_dtype(self.dtype())?;
        let x = pixels.conv2d(&self.conv1, 0, self.shape.patch_size, 1, 1)?;
        let (b, w, gh, gw) = x.dims4()?;
        let x = x.reshape((b, w, gh * gw))?.transpose(1, 2)?;
        let x = x.broadcast_add(&self.positional_embedding)?;
        let mut x = self.ln_pre.forward(&x.contiguous()?, &Inference)?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        self.ln_post.forward(&x, &Inference)
    }
}
