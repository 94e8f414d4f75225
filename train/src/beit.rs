//! The trainable image tower: lexlip-model's BEiT ([`Beit`], `beit.*`, `layernorm.*`) over
//! trainable parameters, plus LexLIP's BERT-style MLM head over every token (`cls.*`), the names
//! `lexlip_model::ImageEncoder` loads (the dense objective uses the BEiT without the head). Runs
//! at the config's native image size.

use candle_core::{Device, Tensor};
pub use lexlip_model::beit::Beit;
use lexlip_model::beit::Config as BeitConfig;
use lexlip_model::image::HeadConfig;

use crate::error::{Result, TrainError};
use crate::head::MlmHead;
use crate::nn::{Act, Differentiable, Dropout, tower_act};
use crate::params::ParamBuilder;
use crate::weight_sharing::SharedLayers;

/// The BEiT tower over trainable parameters from `pb` (the tower root for `beit.*` and
/// `layernorm.*`), after checking that training can compute it.
pub fn tower(pb: &ParamBuilder, cfg: &BeitConfig) -> Result<Beit> {
    cfg.validate().map_err(TrainError::invalid)?;
    tower_act(cfg)?;
    Beit::new(pb, cfg)
}

/// BEiT + LexLIP's MLM head.
#[derive(Debug, Clone)]
pub struct BeitMlm {
    pub encoder: Beit,
    /// COOKIE's weight-sharing layers between the tower and its head (the text tower holds
    /// the same ones).
    pub shared: Option<SharedLayers>,
    pub head: MlmHead,
    pub config: BeitConfig,
}

impl BeitMlm {
    /// `pb`: the tower root for `beit.*` and `layernorm.*`; `head_pb`: the builder for `cls`
    /// (the same store, maybe another source, e.g. the text model's head).
    pub fn new(
        pb: &ParamBuilder,
        head_pb: &ParamBuilder,
        cfg: &BeitConfig,
        head: &HeadConfig,
        vocab: usize,
    ) -> Result<Self> {
        let encoder = tower(pb, cfg)?;
        let head_act = act_of(&head.hidden_act)?;
        Ok(Self {
            encoder,
            shared: None,
            head: MlmHead::new(
                head_pb,
                cfg.hidden_size,
                vocab,
                head_act.into(),
                head.layer_norm_eps,
                None,
            )?,
            config: cfg.clone(),
        })
    }

    pub fn image_size(&self) -> usize {
        self.encoder.input_size()
    }

    pub fn device(&self) -> &Device {
        self.encoder.device()
    }

    /// See [`Beit::patch_embed`].
    pub fn patch_embed(&self, pixels: &Tensor) -> Result<Tensor> {
        Ok(self.encoder.patch_embed(pixels)?)
    }

    /// Hidden states `(batch, 1 + patches, hidden)` after the final layer norm.
    pub fn hidden(&self, pixels: &Tensor, drop: &Dropout) -> Result<Tensor> {
        Ok(self.encoder.hidden(pixels, drop)?)
    }

    /// MLM logits `(batch, 1 + patches, vocab)`: the tower, the shared layers if any, the head.
    pub fn logits(&self, pixels: &Tensor, drop: &Dropout) -> Result<Tensor> {
        let hidden = self.hidden(pixels, drop)?;
        match &self.shared {
            Some(shared) => Ok(self
                .head
                .forward(&shared.forward(&hidden, None, drop)?, &Differentiable)?),
            None => Ok(self.head.forward(&hidden, &Differentiable)?),
        }
    }
}

fn act_of(name: &str) -> Result<Act> {
    Act::parse(name).ok_or_else(|| {
        TrainError::invalid(format!(
            "activation {name:?} is not supported for training (gelu, gelu_new, relu)"
        ))
    })
}
