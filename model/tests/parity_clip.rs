//! The CLIP dense encoder against the Hugging Face reference (tiny random CLIP).

mod common;

use common::*;
use lexlip_model::{ClipEncoder, DenseEncoder, Device};

#[test]
fn embeddings_match_reference() {
    let enc = ClipEncoder::load(&fixtures().join("clip-tiny"), &Device::Cpu).unwrap();
    assert_eq!(enc.dim(), 16);
    assert_dense_parity(&enc, &|t| enc.tokenize(t).unwrap(), "clip.json");
}

#[test]
fn clip_directory_is_detected_as_dense_only() {
    load_dense_only(&fixtures().join("clip-tiny"));
}
