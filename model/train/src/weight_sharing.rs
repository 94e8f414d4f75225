//! COOKIE's weight-sharing transformer (paper 003, sec. 3.1, eq. 4) as the towers train it:
//! BEiT layers without position bias between each tower and its MLM head, one set of weights
//! for both (the text tower's and the image tower's [`SharedLayers`] are clones of the same
//! variables, so both sides' gradients add up in them). Names are the ones
//! `lexlip_model::weight_sharing` loads: `lexlip_shared.layer.N.*`.

use candle_core::Tensor;
use lexlip_model::weight_sharing::SharedConfig;

use crate::beit_layer::{BeitLayer, tower_act};
use crate::error::{Result, TrainError};
use crate::nn::{Dropout, attention_bias};
use crate::params::ParamBuilder;

pub use lexlip_model::weight_sharing::KEY;

/// The shared layers of one model.
#[derive(Debug, Clone)]
pub struct SharedLayers {
    layers: Vec<BeitLayer>,
}

impl SharedLayers {
    /// `pb`: the builder at [`KEY`]; `hidden`: the towers' common width.
    pub fn new(pb: &ParamBuilder, cfg: &SharedConfig, hidden: usize) -> Result<Self> {
        if cfg.num_attention_heads == 0 || !hidden.is_multiple_of(cfg.num_attention_heads) {
            return Err(TrainError::invalid(format!(
                "shared layers: width {hidden} is not a multiple of {} heads",
                cfg.num_attention_heads
            )));
        }
        let layer_cfg = cfg.layer_config(hidden);
        let act = tower_act(&layer_cfg)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| BeitLayer::new(&pb.pp("layer").pp(i), &layer_cfg, act))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers })
    }

    /// `(batch, tokens, hidden)` states through every layer; `mask` `(batch, tokens)` (1 =
    /// token) hides the text side's padding.
    pub fn forward(&self, xs: &Tensor, mask: Option<&Tensor>, drop: &Dropout) -> Result<Tensor> {
        let bias = mask.map(|m| attention_bias(m, xs.dtype())).transpose()?;
        let mut xs = xs.clone();
        for layer in &self.layers {
            xs = layer.forward(&xs, bias.as_ref(), drop)?;
        }
        Ok(xs)
    }
}
