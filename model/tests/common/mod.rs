//! Shared helpers of the integration tests: fixture paths, the tiny SPLADE model, comparisons.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use lexlip_proto::SparseVector;
use serde_json::Value;

/// Max abs difference allowed against the reference (f32).
pub const TOL: f32 = 1e-4;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn fixture_json(name: &str) -> Value {
    let path = fixtures().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

// The test models' fetch helpers are the end-to-end harness's (`tests/src/models.rs`).
#[path = "../../../tests/src/models.rs"]
mod models;
#[allow(unused_imports)] // not every test binary fetches both
pub use models::{mobilenet_dir, splade_dir};

pub fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The strings of a JSON array (a fixture's texts or file names).
pub fn strs(v: &Value) -> Vec<&str> {
    let items = v.as_array().unwrap();
    items.iter().map(|t| t.as_str().unwrap()).collect()
}

/// The string each case of a JSON array holds under `key` (a fixture's cases' texts).
pub fn strs_at<'a>(cases: &'a Value, key: &str) -> Vec<&'a str> {
    let items = cases.as_array().unwrap();
    items.iter().map(|c| c[key].as_str().unwrap()).collect()
}

pub fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

/// A full-vocabulary vector from `{"ids": [...], "weights": [...]}` (absent ids are 0).
pub fn dense_from_sparse_json(v: &Value, vocab: usize) -> Vec<f32> {
    let mut out = vec![0f32; vocab];
    for (i, w) in usizes(&v["ids"]).into_iter().zip(f32s(&v["weights"])) {
        out[i] = w;
    }
    out
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// Quantized impacts (`floor(100 w)`) of the reference and of ours must agree term by term; the
/// only tolerated difference is ±1 where the reference value sits within 1e-3 of an integer
/// boundary (float noise far below the 1e-4 tolerance can cross it). Returns how many such
/// boundary cases there were.
pub fn assert_same_impacts(reference: &[f32], ours: &SparseVector, tokens: &[String]) -> usize {
    let mut boundary = 0;
    let q = ours.quantize(100.0);
    let mut seen = 0;
    for (i, w) in reference.iter().enumerate() {
        let expected = lexlip_proto::sparse::quantize_weight(*w, 100.0);
        let got = q.get(&tokens[i]).unwrap_or(0);
        if got != 0 {
            seen += 1;
        }
        if expected != got {
            let x = w * 100.0;
            assert!(
                (x - x.round()).abs() < 1e-3 && expected.abs_diff(got) == 1,
                "term {:?}: reference impact {expected} (w = {w}), ours {got}",
                tokens[i]
            );
            boundary += 1;
        }
    }
    assert_eq!(
        seen,
        q.len(),
        "quantized vector has terms outside the vocabulary"
    );
    boundary
}

/// Ours as a full-vocabulary vector.
pub fn dense_of(v: &SparseVector, tokens: &[String]) -> Vec<f32> {
    tokens.iter().map(|t| v.get(t).unwrap_or(0.0)).collect()
}

/// A dense encoder against its reference fixture (`texts`, `text_ids`, `text_embeddings`,
/// `images`, `image_embeddings`): the token ids `tokenize` gives, the text embeddings batched
/// and one by one, unit length, and the image embeddings. Returns the largest difference.
pub fn check_dense_parity(
    enc: &dyn lexlip_model::DenseEncoder,
    tokenize: &dyn Fn(&[&str]) -> Vec<Vec<u32>>,
    fixture: &str,
) -> f32 {
    let fx = fixture_json(fixture);
    let texts = strs(&fx["texts"]);
    for (i, row) in tokenize(&texts).iter().enumerate() {
        let expected: Vec<u32> = usizes(&fx["text_ids"][i])
            .into_iter()
            .map(|x| x as u32)
            .collect();
        assert_eq!(row, &expected);
    }
    let batch = enc.encode_texts(&texts).unwrap();
    let mut worst = 0f32;
    for (i, v) in batch.iter().enumerate() {
        worst = worst.max(max_abs_diff(v.as_slice(), &f32s(&fx["text_embeddings"][i])));
        let single = &enc.encode_texts(&texts[i..=i]).unwrap()[0];
        assert!(max_abs_diff(single.as_slice(), v.as_slice()) <= TOL);
        let norm: f32 = v.as_slice().iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
    }
    let images: Vec<_> = strs(&fx["images"])
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(fixtures().join("images").join(n)).unwrap();
            enc.preprocess_image(&bytes, n).unwrap()
        })
        .collect();
    for (i, v) in enc.encode_images(&images).unwrap().iter().enumerate() {
        worst = worst.max(max_abs_diff(
            v.as_slice(),
            &f32s(&fx["image_embeddings"][i]),
        ));
    }
    worst
}

/// A dense dual encoder's directory loaded as any model is: a dense encoder, no lexicon towers.
pub fn load_dense_only(dir: &Path) -> lexlip_model::Encoders {
    let enc = lexlip_model::Encoders::load(dir, &lexlip_model::Device::Cpu).unwrap();
    assert!(enc.dense().is_some());
    assert!(enc.text().is_err() && enc.image().is_err());
    enc
}

/// What every dense parity test asserts: [`check_dense_parity`] within [`TOL`], logged.
pub fn assert_dense_parity(
    enc: &dyn lexlip_model::DenseEncoder,
    tokenize: &dyn Fn(&[&str]) -> Vec<Vec<u32>>,
    fixture: &str,
) {
    let worst = check_dense_parity(enc, tokenize, fixture);
    eprintln!("{fixture} parity: max diff {worst:e}");
    assert!(worst <= TOL, "embeddings differ by {worst}");
}

/// What the lexicon parity tests assert: their worst logit and pooled diffs within [`TOL`].
pub fn assert_logits_and_pooled_within_tol(what: &str, worst_logit: f32, worst_pooled: f32) {
    eprintln!("{what} parity: logits max diff {worst_logit:e}, pooled max diff {worst_pooled:e}");
    assert!(worst_logit <= TOL, "logits differ by {worst_logit}");
    assert!(
        worst_pooled <= TOL,
        "pooled weights differ by {worst_pooled}"
    );
}

/// A temporary copy of `files` of the fixture model `src`, for a test to break one part of.
pub fn copy_of(src: &Path, files: &[&str]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in files {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    tmp
}

/// A checkpoint that lacks tensors: `src`'s config.json and `weights` less `dropped` (a copy).
pub fn copy_without_tensors(
    src: &Path,
    weights: &lexlip_model::Weights,
    dropped: &[&str],
) -> tempfile::TempDir {
    let tmp = copy_of(src, &["config.json"]);
    let kept = weights
        .tensors()
        .iter()
        .filter(|(k, _)| !dropped.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    lexlip_model::Weights::from_tensors(kept, "kept")
        .save_safetensors(&tmp.path().join("model.safetensors"))
        .unwrap();
    tmp
}
