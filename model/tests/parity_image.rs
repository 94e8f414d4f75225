//! The image encoder (BEiT + MLM head) against the Hugging Face reference on a tiny random BEiT
//! (fixtures/beit-tiny, fixtures/beit.json), plus preprocessing and load errors.

mod common;

use common::*;
use lexlip_model::{Device, ImageEncoder, ModelError, PreprocessedImage, Weights};

fn beit_dir() -> std::path::PathBuf {
    fixtures().join("beit-tiny")
}

fn encoder() -> ImageEncoder {
    ImageEncoder::load(&beit_dir(), &Device::Cpu).expect("load tiny BEiT")
}

fn load_images(enc: &ImageEncoder, names: &[&str]) -> Vec<PreprocessedImage> {
    names
        .iter()
        .map(|n| {
            let bytes = std::fs::read(fixtures().join("images").join(n)).unwrap();
            enc.preprocess_named(&bytes, n).unwrap()
        })
        .collect()
}

#[test]
fn pixels_match_reference() {
    let enc = encoder();
    let fx = fixture_json("beit.json");
    let images = load_images(&enc, &strs(&fx["images"]));
    for (i, img) in images.iter().enumerate() {
        assert_eq!(img.size(), 64);
        let first = f32s(&fx["pixels_first_values"][i]);
        assert!(max_abs_diff(&img.data()[..16], &first) < 1e-6);
        let sum: f64 = img.data().iter().map(|x| *x as f64).sum();
        assert!((sum - fx["pixels_sum"][i].as_f64().unwrap()).abs() < 1e-2);
    }
}

#[test]
fn logits_and_pooled_weights_match_reference() {
    let enc = encoder();
    let tokens = enc.vocabulary().tokens().to_vec();
    let fx = fixture_json("beit.json");
    let images = load_images(&enc, &strs(&fx["images"]));
    let logits = enc.logits(&images).unwrap().to_vec3::<f32>().unwrap();
    let cols = usizes(&fx["logit_columns"]);
    let mut worst_logit = 0f32;
    for (img, theirs) in logits.iter().zip(fx["logits"].as_array().unwrap()) {
        assert_eq!(img.len(), 17, "CLS + 16 patches");
        for (row, t) in img.iter().zip(theirs.as_array().unwrap()) {
            let ours: Vec<f32> = cols.iter().map(|&c| row[c]).collect();
            worst_logit = worst_logit.max(max_abs_diff(&ours, &f32s(t)));
        }
    }
    let batch = enc.encode(&images).unwrap();
    let mut worst_pooled = 0f32;
    for (i, v) in batch.iter().enumerate() {
        let reference = f32s(&fx["pooled"][i]);
        worst_pooled = worst_pooled.max(max_abs_diff(&dense_of(v, &tokens), &reference));
        assert_same_impacts(&reference, v, &tokens);
        // Batched == one by one.
        let single = &enc.encode(std::slice::from_ref(&images[i])).unwrap()[0];
        let d = max_abs_diff(&dense_of(single, &tokens), &dense_of(v, &tokens));
        assert!(d <= TOL, "batched vs one-by-one, image {i}: {d}");
    }
    assert_logits_and_pooled_within_tol("beit", worst_logit, worst_pooled);
}

#[test]
fn larger_input_uses_lexlip_interpolated_position_bias() {
    let fx = fixture_json("beit.json");
    let enc = encoder().with_image_size(96).unwrap();
    assert_eq!(enc.image_size(), 96);
    let tokens = enc.vocabulary().tokens().to_vec();
    let images = load_images(&enc, &[fx["image_96"].as_str().unwrap()]);
    let v = &enc.encode(&images).unwrap()[0];
    let reference = f32s(&fx["pooled_96"]);
    let d = max_abs_diff(&dense_of(v, &tokens), &reference);
    eprintln!("beit 96x96 (interpolated bias) pooled max diff {d:e}");
    assert!(d <= TOL, "interpolated forward differs by {d}");
    // Inputs preprocessed for another size are refused, not silently mis-read.
    let small = load_images(&encoder(), &["img0_64.png"]);
    assert!(enc.encode(&small).is_err());
}

#[test]
fn decodes_common_formats_and_resizes() {
    use image::{ImageEncoder as _, RgbImage};
    let enc = encoder();
    let img = RgbImage::from_fn(120, 80, |x, y| image::Rgb([x as u8, y as u8, 128]));
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(img.as_raw(), 120, 80, image::ExtendedColorType::Rgb8)
        .unwrap();
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new(&mut jpeg)
        .encode_image(&img)
        .unwrap();
    let mut webp = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut webp)
        .write_image(img.as_raw(), 120, 80, image::ExtendedColorType::Rgb8)
        .unwrap();
    let mut gif = Vec::new();
    {
        let rgba = image::DynamicImage::ImageRgb8(img.clone()).to_rgba8();
        let mut g = image::codecs::gif::GifEncoder::new(&mut gif);
        g.encode_frames(vec![
            image::Frame::new(rgba.clone()),
            image::Frame::new(rgba),
        ])
        .unwrap();
    }
    for (name, bytes) in [("png", png), ("jpeg", jpeg), ("webp", webp), ("gif", gif)] {
        let p = enc.preprocess_named(&bytes, name).unwrap();
        assert_eq!(p.size(), 64, "{name}");
        assert!(p.data().iter().all(|x| (-1.0..=1.0).contains(x)), "{name}");
        assert_eq!(enc.encode(&[p]).unwrap().len(), 1);
    }
}

#[test]
fn corrupt_or_unsupported_input_is_an_error_naming_it() {
    let enc = encoder();
    let bytes = std::fs::read(fixtures().join("images/corrupt.png")).unwrap();
    let err = enc.preprocess_named(&bytes, "corrupt.png").unwrap_err();
    assert!(matches!(err, ModelError::Image { .. }), "{err}");
    assert!(err.to_string().contains("corrupt.png"), "{err}");
    let err = enc
        .preprocess_named(b"plain text, not an image", "notes.txt")
        .unwrap_err();
    assert!(err.to_string().contains("notes.txt"), "{err}");
    assert!(enc.preprocess(&[]).is_err());
    // A truncated PNG.
    let good = std::fs::read(fixtures().join("images/img0_64.png")).unwrap();
    assert!(
        enc.preprocess_named(&good[..good.len() / 2], "half.png")
            .is_err()
    );
}

/// Copies the tiny BEiT directory into a temp dir, with its weights passed through `edit`.
fn edited_copy(
    edit: impl FnOnce(&mut std::collections::HashMap<String, candle_core::Tensor>),
) -> tempfile::TempDir {
    let files = ["config.json", "tokenizer.json", "preprocessor_config.json"];
    let tmp = copy_of(&beit_dir(), &files);
    let w = Weights::from_safetensors_dir(&beit_dir()).unwrap();
    let mut tensors = w.tensors().clone();
    edit(&mut tensors);
    Weights::from_tensors(tensors, "x")
        .save_safetensors(&tmp.path().join("model.safetensors"))
        .unwrap();
    tmp
}

#[test]
fn missing_tensor_is_named() {
    let name = "beit.encoder.layer.1.attention.attention.key.weight";
    let tmp = edited_copy(|t| {
        t.remove(name);
    });
    let err = ImageEncoder::load(tmp.path(), &Device::Cpu).unwrap_err();
    assert!(matches!(err, ModelError::MissingTensor { .. }), "{err}");
    assert!(err.to_string().contains(name), "{err}");
    let head = "cls.predictions.decoder.weight";
    let tmp = edited_copy(|t| {
        t.remove(head);
    });
    let err = ImageEncoder::load(tmp.path(), &Device::Cpu).unwrap_err();
    assert!(err.to_string().contains(head), "{err}");
}

#[test]
fn shape_mismatch_is_named() {
    let name = "beit.encoder.layer.0.intermediate.dense.weight";
    let tmp = edited_copy(|t| {
        let w = t[name].narrow(0, 0, 60).unwrap();
        t.insert(name.to_string(), w);
    });
    let err = ImageEncoder::load(tmp.path(), &Device::Cpu).unwrap_err();
    assert!(matches!(err, ModelError::ShapeMismatch { .. }), "{err}");
    assert!(err.to_string().contains(name), "{err}");
    // A config that disagrees with the weights (wider hidden size) is reported the same way.
    let tmp = edited_copy(|_| {});
    let cfg = std::fs::read_to_string(tmp.path().join("config.json")).unwrap();
    std::fs::write(
        tmp.path().join("config.json"),
        cfg.replace("\"intermediate_size\": 64", "\"intermediate_size\": 48"),
    )
    .unwrap();
    let err = ImageEncoder::load(tmp.path(), &Device::Cpu).unwrap_err();
    assert!(
        err.to_string().contains("intermediate.dense.weight"),
        "{err}"
    );
}

#[test]
fn preprocessing_works_across_threads() {
    use rayon::prelude::*;
    let enc = encoder();
    let bytes = std::fs::read(fixtures().join("images/img1_64.png")).unwrap();
    let all: Vec<_> = (0..16)
        .into_par_iter()
        .map(|_| enc.preprocess(&bytes).unwrap())
        .collect();
    assert!(all.windows(2).all(|w| w[0] == w[1]));
}
