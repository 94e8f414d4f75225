//! The CLIP dense encoder against the Hugging Face reference (tiny random CLIP).

mod common;

use common::*;
use lexlip_model::{ClipEncoder, DenseEncoder, Device, Encoders};

#[test]
fn embeddings_match_reference() {
    let dir = fixtures().join("clip-tiny");
    let enc = ClipEncoder::load(&dir, &Device::Cpu).unwrap();
    let fx = fixture_json("clip.json");
    assert_eq!(enc.dim(), 16);
    let texts: Vec<&str> = fx["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let ids = enc.tokenize(&texts).unwrap();
    for (i, row) in ids.iter().enumerate() {
        let expected: Vec<u32> = usizes(&fx["text_ids"][i])
            .into_iter()
            .map(|x| x as u32)
            .collect();
        assert_eq!(row, &expected);
    }
    // Batched (padded) and one by one.
    let batch = enc.encode_texts(&texts).unwrap();
    let mut worst = 0f32;
    for (i, v) in batch.iter().enumerate() {
        let reference = f32s(&fx["text_embeddings"][i]);
        worst = worst.max(max_abs_diff(v.as_slice(), &reference));
        let single = &enc.encode_texts(&texts[i..=i]).unwrap()[0];
        assert!(max_abs_diff(single.as_slice(), v.as_slice()) <= TOL);
        let norm: f32 = v.as_slice().iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
    }
    let images: Vec<_> = fx["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let n = n.as_str().unwrap();
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
