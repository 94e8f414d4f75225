//! Loading an official-style LexLIP Lightning checkpoint (tiny; fixtures/lexlip-tiny), converting
//! it into a LexLIP directory, and model-kind detection.

mod common;

use common::*;
use lexlip_model::{
    Architecture, Device, Encoders, LoadOptions, ModelError, ModelSource, convert_checkpoint,
    detect,
};

fn ckpt() -> std::path::PathBuf {
    fixtures().join("lexlip-tiny/lexlip-tiny.ckpt")
}

/// Checks both encoders of `enc` against the reference outputs of the tiny LexLIP.
fn check_against_reference(enc: &Encoders) -> f32 {
    let fx = fixture_json("lexlip-tiny/expected.json");
    let text = enc.text().unwrap();
    let tokens = text.vocabulary().tokens().to_vec();
    let mut worst = 0f32;
    for case in fx["texts"].as_array().unwrap() {
        let t = case["text"].as_str().unwrap();
        let ids: Vec<u32> = usizes(&case["ids"]).into_iter().map(|x| x as u32).collect();
        assert_eq!(text.tokenize(&[t]).unwrap()[0], ids);
        let v = &text.encode(&[t]).unwrap()[0];
        let reference = f32s(&case["pooled"]);
        worst = worst.max(max_abs_diff(&dense_of(v, &tokens), &reference));
        assert_same_impacts(&reference, v, &tokens);
    }
    let image = enc.image().unwrap();
    let name = fx["image"].as_str().unwrap();
    let bytes = std::fs::read(fixtures().join("images").join(name)).unwrap();
    let img = image.preprocess_named(&bytes, name).unwrap();
    let v = &image.encode(&[img]).unwrap()[0];
    let reference = f32s(&fx["image_pooled"]);
    worst = worst.max(max_abs_diff(&dense_of(v, &tokens), &reference));
    assert_same_impacts(&reference, v, &tokens);
    assert!(text.term_space().same_vocabulary(image.term_space()));
    worst
}

#[test]
fn lightning_checkpoint_loads_and_matches_reference() {
    assert_eq!(detect(&ckpt()).unwrap(), ModelSource::Checkpoint(ckpt()));
    let enc = Encoders::load(&ckpt(), &Device::Cpu).unwrap();
    assert_eq!(
        enc.image().unwrap().image_size(),
        64,
        "inferred from the bias table"
    );
    let d = check_against_reference(&enc);
    eprintln!("lexlip ckpt parity: max diff {d:e}");
    assert!(d <= TOL, "{d}");
}

#[test]
fn converted_directory_gives_the_same_vectors() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lexlip");
    convert_checkpoint(&ckpt(), &out, None).unwrap();
    assert_eq!(detect(&out).unwrap(), ModelSource::LexLipDir(out.clone()));
    for f in [
        "lexlip.json",
        "text/config.json",
        "text/model.safetensors",
        "image/config.json",
        "image/model.safetensors",
        "image/tokenizer.json",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let enc = Encoders::load(&out, &Device::Cpu).unwrap();
    let d = check_against_reference(&enc);
    assert!(d <= TOL, "{d}");
    // The image half alone is a single-encoder directory.
    assert_eq!(
        detect(&out.join("image")).unwrap(),
        ModelSource::Single(out.join("image"), Architecture::Beit)
    );
    // Options: max length, image size (relative bias interpolated).
    let opts = LoadOptions {
        max_length: Some(8),
        image_size: Some(96),
        ..Default::default()
    };
    let enc = Encoders::load_with(&out, &Device::Cpu, &opts).unwrap();
    assert_eq!(enc.text().unwrap().max_length(), 8);
    assert_eq!(enc.image().unwrap().image_size(), 96);
}

#[test]
fn checkpoint_without_tokenizer_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let lonely = tmp.path().join("model.ckpt");
    std::fs::copy(ckpt(), &lonely).unwrap();
    let err = Encoders::load(&lonely, &Device::Cpu).unwrap_err();
    assert!(matches!(err, ModelError::Tokenizer { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    // With the tokenizer given explicitly it loads.
    let opts = LoadOptions {
        tokenizer: Some(fixtures().join("vocab1000/tokenizer.json")),
        ..Default::default()
    };
    assert!(Encoders::load_with(&lonely, &Device::Cpu, &opts).is_ok());
}

#[test]
fn not_a_checkpoint_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.ckpt");
    std::fs::write(&bad, b"definitely not a zip or pickle").unwrap();
    std::fs::copy(
        fixtures().join("vocab1000/tokenizer.json"),
        tmp.path().join("tokenizer.json"),
    )
    .unwrap();
    let err = Encoders::load(&bad, &Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("bad.ckpt"), "{err}");
    assert!(detect(&tmp.path().join("nothing-here")).is_err());
    assert!(detect(&fixtures().join("images")).is_err());
}

#[test]
fn text_only_model_refuses_images() {
    let enc = Encoders::load(&splade_dir(), &Device::Cpu).unwrap();
    assert!(enc.text().is_ok());
    let err = enc.image().unwrap_err();
    assert!(
        matches!(err, ModelError::NoEncoder { what: "image", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no image encoder"), "{err}");
    assert_eq!(enc.term_space().unwrap().size, 30522);
}
