//! Official LexLIP checkpoints: the PyTorch Lightning `.ckpt` of the authors' code
//! (`image_transformer.*`, `text_transformer.*`, `mlm_head_for_image.*` in its `state_dict`),
//! split into its towers with configs inferred from tensor shapes, and converted into a LexLIP
//! directory that loads without PyTorch pickles.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::beit;
use crate::error::{ModelError, Result};
use crate::image::{HeadConfig, ImageProcessor};
use crate::weights::Weights;

/// State-dict prefixes of the authors' `ITRTransformerSS` Lightning module.
pub const IMAGE_PREFIX: &str = "image_transformer.";
pub const TEXT_PREFIX: &str = "text_transformer.";
pub const IMAGE_HEAD_PREFIX: &str = "mlm_head_for_image.";

/// The parts of a LexLIP checkpoint, with configs inferred from tensor shapes.
pub(crate) struct CheckpointParts {
    /// BERT config (as `config.json` JSON) and `BertForMaskedLM` weights.
    pub(crate) text: Option<(Value, Weights)>,
    /// BEiT config and `BeitForMaskedImageModeling` weights + head under `cls.`.
    pub(crate) image: Option<(beit::Config, Weights)>,
    pub(crate) tokenizer: PathBuf,
}

impl CheckpointParts {
    pub(crate) fn read(ckpt: &Path, tokenizer: Option<&Path>) -> Result<Self> {
        let all = Weights::from_checkpoint(ckpt)?;
        let tokenizer = match tokenizer {
            Some(t) => t.to_path_buf(),
            None => ckpt
                .parent()
                .unwrap_or_else(|| Path::new("."))
                .join("tokenizer.json"),
        };
        if !tokenizer.is_file() {
            return Err(ModelError::Tokenizer {
                path: tokenizer,
                message: "LexLIP checkpoints carry no tokenizer: put the tokenizer.json of \
                          bert-base-uncased (the vocabulary LexLIP scores) next to the checkpoint"
                    .into(),
            });
        }
        let text_w = keep_float(&all.with_prefix(TEXT_PREFIX), &["bert.", "cls."]);
        let mut image_w = keep_float(&all.with_prefix(IMAGE_PREFIX), &["beit.", "layernorm."]);
        let head_w = keep_float(&all.with_prefix(IMAGE_HEAD_PREFIX), &["predictions."]);
        if text_w.is_empty() && image_w.is_empty() {
            return Err(ModelError::UnknownModel {
                path: ckpt.to_path_buf(),
                message: format!(
                    "no tensor starts with {TEXT_PREFIX:?} or {IMAGE_PREFIX:?}: not a LexLIP checkpoint"
                ),
            });
        }
        let text = if text_w.is_empty() {
            None
        } else {
            Some((infer_bert_config(&text_w)?, text_w))
        };
        let image = if image_w.is_empty() {
            None
        } else {
            if head_w.is_empty() {
                return Err(ModelError::MissingTensor {
                    file: ckpt.to_path_buf(),
                    name: format!("{IMAGE_HEAD_PREFIX}predictions.decoder.weight"),
                });
            }
            image_w.extend_prefixed("cls.", &head_w);
            let cfg = beit::infer_config(&image_w)?;
            Some((cfg, image_w))
        };
        Ok(Self {
            text,
            image,
            tokenizer,
        })
    }
}

/// Float tensors whose names start with one of `prefixes` (drops buffers such as
/// `position_ids` / `relative_position_index`, and modules LexLIP does not encode with).
fn keep_float(w: &Weights, prefixes: &[&str]) -> Weights {
    let tensors = w
        .tensors()
        .iter()
        .filter(|(k, t)| prefixes.iter().any(|p| k.starts_with(p)) && t.dtype().is_float())
        .filter(|(k, _)| !k.ends_with("relative_position_index"))
        .map(|(k, t)| (k.clone(), t.clone()))
        .collect();
    Weights::from_tensors(tensors, w.source())
}

/// A BERT `config.json` inferred from tensor shapes. Head count is not visible in the shapes:
/// it is `hidden / 64` (BERT-base: 12), or 1 for models narrower than 64.
pub(crate) fn infer_bert_config(w: &Weights) -> Result<Value> {
    let emb = w.shape("bert.embeddings.word_embeddings.weight")?;
    let [vocab, hidden] = emb[..] else {
        return Err(ModelError::Weights {
            file: w.source().to_path_buf(),
            message: format!("bert.embeddings.word_embeddings.weight has shape {emb:?}"),
        });
    };
    let heads = if hidden.is_multiple_of(64) {
        hidden / 64
    } else {
        1
    };
    Ok(json!({
        "model_type": "bert",
        "architectures": ["BertForMaskedLM"],
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": beit::count_layers(w, "bert.encoder.layer."),
        "num_attention_heads": heads,
        "intermediate_size": w.shape("bert.encoder.layer.0.intermediate.dense.weight")?[0],
        "max_position_embeddings": w.shape("bert.embeddings.position_embeddings.weight")?[0],
        "type_vocab_size": w.shape("bert.embeddings.token_type_embeddings.weight")?[0],
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
    }))
}

/// Converts an official LexLIP checkpoint into a LexLIP directory (safetensors + configs +
/// tokenizer) that loads without PyTorch pickles. `tokenizer` defaults to `tokenizer.json` next to
/// the checkpoint. Returns `out_dir`.
pub fn convert_checkpoint(
    ckpt: &Path,
    out_dir: &Path,
    tokenizer: Option<&Path>,
) -> Result<PathBuf> {
    let parts = CheckpointParts::read(ckpt, tokenizer)?;
    let mkdir = |p: &Path| std::fs::create_dir_all(p).map_err(|e| ModelError::io(p, e));
    let write = |p: &Path, v: &Value| {
        let text =
            serde_json::to_string_pretty(v).map_err(|e| ModelError::Invalid(e.to_string()))?;
        std::fs::write(p, text + "\n").map_err(|e| ModelError::io(p, e))
    };
    let copy = |to: &Path| {
        std::fs::copy(&parts.tokenizer, to)
            .map(|_| ())
            .map_err(|e| ModelError::io(to, e))
    };
    mkdir(out_dir)?;
    let mut image_size = None;
    if let Some((cfg, w)) = &parts.text {
        let d = out_dir.join("text");
        mkdir(&d)?;
        write(&d.join("config.json"), cfg)?;
        w.save_safetensors(&d.join("model.safetensors"))?;
        copy(&d.join("tokenizer.json"))?;
    }
    if let Some((cfg, w)) = &parts.image {
        let d = out_dir.join("image");
        mkdir(&d)?;
        let mut v = serde_json::to_value(cfg).map_err(|e| ModelError::Invalid(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            o.insert("model_type".into(), json!("beit"));
            o.insert(
                "architectures".into(),
                json!(["BeitForMaskedImageModeling"]),
            );
            o.insert("lexlip_mlm_head".into(), json!(HeadConfig::default()));
        }
        write(&d.join("config.json"), &v)?;
        w.save_safetensors(&d.join("model.safetensors"))?;
        copy(&d.join("tokenizer.json"))?;
        let p = ImageProcessor::beit(cfg.image_size);
        write(
            &d.join("preprocessor_config.json"),
            &json!({"image_mean": p.mean, "image_std": p.std,
                    "size": {"height": p.size, "width": p.size}}),
        )?;
        image_size = Some(cfg.image_size);
    }
    write(
        &out_dir.join("lexlip.json"),
        &json!({
            "format": "lexlip",
            "source": ckpt.file_name().map(|n| n.to_string_lossy().into_owned()),
            "image_size": image_size,
            "max_length": crate::text::DEFAULT_MAX_LENGTH,
        }),
    )?;
    Ok(out_dir.to_path_buf())
}
