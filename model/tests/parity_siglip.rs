//! The SigLIP dense encoder against the Hugging Face reference (tiny random SigLIP,
//! `scripts/make_siglip_fixtures.py`).

mod common;

use common::*;
use lexlip_model::{DenseEncoder, Device, SiglipEncoder};

/// Every text is padded to the whole context with the pad id, as SigLIP's processor does.
#[test]
fn embeddings_match_reference() {
    let enc = SiglipEncoder::load(&fixtures().join("siglip-tiny"), &Device::Cpu).unwrap();
    assert_eq!(enc.dim(), 32);
    assert_dense_parity(&enc, &|t| enc.tokenize(t).unwrap(), "siglip.json");
}

/// A SigLIP directory loads as a dense-only model, as CLIP does.
#[test]
fn siglip_directory_is_detected_as_dense_only() {
    let enc = load_dense_only(&fixtures().join("siglip-tiny"));
    let dense = enc.dense().expect("a dense encoder");
    assert_eq!(dense.dim(), 32);
    let v = dense.encode_texts(&["a photo of a dog"]).unwrap();
    assert_eq!(v[0].as_slice().len(), 32);
}

/// A config whose towers have different widths is refused, naming the two.
#[test]
fn towers_of_different_widths_are_refused() {
    let src = fixtures().join("siglip-tiny");
    let files = [
        "model.safetensors",
        "tokenizer.json",
        "preprocessor_config.json",
    ];
    let tmp = copy_of(&src, &files);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["vision_config"]["hidden_size"] = 48.into();
    std::fs::write(tmp.path().join("config.json"), cfg.to_string()).unwrap();
    let e = SiglipEncoder::load(tmp.path(), &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hidden_size 32") && e.contains("48"), "{e}");
}
