//! One BEiT transformer layer as training computes it (pre-norm attention with an optional
//! relative position bias and layer scale, then the MLP), shared by the image tower
//! ([`crate::beit`]) and COOKIE's weight-sharing layers ([`crate::weight_sharing`]).

use candle_core::Tensor;
use lexlip_model::beit::{Config as BeitConfig, relative_position_index, relative_table_len};

use crate::error::{Result, TrainError};
use crate::nn::{Act, Dropout, LayerNorm, Linear, attend};
use crate::params::{Init, ParamBuilder};

/// A relative position bias table and the index that expands it to `(heads, n+1, n+1)`.
#[derive(Debug, Clone)]
pub(crate) struct RelativeBias {
    table: Tensor,
    index: Tensor,
    tokens: usize,
}

impl RelativeBias {
    pub(crate) fn new(pb: &ParamBuilder, cfg: &BeitConfig) -> Result<Self> {
        let grid = cfg.native_grid();
        let table = pb.get(
            &[relative_table_len(grid), cfg.num_attention_heads],
            "relative_position_bias_table",
            Init::Const(0.0),
        )?;
        let index = Tensor::from_vec(
            relative_position_index(grid),
            (grid * grid + 1) * (grid * grid + 1),
            pb.device(),
        )?;
        Ok(Self {
            table,
            index,
            tokens: grid * grid + 1,
        })
    }

    pub(crate) fn bias(&self) -> Result<Tensor> {
        let heads = self.table.dim(1)?;
        Ok(self
            .table
            .index_select(&self.index, 0)?
            .reshape((self.tokens, self.tokens, heads))?
            .permute((2, 0, 1))?
            .contiguous()?)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct BeitLayer {
    norm_before: LayerNorm,
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    relative: Option<RelativeBias>,
    lambda_1: Option<Tensor>,
    norm_after: LayerNorm,
    intermediate: Linear,
    output: Linear,
    lambda_2: Option<Tensor>,
    heads: usize,
    act: Act,
}

impl BeitLayer {
    pub(crate) fn new(pb: &ParamBuilder, cfg: &BeitConfig, act: Act) -> Result<Self> {
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
            act,
        })
    }

    pub(crate) fn forward(
        &self,
        xs: &Tensor,
        shared: Option<&Tensor>,
        drop: &Dropout,
    ) -> Result<Tensor> {
        let normed = self.norm_before.forward(xs)?;
        let own = self.relative.as_ref().map(RelativeBias::bias).transpose()?;
        let biases: Vec<&Tensor> = own.iter().chain(shared).collect();
        let ctx = attend(
            &self.query.forward(&normed)?,
            &self.key.forward(&normed)?,
            &self.value.forward(&normed)?,
            self.heads,
            &biases,
        )?;
        let mut att = drop.forward(&self.attn_out.forward(&ctx)?)?;
        if let Some(l) = &self.lambda_1 {
            att = att.broadcast_mul(l)?;
        }
        let xs = (att + xs)?;
        let hidden = self
            .act
            .forward(&self.intermediate.forward(&self.norm_after.forward(&xs)?)?)?;
        let mut mlp = drop.forward(&self.output.forward(&hidden)?)?;
        if let Some(l) = &self.lambda_2 {
            mlp = mlp.broadcast_mul(l)?;
        }
        Ok((mlp + xs)?)
    }
}

/// The activation of the tower's layers, as the training ops compute it.
pub fn tower_act(cfg: &BeitConfig) -> Result<Act> {
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
