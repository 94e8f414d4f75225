//! Writing the trained model as a directory lexlip loads unchanged. LexLIP (`lexlip
//! encode/index/serve --model DIR`):
//!
//! ```text
//! lexlip.json   text/{config.json, model.safetensors, tokenizer.json}
//!               image/{config.json, model.safetensors, tokenizer.json, preprocessor_config.json}
//! ```
//!
//! The dense baseline, a dual encoder directory (`lexlip_model::dual`; `--dense-model DIR` or
//! `--model DIR`):
//!
//! ```text
//! config.json  model.safetensors  tokenizer.json  preprocessor_config.json
//! ```
//!
//! With `--shared-layers`, both tower directories carry the shared layers
//! (`lexlip_model::weight_sharing`). Only the towers (and the dense projections) are exported; decoders and momentum encoders stay
//! in checkpoints. Each part is written into a temporary directory and renamed into place, the
//! file that marks the directory as a model (`lexlip.json`, `config.json`) last.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Tensor};
use serde_json::json;

use lexlip_model::dual::{ARCHITECTURE, MODEL_TYPE, TEXT_PREFIX, VISION_PREFIX};
use lexlip_model::weight_sharing::KEY;

use crate::checkpoint::write_atomic;
use crate::dense::DenseModel;
use crate::error::{Result, TrainError};
use crate::init::Init;
use crate::model::LexLipModel;
use crate::options::SaveDtype;
use crate::params::snapshot;

const TMP: &str = ".export-tmp";

pub(crate) fn json_bytes(v: &serde_json::Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s.into_bytes()
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| TrainError::io(path, e))
}

/// Writes `tensors` as safetensors at `path`, in `dtype`, from the CPU.
pub(crate) fn save_weights(
    tensors: HashMap<String, Tensor>,
    dtype: SaveDtype,
    path: &Path,
) -> Result<()> {
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

/// Writes the weights of a trained part into directory `dir` (created) as
/// `model.safetensors`, in `dtype`.
pub(crate) fn save_part(
    dir: &Path,
    tensors: HashMap<String, Tensor>,
    dtype: SaveDtype,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
    save_weights(tensors, dtype, &dir.join("model.safetensors"))
}

/// Writes `value` at `path` as pretty JSON ([`json_bytes`]), atomically: a file that marks a
/// directory as complete.
pub(crate) fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let value = serde_json::to_value(value).map_err(|e| TrainError::invalid(e.to_string()))?;
    write_atomic(path, &json_bytes(&value))
}

/// Copies file `from` to `to`.
pub(crate) fn copy_file(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).map_err(|e| TrainError::io(to, e))?;
    Ok(())
}

/// Copies the plain files of directory `from` into `to` (created): a frozen part of the model
/// (a backbone, a tower) exported as it was loaded.
pub(crate) fn copy_files(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| TrainError::io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| TrainError::io(from, e))? {
        let entry = entry.map_err(|e| TrainError::io(from, e))?;
        if entry.path().is_file() {
            copy_file(&entry.path(), &to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// [`copy_files`] of a model part that reads a vocabulary, with the `tokenizer.json` it
/// shares with its model when it has none of its own, so that the copy loads on its own.
pub(crate) fn copy_part(from: &Path, to: &Path) -> Result<()> {
    copy_files(from, to)?;
    let tokenizer = lexlip_model::vocab::tokenizer_json(from);
    let copied = to.join("tokenizer.json");
    if tokenizer.is_file() && !copied.exists() {
        copy_file(&tokenizer, &copied)?;
    }
    Ok(())
}

/// An empty temporary directory under `out` to write an export into.
fn fresh_tmp(out: &Path) -> Result<std::path::PathBuf> {
    let tmp = out.join(TMP);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    Ok(tmp)
}

/// The image tower's `preprocessor_config.json`: its normalisation at its input size.
fn preprocessor_json(init: &Init, size: usize) -> Vec<u8> {
    json_bytes(&json!({
        "image_mean": init.image.mean, "image_std": init.image.std,
        "size": {"height": size, "width": size},
    }))
}

/// The JSON object `v` with the keys of the object `extra` added.
fn with_keys(mut v: serde_json::Value, extra: &serde_json::Value) -> serde_json::Value {
    if let (Some(o), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(extra.clone());
    }
    v
}

/// The image tower's `config.json` (BEiT keys), with `extra` keys added.
fn beit_json(
    cfg: &lexlip_model::beit::Config,
    extra: serde_json::Value,
) -> Result<serde_json::Value> {
    let v = serde_json::to_value(cfg).map_err(|e| TrainError::invalid(e.to_string()))?;
    Ok(with_keys(
        v,
        &with_keys(json!({"model_type": "beit"}), &extra),
    ))
}

/// Writes the towers of `model` into `out` as a LexLIP model directory.
pub fn export(model: &LexLipModel, out: &Path, dtype: SaveDtype, max_length: usize) -> Result<()> {
    let tmp = fresh_tmp(out)?;
    let init = &model.init;
    let text = tmp.join("text");
    let image = tmp.join("image");
    for d in [&text, &image] {
        std::fs::create_dir_all(d).map_err(|e| TrainError::io(d, e))?;
    }
    // COOKIE's shared layers go into both towers, so each directory loads on its own.
    let shared = snapshot(&model.shared_store)?;
    let shared_json = match &init.shared {
        Some(s) => json!({ KEY: s.config }),
        None => json!({}),
    };
    let with_shared = |mut tensors: HashMap<String, Tensor>| {
        tensors.extend(shared.iter().map(|(k, t)| (k.clone(), t.clone())));
        tensors
    };
    // A tower: its config, then its weights with the shared layers.
    let tower = |dir: &Path, config: &serde_json::Value, store: &candle_nn::VarMap| {
        write(&dir.join("config.json"), &json_bytes(config))?;
        save_weights(
            with_shared(snapshot(store)?),
            dtype,
            &dir.join("model.safetensors"),
        )
    };
    let text_cfg = with_keys(model.text.config.to_json(), &shared_json);
    tower(&text, &text_cfg, &model.text_store)?;

    let cfg = &model.image.config;
    let image_cfg = beit_json(
        cfg,
        with_keys(
            json!({
                "architectures": ["BeitForMaskedImageModeling"],
                "vocab_size": init.vocab.len(),
                "lexlip_mlm_head": init.image.head,
            }),
            &shared_json,
        ),
    )?;
    tower(&image, &image_cfg, &model.image_store)?;
    write(
        &image.join("preprocessor_config.json"),
        &preprocessor_json(init, cfg.image_size),
    )?;
    for d in [&text, &image] {
        copy_file(&init.tokenizer, &d.join("tokenizer.json"))?;
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
    let mut settings = json!({
        "format": "lexlip",
        "source": "lexlip train",
        "image_size": cfg.image_size,
        "max_length": max_length,
    });
    if model.image_top_k > 0 {
        settings["image_top_k"] = json!(model.image_top_k);
    }
    write_atomic(&out.join("lexlip.json"), &json_bytes(&settings))
}

/// Writes the dense model into `out` as a dual encoder directory (`lexlip_model::dual`): the
/// towers' parameters under `text_model.` / `vision_model.`, the projections by their own names.
pub fn export_dense(
    model: &DenseModel,
    out: &Path,
    dtype: SaveDtype,
    max_length: usize,
) -> Result<()> {
    let tmp = fresh_tmp(out)?;
    let init = &model.init;
    let mut tensors = HashMap::new();
    for (prefix, store) in [
        (TEXT_PREFIX, &model.text_store),
        (VISION_PREFIX, &model.image_store),
        ("", &model.projection_store),
    ] {
        for (name, t) in snapshot(store)? {
            tensors.insert(format!("{prefix}{name}"), t);
        }
    }
    save_weights(tensors, dtype, &tmp.join("model.safetensors"))?;
    let mut text_cfg =
        serde_json::to_value(&model.text.config).map_err(|e| TrainError::invalid(e.to_string()))?;
    if let Some(o) = text_cfg.as_object_mut() {
        o.insert("model_type".into(), json!("bert"));
    }
    let cfg = model.image.config();
    let config = json!({
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURE],
        "projection_dim": model.dim,
        "pooling": "cls",
        "max_length": max_length,
        "text_config": text_cfg,
        "vision_config": beit_json(cfg, json!({}))?,
    });
    write(&tmp.join("config.json"), &json_bytes(&config))?;
    write(
        &tmp.join("preprocessor_config.json"),
        &preprocessor_json(init, cfg.image_size),
    )?;
    copy_file(&init.tokenizer, &tmp.join("tokenizer.json"))?;
    for name in [
        "model.safetensors",
        "tokenizer.json",
        "preprocessor_config.json",
        "config.json",
    ] {
        let dest = out.join(name);
        std::fs::rename(tmp.join(name), &dest).map_err(|e| TrainError::io(&dest, e))?;
    }
    std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))
}

#[cfg(test)]
mod tests {
    /// A part that shares its model's tokenizer.json is copied with it; a part with its own
    /// keeps its own.
    #[test]
    fn a_copied_part_carries_its_vocabulary() {
        let tmp = tempfile::tempdir().unwrap();
        let model = tmp.path().join("model");
        std::fs::create_dir_all(model.join("dense")).unwrap();
        std::fs::write(model.join("lexlip.json"), "{}").unwrap();
        std::fs::write(model.join("tokenizer.json"), "shared").unwrap();
        std::fs::write(model.join("dense/config.json"), "{}").unwrap();
        let to = tmp.path().join("copy");
        super::copy_part(&model.join("dense"), &to).unwrap();
        let read = |p: &str| std::fs::read_to_string(to.join(p)).unwrap();
        assert_eq!(
            (read("config.json"), read("tokenizer.json")),
            ("{}".into(), "shared".into())
        );

        std::fs::write(model.join("dense/tokenizer.json"), "own").unwrap();
        let again = tmp.path().join("again");
        super::copy_part(&model.join("dense"), &again).unwrap();
        assert_eq!(
            std::fs::read_to_string(again.join("tokenizer.json")).unwrap(),
            "own"
        );
    }
}
