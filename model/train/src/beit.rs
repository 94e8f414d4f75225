//! The trainable image tower: BEiT (`BeitForMaskedImageModeling` layout: `beit.*`, `layernorm.*`)
//! plus LexLIP's BERT-style MLM head over every token (`cls.*`), the names
//! `lexlip_model::ImageEncoder` loads (the dense objective uses the BEiT without the head). Runs
//! at the config's native image size.
//!
//! The patch embedding is a reshape into non-overlapping patch vectors and one matmul, which is
//! the stride-p convolution exactly and much faster than Candle's CPU conv2d (tested against
//! conv2d in `tests/parity.rs`).

use candle_core::{Device, Tensor};
use lexlip_model::beit::Config as BeitConfig;
use lexlip_model::image::HeadConfig;

use crate::beit_layer::{BeitLayer, RelativeBias, tower_act};
use crate::error::{Result, TrainError};
use crate::head::MlmHead;
use crate::nn::{Act, Dropout, INIT_STD, LayerNorm};
use crate::params::{Init, ParamBuilder};
use crate::weight_sharing::SharedLayers;

/// BEiT (`beit.*`, `layernorm.*`): the image tower of both objectives.
#[derive(Debug, Clone)]
pub struct BeitEncoder {
    cls_token: Tensor,
    /// `(hidden, channels, p, p)` as stored; flattened at each forward (the variable is updated
    /// in place by the optimizer, so nothing derived from it may be cached).
    patch_weight: Tensor,
    patch_bias: Tensor,
    position: Option<Tensor>,
    shared: Option<RelativeBias>,
    layers: Vec<BeitLayer>,
    inner_norm: Option<LayerNorm>,
    final_norm: LayerNorm,
    pub config: BeitConfig,
}

impl BeitEncoder {
    /// `pb`: the tower root for `beit.*` and `layernorm.*`.
    pub fn new(pb: &ParamBuilder, cfg: &BeitConfig) -> Result<Self> {
        check_config(cfg)?;
        let act = tower_act(cfg)?;
        let h = cfg.hidden_size;
        let p = cfg.patch_size;
        let emb = pb.pp("beit").pp("embeddings");
        let proj = emb.pp("patch_embeddings").pp("projection");
        let n = cfg.native_grid() * cfg.native_grid();
        let enc = pb.pp("beit").pp("encoder");
        Ok(Self {
            cls_token: emb.get(&[1, 1, h], "cls_token", Init::Normal(INIT_STD))?,
            patch_weight: proj.get(
                &[h, cfg.num_channels, p, p],
                "weight",
                Init::Normal(INIT_STD),
            )?,
            patch_bias: proj.get(&[h], "bias", Init::Const(0.0))?,
            position: if cfg.use_absolute_position_embeddings {
                Some(emb.get(
                    &[1, n + 1, h],
                    "position_embeddings",
                    Init::Normal(INIT_STD),
                )?)
            } else {
                None
            },
            shared: if cfg.use_shared_relative_position_bias {
                Some(RelativeBias::new(&enc.pp("relative_position_bias"), cfg)?)
            } else {
                None
            },
            layers: (0..cfg.num_hidden_layers)
                .map(|i| BeitLayer::new(&enc.pp("layer").pp(i), cfg, act))
                .collect::<Result<Vec<_>>>()?,
            inner_norm: if cfg.use_mean_pooling {
                None
            } else {
                Some(LayerNorm::new(
                    &pb.pp("beit").pp("layernorm"),
                    h,
                    cfg.layer_norm_eps,
                )?)
            },
            final_norm: LayerNorm::new(&pb.pp("layernorm"), h, cfg.layer_norm_eps)?,
            config: cfg.clone(),
        })
    }

    pub fn image_size(&self) -> usize {
        self.config.image_size
    }

    pub fn device(&self) -> &Device {
        self.cls_token.device()
    }

    /// Patch embeddings `(batch, patches, hidden)` of `(batch, channels, size, size)` pixels.
    pub fn patch_embed(&self, pixels: &Tensor) -> Result<Tensor> {
        let (b, c, hgt, wid) = pixels.dims4()?;
        let size = self.config.image_size;
        if c != self.config.num_channels || hgt != size || wid != size {
            return Err(TrainError::invalid(format!(
                "expected pixels of shape (batch, {}, {size}, {size}), got {:?}",
                self.config.num_channels,
                pixels.dims()
            )));
        }
        let p = self.config.patch_size;
        let g = size / p;
        let h = self.config.hidden_size;
        let patches = pixels
            .to_dtype(self.cls_token.dtype())?
            .reshape((b, c, g, p, g, p))?
            .permute((0, 2, 4, 1, 3, 5))?
            .contiguous()?
            .reshape((b * g * g, c * p * p))?;
        let w = self.patch_weight.reshape((h, c * p * p))?;
        Ok(crate::nn::linear(&patches, &w, Some(&self.patch_bias))?.reshape((b, g * g, h))?)
    }

    /// Hidden states `(batch, 1 + patches, hidden)` after the final layer norm.
    pub fn hidden(&self, pixels: &Tensor, drop: &Dropout) -> Result<Tensor> {
        self.encode(self.patch_embed(pixels)?, drop)
    }

    /// [`Self::hidden`] with the patches where `keep` `(batch, patches)` is 0 replaced by the
    /// embedding `token` `(hidden)` before the layers (SimMIM's and BEiT's learnable mask
    /// token: zeroed pixels would enter the layers as a bias-only embedding, at first an exact
    /// zero whose layer-norm gradient explodes).
    pub fn hidden_masked(
        &self,
        pixels: &Tensor,
        keep: &Tensor,
        token: &Tensor,
        drop: &Dropout,
    ) -> Result<Tensor> {
        let emb = self.patch_embed(pixels)?;
        let keep = keep.to_dtype(emb.dtype())?.unsqueeze(2)?;
        let masked = (keep.ones_like()? - &keep)?;
        let emb = (emb.broadcast_mul(&keep)? + masked.broadcast_mul(token)?)?;
        self.encode(emb, drop)
    }

    /// The layers over patch embeddings `(batch, patches, hidden)`.
    fn encode(&self, emb: Tensor, drop: &Dropout) -> Result<Tensor> {
        let (b, _, h) = emb.dims3()?;
        let cls = self.cls_token.broadcast_as((b, 1, h))?;
        let mut xs = Tensor::cat(&[&cls, &emb], 1)?;
        if let Some(pos) = &self.position {
            xs = xs.broadcast_add(pos)?;
        }
        xs = drop.forward(&xs)?;
        let shared = self.shared.as_ref().map(RelativeBias::bias).transpose()?;
        for layer in &self.layers {
            xs = layer.forward(&xs, shared.as_ref(), drop)?;
        }
        if let Some(norm) = &self.inner_norm {
            xs = norm.forward(&xs)?;
        }
        self.final_norm.forward(&xs)
    }
}

/// BEiT + LexLIP's MLM head.
#[derive(Debug, Clone)]
pub struct BeitMlm {
    pub encoder: BeitEncoder,
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
        let encoder = BeitEncoder::new(pb, cfg)?;
        let head_act = act_of(&head.hidden_act)?;
        Ok(Self {
            encoder,
            shared: None,
            head: MlmHead::new(
                head_pb,
                cfg.hidden_size,
                vocab,
                head_act,
                head.layer_norm_eps,
                None,
            )?,
            config: cfg.clone(),
        })
    }

    pub fn image_size(&self) -> usize {
        self.encoder.image_size()
    }

    pub fn device(&self) -> &Device {
        self.encoder.device()
    }

    /// See [`BeitEncoder::patch_embed`].
    pub fn patch_embed(&self, pixels: &Tensor) -> Result<Tensor> {
        self.encoder.patch_embed(pixels)
    }

    /// Hidden states `(batch, 1 + patches, hidden)` after the final layer norm.
    pub fn hidden(&self, pixels: &Tensor, drop: &Dropout) -> Result<Tensor> {
        self.encoder.hidden(pixels, drop)
    }

    /// MLM logits `(batch, 1 + patches, vocab)`: the tower, the shared layers if any, the head.
    pub fn logits(&self, pixels: &Tensor, drop: &Dropout) -> Result<Tensor> {
        let hidden = self.hidden(pixels, drop)?;
        match &self.shared {
            Some(shared) => self.head.forward(&shared.forward(&hidden, None, drop)?),
            None => self.head.forward(&hidden),
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

fn check_config(cfg: &BeitConfig) -> Result<()> {
    if cfg.patch_size == 0 || !cfg.image_size.is_multiple_of(cfg.patch_size) {
        return Err(TrainError::invalid(format!(
            "image_size {} is not a multiple of patch_size {}",
            cfg.image_size, cfg.patch_size
        )));
    }
    if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
        return Err(TrainError::invalid(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            cfg.hidden_size, cfg.num_attention_heads
        )));
    }
    Ok(())
}
