//! Resume state: how far into the input the last commit reached, written atomically right after
//! each commit. A re-run with the same inputs and options (same fingerprint) skips that prefix;
//! documents added after the last commit were never visible and are added again (same id
//! replaces), so the result equals a clean run. The counts and the errors file's length at the
//! commit are saved too, so a resumed run reports (and writes) what a clean run would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{PipelineError, Result};

pub const PROGRESS_FILE: &str = "pipeline-progress.json";

/// Items read, indexed and skipped (by reason) up to a point of the input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub read: u64,
    pub indexed: u64,
    pub skipped: BTreeMap<String, u64>,
}

impl Counts {
    pub fn skip(&mut self, reason: &str) {
        *self.skipped.entry(reason.to_string()).or_default() += 1;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Identifies the inputs and options of the run.
    pub fingerprint: String,
    /// Input items (in reader order) fully committed.
    pub position: u64,
    /// The run reached the end of its input.
    pub complete: bool,
    /// Counts of the job up to `position`.
    #[serde(default)]
    pub counts: Counts,
    /// The observer's mark at the commit (the errors file's length).
    #[serde(default)]
    pub mark: u64,
}

/// Where a collection's resume point is kept.
pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(PROGRESS_FILE)
}

impl Progress {
    /// The saved progress of a run with this fingerprint, if any.
    pub fn load(dir: &Path, fingerprint: &str) -> Result<Option<Progress>> {
        let p = path(dir);
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(PipelineError::io(&p, e)),
        };
        let saved: Progress = serde_json::from_str(&text)
            .map_err(|e| {
                PipelineError::Input(format!(
                    "{}: {e} (unreadable resume point: remove it, or index from the start with --restart)",
                    p.display()
                ))
            })?;
        Ok((saved.fingerprint == fingerprint).then_some(saved))
    }

    /// Whether `dir` holds a resume point at all (of this run or another).
    pub fn saved_in(dir: &Path) -> bool {
        path(dir).exists()
    }

    /// Writes atomically (temp file + fsync + rename + fsync of the directory).
    pub fn save(&self, dir: &Path) -> Result<()> {
        let p = path(dir);
        let tmp = dir.join(format!(".{PROGRESS_FILE}.tmp"));
        let text = serde_json::to_string(self).map_err(|e| PipelineError::Stage(e.to_string()))?;
        std::fs::write(&tmp, text).map_err(|e| PipelineError::io(&tmp, e))?;
        if let Ok(f) = std::fs::File::open(&tmp) {
            let _ = f.sync_all();
        }
        std::fs::rename(&tmp, &p).map_err(|e| PipelineError::io(&p, e))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// FNV-1a of the run's description, as hex.
pub fn fingerprint(description: &str) -> String {
    format!("{:016x}", fnv1a(description.as_bytes()))
}

pub(crate) use lexlip_corpus::hash::{fnv1a, id_digest};
