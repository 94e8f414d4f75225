//! D2S (Nguyen et al., ECIR 2024, "Multimodal Learned Sparse Retrieval with Probabilistic
//! Expansion Control"; github.com/thongnt99/lsr-multimodal, Apache-2.0; weights `lsr42/d2s_*`),
//! loaded as its authors published it: one lexicon head over a frozen dense model's
//! image-text embeddings (BLIP's or ALBEF's contrastive ones), for images and texts alike.
//!
//! ```text
//! embedding (dense_size) → proj → DistilBERT's vocab_layer_norm → vocab_projector (vocab)
//!   → log(1 + relu(·))
//! ```
//!
//! A query keeps only its own word pieces (the reference's retrieval without expansion;
//! [`crate::text::TextTerms::own_only`]), images keep every positive term.
//!
//! A directory (what `save_pretrained` of the reference's `D2SModel` writes, plus the
//! vocabulary it names):
//! ```text
//! config.json        {"model_type": "d2s", "mlm_head": "distilbert-base-uncased",
//!                     "dense_size": 256}
//! model.safetensors  or pytorch_model.bin: proj.{weight,bias} (hidden, dense_size),
//!                    vocab_layer_norm.{weight,bias} (hidden),
//!                    vocab_projector.{weight,bias} (vocab, hidden)
//! tokenizer.json     the word pieces of `mlm_head` (the terms)
//! ```
//! In a model directory it is `heads/`, beside the dense model as `dense/`
//! (`lexlip model pair` makes one).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use crate::config::{read_json, with_defaults};
use crate::error::{ModelError, Result};
use crate::weights::Weights;

pub use crate::config::D2S_MODEL_TYPE as MODEL_TYPE;

/// DistilBERT's layer-norm epsilon, which its `vocab_layer_norm` keeps.
const EPS: f64 = 1e-12;

/// A D2S `config.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// The masked LM whose vocabulary layer norm and projector the head took: its word pieces
    /// are the terms.
    pub mlm_head: String,
    /// The dense model's embedding dimension.
    pub dense_size: usize,
}

impl Config {
    pub fn read(path: &Path) -> Result<Self> {
        let c: Config = with_defaults(
            path,
            &read_json(path)?,
            serde_json::json!({"mlm_head": "distilbert-base-uncased", "dense_size": 256}),
        )?;
        if c.dense_size == 0 {
            return Err(ModelError::config(path, "dense_size must be positive"));
        }
        Ok(c)
    }
}

/// Whether a `config.json` value is a D2S head's.
pub fn is_d2s(config: &serde_json::Value) -> bool {
    config.get("model_type").and_then(serde_json::Value::as_str) == Some(MODEL_TYPE)
}

/// The head: `(batch, dense_size)` embeddings → `(batch, vocab)` logits, before
/// `log(1 + relu)`.
#[derive(Debug, Clone)]
pub struct D2sHead {
    proj: crate::nn::Linear,
    norm: candle_nn::LayerNorm,
    projector: crate::nn::Linear,
    config: Config,
}

impl D2sHead {
    /// Loads `dir/config.json` and its weights (f32).
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config = Config::read(&dir.join("config.json"))?;
        let weights = Weights::from_model_dir(dir)?;
        let names = ["proj", "vocab_layer_norm", "vocab_projector"]
            .iter()
            .flat_map(|m| [format!("{m}.weight"), format!("{m}.bias")])
            .collect::<Vec<_>>();
        weights.require("D2S", &names)?;
        let hidden = weights.shape("vocab_layer_norm.weight")?[0];
        let vocab = weights.shape("vocab_projector.weight")?[0];
        let vb = weights.var_builder(DType::F32, device);
        let build = || -> candle_core::Result<Self> {
            let linear = |name: &str, input: usize, output: usize| {
                crate::nn::Linear::new(&vb.pp(name), input, output, true)
            };
            Ok(Self {
                proj: linear("proj", config.dense_size, hidden)?,
                norm: candle_nn::LayerNorm::new(
                    vb.pp("vocab_layer_norm").get(hidden, "weight")?,
                    vb.pp("vocab_layer_norm").get(hidden, "bias")?,
                    EPS,
                ),
                projector: linear("vocab_projector", hidden, vocab)?,
                config: config.clone(),
            })
        };
        build().map_err(|e| weights.load_error(e))
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Terms it weighs (its projector's rows).
    pub fn vocab_size(&self) -> usize {
        self.projector.weight.dim(0).unwrap_or(0)
    }

    /// `vocab_projector(vocab_layer_norm(proj(x)))` of embeddings `x` `(batch, dense_size)`.
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.proj.forward(&x.to_dtype(DType::F32)?)?;
        let h = candle_core::Module::forward(&self.norm, &h)?;
        Ok(self.projector.forward(&h)?)
    }
}
