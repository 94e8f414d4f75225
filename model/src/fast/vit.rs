//! A vision transformer's pre-norm block, `x + attn(norm1(x))` then `x + mlp(norm2(x))`: BLIP's
//! and OpenAI CLIP's (VDR's image tower) layers are this block under other tensor names.

use candle_core::Tensor;

use super::layers::{Activation, LayerNorm, Linear, SelfAttention, first};

/// One pre-norm layer.
#[derive(Debug, Clone)]
pub(crate) struct PreNormBlock {
    pub norm1: LayerNorm,
    pub attention: SelfAttention,
    pub norm2: LayerNorm,
    pub fc1: Linear,
    pub fc2: Linear,
    pub act: Activation,
}

impl PreNormBlock {
    /// `x + mlp(norm2(x))`.
    fn mlp(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.fc1.forward_act(&self.norm2.forward(x)?, self.act)?;
        self.fc2.forward_add(&y, x)
    }

    /// `(batch, tokens, hidden)` → the same shape.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.attention.forward(&self.norm1.forward(x)?, None, x)?;
        self.mlp(&x)
    }

    /// The layer's output at the first token only, `(batch, 1, hidden)`.
    pub fn forward_first(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self
            .attention
            .forward_first(&self.norm1.forward(x)?, None, &first(x)?)?;
        self.mlp(&x)
    }
}

/// Stride-`p` convolution with a `p × p` kernel of `(batch, 3, size, size)` pixels as a matrix
/// product over the patches, each flattened in the kernel's (channel, row, column) order:
/// `(batch, patches, hidden)`. `embedding` holds the kernel as `(hidden, 3·p·p)`.
pub(crate) fn patches(
    pixels: &Tensor,
    embedding: &Linear,
    size: usize,
    patch: usize,
) -> candle_core::Result<Tensor> {
    let (b, c, height, width) = pixels.dims4()?;
    if (c, height, width) != (3, size, size) {
        candle_core::bail!(
            "the image tower reads (batch, 3, {size}, {size}) pixels, got {:?}",
            pixels.dims()
        );
    }
    let g = size / patch;
    let flat = pixels
        .reshape((b, 3, g, patch, g, patch))?
        .permute((0, 2, 4, 1, 3, 5))?
        .contiguous()?
        .reshape((b, g * g, 3 * patch * patch))?;
    embedding.forward(&flat)
}
