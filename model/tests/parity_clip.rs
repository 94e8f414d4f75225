//! The CLIP dense encoder against the Hugging Face reference (tiny random CLIP).

mod common;

use common::*;
use lexlip_model::{ClipEncoder, DenseEncoder, Device, Encoders};

#[test]
fn embeddings_match_reference() {
    let enc = ClipEncoder::load(&fixtures().join("clip-tiny"), &Device::Cpu).unwrap();
    assert_eq!(enc.dim(), 16);
    let worst = check_dense_parity(&enc, &|t| enc.tokenize(t).unwrap(), "clip.json");
    eprintln!("clip parity: max diff {worst:e}");
    assert!(worst <= TOL, "embeddings differ by {worst}");
}

#[test]
fn clip_directory_is_detected_as_dense_only() {
    let enc = Encoders::load(&fixtures().join("clip-tiny"), &Device::Cpu).unwrap();
    assert!(enc.dense().is_some());
    assert!(enc.text().is_err());
    assert!(enc.image().is_err());
}
