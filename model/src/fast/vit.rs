//! A transformer's pre-norm block, `x + attn(norm1(x))` then `x + mlp(norm2(x))`: BLIP's and
//! OpenAI CLIP's vision layers (VDR's image tower too) and CLIP's text layers, behind a causal
//! mask, are this block under other tensor names.

use candle_core::Tensor;

use candle_nn::VarBuilder;

use super::layers::{Activation, LayerNorm, Linear, SelfAttention};

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

    /// The same where each position attends to itself and those before it only (a causal
    /// mask: CLIP's text tower).
    pub fn forward_causal(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.attention.forward_causal(&self.norm1.forward(x)?, x)?;
        self.mlp(&x)
    }

    /// The output at position `at[i]` of input `i` only, `(batch, 1, hidden)`, that position
    /// attending to every position or, `causal`, to those up to it (as in
    /// [`Self::forward_causal`]): what a head pooling one token reads of a last layer.
    pub fn forward_at(
        &self,
        x: &Tensor,
        at: &[usize],
        causal: bool,
    ) -> candle_core::Result<Tensor> {
        let normed = self.norm1.forward(x)?;
        let seen: Option<Vec<usize>> = causal.then(|| at.iter().map(|&p| p + 1).collect());
        let x = self.attention.forward_picked(
            &normed,
            &rows_at(&normed, at)?,
            seen.as_deref(),
            &rows_at(x, at)?,
        )?;
        self.mlp(&x)
    }
}

/// One residual block under open_clip's (and OpenAI CLIP's) names: `ln_1`, `nn.MultiheadAttention`'s
/// packed projection (`attn.in_proj_weight`, queries then keys then values), `ln_2`, and the MLP
/// `mlp.c_fc` → `act` → `mlp.c_proj`; layer norms at PyTorch's default ε.
pub(crate) fn open_clip_block(
    vb: &VarBuilder,
    width: usize,
    mlp: usize,
    heads: usize,
    act: Activation,
) -> candle_core::Result<PreNormBlock> {
    const EPS: f64 = 1e-5;
    let w = width;
    let attn = vb.pp("attn");
    Ok(PreNormBlock {
        norm1: LayerNorm::load(&vb.pp("ln_1"), w, EPS)?,
        attention: SelfAttention::new(
            Linear::from_tensors(
                attn.get((3 * w, w), "in_proj_weight")?,
                attn.get(3 * w, "in_proj_bias")?,
            ),
            Linear::load(&attn.pp("out_proj"), w, w)?,
            heads,
        )?,
        norm2: LayerNorm::load(&vb.pp("ln_2"), w, EPS)?,
        fc1: Linear::load(&vb.pp("mlp").pp("c_fc"), w, mlp)?,
        fc2: Linear::load(&vb.pp("mlp").pp("c_proj"), mlp, w)?,
        act,
    })
}

/// `blocks` over `x` (each position attending to all, or, `causal`, to those up to it), the
/// last block at position `at[i]` of input `i` only: `(batch, 1, hidden)`, what a head pooling
/// one token reads.
pub(crate) fn pooled(
    blocks: &[PreNormBlock],
    mut x: Tensor,
    at: &[usize],
    causal: bool,
) -> candle_core::Result<Tensor> {
    let Some((last, rest)) = blocks.split_last() else {
        candle_core::bail!("a transformer tower needs at least one layer");
    };
    for block in rest {
        x = if causal {
            block.forward_causal(&x)?
        } else {
            block.forward(&x)?
        };
    }
    last.forward_at(&x, at, causal)
}

/// Token ids (one row per text, right-padded with 0 to the longest) embedded by
/// `token_embedding` `(vocab, hidden)` plus the first rows of `position_embedding`:
/// `(batch, tokens, hidden)`.
pub(crate) fn embed_tokens(
    token_embedding: &Tensor,
    position_embedding: &Tensor,
    ids: &[Vec<u32>],
) -> candle_core::Result<Tensor> {
    let n = ids.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let positions = position_embedding.dim(0)?;
    if n > positions {
        candle_core::bail!("a text of {n} tokens is longer than the model's {positions} positions");
    }
    let flat: Vec<u32> = ids
        .iter()
        .flat_map(|row| {
            row.iter()
                .copied()
                .chain(std::iter::repeat_n(0, n - row.len()))
        })
        .collect();
    let b = ids.len();
    let index = Tensor::from_vec(flat, b * n, token_embedding.device())?;
    token_embedding
        .index_select(&index, 0)?
        .reshape((b, n, token_embedding.dim(1)?))?
        .broadcast_add(&position_embedding.narrow(0, 0, n)?)
}

/// The first position of the largest id (PyTorch's `argmax`), where OpenAI's CLIP vocabularies
/// put `<|endoftext|>`, the token their text towers pool at; 0 for no ids.
pub(crate) fn first_largest(ids: &[u32]) -> usize {
    let max = ids.iter().copied().max().unwrap_or(0);
    ids.iter().position(|&t| t == max).unwrap_or(0)
}

/// Row `at[i]` of input `i` of `(batch, tokens, hidden)` states: `(batch, 1, hidden)`.
pub(crate) fn rows_at(x: &Tensor, at: &[usize]) -> candle_core::Result<Tensor> {
    let (b, n, h) = x.dims3()?;
    if at.len() != b || at.iter().any(|&p| p >= n) {
        candle_core::bail!("positions {at:?} outside {b} inputs of {n} tokens");
    }
    let flat: Vec<u32> = at
        .iter()
        .enumerate()
        .map(|(i, &p)| (i * n + p) as u32)
        .collect();
    let index = Tensor::from_vec(flat, b, x.device())?;
    x.reshape((b * n, h))?
        .index_select(&index, 0)?
        .reshape((b, 1, h))
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

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device};

    use super::*;

    fn linear(input: usize, output: usize, dtype: DType) -> Linear {
        let w = Tensor::randn(0f32, 0.4, (output, input), &Device::Cpu).unwrap();
        let b = Tensor::randn(0f32, 0.1, output, &Device::Cpu).unwrap();
        Linear::from_tensors(w.to_dtype(dtype).unwrap(), b.to_dtype(dtype).unwrap())
    }

    /// A block of width 8 with 2 heads and random weights; its f64 copy takes candle's ops.
    fn blocks() -> (PreNormBlock, PreNormBlock) {
        let norm = |dtype| {
            let vb = candle_nn::VarBuilder::from_tensors(
                [
                    (
                        "weight".to_string(),
                        Tensor::ones(8, dtype, &Device::Cpu).unwrap(),
                    ),
                    (
                        "bias".to_string(),
                        Tensor::zeros(8, dtype, &Device::Cpu).unwrap(),
                    ),
                ]
                .into(),
                dtype,
                &Device::Cpu,
            );
            LayerNorm::load(&vb, 8, 1e-5).unwrap()
        };
        let f32_block = PreNormBlock {
            norm1: norm(DType::F32),
            attention: SelfAttention::new(linear(8, 24, DType::F32), linear(8, 8, DType::F32), 2)
                .unwrap(),
            norm2: norm(DType::F32),
            fc1: linear(8, 16, DType::F32),
            fc2: linear(16, 8, DType::F32),
            act: Activation::QuickGelu,
        };
        let to64 = |l: &Linear| {
            let w = l.weight().to_dtype(DType::F64).unwrap();
            let b = l.bias().to_dtype(DType::F64).unwrap();
            Linear::from_tensors(w, b)
        };
        let (qkv, out) = f32_block.attention.projections();
        let f64_block = PreNormBlock {
            norm1: norm(DType::F64),
            attention: SelfAttention::prescaled(to64(qkv), to64(out), 2).unwrap(),
            norm2: norm(DType::F64),
            fc1: to64(&f32_block.fc1),
            fc2: to64(&f32_block.fc2),
            act: Activation::QuickGelu,
        };
        (f32_block, f64_block)
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        let f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
        crate::nn::tests::max_abs_diff(&f32(a), &f32(b))
    }

    /// The causal mask's oracle: position r's output is the unmasked block's last output over
    /// the first r + 1 positions; the fast f32 path and candle's f64 ops agree; the outputs at
    /// picked positions are those rows of the whole.
    #[test]
    fn causal_block_is_the_block_over_each_prefix() {
        let (block, block64) = blocks();
        let x = Tensor::randn(0f32, 1.0, (3, 7, 8), &Device::Cpu).unwrap();
        let y = block.forward_causal(&x).unwrap();
        for r in 0..7 {
            let prefix = x.narrow(1, 0, r + 1).unwrap();
            let z = block.forward(&prefix).unwrap();
            let d = max_diff(&y.narrow(1, r, 1).unwrap(), &z.narrow(1, r, 1).unwrap());
            assert!(d < 1e-5, "position {r}: {d}");
        }
        let y64 = block64
            .forward_causal(&x.to_dtype(DType::F64).unwrap())
            .unwrap();
        assert!(max_diff(&y, &y64) < 1e-5);
        let at = [6, 0, 3];
        let picked = block.forward_at(&x, &at, true).unwrap();
        assert_eq!(picked.dims(), &[3, 1, 8]);
        assert!(max_diff(&picked, &rows_at(&y, &at).unwrap()) < 1e-5);
        assert!(rows_at(&y, &[7, 0, 0]).is_err());
        // Unmasked, the picked outputs are those rows of the whole block's.
        let whole = block.forward(&x).unwrap();
        let picked = block.forward_at(&x, &at, false).unwrap();
        assert!(max_diff(&picked, &rows_at(&whole, &at).unwrap()) < 1e-5);
    }
}
