//! What identifies a run or a cache: SHA-256 of files and of JSON descriptions, the keys that
//! resume a run only with the same options, inputs and initial weights.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{Result, TrainError};

/// SHA-256 of a file's bytes, in hex.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).map_err(|e| TrainError::io(path, e))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(|e| TrainError::io(path, e))?;
    Ok(format!("{:x}", h.finalize()))
}

/// SHA-256 of a JSON description (its compact text): what identifies a run or a cache.
pub(crate) fn sha256_json(desc: &serde_json::Value) -> String {
    format!("{:x}", Sha256::digest(desc.to_string().as_bytes()))
}
