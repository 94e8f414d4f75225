//! Writing the trained model as a LexLIP directory that `lexlip encode/index/serve --model DIR`
//! loads unchanged:
//!
//! ```text
//! lexlip.json   text/{config.json, model.safetensors, tokenizer.json}
//!               image/{config.json, model.safetensors, tokenizer.json, preprocessor_config.json}
//! ```
//!
//! Only the towers are exported (decoders and momentum encoders stay in checkpoints). Each
//! part is written into a temporary directory and renamed into place.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Tensor};
use serde_json::json;

use crate::checkpoint::write_atomic;
use crate::error::{Result, TrainError};
use crate::model::LexLipModel;
use crate::options::SaveDtype;
use crate::params::snapshot;

const TMP: &str = ".export-tmp";

fn json_bytes(v: &serde_json::Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s.into_bytes()
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| TrainError::io(path, e))
}

fn save_weights(tensors: HashMap<String, Tensor>, dtype: SaveDtype, path: &Path) -> Result<()> {
    let tensors = tensors
        .into_iter()
        .map(|(k, t)| {
            let t = match dtype {
                SaveDtype::F32 => t.to_dtype(DType::F32)?,
                SaveDtype::F16 => t.to_dtype(DType::F16)?,
            };
            Ok((k, t.to_device(&candle_core::Device::Cpu)?))
        })
        .collect::<Result<HashMap<_, _>>>()?;
    candle_core::safetensors::save(&tensors, path).map_err(|e| TrainError::Checkpoint {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Writes the towers of `model` into `out` as a LexLIP model directory.
pub fn export(model: &LexLipModel, out: &Path, dtype: SaveDtype, max_length: usize) -> Result<()> {
    let tmp = out.join(TMP);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    }
    let init = &model.init;
    let text = tmp.join("text");
    let image = tmp.join("image");
    for d in [&text, &image] {
        std::fs::create_dir_all(d).map_err(|e| TrainError::io(d, e))?;
    }
    write(
        &text.join("config.json"),
        &json_bytes(&model.text.config.to_json()),
    )?;
    save_weights(
        snapshot(&model.text_store)?,
        dtype,
        &text.join("model.safetensors"),
    )?;

    let cfg = &model.image.config;
    let mut image_cfg =
        serde_json::to_value(cfg).map_err(|e| TrainError::invalid(e.to_string()))?;
    if let Some(o) = image_cfg.as_object_mut() {
        o.insert("model_type".into(), json!("beit"));
        o.insert(
            "architectures".into(),
            json!(["BeitForMaskedImageModeling"]),
        );
        o.insert("vocab_size".into(), json!(init.vocab.len()));
        o.insert("lexlip_mlm_head".into(), json!(init.image.head));
    }
    write(&image.join("config.json"), &json_bytes(&image_cfg))?;
    save_weights(
        snapshot(&model.image_store)?,
        dtype,
        &image.join("model.safetensors"),
    )?;
    write(
        &image.join("preprocessor_config.json"),
        &json_bytes(&json!({
            "image_mean": init.image.mean, "image_std": init.image.std,
            "size": {"height": cfg.image_size, "width": cfg.image_size},
        })),
    )?;
    for d in [&text, &image] {
        let to = d.join("tokenizer.json");
        std::fs::copy(&init.tokenizer, &to).map_err(|e| TrainError::io(&to, e))?;
    }
    for part in ["text", "image"] {
        let dest = out.join(part);
        let old = out.join(format!(".export-old-{part}"));
        if dest.exists() {
            if old.exists() {
                std::fs::remove_dir_all(&old).map_err(|e| TrainError::io(&old, e))?;
            }
            std::fs::rename(&dest, &old).map_err(|e| TrainError::io(&dest, e))?;
        }
        std::fs::rename(tmp.join(part), &dest).map_err(|e| TrainError::io(&dest, e))?;
        if old.exists() {
            std::fs::remove_dir_all(&old).map_err(|e| TrainError::io(&old, e))?;
        }
    }
    std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    write_atomic(
        &out.join("lexlip.json"),
        &json_bytes(&json!({
            "format": "lexlip",
            "source": "lexlip train",
            "image_size": cfg.image_size,
            "max_length": max_length,
        })),
    )
}
