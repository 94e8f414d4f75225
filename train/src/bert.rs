//! The trainable text tower: BERT masked LM in the Hugging Face `BertForMaskedLM` layout (the
//! names `lexlip_model::TextEncoder` loads; the dense objective uses its encoder without the head),
//! and the weakened 2-layer decoders of LexMLM, which reuse its layer type.

use std::path::Path;

use candle_core::{DType, Tensor};
pub use lexlip_model::bert::{BertLayer, LayerShape, PostNorm};
use lexlip_model::config::with_defaults;
use lexlip_model::text::bert_defaults;
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::head::MlmHead;
use crate::nn::{Act, Differentiable, Dropout, INIT_STD, LayerNorm, attention_bias, gather_rows};
use crate::params::{Init, ParamBuilder};
use crate::weight_sharing::SharedLayers;

/// The `config.json` keys of a BERT the tower uses (Hugging Face names); read it with
/// [`BertConfig::read`], which fills what a file omits with `lexlip_model`'s BERT defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub pad_token_id: usize,
}

impl BertConfig {
    /// The config in `raw` (the `config.json` at `path`), with the Hugging Face defaults for
    /// what it omits.
    pub fn read(path: &Path, raw: &serde_json::Value) -> Result<Self> {
        Ok(with_defaults(path, raw, bert_defaults())?)
    }

    /// A BERT of the given shape with the Hugging Face defaults otherwise.
    pub fn sized(vocab: usize, hidden: usize, layers: usize, heads: usize, inter: usize) -> Self {
        let defaults: Self = serde_json::from_value(bert_defaults())
            .expect("lexlip-model's BERT defaults name every BertConfig field");
        Self {
            vocab_size: vocab,
            hidden_size: hidden,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            intermediate_size: inter,
            ..defaults
        }
    }

    /// The shape of one encoder layer.
    pub fn shape(&self) -> Result<LayerShape> {
        Ok(LayerShape {
            hidden: self.hidden_size,
            heads: self.num_attention_heads,
            intermediate: self.intermediate_size,
            eps: self.layer_norm_eps,
            act: self.act()?.into(),
        })
    }

    pub fn act(&self) -> Result<Act> {
        Act::parse(&self.hidden_act).ok_or_else(|| {
            TrainError::invalid(format!(
                "hidden_act {:?} is not supported for training (gelu, gelu_new, relu)",
                self.hidden_act
            ))
        })
    }

    pub fn validate(&self) -> Result<()> {
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(TrainError::invalid(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            )));
        }
        self.act().map(|_| ())
    }

    /// The `config.json` of the saved model.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("model_type".into(), "bert".into());
            o.insert(
                "architectures".into(),
                serde_json::json!(["BertForMaskedLM"]),
            );
            o.insert("position_embedding_type".into(), "absolute".into());
            o.insert("tie_word_embeddings".into(), true.into());
        }
        v
    }
}

/// Token + position + token-type embeddings, layer norm.
#[derive(Debug, Clone)]
pub struct BertEmbeddings {
    pub word: Tensor,
    position: Tensor,
    token_type: Tensor,
    norm: LayerNorm,
}

impl BertEmbeddings {
    fn new(pb: &ParamBuilder, cfg: &BertConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        Ok(Self {
            word: pb.get(
                &[cfg.vocab_size, h],
                "word_embeddings.weight",
                Init::Normal(INIT_STD),
            )?,
            position: pb.get(
                &[cfg.max_position_embeddings, h],
                "position_embeddings.weight",
                Init::Normal(INIT_STD),
            )?,
            token_type: pb.get(
                &[cfg.type_vocab_size, h],
                "token_type_embeddings.weight",
                Init::Normal(INIT_STD),
            )?,
            norm: LayerNorm::new(&pb.pp("LayerNorm"), h, cfg.layer_norm_eps)?,
        })
    }

    /// `ids: (batch, tokens)` u32 → `(batch, tokens, hidden)` (token type 0 everywhere).
    pub fn forward(&self, ids: &Tensor, drop: &Dropout) -> Result<Tensor> {
        let (b, n) = ids.dims2()?;
        if n > self.position.dim(0)? {
            return Err(TrainError::invalid(format!(
                "{n} tokens but the model has {} positions",
                self.position.dim(0)?
            )));
        }
        let h = self.word.dim(1)?;
        let words = self
            .word
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, n, h))?;
        let pos = self.position.narrow(0, 0, n)?;
        let typ = self.token_type.narrow(0, 0, 1)?;
        let x = words.broadcast_add(&pos)?.broadcast_add(&typ)?;
        Ok(drop.forward(&self.norm.forward(&x, drop)?)?)
    }
}

/// `BertModel` (embeddings and encoder layers) under `bert.*`: the text tower of both
/// objectives.
#[derive(Debug, Clone)]
pub struct BertEncoder {
    pub embeddings: BertEmbeddings,
    layers: Vec<BertLayer>,
    pub config: BertConfig,
}

impl BertEncoder {
    /// Builds the encoder under `pb` (the model root; parameters are `bert.*`).
    pub fn new(pb: &ParamBuilder, cfg: &BertConfig) -> Result<Self> {
        cfg.validate()?;
        let bert = pb.pp("bert");
        Ok(Self {
            embeddings: BertEmbeddings::new(&bert.pp("embeddings"), cfg)?,
            layers: lexlip_model::bert::layers(
                &bert.pp("encoder"),
                cfg.num_hidden_layers,
                &cfg.shape()?,
            )?,
            config: cfg.clone(),
        })
    }

    /// Final hidden states `(batch, tokens, hidden)` of `ids` with attention `mask` (1 = token).
    pub fn hidden(&self, ids: &Tensor, mask: &Tensor, drop: &Dropout) -> Result<Tensor> {
        let mut xs = self.embeddings.forward(ids, drop)?;
        let bias = attention_bias(mask, xs.dtype())?;
        for layer in &self.layers {
            xs = layer.forward(&xs, &bias, drop)?;
        }
        Ok(xs)
    }
}

/// `BertForMaskedLM`: the encoder and the MLM head.
#[derive(Debug, Clone)]
pub struct BertMlm {
    pub encoder: BertEncoder,
    /// COOKIE's weight-sharing layers between the tower and its head (the image tower holds
    /// the same ones).
    pub shared: Option<SharedLayers>,
    pub head: MlmHead,
    pub config: BertConfig,
}

impl BertMlm {
    /// Builds the tower under `pb` (the model root: `bert.*`, `cls.*`). The decoder is tied to
    /// the word embeddings unless the source has `cls.predictions.decoder.weight` (`untied`).
    pub fn new(pb: &ParamBuilder, cfg: &BertConfig, untied: bool) -> Result<Self> {
        let encoder = BertEncoder::new(pb, cfg)?;
        let tied = (!untied).then_some(&encoder.embeddings.word);
        let head = MlmHead::new(
            &pb.pp("cls"),
            cfg.hidden_size,
            cfg.vocab_size,
            cfg.act()?.into(),
            cfg.layer_norm_eps,
            tied,
        )?;
        Ok(Self {
            encoder,
            shared: None,
            head,
            config: cfg.clone(),
        })
    }

    /// Final hidden states `(batch, tokens, hidden)` of `ids` with attention `mask` (1 = token).
    pub fn hidden(&self, ids: &Tensor, mask: &Tensor, drop: &Dropout) -> Result<Tensor> {
        self.encoder.hidden(ids, mask, drop)
    }

    /// MLM logits `(batch, tokens, vocab)`: the tower, the shared layers if any, the head.
    pub fn logits(&self, ids: &Tensor, mask: &Tensor, drop: &Dropout) -> Result<Tensor> {
        self.head_logits(&self.hidden(ids, mask, drop)?, mask, drop)
    }

    /// MLM logits of the tower's hidden states (`drop` acts in the shared layers only).
    pub fn head_logits(&self, hidden: &Tensor, mask: &Tensor, drop: &Dropout) -> Result<Tensor> {
        match &self.shared {
            Some(shared) => Ok(self
                .head
                .forward(&shared.forward(hidden, Some(mask), drop)?, &Differentiable)?),
            None => Ok(self.head.forward(hidden, &Differentiable)?),
        }
    }

    pub fn embeddings(&self) -> &BertEmbeddings {
        &self.encoder.embeddings
    }

    pub fn word_embeddings(&self) -> &Tensor {
        &self.encoder.embeddings.word
    }

    pub fn dtype(&self) -> DType {
        self.encoder.embeddings.word.dtype()
    }
}

/// A weakened masking-style decoder of LexMLM (LexLIP eq. 11-12): a CBoW bottleneck replaces the
/// `[CLS]` embedding of the heavily masked text, a few BERT layers, and an MLM head whose
/// projection is tied to the text tower's word embeddings. Names: `layer.N.*`, `cls.*`.
#[derive(Debug, Clone)]
pub struct Decoder {
    layers: Vec<BertLayer>,
    head: MlmHead,
}

impl Decoder {
    pub fn new(pb: &ParamBuilder, cfg: &BertConfig, layers: usize, word: &Tensor) -> Result<Self> {
        Ok(Self {
            layers: lexlip_model::bert::layers(pb, layers, &cfg.shape()?)?,
            head: MlmHead::new(
                &pb.pp("cls"),
                cfg.hidden_size,
                cfg.vocab_size,
                cfg.act()?.into(),
                cfg.layer_norm_eps,
                Some(word),
            )?,
        })
    }

    /// `embedded: (batch, tokens, hidden)` embeddings of the masked text, `bottleneck: (batch,
    /// hidden)` replaces position 0; returns the logits `(rows, vocab)` at the flattened
    /// positions `rows` (the masked ones: the only ones the loss reads).
    pub fn logits(
        &self,
        embedded: &Tensor,
        bottleneck: &Tensor,
        mask: &Tensor,
        rows: &Tensor,
        drop: &Dropout,
    ) -> Result<Tensor> {
        let n = embedded.dim(1)?;
        let mut xs = Tensor::cat(
            &[&bottleneck.unsqueeze(1)?, &embedded.narrow(1, 1, n - 1)?],
            1,
        )?;
        let bias = attention_bias(mask, xs.dtype())?;
        for layer in &self.layers {
            xs = layer.forward(&xs, &bias, drop)?;
        }
        Ok(self
            .head
            .forward(&gather_rows(&xs, rows)?, &Differentiable)?)
    }
}
