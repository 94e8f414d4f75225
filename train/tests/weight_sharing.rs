//! COOKIE's weight-sharing layers (`--shared-layers`): the exported model encodes what the
//! training towers compute (both tower directories carry the same layers, and the layers change
//! the output), runs resume bit for bit in both phases, a model trained with them starts the
//! next run with them (a frozen text tower stays bit for bit while they train), and bad
//! combinations are refused. Their gradients: `gradients.rs`.

mod common;

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use lexlip_model::{ImageEncoder, TextEncoder};
use lexlip_train::model::LexLipModel;
use lexlip_train::nn::Dropout;
use lexlip_train::{Objective, Preset, TrainOptions};

use common::*;

fn shared_options(tsv: &Path, out: &Path) -> TrainOptions {
    let mut o = resume_options(tsv, out);
    o.method.shared_layers = Some(1);
    o
}

fn tensors(path: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(path, &Device::Cpu).unwrap()
}

fn shared_of(dir: &Path, tower: &str) -> Vec<(String, Vec<f32>)> {
    let mut out: Vec<(String, Vec<f32>)> = tensors(&dir.join(tower).join("model.safetensors"))
        .into_iter()
        .filter(|(k, _)| k.starts_with("lexlip_shared."))
        .map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn the_exported_model_encodes_what_the_training_towers_compute() {
    let (tmp, tsv) = corpus();
    let out = tmp.path().join("model");
    let s = run_quietly(&shared_options(&tsv, &out));
    assert_eq!(s.steps_done, 6);
    let record = train_json(&out);
    assert_eq!(record["init"]["shared_layers"]["layers"], 1);
    assert_eq!(record["init"]["shared_layers"]["from"], "random");
    // Both towers carry the same shared layers, declared in their config.json.
    let text_shared = shared_of(&out, "text");
    assert_eq!(text_shared.len(), 17, "one layer: 17 tensors");
    assert_eq!(text_shared, shared_of(&out, "image"));
    for tower in ["text", "image"] {
        let cfg: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(tower).join("config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(cfg["lexlip_shared"]["num_hidden_layers"], 1, "{tower}");
    }

    // The training towers, initialised from the exported model, give the inference logits.
    let mut o = shared_options(&tsv, &tmp.path().join("again"));
    o.model.init = Some(out.clone());
    o.method.shared_layers = None;
    o.model.tokenizer = None;
    o.model.image_size = None;
    o.model.patch_size = None;
    let init = lexlip_train::init::resolve(&o, &tmp.path().join("scratch")).unwrap();
    assert!(init.shared.as_ref().is_some_and(|s| s.pretrained));
    let dev = Device::Cpu;
    let model = LexLipModel::build(&init, 2, None, 0, DType::F32, &dev).unwrap();
    let text = TextEncoder::load(&out.join("text"), &dev).unwrap();
    let texts = [
        "a red circle",
        "square in blue",
        "a green triangle drawn large",
    ];
    assert_text_logits_close(&text, &texts, 1e-3, &|ids, mask| {
        model.text.logits(ids, mask, &Dropout::off()).unwrap()
    });

    let image = ImageEncoder::load_with_dtype(&out.join("image"), &dev, DType::F32).unwrap();
    let images = random_images(3, 16, 9);
    let want = image.logits(&images).unwrap();
    let got = model
        .image
        .logits(&pixels_of(&images, 16, &dev), &Dropout::off())
        .unwrap();
    assert_rows_close(&got, &want, &[want.dim(1).unwrap(); 3], 1e-3, "image");

    // The layers count: without them the same tower gives other logits.
    let bare = tmp.path().join("bare-text");
    std::fs::create_dir_all(&bare).unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(out.join("text").join(f), bare.join(f)).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("text/config.json")).unwrap())
            .unwrap();
    cfg.as_object_mut().unwrap().remove("lexlip_shared");
    std::fs::write(bare.join("config.json"), cfg.to_string()).unwrap();
    let (without, _) = TextEncoder::load(&bare, &dev)
        .unwrap()
        .logits(&texts)
        .unwrap();
    let (with, _) = text.logits(&texts).unwrap();
    let d = max_abs_diff(
        &with.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        &without.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
    );
    assert!(d > 1e-3, "the shared layer changed nothing ({d})");
}

#[test]
fn shared_runs_resume_bitwise_and_the_next_run_keeps_the_layers() {
    let (tmp, tsv) = corpus();
    let whole = tmp.path().join("whole");
    run_quietly(&shared_options(&tsv, &whole));
    let parts = tmp.path().join("parts");
    train_stopped_and_resumed(&shared_options(&tsv, &parts), 3, "lexlip.json");
    assert_eq!(model_bytes(&whole), model_bytes(&parts));

    // Phase 2 from that model with its text tower frozen: the shared layers come along
    // (no option needed), keep training, and resume with their momentum copy.
    let p2 = |out: &Path| {
        let mut o = resume_options(&tsv, out);
        o.method.phase = 2;
        o.model.init = Some(whole.clone());
        o.method.freeze_text = true;
        o.model.tokenizer = None;
        o.model.image_size = None;
        o.model.patch_size = None;
        o.method.queue_size = 16;
        o
    };
    let whole2 = tmp.path().join("whole2");
    let (_, seen) = run_collecting(&p2(&whole2));
    assert!(
        !seen.messages.iter().any(|m| m.contains("encoding the")),
        "a text lexicon that trains is not cached"
    );
    let parts2 = tmp.path().join("parts2");
    train_stopped_and_resumed(&p2(&parts2), 4, "lexlip.json");
    assert_eq!(model_bytes(&whole2), model_bytes(&parts2));
    let before = tensors(&whole.join("text/model.safetensors"));
    let after = tensors(&whole2.join("text/model.safetensors"));
    let (mut same, mut moved) = (0, 0);
    for (name, t) in &after {
        let a = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = before[name]
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        if name.starts_with("lexlip_shared.") {
            moved += usize::from(a != b);
        } else {
            assert_eq!(a, b, "{name}: the frozen text tower changed");
            same += 1;
        }
    }
    assert!(
        same > 20 && moved > 0,
        "{same} tower tensors, {moved} shared ones moved"
    );
}

#[test]
fn bad_shared_layer_options_are_refused() {
    let (tmp, tsv) = corpus();
    let mut o = shared_options(&tsv, &tmp.path().join("dense"));
    o.method.objective = Objective::Dense;
    assert!(err_of(&o).contains("--shared-layers"), "{}", err_of(&o));
    let mut o = shared_options(&tsv, &tmp.path().join("widths"));
    o.model.image_config = Preset::Small;
    let e = err_of(&o);
    assert!(e.contains("one width (text 128, image 256)"), "{e}");

    let first = tmp.path().join("first");
    run_for(shared_options(&tsv, &first), 2);
    let mut o = shared_options(&tsv, &tmp.path().join("more"));
    o.model.init = Some(first);
    o.model.tokenizer = None;
    o.model.image_size = None;
    o.model.patch_size = None;
    o.method.shared_layers = Some(2);
    let e = err_of(&o);
    assert!(e.contains("has 1 shared layers"), "{e}");
    assert!(!tmp.path().join("more/lexlip.json").exists());
}
