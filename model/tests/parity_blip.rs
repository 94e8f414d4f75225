//! BLIP's contrastive (ITC) encoders against the Hugging Face reference (a tiny random
//! `BlipForImageTextRetrieval`, `scripts/make_blip_fixtures.py`). The model is fed the reference
//! processor's pixel tensors, so that its parity is tested apart from the resampler's.

mod common;

use common::*;
use lexlip_model::blip::{BlipEncoder, MAX_TEXT_TOKENS};
use lexlip_model::{DType, DenseEncoder, Device, ImageProcessor, ModelError, PreprocessedImage};

fn tiny() -> std::path::PathBuf {
    fixtures().join("blip-tiny")
}

fn texts(fx: &serde_json::Value) -> Vec<&str> {
    strs(&fx["texts"])
}

/// The reference pixel tensors of blip.json.
fn pixels(fx: &serde_json::Value) -> Vec<PreprocessedImage> {
    let size = fx["image_size"].as_u64().unwrap() as usize;
    fx["pixels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| PreprocessedImage::from_chw(size, f32s(p)).unwrap())
        .collect()
}

/// The worst difference of the text and of the image embeddings from the reference.
fn worst_diffs(enc: &BlipEncoder, fx: &serde_json::Value) -> (f32, f32) {
    let texts = texts(fx);
    let mut text = 0f32;
    for (i, v) in enc.encode_texts(&texts).unwrap().iter().enumerate() {
        text = text.max(max_abs_diff(v.as_slice(), &f32s(&fx["text_embeddings"][i])));
        // One by one (no padding) as in a batch (padded, masked).
        let single = &enc.encode_texts(&texts[i..=i]).unwrap()[0];
        assert!(max_abs_diff(single.as_slice(), v.as_slice()) <= 1e-5);
        let norm: f32 = v.as_slice().iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
    }
    let mut image = 0f32;
    for (i, v) in enc.encode_images(&pixels(fx)).unwrap().iter().enumerate() {
        image = image.max(max_abs_diff(
            v.as_slice(),
            &f32s(&fx["image_embeddings"][i]),
        ));
    }
    (text, image)
}

#[test]
fn embeddings_match_reference() {
    let fx = fixture_json("blip.json");
    let enc = BlipEncoder::load(&tiny(), &Device::Cpu).unwrap();
    assert_eq!(enc.dim(), 16);
    let (text, image) = worst_diffs(&enc, &fx);
    eprintln!("blip parity: max diff text {text:e}, image {image:e}");
    assert!(text <= TOL, "text embeddings differ by {text}");
    assert!(image <= TOL, "image embeddings differ by {image}");
}

/// [`worst_diffs`] of the tiny model loaded in `dtype`, logged as `what`.
fn worst_diffs_in(dtype: DType, what: &str) -> (f32, f32) {
    let enc = BlipEncoder::load_with_dtype(&tiny(), &Device::Cpu, dtype).unwrap();
    let (text, image) = worst_diffs(&enc, &fixture_json("blip.json"));
    eprintln!("blip parity ({what}): max diff text {text:e}, image {image:e}");
    (text, image)
}

/// In f64 both towers run candle's generic ops (what a GPU runs) instead of the f32 CPU fast
/// paths: the same embeddings.
#[test]
fn generic_ops_match_reference() {
    let (text, image) = worst_diffs_in(DType::F64, "f64, generic ops");
    assert!(text <= TOL && image <= TOL, "{text} {image}");
}

/// An f16 image tower (for a GPU) stays close.
#[test]
fn f16_image_tower_is_close() {
    let (text, image) = worst_diffs_in(DType::F16, "f16 image tower");
    assert!(text <= TOL && image <= 1e-2, "{text} {image}");
}

/// Batches longer than one forward pass (8 images on the CPU, 64 texts) are cut and joined in
/// order; empty ones give nothing.
#[test]
fn long_batches_keep_their_order() {
    let fx = fixture_json("blip.json");
    let enc = BlipEncoder::load(&tiny(), &Device::Cpu).unwrap();
    let px = pixels(&fx);
    let images: Vec<PreprocessedImage> = (0..19).map(|i| px[i % px.len()].clone()).collect();
    for (i, v) in enc.encode_images(&images).unwrap().iter().enumerate() {
        let expected = f32s(&fx["image_embeddings"][i % px.len()]);
        assert!(max_abs_diff(v.as_slice(), &expected) <= TOL, "image {i}");
    }
    let texts = texts(&fx);
    let many: Vec<&str> = (0..67).map(|i| texts[i % texts.len()]).collect();
    for (i, v) in enc.encode_texts(&many).unwrap().iter().enumerate() {
        let expected = f32s(&fx["text_embeddings"][i % texts.len()]);
        assert!(max_abs_diff(v.as_slice(), &expected) <= TOL, "text {i}");
    }
    assert!(enc.encode_texts(&[]).unwrap().is_empty());
    assert!(enc.encode_images(&[]).unwrap().is_empty());
    assert_eq!(enc.text_features(&[]).unwrap().dims(), [0, 16]);
}

/// `[CLS] … [SEP]` as the reference tokenizer gives them, cut to LAVIS's 35 tokens.
#[test]
fn token_ids_match_reference() {
    let fx = fixture_json("blip.json");
    let enc = BlipEncoder::load(&tiny(), &Device::Cpu).unwrap();
    assert_eq!(fx["max_length"].as_u64(), Some(MAX_TEXT_TOKENS as u64));
    assert_eq!(enc.max_length(), MAX_TEXT_TOKENS);
    let ids = enc.tokenize(&texts(&fx)).unwrap();
    assert!(
        ids.iter().any(|row| row.len() == MAX_TEXT_TOKENS),
        "one text is cut"
    );
    for (i, row) in ids.iter().enumerate() {
        let expected: Vec<u32> = usizes(&fx["text_ids"][i])
            .into_iter()
            .map(|x| x as u32)
            .collect();
        assert_eq!(row, &expected, "text {i}");
    }
}

/// A repository that holds `pytorch_model.bin` (and a config.json with transformers' defaults
/// left out) loads the same model.
#[test]
fn pytorch_bin_directory_gives_the_same_embeddings() {
    let fx = fixture_json("blip.json");
    let st = BlipEncoder::load(&tiny(), &Device::Cpu).unwrap();
    let bin = BlipEncoder::load(&fixtures().join("blip-tiny-bin"), &Device::Cpu).unwrap();
    assert_eq!(bin.config(), st.config());
    let (text, image) = worst_diffs(&bin, &fx);
    assert!(text <= TOL && image <= TOL, "{text} {image}");
    let texts = texts(&fx);
    let (a, b) = (
        st.encode_texts(&texts).unwrap(),
        bin.encode_texts(&texts).unwrap(),
    );
    for (a, b) in a.iter().zip(&b) {
        assert_eq!(a.as_slice(), b.as_slice());
    }
}

/// BLIP's processor: squashed to the model's size, Pillow's bicubic, OpenAI CLIP's mean/std
/// (from preprocessor_config.json when there is one).
#[test]
fn image_processor_is_blips() {
    let enc = BlipEncoder::load(&tiny(), &Device::Cpu).unwrap();
    let expected = ImageProcessor {
        size: 32,
        squash: true,
        ..ImageProcessor::clip(32)
    }
    .with_pillow_resampling();
    assert_eq!(enc.image_processor(), &expected);
    let bin = BlipEncoder::load(&fixtures().join("blip-tiny-bin"), &Device::Cpu).unwrap();
    assert_eq!(bin.image_processor(), &expected);
}

/// Copies the tiny model into a temporary directory, minus the tensors `drop` names.
fn without_tensors(drop: &[&str]) -> tempfile::TempDir {
    let src = tiny();
    let files = ["config.json", "tokenizer.json", "preprocessor_config.json"];
    let tmp = copy_of(&src, &files);
    let mut tensors =
        candle_core::safetensors::load(src.join("model.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    for name in drop {
        assert!(tensors.remove(*name).is_some(), "{name} is in the fixture");
    }
    candle_core::safetensors::save(&tensors, tmp.path().join("model.safetensors")).unwrap();
    tmp
}

/// A checkpoint that lacks tensors the contrastive path reads is refused by one error that
/// names them all; tensors it does not read (the ITM head, cross-attention) may be missing.
#[test]
fn missing_tensors_are_named() {
    let missing = [
        "text_proj.weight",
        "vision_model.encoder.layers.1.self_attn.qkv.bias",
    ];
    let tmp = without_tensors(&missing);
    let err = BlipEncoder::load(tmp.path(), &Device::Cpu).unwrap_err();
    match &err {
        ModelError::MissingTensors { model, names, .. } => {
            assert_eq!(*model, "BLIP");
            let mut expected: Vec<String> = missing.iter().map(|s| s.to_string()).collect();
            expected.sort();
            assert_eq!(names, &expected);
        }
        other => panic!("expected MissingTensors, got {other:?}"),
    }
    let message = err.to_string();
    assert!(missing.iter().all(|n| message.contains(n)), "{message}");

    let unused = without_tensors(&[
        "itm_head.weight",
        "itm_head.bias",
        "text_encoder.encoder.layer.0.crossattention.self.query.weight",
    ]);
    let enc = BlipEncoder::load(unused.path(), &Device::Cpu).unwrap();
    assert_eq!(enc.dim(), 16);
}

/// The message the tiny model's loader refuses `dir` with.
fn load_error(dir: &std::path::Path) -> String {
    BlipEncoder::load(dir, &Device::Cpu)
        .unwrap_err()
        .to_string()
}

/// A directory without weights names what it looked for.
#[test]
fn a_directory_without_weights_is_refused() {
    let tmp = copy_of(&tiny(), &["config.json"]);
    let e = load_error(tmp.path());
    assert!(e.contains("pytorch_model.bin"), "{e}");
}

/// A tokenizer with word pieces the text tower cannot embed is refused, naming both sizes.
#[test]
fn a_tokenizer_larger_than_the_vocabulary_is_refused() {
    let src = tiny();
    let files = [
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
    ];
    let tmp = copy_of(&src, &files);
    let mut tok = tokenizers::Tokenizer::from_file(src.join("tokenizer.json")).unwrap();
    let added = tok
        .add_special_tokens([tokenizers::AddedToken::from("[EXTRA]", true)])
        .unwrap();
    assert_eq!(added, 1);
    tok.save(tmp.path().join("tokenizer.json"), false).unwrap();
    let e = load_error(tmp.path());
    assert!(e.contains("1003 word pieces") && e.contains("1002"), "{e}");
}
