//! BEiT in the Hugging Face layout (`BeitForMaskedImageModeling`: `beit.*` + `layernorm.*`), as the
//! LexLIP image encoder uses it: CLS token, relative position bias (per layer or shared), layer
//! scale (`lambda_1`, `lambda_2`), and the final layer norm over every token (CLS + patches).
//!
//! candle-transformers' `beit` is timm-style (fused qkv, fixed 384 input), so this file follows the
//! HF module tree instead; tensor names mirror it. Inputs larger than the checkpoint's native size
//! use LexLIP's interpolation of the relative position bias table (their `interpolate_pos`: a 1-D
//! linear resampling of the whole table, which is how the official 384×384 models ran).

use candle_core::{DType, Device, Tensor};
use candle_nn::{Activation, VarBuilder};

use crate::error::{ModelError, Result};
use crate::nn::{INIT_STD, Inference, Init, LayerNorm, Mode, Params, linear};

mod config;
pub(crate) mod layer;
pub mod random;
mod relative;

pub use config::Config;
/// BEiT's defaults, which the weight-sharing layers (BEiT layers) share.
pub(crate) use config::{default_act, default_eps, default_layer_scale};
use layer::{Layer, RelativeBias};
pub use relative::{
    grid_of_table_len, interpolate_table_lexlip, relative_position_index, relative_table_len,
};

/// Tensors derived from weights that no longer change (a loaded model): computed once per input
/// size instead of at every forward pass.
#[derive(Debug, Clone)]
struct Frozen {
    /// The patch projection as a `(C·p·p, hidden)` matrix.
    patch_matrix: Tensor,
    /// The shared relative bias and each layer's, at the input grid.
    shared_bias: Option<Tensor>,
    layer_biases: Vec<Option<Tensor>>,
}

/// `BeitForMaskedImageModeling` without its visual-token head: pixels → normalised hidden states
/// of every token `(batch, 1 + patches, hidden)`. Built by [`Beit::load`] from a checkpoint for
/// inference, or by [`Beit::new`] over trainable parameters (`lexlip-train`).
#[derive(Debug, Clone)]
pub struct Beit {
    cls_token: Tensor,
    /// `(hidden, channels, p, p)` as stored.
    patch_weight: Tensor,
    patch_bias: Tensor,
    position_embeddings: Option<Tensor>,
    shared_relative: Option<RelativeBias>,
    layers: Vec<Layer>,
    /// `beit.layernorm` (present when `use_mean_pooling` is false).
    inner_norm: Option<LayerNorm>,
    /// `layernorm` of `BeitForMaskedImageModeling`, applied to every token.
    final_norm: LayerNorm,
    config: Config,
    input_size: usize,
    /// `None` while the weights train: they change in place at every step, so nothing derived
    /// from them may be kept.
    frozen: Option<Frozen>,
}

impl Beit {
    /// The tower over parameters from `pb`, rooted at the `BeitForMaskedImageModeling` level
    /// (`beit.*`, `layernorm.*`); runs at the config's native size.
    pub fn new<P: Params>(pb: &P, config: &Config) -> std::result::Result<Self, P::Error> {
        config
            .validate()
            .map_err(|e| P::Error::from(candle_core::Error::Msg(e)))?;
        let h = config.hidden_size;
        let p = config.patch_size;
        let emb = pb.pp("beit").pp("embeddings");
        let proj = emb.pp("patch_embeddings").pp("projection");
        let n = config.native_grid() * config.native_grid();
        let enc = pb.pp("beit").pp("encoder");
        Ok(Self {
            cls_token: emb.get(&[1, 1, h], "cls_token", Init::Normal(INIT_STD))?,
            patch_weight: proj.get(
                &[h, config.num_channels, p, p],
                "weight",
                Init::Normal(INIT_STD),
            )?,
            patch_bias: proj.get(&[h], "bias", Init::Const(0.0))?,
            position_embeddings: if config.use_absolute_position_embeddings {
                Some(emb.get(
                    &[1, n + 1, h],
                    "position_embeddings",
                    Init::Normal(INIT_STD),
                )?)
            } else {
                None
            },
            shared_relative: if config.use_shared_relative_position_bias {
                Some(RelativeBias::new(
                    &enc.pp("relative_position_bias"),
                    config,
                )?)
            } else {
                None
            },
            layers: (0..config.num_hidden_layers)
                .map(|i| Layer::new(&enc.pp("layer").pp(i), config))
                .collect::<std::result::Result<Vec<_>, _>>()?,
            inner_norm: if config.use_mean_pooling {
                None
            } else {
                Some(LayerNorm::new(
                    &pb.pp("beit").pp("layernorm"),
                    h,
                    config.layer_norm_eps,
                )?)
            },
            final_norm: LayerNorm::new(&pb.pp("layernorm"), h, config.layer_norm_eps)?,
            config: config.clone(),
            input_size: config.image_size,
            frozen: None,
        })
    }

    /// Loads for inference from a `VarBuilder` rooted at the `BeitForMaskedImageModeling` level.
    /// Runs at the config's image size until [`Beit::set_input_size`].
    pub fn load(vb: VarBuilder, config: &Config) -> candle_core::Result<Self> {
        let mut beit = Self::new(&vb, config)?;
        beit.freeze(config.image_size)?;
        Ok(beit)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn input_size(&self) -> usize {
        self.input_size
    }

    pub fn dtype(&self) -> DType {
        self.cls_token.dtype()
    }

    pub fn device(&self) -> &Device {
        self.cls_token.device()
    }

    /// Runs at `size × size` pixels. Relative position biases are resampled the way LexLIP does
    /// for 384 × 384; absolute position embeddings cannot be, so those models keep their size,
    /// and so does a tower in training.
    pub fn set_input_size(&mut self, size: usize) -> candle_core::Result<()> {
        if self.frozen.is_none() {
            // Training: the weights change at every step, so nothing is derived ahead.
            if size != self.config.image_size {
                candle_core::bail!(
                    "a BEiT in training runs at its native {0}×{0}",
                    self.config.image_size
                )
            }
            return Ok(());
        }
        self.freeze(size)
    }

    /// Computes what the forward pass derives from the weights, once, for `size × size` inputs.
    fn freeze(&mut self, size: usize) -> candle_core::Result<()> {
        let p = self.config.patch_size;
        if size == 0 || !size.is_multiple_of(p) {
            candle_core::bail!("image size {size} is not a positive multiple of the patch size {p}")
        }
        if self.position_embeddings.is_some() && size != self.config.image_size {
            candle_core::bail!(
                "this BEiT has absolute position embeddings for {0}×{0} inputs; it cannot run at {size}×{size}",
                self.config.image_size
            )
        }
        let grid = size / p;
        let bias = |r: &Option<RelativeBias>| r.as_ref().map(|r| r.bias(grid)).transpose();
        self.frozen = Some(Frozen {
            patch_matrix: self.patch_matrix()?.t()?.contiguous()?,
            shared_bias: bias(&self.shared_relative)?,
            layer_biases: self
                .layers
                .iter()
                .map(|l| bias(&l.relative))
                .collect::<candle_core::Result<_>>()?,
        });
        self.input_size = size;
        Ok(())
    }

    /// The patch projection as `(hidden, C·p·p)`.
    fn patch_matrix(&self) -> candle_core::Result<Tensor> {
        let c = &self.config;
        self.patch_weight
            .reshape((c.hidden_size, c.num_channels * c.patch_size * c.patch_size))
    }

    /// `(batch, channels, size, size)` pixels → `(batch, 1 + patches, hidden)`, for inference.
    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.hidden(pixels, &Inference)
    }

    /// Hidden states `(batch, 1 + patches, hidden)` after the final layer norm.
    pub fn hidden(&self, pixels: &Tensor, mode: &dyn Mode) -> candle_core::Result<Tensor> {
        self.encode(self.patch_embed(pixels)?, mode)
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
        mode: &dyn Mode,
    ) -> candle_core::Result<Tensor> {
        let emb = self.patch_embed(pixels)?;
        let keep = keep.to_dtype(emb.dtype())?.unsqueeze(2)?;
        let masked = (keep.ones_like()? - &keep)?;
        let emb = (emb.broadcast_mul(&keep)? + masked.broadcast_mul(token)?)?;
        self.encode(emb, mode)
    }

    /// Patch embeddings `(batch, patches, hidden)`: non-overlapping patches as vectors in
    /// (channel, row, col) order, like the convolution's kernel, times the projection (the
    /// stride-p convolution exactly, and much faster than Candle's CPU conv2d).
    pub fn patch_embed(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let (b, c, hgt, wid) = pixels.dims4()?;
        let size = self.input_size;
        if c != self.config.num_channels || hgt != size || wid != size {
            candle_core::bail!(
                "expected pixels of shape (batch, {}, {size}, {size}), got {:?}",
                self.config.num_channels,
                pixels.dims()
            )
        }
        let p = self.config.patch_size;
        let g = size / p;
        let h = self.config.hidden_size;
        let patches = pixels
            .to_dtype(self.dtype())?
            .reshape((b, c, g, p, g, p))?
            .permute((0, 2, 4, 1, 3, 5))?
            .contiguous()?
            .reshape((b * g * g, c * p * p))?;
        let emb = match &self.frozen {
            Some(f) => patches
                .matmul(&f.patch_matrix)?
                .broadcast_add(&self.patch_bias)?,
            None => linear(&patches, &self.patch_matrix()?, Some(&self.patch_bias))?,
        };
        emb.reshape((b, g * g, h))
    }

    /// The layers over patch embeddings `(batch, patches, hidden)`.
    fn encode(&self, emb: Tensor, mode: &dyn Mode) -> candle_core::Result<Tensor> {
        let (b, _, h) = emb.dims3()?;
        let cls = self.cls_token.broadcast_as((b, 1, h))?;
        let mut xs = Tensor::cat(&[&cls, &emb], 1)?;
        if let Some(pos) = &self.position_embeddings {
            xs = xs.broadcast_add(pos)?;
        }
        xs = mode.dropout(&xs)?;
        let grid = self.config.native_grid();
        let live = |r: &Option<RelativeBias>| r.as_ref().map(|r| r.bias(grid)).transpose();
        let shared = match &self.frozen {
            Some(f) => f.shared_bias.clone(),
            None => live(&self.shared_relative)?,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let own = match &self.frozen {
                Some(f) => f.layer_biases.get(i).cloned().flatten(),
                None => live(&layer.relative)?,
            };
            let biases: Vec<&Tensor> = own.iter().chain(shared.as_ref()).collect();
            xs = layer.forward(&xs, &biases, mode)?;
        }
        if let Some(norm) = &self.inner_norm {
            xs = norm.forward(&xs, mode)?;
        }
        self.final_norm.forward(&xs, mode)
    }
}

/// Infers a BEiT config from the tensor shapes of a checkpoint (LexLIP's `.ckpt` carries no
/// `config.json`). Assumes GELU, `layer_norm_eps = 1e-12` (BEiT's defaults) and, without any
/// relative position table to count heads, a head size of 64.
pub fn infer_config(w: &crate::weights::Weights) -> Result<Config> {
    let cls = w.shape("beit.embeddings.cls_token")?;
    let proj = w.shape("beit.embeddings.patch_embeddings.projection.weight")?;
    let [_, _, hidden] = cls[..] else {
        return Err(bad_shape(w, "beit.embeddings.cls_token", &cls));
    };
    let [_, channels, patch, _] = proj[..] else {
        return Err(bad_shape(
            w,
            "beit.embeddings.patch_embeddings.projection.weight",
            &proj,
        ));
    };
    let layers = count_layers(w, "beit.encoder.layer.");
    let intermediate = w.shape("beit.encoder.layer.0.intermediate.dense.weight")?[0];
    let per_layer = "beit.encoder.layer.0.attention.attention.relative_position_bias.relative_position_bias_table";
    let shared = "beit.encoder.relative_position_bias.relative_position_bias_table";
    let table = if w.contains(per_layer) {
        Some(w.shape(per_layer)?)
    } else if w.contains(shared) {
        Some(w.shape(shared)?)
    } else {
        None
    };
    let heads = table
        .as_ref()
        .and_then(|t| t.get(1).copied())
        .unwrap_or((hidden / 64).max(1));
    let image_size = if let Some(t) = &table {
        let grid = grid_of_table_len(t[0]).ok_or_else(|| bad_shape(w, per_layer, t))?;
        grid * patch
    } else if w.contains("beit.embeddings.position_embeddings") {
        let n = w.shape("beit.embeddings.position_embeddings")?[1] - 1;
        ((n as f64).sqrt().round() as usize) * patch
    } else {
        224
    };
    Ok(Config {
        hidden_size: hidden,
        num_hidden_layers: layers,
        num_attention_heads: heads,
        intermediate_size: intermediate,
        hidden_act: Activation::Gelu,
        layer_norm_eps: 1e-12,
        image_size,
        patch_size: patch,
        num_channels: channels,
        use_absolute_position_embeddings: w.contains("beit.embeddings.position_embeddings"),
        use_relative_position_bias: w.contains(per_layer),
        use_shared_relative_position_bias: w.contains(shared),
        layer_scale_init_value: if w.contains("beit.encoder.layer.0.lambda_1") {
            0.1
        } else {
            0.0
        },
        use_mean_pooling: !w.contains("beit.layernorm.weight"),
    })
}

pub(crate) fn count_layers(w: &crate::weights::Weights, prefix: &str) -> usize {
    w.names()
        .filter_map(|n| {
            n.strip_prefix(prefix)?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |m| m + 1)
}

fn bad_shape(w: &crate::weights::Weights, name: &str, got: &[usize]) -> ModelError {
    ModelError::Weights {
        file: w.source().to_path_buf(),
        message: format!("tensor `{name}` has an unexpected shape {got:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tower built over parameters (training) derives nothing ahead and keeps its native size;
    /// a loaded one resamples its relative bias to another size.
    #[test]
    fn only_a_loaded_tower_changes_size() {
        let cfg = Config {
            hidden_size: 8,
            num_hidden_layers: 1,
            num_attention_heads: 2,
            intermediate_size: 16,
            image_size: 16,
            patch_size: 8,
            ..Config::base_patch16_224()
        };
        let vb = VarBuilder::zeros(DType::F32, &Device::Cpu);
        let mut training = Beit::new(&vb, &cfg).unwrap();
        training.set_input_size(16).unwrap();
        assert!(training.frozen.is_none());
        assert!(training.set_input_size(32).is_err());
        let mut loaded = Beit::load(vb, &cfg).unwrap();
        loaded.set_input_size(32).unwrap();
        let out = loaded.forward(&Tensor::zeros((1, 3, 32, 32), DType::F32, &Device::Cpu).unwrap());
        assert_eq!(out.unwrap().dims(), &[1, 17, 8]);
    }

    #[test]
    fn table_lengths() {
        assert_eq!(relative_table_len(14), 732);
        assert_eq!(grid_of_table_len(732), Some(14));
        assert_eq!(grid_of_table_len(2212), Some(24));
        assert_eq!(grid_of_table_len(100), None);
    }

    #[test]
    fn index_matches_definition() {
        // 2×2 grid: 5 tokens, 12 table rows; CLS rows/cols use the last three entries.
        let idx = relative_position_index(2);
        assert_eq!(idx.len(), 25);
        assert_eq!(idx[0], 11);
        assert_eq!(idx[1], 9);
        assert_eq!(idx[5], 10);
        // token (0,0) to itself: dh = dw = 1 → 1·3 + 1 = 4 (the centre).
        assert_eq!(idx[6], 4);
    }

    #[test]
    fn interpolation_keeps_a_constant_table() {
        let t = vec![vec![2.0f32, -1.0]; 52];
        let u = interpolate_table_lexlip(&t, 124);
        assert_eq!(u.len(), 124);
        assert!(
            u.iter()
                .all(|r| (r[0] - 2.0).abs() < 1e-6 && (r[1] + 1.0).abs() < 1e-6)
        );
    }
}
