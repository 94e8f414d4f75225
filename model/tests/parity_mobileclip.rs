//! The MobileCLIP dense encoder against open_clip's reference (tiny random MobileCLIP with a
//! FastViT MCi image tower, `scripts/make_mobileclip_fixtures.py`).

mod common;

use std::path::Path;

use common::*;
use lexlip_model::{
    Architecture, DenseEncoder, Device, Encoders, MobileClipEncoder, ModelSource, detect,
};

/// A copy of the fixture in a temporary directory, changed by `edit` (a variant to load).
fn edited_fixture(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(fixtures().join("mobileclip-tiny")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, tmp.path().join(f.file_name().unwrap())).unwrap();
    }
    edit(tmp.path());
    tmp
}

/// The error the encoder refuses an [`edited_fixture`] with.
fn refusal(edit: impl FnOnce(&Path)) -> String {
    let tmp = edited_fixture(edit);
    MobileClipEncoder::load(tmp.path(), &Device::Cpu)
        .unwrap_err()
        .to_string()
}

fn write_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("open_clip_config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&path, cfg.to_string()).unwrap();
}

/// Texts are padded to the whole context with 0 and pooled at `<|endoftext|>`; images are not
/// normalised; the FastViT shape is read off the weights.
#[test]
fn embeddings_match_reference() {
    let enc = MobileClipEncoder::load(&fixtures().join("mobileclip-tiny"), &Device::Cpu).unwrap();
    assert_eq!(enc.dim(), 32);
    assert_eq!(enc.image_processor().size, 64);
    assert_dense_parity(&enc, &|t| enc.tokenize(t).unwrap(), "mobileclip.json");
}

/// A text longer than the context keeps `<|endoftext|>` in its last position, as open_clip's
/// tokenizer does, so the tower still pools at it.
#[test]
fn long_texts_end_with_end_of_text() {
    let enc = MobileClipEncoder::load(&fixtures().join("mobileclip-tiny"), &Device::Cpu).unwrap();
    let long = ["red car on the grass"; 5].join(" ");
    let ids = enc.tokenize(&[long.as_str(), "cat"]).unwrap();
    assert_eq!(ids[0].len(), 16);
    assert_eq!(ids[0][15], 999, "{:?}", ids[0]);
    assert_eq!(ids[1], [998, 5, 999, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
}

/// An open_clip directory is detected as MobileCLIP and loads as a dense-only model.
#[test]
fn open_clip_directory_is_detected_as_dense_only() {
    let dir = fixtures().join("mobileclip-tiny");
    assert!(matches!(
        detect(&dir).unwrap(),
        ModelSource::Single(_, Architecture::MobileClip)
    ));
    let enc = Encoders::load(&dir, &Device::Cpu).unwrap();
    assert!(enc.is_dense_only());
    let dense = enc.dense().expect("a dense encoder");
    let v = dense.encode_texts(&["a photo of a dog"]).unwrap();
    assert_eq!(v[0].as_slice().len(), 32);
}

/// Other open_clip models (a ViT image tower) are refused, naming the tower and what to use.
#[test]
fn other_open_clip_models_are_refused() {
    let tmp = edited_fixture(|dir| {
        write_config(dir, |c| {
            c["model_cfg"]["vision_cfg"] =
                serde_json::json!({"width": 768, "layers": 12, "image_size": 224})
        })
    });
    let e = detect(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("non-timm image tower") && e.contains("config.json"),
        "{e}"
    );
    write_config(tmp.path(), |c| {
        c["model_cfg"]["vision_cfg"] = serde_json::json!({"timm_model_name": "fastvit_mci3"})
    });
    let e = detect(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("\"fastvit_mci3\"") && e.contains("fastvit_mci2"),
        "{e}"
    );
}

/// A text tower with a causal mask, a tokenizer without `<|endoftext|>` and a pickle-only
/// directory are refused with what to do.
#[test]
fn unusable_directories_are_refused() {
    let e = refusal(|dir| {
        write_config(dir, |c| {
            c["model_cfg"]["text_cfg"]["no_causal_mask"] = false.into()
        })
    });
    assert!(e.contains("causal mask"), "{e}");

    let e = refusal(|dir| {
        let tok = dir.join("tokenizer.json");
        let text = std::fs::read_to_string(&tok)
            .unwrap()
            .replace("<|endoftext|>", "<|end|>");
        std::fs::write(&tok, text).unwrap();
    });
    assert!(e.contains("<|endoftext|>"), "{e}");

    let e = refusal(|dir| {
        std::fs::remove_file(dir.join("open_clip_model.safetensors")).unwrap();
        std::fs::write(dir.join("open_clip_pytorch_model.bin"), b"pickle").unwrap();
    });
    assert!(e.contains("open_clip_model.safetensors"), "{e}");
}

/// The same model with its image tower already folded by timm (`reparam_conv` layers) gives the
/// reference's embeddings too.
#[test]
fn a_tower_folded_by_timm_loads_and_matches() {
    let tmp = edited_fixture(|dir| {
        let folded = fixtures().join("mobileclip-tiny-folded.safetensors");
        std::fs::copy(folded, dir.join("open_clip_model.safetensors")).unwrap();
    });
    let enc = MobileClipEncoder::load(tmp.path(), &Device::Cpu).unwrap();
    assert_dense_parity(&enc, &|t| enc.tokenize(t).unwrap(), "mobileclip.json");
}
