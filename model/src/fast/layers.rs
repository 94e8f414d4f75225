//! The layers of the published towers: linear layers with their activation or residual folded
//! in, layer norms, and multi-head self-attention with one fused query-key-value projection,
//! which can answer for the first position only (the class token, all a contrastive head
//! reads).
//!
//! Each operation takes the fast f32 CPU path of [`super::kernels`] where it applies and
//! candle's ops otherwise (a GPU, f16, f64); both compute the same thing.

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;
use serde::Deserialize;

use super::kernels::{self as cpu, Epilogue, Keys};

/// The activation of a tower's feed-forward block, by its transformers name (`ACT2FN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Activation {
    /// `gelu`: the exact, erf-based GELU (BLIP's, in both towers).
    #[serde(rename = "gelu")]
    Gelu,
    /// `gelu_new` / `gelu_pytorch_tanh`: GELU's tanh approximation.
    #[serde(rename = "gelu_pytorch_tanh", alias = "gelu_new")]
    GeluTanh,
    #[serde(rename = "quick_gelu")]
    QuickGelu,
    #[serde(rename = "relu")]
    Relu,
    #[serde(rename = "silu", alias = "swish")]
    Silu,
}

impl Activation {
    pub fn forward(self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Gelu => xs.gelu_erf(),
            Self::GeluTanh => xs.gelu(),
            Self::QuickGelu => xs * candle_nn::ops::sigmoid(&(xs * 1.702)?)?,
            Self::Relu => xs.relu(),
            Self::Silu => xs.silu(),
        }
    }
}

/// `y = x Wᵀ + b` over the last dimension.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    /// `(out, in)`, as PyTorch stores it.
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    pub fn load(vb: &VarBuilder, input: usize, output: usize) -> candle_core::Result<Self> {
        Ok(Self {
            weight: vb.get((output, input), "weight")?,
            bias: vb.get(output, "bias")?,
        })
    }

    /// `weight`: `(out, in)`; `bias`: `(out,)`.
    pub fn from_tensors(weight: Tensor, bias: Tensor) -> Self {
        Self { weight, bias }
    }

    /// A layer without bias (a projection, a bias-free convolution): `weight` `(out, in)`.
    pub fn without_bias(weight: Tensor) -> candle_core::Result<Self> {
        let bias = Tensor::zeros(weight.dim(0)?, weight.dtype(), weight.device())?;
        Ok(Self { weight, bias })
    }

    /// The layer whose outputs are these layers' outputs, one after the other.
    pub fn stack(parts: &[Linear]) -> candle_core::Result<Self> {
        let weights: Vec<&Tensor> = parts.iter().map(|l| &l.weight).collect();
        let biases: Vec<&Tensor> = parts.iter().map(|l| &l.bias).collect();
        Ok(Self {
            weight: Tensor::cat(&weights, 0)?,
            bias: Tensor::cat(&biases, 0)?,
        })
    }

    /// Outputs `start .. start + len` only (a view of the same weights).
    pub fn rows(&self, start: usize, len: usize) -> candle_core::Result<Self> {
        Ok(Self {
            weight: self.weight.narrow(0, start, len)?.contiguous()?,
            bias: self.bias.narrow(0, start, len)?.contiguous()?,
        })
    }

    /// Outputs `start .. start + len` multiplied by `factor`.
    fn scale_rows(&mut self, start: usize, len: usize, factor: f64) -> candle_core::Result<()> {
        let scale = |t: &Tensor| -> candle_core::Result<Tensor> {
            let n = t.dim(0)?;
            let mut parts = Vec::with_capacity(3);
            if start > 0 {
                parts.push(t.narrow(0, 0, start)?);
            }
            parts.push((t.narrow(0, start, len)? * factor)?);
            if start + len < n {
                parts.push(t.narrow(0, start + len, n - start - len)?);
            }
            Tensor::cat(&parts, 0)
        };
        self.weight = scale(&self.weight)?;
        self.bias = scale(&self.bias)?;
        Ok(())
    }

    #[cfg(test)]
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    #[cfg(test)]
    pub fn bias(&self) -> &Tensor {
        &self.bias
    }

    pub fn out_features(&self) -> usize {
        self.weight.dims()[0]
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match cpu::linear(x, &self.weight, &self.bias, Epilogue::None) {
            Some(y) => y,
            None => self.generic(x),
        }
    }

    /// `act(x Wᵀ + b)`.
    pub fn forward_act(&self, x: &Tensor, act: Activation) -> candle_core::Result<Tensor> {
        let epilogue = match act {
            Activation::Gelu => Some(Epilogue::Gelu),
            Activation::QuickGelu => Some(Epilogue::QuickGelu),
            _ => None,
        };
        if let Some(e) = epilogue
            && let Some(y) = cpu::linear(x, &self.weight, &self.bias, e)
        {
            return y;
        }
        act.forward(&self.forward(x)?)
    }

    /// `x Wᵀ + b + residual`.
    pub fn forward_add(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        match cpu::linear(x, &self.weight, &self.bias, Epilogue::Add(residual)) {
            Some(y) => y,
            None => self.generic(x)? + residual,
        }
    }

    /// candle's ops: one 2-D matrix product whatever the rank of `x`.
    fn generic(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dims = x.dims();
        let Some((&last, lead)) = dims.split_last() else {
            candle_core::bail!("linear layer on a scalar")
        };
        let rows: usize = lead.iter().product();
        let y = x
            .reshape((rows, last))?
            .matmul(&self.weight.t()?)?
            .broadcast_add(&self.bias)?;
        let mut shape = lead.to_vec();
        shape.push(self.out_features());
        y.reshape(shape)
    }
}

/// Layer normalisation's parameters over the last dimension.
#[derive(Debug, Clone)]
pub(crate) struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    pub fn load(vb: &VarBuilder, size: usize, eps: f64) -> candle_core::Result<Self> {
        Ok(Self {
            weight: vb.get(size, "weight")?,
            bias: vb.get(size, "bias")?,
            eps,
        })
    }

    /// candle's fused kernel (which has no f64 version: f64 takes candle's primitive ops).
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = x.contiguous()?;
        if x.dtype() == DType::F64 {
            candle_nn::ops::layer_norm_slow(&x, &self.weight, &self.bias, self.eps as f32)
        } else {
            candle_nn::ops::layer_norm(&x, &self.weight, &self.bias, self.eps as f32)
        }
    }
}

/// The first position of `(batch, tokens, hidden)` states, `(batch, 1, hidden)`.
pub(crate) fn first(x: &Tensor) -> candle_core::Result<Tensor> {
    x.narrow(1, 0, 1)?.contiguous()
}

/// Multi-head self-attention: one `(3 hidden, hidden)` projection to queries, keys and values
/// (query rows pre-multiplied by `1/√head_dim`, so the scores need no scaling), scaled
/// dot-product attention per head, then the output projection, to which the caller's residual
/// is added.
#[derive(Debug, Clone)]
pub(crate) struct SelfAttention {
    qkv: Linear,
    /// Views of `qkv`: the queries, and the keys and values.
    q: Linear,
    kv: Linear,
    out: Linear,
    heads: usize,
}

impl SelfAttention {
    /// `qkv`: queries, keys and values in this order, each `hidden` wide.
    pub fn new(mut qkv: Linear, out: Linear, heads: usize) -> candle_core::Result<Self> {
        let hidden = out.out_features();
        if qkv.out_features() != 3 * hidden || heads == 0 || !hidden.is_multiple_of(heads) {
            candle_core::bail!(
                "attention of width {hidden} with {heads} heads cannot read a projection to {}",
                qkv.out_features()
            );
        }
        let head_dim = hidden / heads;
        qkv.scale_rows(0, hidden, 1.0 / (head_dim as f64).sqrt())?;
        Self::prescaled(qkv, out, heads)
    }

    /// [`Self::new`] for a projection whose query rows are already scaled.
    pub fn prescaled(qkv: Linear, out: Linear, heads: usize) -> candle_core::Result<Self> {
        let hidden = out.out_features();
        Ok(Self {
            q: qkv.rows(0, hidden)?,
            kv: qkv.rows(hidden, 2 * hidden)?,
            qkv,
            out,
            heads,
        })
    }

    /// The fused projection and the output's.
    #[cfg(test)]
    pub fn projections(&self) -> (&Linear, &Linear) {
        (&self.qkv, &self.out)
    }

    /// The queries, keys and values of a tower that stores them as three layers.
    pub fn from_parts(
        query: Linear,
        key: Linear,
        value: Linear,
        out: Linear,
        heads: usize,
    ) -> candle_core::Result<Self> {
        Self::new(Linear::stack(&[query, key, value])?, out, heads)
    }

    /// `residual + attention(x)`, `(batch, tokens, hidden)`; the keys of input `i` past
    /// `lengths[i]` are padding, attended by no query.
    pub fn forward(
        &self,
        x: &Tensor,
        lengths: Option<&[usize]>,
        residual: &Tensor,
    ) -> candle_core::Result<Tensor> {
        self.forward_keys(x, lengths.map_or(Keys::All, Keys::Lengths), residual)
    }

    /// `residual + attention(x)` where each position attends to itself and the positions
    /// before it only (a decoder's causal mask: CLIP's text tower).
    pub fn forward_causal(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_keys(x, Keys::Causal, residual)
    }

    fn forward_keys(
        &self,
        x: &Tensor,
        keys: Keys,
        residual: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let qkv = self.qkv.forward(x)?;
        let ctx = match cpu::self_attention(&qkv, self.heads, keys) {
            Some(ctx) => ctx?,
            None => {
                let (b, n, h3) = qkv.dims3()?;
                let d = h3 / 3 / self.heads;
                // (batch, tokens, 3, heads, d) → (3, batch, heads, tokens, d).
                let qkv = qkv
                    .reshape((b, n, 3, self.heads, d))?
                    .permute((2, 0, 3, 1, 4))?
                    .contiguous()?;
                let bias = match keys {
                    Keys::All => None,
                    Keys::Lengths(lengths) => padding_bias(Some(lengths), n, &qkv)?,
                    Keys::Causal => Some(causal_bias(n, &qkv)?),
                };
                attend(&qkv.get(0)?, &qkv.get(1)?, &qkv.get(2)?, bias.as_ref())?
            }
        };
        self.out.forward_add(&ctx, residual)
    }

    /// `residual + attention(x)` at the first position only, `(batch, 1, hidden)`: its query
    /// against every position's key and value (all a class-token head needs of a last layer).
    pub fn forward_first(
        &self,
        x: &Tensor,
        lengths: Option<&[usize]>,
        residual: &Tensor,
    ) -> candle_core::Result<Tensor> {
        self.forward_picked(x, &first(x)?, lengths, residual)
    }

    /// `residual + attention` of one position per input, `picked` `(batch, 1, hidden)` (rows
    /// of `x`), against the keys and values of `x`'s first `lengths[i]` positions (all without
    /// `lengths`): what a pooling head reads of a last layer.
    pub fn forward_picked(
        &self,
        x: &Tensor,
        picked: &Tensor,
        lengths: Option<&[usize]>,
        residual: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let q = self.q.forward(picked)?;
        let kv = self.kv.forward(x)?;
        let ctx = match cpu::first_attention(&q, &kv, self.heads, lengths) {
            Some(ctx) => ctx?,
            None => {
                let (b, n, h2) = kv.dims3()?;
                let d = h2 / 2 / self.heads;
                let q = q
                    .reshape((b, 1, self.heads, d))?
                    .transpose(1, 2)?
                    .contiguous()?;
                // (batch, tokens, 2, heads, d) → (2, batch, heads, tokens, d).
                let kv = kv
                    .reshape((b, n, 2, self.heads, d))?
                    .permute((2, 0, 3, 1, 4))?
                    .contiguous()?;
                let bias = padding_bias(lengths, n, &kv)?;
                attend(&q, &kv.get(0)?, &kv.get(1)?, bias.as_ref())?
            }
        };
        self.out.forward_add(&ctx, residual)
    }
}

/// The additive bias `(1, 1, tokens, tokens)` that hides each query's later keys, as
/// transformers builds a decoder's (f32's minimum above the diagonal; -inf in f16, where every
/// row still has its diagonal), in `like`'s dtype.
fn causal_bias(tokens: usize, like: &Tensor) -> candle_core::Result<Tensor> {
    let min = match like.dtype() {
        DType::F64 => f64::MIN,
        _ => f64::from(f32::MIN),
    };
    let bias: Vec<f64> = (0..tokens)
        .flat_map(|i| (0..tokens).map(move |j| if j > i { min } else { 0.0 }))
        .collect();
    Tensor::from_vec(bias, (1, 1, tokens, tokens), like.device())?.to_dtype(like.dtype())
}

/// The additive bias `(batch, 1, 1, keys)` that hides padding as transformers does outside a
/// decoder (the dtype's minimum added to the scores of padded keys), in `like`'s dtype.
fn padding_bias(
    lengths: Option<&[usize]>,
    keys: usize,
    like: &Tensor,
) -> candle_core::Result<Option<Tensor>> {
    let Some(lengths) = lengths else {
        return Ok(None);
    };
    let mask: Vec<u32> = lengths
        .iter()
        .flat_map(|&l| (0..keys).map(move |j| u32::from(j < l)))
        .collect();
    let mask = Tensor::from_vec(mask, (lengths.len(), keys), like.device())?;
    let dtype = match like.dtype() {
        DType::F64 => DType::F64,
        _ => DType::F32,
    };
    let bias = crate::nn::attention_bias(&mask, dtype)?;
    Ok(Some(bias.to_dtype(like.dtype())?))
}

/// `softmax(q kᵀ + bias) v` per head, merged back to `(batch, queries, heads × d)`; `(batch,
/// heads, tokens, d)` each (queries pre-scaled).
fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let scores = q.matmul(&k.t()?)?;
    let scores = match bias {
        Some(bias) => scores.broadcast_add(bias)?,
        None => scores,
    };
    let ctx = candle_nn::ops::softmax_last_dim(&scores)?.matmul(v)?;
    let (b, heads, n, d) = ctx.dims4()?;
    ctx.transpose(1, 2)?
        .contiguous()?
        .reshape((b, n, heads * d))
}
