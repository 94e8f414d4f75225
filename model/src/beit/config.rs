//! BEiT's configuration: the part of Hugging Face's `config.json` the encoder reads.

use candle_nn::Activation;
use serde::{Deserialize, Serialize};

/// The subset of Hugging Face's `BeitConfig` the encoder uses (unknown keys are ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: Activation,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_image_size")]
    pub image_size: usize,
    #[serde(default = "default_patch_size")]
    pub patch_size: usize,
    #[serde(default = "default_channels")]
    pub num_channels: usize,
    #[serde(default)]
    pub use_absolute_position_embeddings: bool,
    #[serde(default)]
    pub use_relative_position_bias: bool,
    #[serde(default)]
    pub use_shared_relative_position_bias: bool,
    #[serde(default = "default_layer_scale")]
    pub layer_scale_init_value: f64,
    #[serde(default = "default_true")]
    pub use_mean_pooling: bool,
}

pub(crate) fn default_act() -> Activation {
    Activation::Gelu
}
pub(crate) fn default_eps() -> f64 {
    1e-12
}
fn default_image_size() -> usize {
    224
}
fn default_patch_size() -> usize {
    16
}
fn default_channels() -> usize {
    3
}
pub(crate) fn default_layer_scale() -> f64 {
    0.1
}
fn default_true() -> bool {
    true
}

impl Config {
    /// BEiT-B/16 at 224 as LexLIP uses it (`microsoft/beit-base-patch16-224-pt22k-ft22k`).
    pub fn base_patch16_224() -> Self {
        Self {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: Activation::Gelu,
            layer_norm_eps: 1e-12,
            image_size: 224,
            patch_size: 16,
            num_channels: 3,
            use_absolute_position_embeddings: false,
            use_relative_position_bias: true,
            use_shared_relative_position_bias: false,
            layer_scale_init_value: 0.1,
            use_mean_pooling: true,
        }
    }

    /// Patches per side at the native image size.
    pub fn native_grid(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Why this config cannot make a tower, if it cannot.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.patch_size == 0 || !self.image_size.is_multiple_of(self.patch_size) {
            return Err(format!(
                "image_size {} is not a multiple of patch_size {}",
                self.image_size, self.patch_size
            ));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        Ok(())
    }
}
