//! Differentiable building blocks written with primitive tensor ops only.
//!
//! Candle's fused kernels (`candle_nn::LayerNorm` on contiguous input, `ops::layer_norm`,
//! `softmax_last_dim`, …) have no backward pass and drop gradients silently, so training runs
//! the towers in a [`Mode`] that uses `lexlip_model::nn`'s primitives instead: [`Dropout`] (with
//! its dropout) or [`Differentiable`] (without). `tests/gradients.rs` checks every parameter gets a
//! gradient and that gradients match finite differences.

use std::cell::RefCell;

use candle_core::{D, Module, Tensor};
pub use lexlip_model::nn::{
    INIT_STD, LayerNorm, Linear, Mode, attend, attention_bias, layer_norm, linear, softmax,
};

use crate::error::{Result, TrainError};
use crate::rng::Rng;

/// The training ops without dropout (heads, evaluation, momentum encoders).
#[derive(Debug, Clone, Copy, Default)]
pub struct Differentiable;

impl Mode for Differentiable {
    fn dropout(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Ok(x.clone())
    }
}

impl Mode for Dropout {
    fn dropout(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward(x)
    }
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
        Ok(candle_nn::Activation::from(self).forward(x)?)
    }
}

/// The same functions under Candle's names (what lexlip-model's layers take).
impl From<Act> for candle_nn::Activation {
    fn from(act: Act) -> Self {
        match act {
            Act::Gelu => candle_nn::Activation::Gelu,
            Act::GeluTanh => candle_nn::Activation::NewGelu,
            Act::Relu => candle_nn::Activation::Relu,
        }
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

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
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
        x.mul(&mask)
    }
}

/// Rows scaled to unit L2 norm (differentiable; norms below `1e-12` count as `1e-12`, as
/// PyTorch's `F.normalize`).
pub fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let norm = x.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.maximum(1e-12)?;
    Ok(x.broadcast_div(&norm)?)
}

/// Rows `rows` (flattened `b · n + i`, u32) of `(batch, n, dim)` states, as `(rows, dim)`: the
/// masked positions a reconstruction loss reads.
pub fn gather_rows(states: &Tensor, rows: &Tensor) -> Result<Tensor> {
    let (b, n, d) = states.dims3()?;
    Ok(states.reshape((b * n, d))?.index_select(rows, 0)?)
}

/// The activation of the tower's layers, as the training ops compute it.
pub fn tower_act(cfg: &lexlip_model::beit::Config) -> Result<Act> {
    Ok(match cfg.hidden_act {
        candle_nn::Activation::Gelu => Act::Gelu,
        candle_nn::Activation::NewGelu | candle_nn::Activation::GeluPytorchTanh => Act::GeluTanh,
        candle_nn::Activation::Relu => Act::Relu,
        other => {
            return Err(TrainError::invalid(format!(
                "BEiT activation {other:?} is not supported for training (gelu, gelu_new, relu)"
            )));
        }
    })
}
