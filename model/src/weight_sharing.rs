//! COOKIE's weight-sharing transformer (ICCV 2021, sec. 3.1, eq. 4): layers on top of both
//! towers with one set of weights, so that images and texts attend to tokens of the same
//! meaning before each tower's lexicon head reads them (`lexlip train --shared-layers N`).
//!
//! Each layer is a BEiT layer without relative position bias (pre-norm, layer scale): with its
//! layer scale near zero it starts close to the identity, so adding it to a trained model starts
//! from that model. A trained model carries the same layers in both tower directories (each
//! directory stays loadable on its own):
//! ```text
//! config.json        "lexlip_shared": {"num_hidden_layers": 1, "num_attention_heads": 2,
//!                                      "intermediate_size": 512, ...}
//! model.safetensors  lexlip_shared.layer.0.attention.attention.query.weight, ...
//! ```

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::Activation;
use serde::{Deserialize, Serialize};

use crate::beit::{self, layer::Layer};
use crate::error::{ModelError, Result};
use crate::nn::{Mode, Params, attention_bias};
use crate::weights::Weights;

/// The `config.json` key and the tensor-name prefix of the shared layers.
pub const KEY: &str = "lexlip_shared";

/// Shape of the shared layers (their width is the towers').
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedConfig {
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "beit::default_act")]
    pub hidden_act: Activation,
    #[serde(default = "beit::default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "beit::default_layer_scale")]
    pub layer_scale_init_value: f64,
}

impl SharedConfig {
    /// The `lexlip_shared` entry of a tower's `config.json` (`raw`), if it has one.
    pub fn of_tower(path: &Path, raw: &serde_json::Value) -> Result<Option<Self>> {
        match raw.get(KEY) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| ModelError::config(path, format!("{KEY}: {e}"))),
        }
    }

    /// Why layers of this shape cannot run at the towers' width `hidden`, if they cannot.
    pub fn check_width(&self, hidden: usize) -> std::result::Result<(), String> {
        if self.num_attention_heads == 0 || !hidden.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "{KEY}: width {hidden} is not a multiple of num_attention_heads {}",
                self.num_attention_heads
            ));
        }
        Ok(())
    }

    /// One shared layer as a BEiT layer config of width `hidden` (no position bias: the text
    /// side has no patch grid).
    pub fn layer_config(&self, hidden: usize) -> beit::Config {
        beit::Config {
            hidden_size: hidden,
            num_hidden_layers: 1,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: self.hidden_act,
            layer_norm_eps: self.layer_norm_eps,
            use_absolute_position_embeddings: false,
            use_relative_position_bias: false,
            use_shared_relative_position_bias: false,
            layer_scale_init_value: self.layer_scale_init_value,
            ..beit::Config::base_patch16_224()
        }
    }
}

/// The shared layers of one model (in training, the text tower's and the image tower's are clones
/// of the same variables, so both sides' gradients add up in them).
#[derive(Debug, Clone)]
pub struct SharedLayers {
    layers: Vec<Layer>,
}

impl SharedLayers {
    /// The layers over parameters from `pb` (the source at [`KEY`]); `hidden`: the towers'
    /// common width.
    pub fn new<P: Params>(
        pb: &P,
        cfg: &SharedConfig,
        hidden: usize,
    ) -> std::result::Result<Self, P::Error> {
        cfg.check_width(hidden)
            .map_err(|e| P::Error::from(candle_core::Error::Msg(e)))?;
        let layer_cfg = cfg.layer_config(hidden);
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::new(&pb.pp("layer").pp(i), &layer_cfg))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Self { layers })
    }

    /// The shared layers a tower directory declares in `raw` (its `config.json` at `path`), read
    /// from `weights`; `None` when it declares none.
    pub fn load(
        path: &Path,
        raw: &serde_json::Value,
        weights: &Weights,
        hidden: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Option<Self>> {
        let Some(cfg) = SharedConfig::of_tower(path, raw)? else {
            return Ok(None);
        };
        cfg.check_width(hidden)
            .map_err(|e| ModelError::config(path, e))?;
        let vb = weights.var_builder(dtype, device).pp(KEY);
        Self::new(&vb, &cfg, hidden)
            .map(Some)
            .map_err(|e| weights.load_error(e))
    }

    /// `(batch, tokens, hidden)` states through every layer; `mask` `(batch, tokens)` (1 =
    /// token) hides padding from attention.
    pub fn forward(
        &self,
        xs: &Tensor,
        mask: Option<&Tensor>,
        mode: &dyn Mode,
    ) -> candle_core::Result<Tensor> {
        let bias = mask.map(|m| attention_bias(m, xs.dtype())).transpose()?;
        let biases: Vec<&Tensor> = bias.iter().collect();
        let mut xs = xs.clone();
        for layer in &self.layers {
            xs = layer.forward(&xs, &biases, mode)?;
        }
        Ok(xs)
    }
}
