//! Checkpoints: everything a run needs to continue bit for bit: the weights of every part
//! (towers, decoders, momentum encoders), AdamW's moments, the queues, and the step (data
//! order, masks, augmentation and dropout are functions of the seed and the step).
//!
//! Layout under `OUT/checkpoints/`: `step-NNNNNNNN/{state.safetensors, state.json}` and
//! `latest.json` naming the newest. A checkpoint is written into a temporary directory, synced,
//! renamed into place, and only then named by `latest.json` (replaced atomically), so a kill at
//! any moment leaves the previous checkpoint usable.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

pub const DIR: &str = "checkpoints";
const LATEST: &str = "latest.json";
const TENSORS: &str = "state.safetensors";
const STATE: &str = "state.json";

/// The non-tensor state of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub format: u32,
    /// Steps done.
    pub step: u64,
    pub total_steps: u64,
    /// Identifies the run (options, inputs, initial models): only the same run resumes.
    pub fingerprint: String,
    /// AdamW updates done.
    pub adam_t: u64,
    pub queue_ptr: usize,
    pub queue_fill: usize,
}

pub fn dir(out: &Path) -> PathBuf {
    out.join(DIR)
}

fn ck_err(path: &Path, message: impl Into<String>) -> TrainError {
    TrainError::Checkpoint {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Writes a file and syncs it to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(|e| TrainError::io(path, e))?;
    f.write_all(bytes).map_err(|e| TrainError::io(path, e))?;
    f.sync_all().map_err(|e| TrainError::io(path, e))
}

fn sync_dir(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| TrainError::io(path, e))
}

/// Writes `bytes` to `path` atomically (temporary file, sync, rename, sync the directory).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.tmp"));
    write_synced(&tmp, bytes)?;
    std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))?;
    sync_dir(parent)
}

/// Saves a checkpoint of `state` with `tensors` and prunes all but the `keep` newest.
pub fn save(
    out: &Path,
    state: &State,
    tensors: &HashMap<String, Tensor>,
    keep: usize,
) -> Result<PathBuf> {
    let root = dir(out);
    std::fs::create_dir_all(&root).map_err(|e| TrainError::io(&root, e))?;
    let name = format!("step-{:08}", state.step);
    let tmp = root.join(format!(".tmp-{name}"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    let tensors_path = tmp.join(TENSORS);
    candle_core::safetensors::save(tensors, &tensors_path)
        .map_err(|e| ck_err(&tensors_path, e.to_string()))?;
    std::fs::File::open(&tensors_path)
        .and_then(|f| f.sync_all())
        .map_err(|e| TrainError::io(&tensors_path, e))?;
    let json = serde_json::to_vec_pretty(state).map_err(|e| ck_err(&tmp, e.to_string()))?;
    write_synced(&tmp.join(STATE), &json)?;
    sync_dir(&tmp)?;
    let dest = root.join(&name);
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(|e| TrainError::io(&dest, e))?;
    }
    std::fs::rename(&tmp, &dest).map_err(|e| TrainError::io(&dest, e))?;
    sync_dir(&root)?;
    write_atomic(
        &root.join(LATEST),
        serde_json::json!({ "checkpoint": name })
            .to_string()
            .as_bytes(),
    )?;
    prune(&root, &name, keep)?;
    Ok(dest)
}

/// Deletes leftovers of interrupted saves and all but the `keep` newest checkpoints (never the
/// latest).
fn prune(root: &Path, latest: &str, keep: usize) -> Result<()> {
    let mut steps: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(root).map_err(|e| TrainError::io(root, e))? {
        let entry = entry.map_err(|e| TrainError::io(root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-step-") {
            let _ = std::fs::remove_dir_all(entry.path());
        } else if name.starts_with("step-") {
            steps.push(name);
        }
    }
    steps.sort();
    let keep = keep.max(1);
    let excess = steps.len().saturating_sub(keep);
    for name in steps.into_iter().take(excess) {
        if name != latest {
            let p = root.join(&name);
            std::fs::remove_dir_all(&p).map_err(|e| TrainError::io(&p, e))?;
        }
    }
    Ok(())
}

/// The newest complete checkpoint in `out`, if any: its directory and state.
pub fn latest(out: &Path) -> Result<Option<(PathBuf, State)>> {
    let root = dir(out);
    let pointer = root.join(LATEST);
    let text = match std::fs::read_to_string(&pointer) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TrainError::io(&pointer, e)),
    };
    let name = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            v.get("checkpoint")
                .and_then(|c| c.as_str())
                .map(str::to_string)
        })
        .ok_or_else(|| {
            ck_err(
                &pointer,
                "unreadable; delete the checkpoints directory or pass --restart",
            )
        })?;
    let dir = root.join(name);
    let state_path = dir.join(STATE);
    let text = std::fs::read_to_string(&state_path).map_err(|e| TrainError::io(&state_path, e))?;
    let state: State = serde_json::from_str(&text)
        .map_err(|e| ck_err(&state_path, format!("{e}; pass --restart to start again")))?;
    Ok(Some((dir, state)))
}

/// The checkpoint a run with `fingerprint` resumes from: none after `--restart` (which
/// deletes them), an error when the latest belongs to a run with other options or inputs.
pub fn resumable(out: &Path, fingerprint: &str, restart: bool) -> Result<Option<(PathBuf, State)>> {
    if restart {
        clear(out)?;
    }
    match latest(out)? {
        Some((dir, state)) if state.fingerprint != fingerprint => Err(TrainError::Checkpoint {
            path: dir,
            message: "this checkpoint belongs to a run with other options, inputs or initial \
                      model; use another --out or pass --restart to discard it"
                .into(),
        }),
        found => Ok(found),
    }
}

/// The tensors of a checkpoint directory (on the CPU).
pub fn tensors(dir: &Path) -> Result<HashMap<String, Tensor>> {
    let path = dir.join(TENSORS);
    candle_core::safetensors::load(&path, &candle_core::Device::Cpu)
        .map_err(|e| ck_err(&path, e.to_string()))
}

/// The tensors of a checkpoint stored under `PREFIX/`, by their names without it.
pub fn group(all: &HashMap<String, Tensor>, prefix: &str) -> HashMap<String, Tensor> {
    let p = format!("{prefix}/");
    all.iter()
        .filter_map(|(k, t)| k.strip_prefix(&p).map(|n| (n.to_string(), t.clone())))
        .collect()
}

/// Deletes every checkpoint (`--restart`).
pub fn clear(out: &Path) -> Result<()> {
    let root = dir(out);
    if root.exists() {
        std::fs::remove_dir_all(&root).map_err(|e| TrainError::io(&root, e))?;
    }
    Ok(())
}
