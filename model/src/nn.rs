//! The building blocks of lexlip's own architectures (BEiT and the weight-sharing layers),
//! written once for inference and for training.
//!
//! Two things differ between the two and nothing else:
//! - where the weights come from, a [`Params`]: a checkpoint for inference (Candle's
//!   `VarBuilder`), trainable variables for training (`lexlip-train`'s parameter builder, which
//!   also initialises what it does not load, hence [`Init`]);
//! - how the forward pass computes, a [`Mode`]: [`Inference`] uses Candle's fused layer-norm and
//!   softmax kernels, which have no backward pass, and no dropout; training uses the
//!   differentiable primitives below ([`layer_norm`], [`softmax`]) and its dropout.

use candle_core::{D, DType, Device, Tensor};
use candle_nn::VarBuilder;

/// How a parameter is initialised when it is not loaded (ignored when it is).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Normal with this standard deviation, truncated at two deviations (BERT/BEiT's 0.02).
    Normal(f64),
    Const(f64),
}

/// BERT/BEiT initialiser range.
pub const INIT_STD: f64 = 0.02;

/// A source of named weights, rooted at a name prefix (Hugging Face names, `.`-separated).
pub trait Params: Clone {
    type Error: From<candle_core::Error>;
    /// The source for a sub-module (`name.` appended to the prefix).
    fn pp(&self, name: impl std::fmt::Display) -> Self;
    /// The weight `name` under the prefix, of this shape.
    fn get(&self, shape: &[usize], name: &str, init: Init) -> Result<Tensor, Self::Error>;
    fn dtype(&self) -> DType;
    fn device(&self) -> &Device;
}

impl Params for VarBuilder<'_> {
    type Error = candle_core::Error;

    fn pp(&self, name: impl std::fmt::Display) -> Self {
        VarBuilder::pp(self, name.to_string())
    }

    fn get(&self, shape: &[usize], name: &str, _init: Init) -> candle_core::Result<Tensor> {
        VarBuilder::get(self, shape, name)
    }

    fn dtype(&self) -> DType {
        VarBuilder::dtype(self)
    }

    fn device(&self) -> &Device {
        VarBuilder::device(self)
    }
}

/// How a forward pass computes the operations whose fast kernels cannot be differentiated. The
/// defaults are the differentiable primitives; [`Inference`] replaces them with fused kernels.
pub trait Mode {
    /// Layer normalisation of `x` over its last dimension.
    fn layer_norm(&self, x: &Tensor, norm: &LayerNorm) -> candle_core::Result<Tensor> {
        layer_norm(x, norm)
    }
    /// Softmax over the last dimension.
    fn softmax(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        softmax(x)
    }
    /// Dropout (the identity outside training).
    fn dropout(&self, x: &Tensor) -> candle_core::Result<Tensor>;
}

/// Inference: Candle's fused kernels, no dropout.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inference;

impl Mode for Inference {
    fn layer_norm(&self, x: &Tensor, norm: &LayerNorm) -> candle_core::Result<Tensor> {
        use candle_core::Module;
        candle_nn::LayerNorm::new(norm.weight.clone(), norm.bias.clone(), norm.eps).forward(x)
    }

    fn softmax(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::softmax_last_dim(x)
    }

    fn dropout(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Ok(x.clone())
    }
}

/// Layer normalisation over the last dimension from primitive ops (differentiable).
pub fn layer_norm(x: &Tensor, norm: &LayerNorm) -> candle_core::Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?;
    let centred = x.broadcast_sub(&mean)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = centred.broadcast_div(&(var + norm.eps)?.sqrt()?)?;
    normed
        .broadcast_mul(&norm.weight)?
        .broadcast_add(&norm.bias)
}

/// Softmax over the last dimension from primitive ops (the max is detached: softmax does not
/// depend on it).
pub fn softmax(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// `y = x Wᵀ + b` over the last dimension, as one 2-D matmul whatever the rank of `x`.
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    pub fn new<P: Params>(
        pb: &P,
        input: usize,
        output: usize,
        bias: bool,
    ) -> Result<Self, P::Error> {
        let weight = pb.get(&[output, input], "weight", Init::Normal(INIT_STD))?;
        let bias = if bias {
            Some(pb.get(&[output], "bias", Init::Const(0.0))?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        linear(x, &self.weight, self.bias.as_ref())
    }
}

/// `x Wᵀ + b` with `W: (out, in)`.
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let Some((last, lead)) = dims.split_last() else {
        candle_core::bail!("linear on a scalar")
    };
    let rows: usize = lead.iter().product();
    let y = x.reshape((rows, *last))?.matmul(&weight.t()?)?;
    let y = match bias {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    let mut out = lead.to_vec();
    out.push(weight.dim(0)?);
    y.reshape(out)
}

/// Layer normalisation's parameters; the [`Mode`] computes it.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    pub eps: f64,
}

impl LayerNorm {
    pub fn new<P: Params>(pb: &P, size: usize, eps: f64) -> Result<Self, P::Error> {
        Ok(Self {
            weight: pb.get(&[size], "weight", Init::Const(1.0))?,
            bias: pb.get(&[size], "bias", Init::Const(0.0))?,
            eps,
        })
    }

    pub fn forward(&self, x: &Tensor, mode: &dyn Mode) -> candle_core::Result<Tensor> {
        mode.layer_norm(x, self)
    }
}

/// Additive attention bias `(batch, 1, 1, keys)` of a `(batch, keys)` mask (1 = token): 0 where
/// attended, `f32::MIN` at padding (which is why text runs in f32).
pub fn attention_bias(mask: &Tensor, dtype: DType) -> candle_core::Result<Tensor> {
    let m = mask.to_dtype(dtype)?;
    ((m.ones_like()? - &m)? * f64::from(f32::MIN))?
        .unsqueeze(1)?
        .unsqueeze(1)
}

/// Multi-head attention core: `softmax(q kᵀ / √d + biases) v` for `(batch, tokens, hidden)`
/// projections (keys and values may have another length than the queries: cross-attention);
/// each bias broadcasts to `(batch, heads, queries, keys)`.
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    biases: &[&Tensor],
    mode: &dyn Mode,
) -> candle_core::Result<Tensor> {
    let (b, n, h) = q.dims3()?;
    let hd = h / heads;
    let split = |t: &Tensor| -> candle_core::Result<Tensor> {
        let tokens = t.dim(1)?;
        t.reshape((b, tokens, heads, hd))?
            .transpose(1, 2)?
            .contiguous()
    };
    let (q, k, v) = (split(q)?, split(k)?, split(v)?);
    let mut scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?;
    for bias in biases {
        scores = scores.broadcast_add(bias)?;
    }
    mode.softmax(&scores)?
        .matmul(&v)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b, n, h))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The largest absolute difference between two tensors of one shape.
    pub(crate) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    /// The fused kernels and the primitives compute the same thing.
    #[test]
    fn inference_ops_equal_the_primitives() {
        let dev = Device::Cpu;
        let x = Tensor::from_vec(
            (0..24).map(|i| ((i * 7 % 11) as f32) * 0.3 - 1.0).collect(),
            (2, 3, 4),
            &dev,
        )
        .unwrap();
        let norm = LayerNorm {
            weight: Tensor::new(&[1.0f32, 0.5, 2.0, -1.0], &dev).unwrap(),
            bias: Tensor::new(&[0.1f32, 0.0, -0.2, 0.3], &dev).unwrap(),
            eps: 1e-12,
        };
        let pairs = [
            (
                Inference.layer_norm(&x, &norm).unwrap(),
                layer_norm(&x, &norm).unwrap(),
            ),
            (Inference.softmax(&x).unwrap(), softmax(&x).unwrap()),
        ];
        for (fused, plain) in pairs {
            let diff = max_abs_diff(&fused, &plain);
            assert!(diff < 1e-5, "fused and primitive differ by {diff}");
        }
        assert_eq!(
            Inference.dropout(&x).unwrap().to_vec3::<f32>().unwrap(),
            x.to_vec3::<f32>().unwrap()
        );
    }
}
