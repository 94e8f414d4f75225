//! BEiT in the Hugging Face layout (`BeitForMaskedImageModeling`: `beit.*` + `layernorm.*`), as the
//! LexLIP image encoder uses it: CLS token, relative position bias (per layer or shared), layer
//! scale (`lambda_1`, `lambda_2`), and the final layer norm over every token (CLS + patches).
//!
//! candle-transformers' `beit` is timm-style (fused qkv, fixed 384 input), so this file follows the
//! HF module tree instead; tensor names mirror it. Inputs larger than the checkpoint's native size
//! use LexLIP's interpolation of the relative position bias table (their `interpolate_pos`: a 1-D
//! linear resampling of the whole table, which is how the official 384×384 models ran).

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Activation, LayerNorm, Linear, VarBuilder, layer_norm, linear, linear_no_bias};
use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};

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

fn default_act() -> Activation {
    Activation::Gelu
}
fn default_eps() -> f64 {
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
fn default_layer_scale() -> f64 {
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

    fn validate(&self) -> std::result::Result<(), String> {
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

/// Number of rows of a relative position bias table for a `w × w` patch grid.
pub fn relative_table_len(grid: usize) -> usize {
    (2 * grid - 1) * (2 * grid - 1) + 3
}

/// The grid whose table has `rows` rows, if any.
pub fn grid_of_table_len(rows: usize) -> Option<usize> {
    let side = ((rows.checked_sub(3)?) as f64).sqrt().round() as usize;
    (side % 2 == 1 && side * side + 3 == rows).then_some(side.div_ceil(2))
}

/// Pair-wise relative position index for a `grid × grid` window plus the CLS token (as HF and the
/// BEiT paper define it): `(n + 1)²` indices into the bias table, row-major.
pub fn relative_position_index(grid: usize) -> Vec<u32> {
    let n = grid * grid;
    let side = 2 * grid - 1;
    let num_rel = relative_table_len(grid);
    let mut idx = vec![0u32; (n + 1) * (n + 1)];
    for i in 0..=n {
        for j in 0..=n {
            let v = match (i, j) {
                (0, 0) => num_rel - 1,
                (0, _) => num_rel - 3,
                (_, 0) => num_rel - 2,
                _ => {
                    let (hi, wi) = ((i - 1) / grid, (i - 1) % grid);
                    let (hj, wj) = ((j - 1) / grid, (j - 1) % grid);
                    let dh = hi + grid - 1 - hj;
                    let dw = wi + grid - 1 - wj;
                    dh * side + dw
                }
            };
            idx[i * (n + 1) + j] = v as u32;
        }
    }
    idx
}

/// LexLIP's resampling of a `(rows, heads)` table to `new_rows` rows: `F.interpolate(mode="linear",
/// align_corners=False, scale_factor=(new_rows + 0.1) / rows)` along the rows, reproduced exactly
/// (the source coordinate uses `1 / scale_factor`, not `rows / new_rows`).
pub fn interpolate_table_lexlip(table: &[Vec<f32>], new_rows: usize) -> Vec<Vec<f32>> {
    let rows = table.len();
    let scale_factor = (new_rows as f64 + 0.1) / rows as f64;
    let scale = (1.0 / scale_factor) as f32;
    (0..new_rows)
        .map(|dst| {
            let src = (scale * (dst as f32 + 0.5) - 0.5).max(0.0);
            let i0 = (src.floor() as usize).min(rows - 1);
            let i1 = if i0 < rows - 1 { i0 + 1 } else { i0 };
            let l1 = (src - i0 as f32).clamp(0.0, 1.0);
            let l0 = 1.0 - l1;
            table[i0]
                .iter()
                .zip(&table[i1])
                .map(|(a, b)| l0 * a + l1 * b)
                .collect()
        })
        .collect()
}

/// A relative position bias table and the bias it yields for a given grid.
#[derive(Debug, Clone)]
struct RelativePositionBias {
    /// `(rows, heads)` as stored, f32 on the CPU (interpolation happens there, once).
    table: Vec<Vec<f32>>,
    native_grid: usize,
}

impl RelativePositionBias {
    fn load(vb: VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        let rows = relative_table_len(cfg.native_grid());
        let table = vb
            .get(
                (rows, cfg.num_attention_heads),
                "relative_position_bias_table",
            )?
            .to_dtype(DType::F32)?
            .to_device(&Device::Cpu)?
            .to_vec2::<f32>()?;
        Ok(Self {
            table,
            native_grid: cfg.native_grid(),
        })
    }

    /// `(heads, n + 1, n + 1)` bias for a `grid × grid` input.
    fn bias(&self, grid: usize, dtype: DType, device: &Device) -> candle_core::Result<Tensor> {
        let table = if grid == self.native_grid {
            self.table.clone()
        } else {
            interpolate_table_lexlip(&self.table, relative_table_len(grid))
        };
        let heads = table.first().map(Vec::len).unwrap_or(0);
        let rows = table.len();
        let flat: Vec<f32> = table.into_iter().flatten().collect();
        let table = Tensor::from_vec(flat, (rows, heads), &Device::Cpu)?;
        let n1 = grid * grid + 1;
        let index = Tensor::from_vec(relative_position_index(grid), n1 * n1, &Device::Cpu)?;
        table
            .index_select(&index, 0)?
            .reshape((n1, n1, heads))?
            .permute((2, 0, 1))?
            .contiguous()?
            .to_dtype(dtype)?
            .to_device(device)
    }
}

#[derive(Debug, Clone)]
struct SelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    output: Linear,
    relative: Option<RelativePositionBias>,
    /// The relative bias for the current input grid (computed once per grid).
    bias: Option<Tensor>,
    heads: usize,
    head_dim: usize,
}

impl SelfAttention {
    fn load(vb: VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let att = vb.pp("attention");
        let relative = if cfg.use_relative_position_bias {
            Some(RelativePositionBias::load(
                att.pp("relative_position_bias"),
                cfg,
            )?)
        } else {
            None
        };
        Ok(Self {
            query: linear(h, h, att.pp("query"))?,
            // BEiT has no key bias.
            key: linear_no_bias(h, h, att.pp("key"))?,
            value: linear(h, h, att.pp("value"))?,
            output: linear(h, h, vb.pp("output").pp("dense"))?,
            relative,
            bias: None,
            heads: cfg.num_attention_heads,
            head_dim: h / cfg.num_attention_heads,
        })
    }

    fn forward(&self, xs: &Tensor, shared_bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let (b, n, h) = xs.dims3()?;
        let split = |t: Tensor| -> candle_core::Result<Tensor> {
            t.reshape((b, n, self.heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(self.query.forward(xs)?)?;
        let k = split(self.key.forward(xs)?)?;
        let v = split(self.value.forward(xs)?)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let mut scores = (q.matmul(&k.t()?)? * scale)?;
        if let Some(bias) = &self.bias {
            scores = scores.broadcast_add(bias)?;
        }
        if let Some(bias) = shared_bias {
            scores = scores.broadcast_add(bias)?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, n, h))?;
        self.output.forward(&ctx)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Layer {
    attention: SelfAttention,
    intermediate: Linear,
    output: Linear,
    layernorm_before: LayerNorm,
    layernorm_after: LayerNorm,
    lambda_1: Option<Tensor>,
    lambda_2: Option<Tensor>,
    act: Activation,
}

impl Layer {
    pub(crate) fn load(vb: VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let (lambda_1, lambda_2) = if cfg.layer_scale_init_value > 0.0 {
            (Some(vb.get(h, "lambda_1")?), Some(vb.get(h, "lambda_2")?))
        } else {
            (None, None)
        };
        Ok(Self {
            attention: SelfAttention::load(vb.pp("attention"), cfg)?,
            intermediate: linear(h, cfg.intermediate_size, vb.pp("intermediate").pp("dense"))?,
            output: linear(cfg.intermediate_size, h, vb.pp("output").pp("dense"))?,
            layernorm_before: layer_norm(h, cfg.layer_norm_eps, vb.pp("layernorm_before"))?,
            layernorm_after: layer_norm(h, cfg.layer_norm_eps, vb.pp("layernorm_after"))?,
            lambda_1,
            lambda_2,
            act: cfg.hidden_act,
        })
    }

    pub(crate) fn forward(
        &self,
        xs: &Tensor,
        shared_bias: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let mut att = self
            .attention
            .forward(&self.layernorm_before.forward(xs)?, shared_bias)?;
        if let Some(l) = &self.lambda_1 {
            att = att.broadcast_mul(l)?;
        }
        let xs = (att + xs)?;
        let mut mlp = self.output.forward(
            &self.act.forward(
                &self
                    .intermediate
                    .forward(&self.layernorm_after.forward(&xs)?)?,
            )?,
        )?;
        if let Some(l) = &self.lambda_2 {
            mlp = mlp.broadcast_mul(l)?;
        }
        mlp + xs
    }
}

/// `BeitForMaskedImageModeling` without its visual-token head: pixels → normalised hidden states
/// of every token `(batch, 1 + patches, hidden)`.
#[derive(Debug, Clone)]
pub struct Beit {
    cls_token: Tensor,
    patch_weight: Tensor,
    patch_bias: Tensor,
    position_embeddings: Option<Tensor>,
    shared_relative: Option<RelativePositionBias>,
    shared_bias: Option<Tensor>,
    layers: Vec<Layer>,
    /// `beit.layernorm` (present when `use_mean_pooling` is false).
    inner_norm: Option<LayerNorm>,
    /// `layernorm` of `BeitForMaskedImageModeling`, applied to every token.
    final_norm: LayerNorm,
    config: Config,
    input_size: usize,
    dtype: DType,
    device: Device,
}

impl Beit {
    /// Loads from a `VarBuilder` rooted at the `BeitForMaskedImageModeling` level (`beit.*`,
    /// `layernorm.*`). Runs at the config's image size until [`Beit::set_input_size`].
    pub fn load(vb: VarBuilder, config: &Config) -> candle_core::Result<Self> {
        config.validate().map_err(candle_core::Error::Msg)?;
        let h = config.hidden_size;
        let p = config.patch_size;
        let emb = vb.pp("beit").pp("embeddings");
        let cls_token = emb.get((1, 1, h), "cls_token")?;
        let proj = emb.pp("patch_embeddings").pp("projection");
        let patch_weight = proj.get((h, config.num_channels, p, p), "weight")?;
        let patch_bias = proj.get(h, "bias")?;
        let n = config.native_grid() * config.native_grid();
        let position_embeddings = if config.use_absolute_position_embeddings {
            Some(emb.get((1, n + 1, h), "position_embeddings")?)
        } else {
            None
        };
        let enc = vb.pp("beit").pp("encoder");
        let shared_relative = if config.use_shared_relative_position_bias {
            Some(RelativePositionBias::load(
                enc.pp("relative_position_bias"),
                config,
            )?)
        } else {
            None
        };
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(enc.pp("layer").pp(i), config))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let inner_norm = if config.use_mean_pooling {
            None
        } else {
            Some(layer_norm(
                h,
                config.layer_norm_eps,
                vb.pp("beit").pp("layernorm"),
            )?)
        };
        let final_norm = layer_norm(h, config.layer_norm_eps, vb.pp("layernorm"))?;
        let mut beit = Self {
            // Flattened once: the patch projection is a matmul over `(C·p·p)` patch vectors.
            patch_weight: patch_weight
                .reshape((h, config.num_channels * p * p))?
                .t()?
                .contiguous()?,
            cls_token,
            patch_bias,
            position_embeddings,
            shared_relative,
            shared_bias: None,
            layers,
            inner_norm,
            final_norm,
            config: config.clone(),
            input_size: config.image_size,
            dtype: vb.dtype(),
            device: vb.device().clone(),
        };
        beit.set_input_size(config.image_size)?;
        Ok(beit)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn input_size(&self) -> usize {
        self.input_size
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Runs at `size × size` pixels. Relative position biases are resampled the way LexLIP does
    /// for 384 × 384; absolute position embeddings cannot be, so those models keep their size.
    pub fn set_input_size(&mut self, size: usize) -> candle_core::Result<()> {
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
        if let Some(r) = &self.shared_relative {
            self.shared_bias = Some(r.bias(grid, self.dtype, &self.device)?);
        }
        for layer in &mut self.layers {
            if let Some(r) = &layer.attention.relative {
                layer.attention.bias = Some(r.bias(grid, self.dtype, &self.device)?);
            }
        }
        self.input_size = size;
        Ok(())
    }

    /// `(batch, channels, size, size)` pixels → `(batch, 1 + patches, hidden)`.
    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
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
        // Non-overlapping patches as vectors in (channel, row, col) order, like the conv kernel.
        let patches = pixels
            .to_dtype(self.dtype)?
            .reshape((b, c, g, p, g, p))?
            .permute((0, 2, 4, 1, 3, 5))?
            .contiguous()?
            .reshape((b * g * g, c * p * p))?;
        let emb = patches
            .matmul(&self.patch_weight)?
            .broadcast_add(&self.patch_bias)?
            .reshape((b, g * g, h))?;
        let cls = self.cls_token.broadcast_as((b, 1, h))?;
        let mut xs = Tensor::cat(&[&cls, &emb], 1)?;
        if let Some(pos) = &self.position_embeddings {
            xs = xs.broadcast_add(pos)?;
        }
        for layer in &self.layers {
            xs = layer.forward(&xs, self.shared_bias.as_ref())?;
        }
        if let Some(norm) = &self.inner_norm {
            xs = norm.forward(&xs)?;
        }
        self.final_norm.forward(&xs)
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
