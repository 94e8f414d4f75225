//! One BEiT transformer layer (pre-norm attention with an optional relative position bias and
//! layer scale, then the MLP), used by the image tower ([`super::Beit`]) and COOKIE's
//! weight-sharing layers ([`crate::weight_sharing`]), in inference and in training.

use candle_core::{DType, Device, Tensor};

use super::config::Config;
use super::relative::{interpolate_table_lexlip, relative_position_index, relative_table_len};
use crate::nn::{Init, LayerNorm, Linear, Mode, Params, attend};

/// A relative position bias table `(rows, heads)` and the bias it yields for a patch grid.
#[derive(Debug, Clone)]
pub(crate) struct RelativeBias {
    table: Tensor,
    native_grid: usize,
}

impl RelativeBias {
    pub(crate) fn new<P: Params>(pb: &P, cfg: &Config) -> Result<Self, P::Error> {
        let grid = cfg.native_grid();
        Ok(Self {
            table: pb.get(
                &[relative_table_len(grid), cfg.num_attention_heads],
                "relative_position_bias_table",
                Init::Const(0.0),
            )?,
            native_grid: grid,
        })
    }

    /// `(heads, n + 1, n + 1)` for a `grid × grid` input: the table expanded by the relative
    /// position index (differentiable), after LexLIP's resampling when the grid is not native.
    pub(crate) fn bias(&self, grid: usize) -> candle_core::Result<Tensor> {
        let device = self.table.device();
        let table = if grid == self.native_grid {
            self.table.clone()
        } else {
            let rows = self.table.to_dtype(DType::F32)?.to_device(&Device::Cpu)?;
            let resampled =
                interpolate_table_lexlip(&rows.to_vec2::<f32>()?, relative_table_len(grid));
            let heads = self.table.dim(1)?;
            let flat: Vec<f32> = resampled.into_iter().flatten().collect();
            let len = flat.len() / heads.max(1);
            Tensor::from_vec(flat, (len, heads), &Device::Cpu)?
                .to_dtype(self.table.dtype())?
                .to_device(device)?
        };
        let heads = table.dim(1)?;
        let n1 = grid * grid + 1;
        let index = Tensor::from_vec(relative_position_index(grid), n1 * n1, device)?;
        table
            .index_select(&index, 0)?
            .reshape((n1, n1, heads))?
            .permute((2, 0, 1))?
            .contiguous()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Layer {
    norm_before: LayerNorm,
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    pub(crate) relative: Option<RelativeBias>,
    lambda_1: Option<Tensor>,
    norm_after: LayerNorm,
    intermediate: Linear,
    output: Linear,
    lambda_2: Option<Tensor>,
    heads: usize,
    act: candle_nn::Activation,
}

impl Layer {
    pub(crate) fn new<P: Params>(pb: &P, cfg: &Config) -> Result<Self, P::Error> {
        let h = cfg.hidden_size;
        let eps = cfg.layer_norm_eps;
        let att = pb.pp("attention").pp("attention");
        let scale = cfg.layer_scale_init_value;
        let (lambda_1, lambda_2) = if scale > 0.0 {
            (
                Some(pb.get(&[h], "lambda_1", Init::Const(scale))?),
                Some(pb.get(&[h], "lambda_2", Init::Const(scale))?),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            norm_before: LayerNorm::new(&pb.pp("layernorm_before"), h, eps)?,
            query: Linear::new(&att.pp("query"), h, h, true)?,
            // BEiT has no key bias.
            key: Linear::new(&att.pp("key"), h, h, false)?,
            value: Linear::new(&att.pp("value"), h, h, true)?,
            attn_out: Linear::new(&pb.pp("attention").pp("output").pp("dense"), h, h, true)?,
            relative: if cfg.use_relative_position_bias {
                Some(RelativeBias::new(&att.pp("relative_position_bias"), cfg)?)
            } else {
                None
            },
            lambda_1,
            norm_after: LayerNorm::new(&pb.pp("layernorm_after"), h, eps)?,
            intermediate: Linear::new(
                &pb.pp("intermediate").pp("dense"),
                h,
                cfg.intermediate_size,
                true,
            )?,
            output: Linear::new(&pb.pp("output").pp("dense"), cfg.intermediate_size, h, true)?,
            lambda_2,
            heads: cfg.num_attention_heads,
            act: cfg.hidden_act,
        })
    }

    /// `(batch, tokens, hidden)` → the same shape; `biases` are added to the attention scores
    /// (this layer's relative bias, the shared one, a padding mask).
    pub(crate) fn forward(
        &self,
        xs: &Tensor,
        biases: &[&Tensor],
        mode: &dyn Mode,
    ) -> candle_core::Result<Tensor> {
        use candle_core::Module;
        let normed = self.norm_before.forward(xs, mode)?;
        let ctx = attend(
            &self.query.forward(&normed)?,
            &self.key.forward(&normed)?,
            &self.value.forward(&normed)?,
            self.heads,
            biases,
            mode,
        )?;
        let mut att = mode.dropout(&self.attn_out.forward(&ctx)?)?;
        if let Some(l) = &self.lambda_1 {
            att = att.broadcast_mul(l)?;
        }
        let xs = (att + xs)?;
        let hidden = self.act.forward(
            &self
                .intermediate
                .forward(&self.norm_after.forward(&xs, mode)?)?,
        )?;
        let mut mlp = mode.dropout(&self.output.forward(&hidden)?)?;
        if let Some(l) = &self.lambda_2 {
            mlp = mlp.broadcast_mul(l)?;
        }
        mlp + xs
    }
}
