//! The dense baseline (`--objective dense`): InfoNCE against a hand computation, the training
//! forward against the exported directory loaded by lexlip-model, whole runs (the loss goes down,
//! the output is a dense-only model, resume is bitwise) and clear errors.

mod common;

use candle_core::{DType, Device, Tensor};
use lexlip_model::Encoders;
use lexlip_train::dense::DenseModel;
use lexlip_train::nn::{self, Dropout};
use lexlip_train::text::TextTokenizer;
use lexlip_train::{Objective, SaveDtype, TrainOptions, losses};

use common::{
    assert_near, copy_without, corpus, err_of, fast_options, forty_steps_lower_the_loss,
    max_abs_diff, random_images, resume_options, run_for, run_quietly, train_json,
    train_stopped_and_resumed,
};

/// `-log softmax` of row `i` at column `i` of `m / tau`, by hand in f64.
fn hand_ce(m: &[[f64; 3]; 3], tau: f64, i: usize) -> f64 {
    let lse = m[i].iter().map(|s| (s / tau).exp()).sum::<f64>().ln();
    lse - m[i][i] / tau
}

#[test]
fn info_nce_is_the_hand_computation() {
    let dev = Device::Cpu;
    // Similarities of 3 images (rows) with 3 texts (columns); image i is text i's pair.
    let s = [[0.9, 0.1, -0.3], [0.2, 0.4, 0.5], [-0.1, 0.7, 0.6]];
    let st = [
        [s[0][0], s[1][0], s[2][0]],
        [s[0][1], s[1][1], s[2][1]],
        [s[0][2], s[1][2], s[2][2]],
    ];
    // Images are the unit axes, so image i · text j = text j's i-th component = s[i][j].
    let image = Tensor::new(
        &[[1.0f64, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        &dev,
    )
    .unwrap();
    let text = Tensor::new(&st, &dev).unwrap();
    let tau = 0.07;
    let (loss, i2t, t2i) = losses::info_nce(&image, &text, tau).unwrap();
    let want_i2t = (0..3).map(|i| hand_ce(&s, tau, i)).sum::<f64>() / 3.0;
    let want_t2i = (0..3).map(|j| hand_ce(&st, tau, j)).sum::<f64>() / 3.0;
    let got = |t: &Tensor| t.to_scalar::<f64>().unwrap();
    assert_near(got(&i2t), want_i2t, 1e-12);
    assert_near(got(&t2i), want_t2i, 1e-12);
    assert_near(got(&loss), (want_i2t + want_t2i) / 2.0, 1e-12);
    // The two directions differ on this matrix: the test would catch a transposition.
    assert!((want_i2t - want_t2i).abs() > 1e-3);

    // Normalisation: rows of unit length, direction kept; a zero row stays finite.
    let x = Tensor::new(&[[3.0f64, 4.0], [0.0, 0.0]], &dev).unwrap();
    let n = nn::l2_normalize(&x).unwrap().to_vec2::<f64>().unwrap();
    assert_eq!(n, vec![vec![0.6, 0.8], vec![0.0, 0.0]]);
}

/// Each vector has unit length and is within 1e-4 of its expected row.
fn assert_unit_and_close(got: &[lexlip_proto::DenseVector], want: &[Vec<f32>], what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = max_abs_diff(g.as_slice(), w);
        assert!(d < 1e-4, "{what} {i}: max abs diff {d}");
        let norm = g.dot(g).sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{what} {i}: norm {norm}");
    }
    eprintln!("{what}: parity within 1e-4 over {} vectors", got.len());
}

/// The training forward of both towers equals `lexlip_model`'s encoder on the exported
/// directory (text: the real tiny SPLADE BERT; image: the tiny BEiT fixture, which has the inner
/// layer norm), batched and one by one.
#[test]
fn training_forward_equals_the_exported_encoder() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = Device::Cpu;
    let mut o = TrainOptions::new(tmp.path().join("out"));
    o.method.objective = Objective::Dense;
    o.method.dense_dim = 24;
    o.model.text_init = Some(common::splade_dir());
    o.model.image_init = Some(common::model_fixtures().join("beit-tiny"));
    o.data.max_length = 16;
    let init = lexlip_train::init::resolve(&o, tmp.path()).unwrap();
    let model = DenseModel::build(&init, o.method.dense_dim, 3, DType::F32, &dev).unwrap();
    // No MLM head was built: nothing under `cls.` in any store.
    for (group, store) in model.stores() {
        for (name, _) in lexlip_train::params::sorted_vars(store) {
            assert!(!name.starts_with("cls."), "{group}/{name}");
        }
    }
    let out = tmp.path().join("dense");
    std::fs::create_dir_all(&out).unwrap();
    lexlip_train::export::export_dense(&model, &out, SaveDtype::F32, o.data.max_length).unwrap();
    let enc = Encoders::load(&out, &dev).unwrap();
    assert!(!enc.has_text() && !enc.has_image() && enc.term_space().is_none());
    let dense = enc.dense().expect("a dense encoder");
    assert_eq!(dense.dim(), 24);

    let texts = [
        "a brown dog runs on the grass",
        "smiling face with heart-eyes",
        "red apple",
        "a very long caption that goes on and on past the sixteen tokens the model reads here",
    ];
    let tok = TextTokenizer::load(&init.tokenizer, o.data.max_length).unwrap();
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t).unwrap()).collect();
    let t = ids.iter().map(Vec::len).max().unwrap();
    assert_eq!(t, 16, "the long caption is truncated");
    let (mut flat, mut mask) = (Vec::new(), Vec::new());
    for row in &ids {
        flat.extend(row.iter().copied());
        flat.extend(std::iter::repeat_n(tok.pad, t - row.len()));
        mask.extend(std::iter::repeat_n(1u32, row.len()));
        mask.extend(std::iter::repeat_n(0u32, t - row.len()));
    }
    let ids_t = Tensor::from_vec(flat, (ids.len(), t), &dev).unwrap();
    let mask_t = Tensor::from_vec(mask, (ids.len(), t), &dev).unwrap();
    let want = model
        .embed_texts(&ids_t, &mask_t, &Dropout::off())
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let got = dense.encode_texts(&texts).unwrap();
    assert_unit_and_close(&got, &want, "text");
    for (i, g) in got.iter().enumerate() {
        let one = &dense.encode_texts(&texts[i..=i]).unwrap()[0];
        let d = max_abs_diff(one.as_slice(), g.as_slice());
        assert!(d < 1e-5, "text {i} alone differs from the batch by {d}");
    }

    let size = model.image.input_size();
    let images = random_images(3, size, 7);
    let pixels = common::pixels_of(&images, size, &dev);
    let want = model
        .embed_images(&pixels, &Dropout::off())
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let got = dense.encode_images(&images).unwrap();
    assert_unit_and_close(&got, &want, "image");
    // The directory also loads as the dense part of a LexLIP directory (`dense/`).
    let lexlip = tmp.path().join("with-dense");
    std::fs::create_dir_all(&lexlip).unwrap();
    std::fs::write(lexlip.join("lexlip.json"), r#"{"format": "lexlip"}"#).unwrap();
    std::fs::rename(&out, lexlip.join("dense")).unwrap();
    let enc = Encoders::load(&lexlip, &dev).unwrap();
    let again = enc.dense().unwrap().encode_images(&images).unwrap();
    assert_eq!(again, got);

    // A missing projection is an error that names it.
    let st = lexlip.join("dense/model.safetensors");
    let mut w = candle_core::safetensors::load(&st, &dev).unwrap();
    w.remove("visual_projection.weight").unwrap();
    candle_core::safetensors::save(&w, &st).unwrap();
    let e = Encoders::load(&lexlip, &dev).unwrap_err().to_string();
    assert!(e.contains("visual_projection.weight"), "{e}");
}

fn dense_options(tsv: &std::path::Path, out: &std::path::Path) -> TrainOptions {
    let mut o = fast_options(tsv, out);
    o.method.objective = Objective::Dense;
    o.method.dense_dim = 32;
    o
}

#[test]
fn a_few_dense_steps_lower_the_loss_and_the_model_loads() {
    let (tmp, tsv) = corpus();
    let out = tmp.path().join("model");
    let mut o = dense_options(&tsv, &out);
    let seen = forty_steps_lower_the_loss(&mut o);
    for l in &seen.logs {
        assert!(l.parts["i2t"].is_finite() && l.parts["t2i"].is_finite());
        assert!(l.nnz_image.is_none() && !l.parts.contains_key("baco"));
    }
    // The output directory is a dense-only model: a dual encoder at --dense-dim.
    assert!(!out.join("lexlip.json").exists());
    let enc = Encoders::load(&out, &Device::Cpu).unwrap();
    assert!(enc.text().is_err() && enc.image().is_err());
    let d = enc.dense().unwrap();
    assert_eq!(d.dim(), 32);
    let v = d.encode_texts(&["a red square"]).unwrap();
    assert_eq!(v[0].dim(), 32);
    let png = common::shape_png([220, 30, 30], "square", 24);
    let img = d.preprocess_image(&png, "red-square").unwrap();
    assert_eq!(img.size(), 16);
    let w = d.encode_images(&[img]).unwrap();
    assert!((w[0].dot(&w[0]) - 1.0).abs() < 1e-5);
    let meta = train_json(&out);
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["options"]["objective"], "dense");
    assert!(meta["init"]["image_head"].is_null());
    // Finished: a second start does nothing, and keeps the record of the training.
    let record = std::fs::read(out.join("train.json")).unwrap();
    let again = run_quietly(&o);
    assert!(again.already_complete);
    assert_eq!(std::fs::read(out.join("train.json")).unwrap(), record);
}

/// ConLIP's decoupled contrastive loss (`--dense-loss dcl`) trains the dense towers too.
#[test]
fn dcl_dense_steps_lower_the_loss() {
    let (tmp, tsv) = corpus();
    let mut o = dense_options(&tsv, &tmp.path().join("model"));
    o.method.dense_loss = lexlip_train::DenseLoss::Dcl;
    let seen = forty_steps_lower_the_loss(&mut o);
    assert!(seen.logs.iter().all(|l| l.parts.contains_key("dcl")));
    assert_eq!(train_json(&o.run.out)["options"]["dense_loss"], "dcl");
}

/// [`resume_options`] for the dense objective.
fn dense_resume_options(tsv: &std::path::Path, out: &std::path::Path) -> TrainOptions {
    let mut o = resume_options(tsv, out);
    o.method.objective = Objective::Dense;
    o.method.dense_dim = 32;
    o
}

/// [`dense_resume_options`] with ConLIP's MoCo and DCL (`--dense-momentum`, a queue of 16).
fn momentum_options(tsv: &std::path::Path, out: &std::path::Path) -> TrainOptions {
    let mut o = dense_resume_options(tsv, out);
    o.method.dense_momentum = true;
    o.method.dense_loss = lexlip_train::DenseLoss::Dcl;
    o.method.queue_size = 16;
    o
}

/// `o` moved to the LexLIP objective and InfoNCE, to check that dense-only options are refused.
fn as_lexlip(mut o: TrainOptions) -> TrainOptions {
    o.method.objective = Objective::Lexlip;
    o.method.dense_loss = lexlip_train::DenseLoss::Infonce;
    o
}

/// The tensors of the model exported into `dir`.
fn exported_tensors(dir: &std::path::Path) -> std::collections::HashMap<String, Tensor> {
    candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap()
}

/// Trains `base(tmp/whole)` in one go and `base(tmp/parts)` stopped after 3 steps and resumed:
/// the exported models are bitwise equal and the last checkpoint holds `tensors`. Returns the
/// whole run's summary, that checkpoint's state and its tensor names.
fn resumes_bitwise_holding(
    tmp: &std::path::Path,
    base: &dyn Fn(&std::path::Path) -> TrainOptions,
    tensors: &[&str],
) -> (
    lexlip_train::Summary,
    lexlip_train::checkpoint::State,
    Vec<String>,
) {
    let bytes = |dir: &std::path::Path| std::fs::read(dir.join("model.safetensors")).unwrap();
    let (whole, parts) = (tmp.join("whole"), tmp.join("parts"));
    let summary = run_quietly(&base(&whole));
    train_stopped_and_resumed(&base(&parts), 3, "config.json");
    assert_eq!(bytes(&whole), bytes(&parts));
    let (dir, state) = lexlip_train::checkpoint::latest(&parts).unwrap().unwrap();
    let names: Vec<String> = lexlip_train::checkpoint::tensors(&dir)
        .unwrap()
        .into_keys()
        .collect();
    for n in tensors {
        assert!(names.iter().any(|m| m == n), "{n} not in {names:?}");
    }
    (summary, state, names)
}

/// ConLIP's MoCo (`--dense-momentum`, here with DCL): the momentum copies and the queues are
/// checkpointed (a run stopped after 3 steps, when 24 keys have gone through the queue of 16
/// and it has wrapped, resumes bit for bit), and the exported model is the online one alone.
#[test]
fn dense_momentum_trains_and_resumes_bitwise() {
    let (tmp, tsv) = corpus();
    let base = |out: &std::path::Path| momentum_options(&tsv, out);
    let (s, state, _) = resumes_bitwise_holding(
        tmp.path(),
        &base,
        &[
            "momentum_projection/text_projection.weight",
            "queue/image",
            "queue/text",
        ],
    );
    assert!(s.last.as_ref().unwrap().parts.contains_key("dcl"));
    assert_eq!(state.queue_fill, 16);
    let exported = exported_tensors(&tmp.path().join("whole"));
    assert!(exported.keys().all(|k| !k.starts_with("momentum")));
    // And only with the dense objective.
    let lexlip = as_lexlip(base(&tmp.path().join("lexlip")));
    assert!(err_of(&lexlip).contains("give --objective dense"));
}

/// ConLIP's conditioned token-level heads (`--dense-token conditioned`, with DCL and MoCo as in
/// the paper): the steps report the MLM and MIM losses, the heads are checkpointed (a stopped run
/// resumes bit for bit: patch masks are drawn per step) and dropped at export.
#[test]
fn dense_token_heads_train_resume_bitwise_and_are_not_exported() {
    let (tmp, tsv) = corpus();
    let base = |out: &std::path::Path| {
        let mut o = momentum_options(&tsv, out);
        o.method.dense_token = lexlip_train::DenseToken::Conditioned;
        o
    };
    let (s, _, _) = resumes_bitwise_holding(
        tmp.path(),
        &base,
        &[
            "token_heads/mask_token",
            "token_heads/mim.weight",
            "token_heads/text.crossattention.self.key.weight",
        ],
    );
    let last = s.last.as_ref().unwrap();
    for part in ["dcl", "mlm", "mim"] {
        assert!(last.parts[part].is_finite(), "{part}: {:?}", last.parts);
    }
    let whole = tmp.path().join("whole");
    let exported = exported_tensors(&whole);
    assert!(
        exported
            .keys()
            .all(|k| !k.contains("crossattention") && !k.contains("mask_token")),
        "{:?}",
        exported.keys()
    );
    Encoders::load(&whole, &Device::Cpu)
        .unwrap()
        .dense()
        .unwrap();
    assert_eq!(train_json(&whole)["options"]["dense_token"], "conditioned");
    // Only with the dense objective, and a rate in range.
    let mut lexlip = as_lexlip(base(&tmp.path().join("lexlip")));
    lexlip.method.dense_momentum = false;
    assert!(
        err_of(&lexlip).contains("--dense-token"),
        "{}",
        err_of(&lexlip)
    );
    let mut o = base(&tmp.path().join("rate"));
    o.method.image_mask_rate = 0.0;
    assert!(err_of(&o).contains("--image-mask-rate"), "{}", err_of(&o));
}

/// N steps in one go and k steps, stop, resume to N give bitwise the same model (with dropout
/// and augmentation on).
#[test]
fn dense_resume_gives_bitwise_the_same_weights() {
    let (tmp, tsv) = corpus();
    let base = |out: &std::path::Path| dense_resume_options(&tsv, out);
    // Checkpoints hold the projections (and no decoders or heads).
    let (_, _, names) =
        resumes_bitwise_holding(tmp.path(), &base, &["projection/text_projection.weight"]);
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("decoder") || n.contains("/cls."))
    );
}

#[test]
fn dense_options_and_outputs_are_checked() {
    let (tmp, tsv) = corpus();
    let out = tmp.path().join("out");
    let mut o = dense_options(&tsv, &out);
    o.method.phase = 2;
    assert!(err_of(&o).contains("--phase 2"), "{}", err_of(&o));
    let mut o = dense_options(&tsv, &out);
    o.method.dense_dim = 0;
    assert!(err_of(&o).contains("--dense-dim"), "{}", err_of(&o));
    let mut o = dense_options(&tsv, &out);
    o.method.freeze_text = true;
    o.model.text_init = Some(common::splade_dir());
    o.model.tokenizer = None;
    let e = err_of(&o);
    assert!(e.contains("--freeze-text") && e.contains("dense"), "{e}");
    // A directory holding a LexLIP model is not overwritten by a dense one, and vice versa.
    type Options = fn(&std::path::Path, &std::path::Path) -> TrainOptions;
    let runs: [(&str, Options, Options, &str); 2] = [
        (
            "lexlip",
            fast_options,
            dense_options,
            "holds a LexLIP model",
        ),
        ("dense", dense_options, fast_options, "holds a dense model"),
    ];
    for (name, first, then, held) in runs {
        let dir = tmp.path().join(name);
        run_for(first(&tsv, &dir), 1);
        let e = err_of(&then(&tsv, &dir));
        assert!(e.contains(held), "{e}");
    }
    let dense = tmp.path().join("dense");
    // A dense model is not an initial model.
    let mut o = dense_options(&tsv, &out);
    o.model.init = Some(dense.clone());
    o.model.tokenizer = None;
    let e = err_of(&o);
    assert!(e.contains("cannot be trained"), "{e}");
    // The text tower may come without an MLM head for the dense objective.
    let no_head = tmp.path().join("bert-no-head");
    let files = ["config.json", "tokenizer.json"];
    copy_without(&common::splade_dir(), &no_head, &files, "cls.");
    let mut o = dense_options(&tsv, &tmp.path().join("from-bert"));
    o.model.text_init = Some(no_head);
    o.model.tokenizer = None;
    run_for(o, 1);
}
