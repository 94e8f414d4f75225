//! Differentiable building blocks written with primitive tensor ops only.
//!
//! Candle's fused kernels (`candle_nn::LayerNorm` on contiguous input, `ops::layer_norm`,
//! `softmax_last_dim`, …) have no backward pass and drop gradients silently, so the training
//! towers use these instead; `tests/gradients.rs` checks every parameter gets a gradient and that
//! gradients match finite differences.

use std::cell::RefCell;

use candle_core::{D, DType, Tensor};

use crate::error::Result;
use crate::params::{Init, ParamBuilder};
use crate::rng::Rng;

/// BERT/BEiT initialiser range.
pub const INIT_STD: f64 = 0.02;

/// `y = x Wᵀ + b` over the last dimension, as one 2-D matmul whatever the rank of `x`.
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    pub fn new(pb: &ParamBuilder, input: usize, output: usize, bias: bool) -> Result<Self> {
        let weight = pb.get(&[output, input], "weight", Init::Normal(INIT_STD))?;
        let bias = if bias {
            Some(pb.get(&[output], "bias", Init::Const(0.0))?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        linear(x, &self.weight, self.bias.as_ref())
    }
}

/// `x Wᵀ + b` with `W: (out, in)`.
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let (last, lead) = match dims.split_last() {
        Some((l, lead)) => (*l, lead.to_vec()),
        None => return Err(crate::TrainError::invalid("linear on a scalar")),
    };
    let rows: usize = lead.iter().product();
    let y = x.reshape((rows, last))?.matmul(&weight.t()?)?;
    let y = match bias {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    let mut out = lead;
    out.push(weight.dim(0)?);
    Ok(y.reshape(out)?)
}

/// Layer normalisation over the last dimension, from primitive ops (differentiable).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    pub eps: f64,
}

impl LayerNorm {
    pub fn new(pb: &ParamBuilder, size: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: pb.get(&[size], "weight", Init::Const(1.0))?,
            bias: pb.get(&[size], "bias", Init::Const(0.0))?,
            eps,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mean = x.mean_keepdim(D::Minus1)?;
        let centred = x.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centred.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        Ok(normed
            .broadcast_mul(&self.weight)?
            .broadcast_add(&self.bias)?)
    }
}

/// Softmax over the last dimension (the max is detached: softmax does not depend on it).
pub fn softmax(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    Ok(e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?)
}

/// Log-softmax over the last dimension.
pub fn log_softmax(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    Ok(shifted.broadcast_sub(&lse)?)
}

/// The activations the towers support (Hugging Face names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// `gelu`: the exact (erf) form.
    Gelu,
    /// `gelu_new` / `gelu_pytorch_tanh`: the tanh approximation.
    GeluTanh,
    Relu,
}

impl Act {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "gelu" => Some(Act::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Act::GeluTanh),
            "relu" => Some(Act::Relu),
            _ => None,
        }
    }

    pub fn forward(self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Act::Gelu => x.gelu_erf()?,
            Act::GeluTanh => x.gelu()?,
            Act::Relu => x.relu()?,
        })
    }
}

/// Per-step dropout: masks drawn from a stream keyed by the seed and step, in call order (the
/// forward pass calls in a fixed order), so a step's masks are reproducible. `p = 0` or eval mode
/// draws nothing.
pub struct Dropout {
    p: f64,
    rng: RefCell<Rng>,
}

impl Dropout {
    pub fn new(p: f64, rng: Rng) -> Self {
        Self {
            p,
            rng: RefCell::new(rng),
        }
    }

    /// No dropout (evaluation, parity tests, momentum encoders).
    pub fn off() -> Self {
        Self::new(0.0, Rng::new(&[0]))
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.p <= 0.0 {
            return Ok(x.clone());
        }
        let n = x.elem_count();
        let keep = 1.0 - self.p;
        let scale = (1.0 / keep) as f32;
        let mut rng = self.rng.borrow_mut();
        let mask: Vec<f32> = (0..n)
            .map(|_| {
                if f64::from(rng.uniform_f32()) < keep {
                    scale
                } else {
                    0.0
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
        Ok(x.mul(&mask)?)
    }
}

/// Additive attention mask `(batch, 1, 1, keys)`: 0 for real tokens, `f32::MIN` for padding (as
/// the inference BERT does, so outputs match bit for bit in spirit and to 1e-6 in practice).
pub fn attention_bias(mask: &Tensor, dtype: DType) -> Result<Tensor> {
    let m = mask.to_dtype(dtype)?.unsqueeze(1)?.unsqueeze(1)?;
    Ok(((m.ones_like()? - m)? * f64::from(f32::MIN))?)
}

/// Rows `rows` (flattened `b · n + i`, u32) of `(batch, n, dim)` states, as `(rows, dim)`: the
/// masked positions a reconstruction loss reads.
pub fn gather_rows(states: &Tensor, rows: &Tensor) -> Result<Tensor> {
    let (b, n, d) = states.dims3()?;
    Ok(states.reshape((b * n, d))?.index_select(rows, 0)?)
}

/// Multi-head attention core: `softmax(q kᵀ / √d + bias) v` for `(batch, tokens, hidden)`
/// projections (keys and values may have another length than the queries: cross-attention);
/// `bias` broadcasts to `(batch, heads, queries, keys)`.
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    biases: &[&Tensor],
) -> Result<Tensor> {
    let (b, n, h) = q.dims3()?;
    let hd = h / heads;
    let split = |t: &Tensor| -> Result<Tensor> {
        let tokens = t.dim(1)?;
        Ok(t.reshape((b, tokens, heads, hd))?
            .transpose(1, 2)?
            .contiguous()?)
    };
    let (q, k, v) = (split(q)?, split(k)?, split(v)?);
    let mut scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?;
    for bias in biases {
        scores = scores.broadcast_add(bias)?;
    }
    let probs = softmax(&scores)?;
    Ok(probs
        .matmul(&v)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b, n, h))?)
}
