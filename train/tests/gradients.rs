//! Every trainable parameter receives a non-zero gradient in both phases and under the dense
//! objective (AdamW would skip one without, silently), and gradients of the whole phase-1 /
//! phase-2 / dense loss match central finite differences on a tiny f64 model; so do COOKIE's
//! shared layers (`--shared-layers`), which take gradients from both towers.

use std::collections::BTreeSet;
use std::path::PathBuf;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor};
use lexlip_model::Vocabulary;
use lexlip_model::image::HeadConfig;
use lexlip_model::weight_sharing::SharedConfig;
use lexlip_train::bert::BertConfig;
use lexlip_train::dense::DenseModel;
use lexlip_train::init::{ImageInit, Init, SharedInit, TextInit, beit_config};
use lexlip_train::lexicon::Flops;
use lexlip_train::model::{Batch, LexLipModel, Objectives};
use lexlip_train::nn::Dropout;
use lexlip_train::optim::Param;
use lexlip_train::options::{DenseLoss, DenseToken, HeadInit};
use lexlip_train::rng::Rng;
use lexlip_train::token_heads::PatchMask;

const VOCAB: usize = 40;

fn tiny_init(head_init: HeadInit, image_hidden: usize) -> Init {
    let tokens: Vec<String> = (0..VOCAB).map(|i| format!("t{i}")).collect();
    Init {
        text: TextInit {
            config: BertConfig::sized(VOCAB, 16, 1, 2, 24),
            weights: None,
            untied: false,
            from: "random".into(),
            shared: None,
        },
        image: ImageInit {
            config: beit_config(image_hidden, 1, 2, 24, 16, 8),
            head: HeadConfig::default(),
            weights: None,
            has_head: false,
            mean: [0.5; 3],
            std: [0.5; 3],
            from: "random".into(),
        },
        tokenizer: PathBuf::from("unused"),
        vocab: Vocabulary::new("tiny", tokens),
        head_init,
        shared: None,
    }
}

/// [`tiny_init`] with one shared layer on top of two 16-wide towers.
fn tiny_init_shared() -> Init {
    let mut init = tiny_init(HeadInit::Auto, 16);
    init.shared = Some(SharedInit {
        config: SharedConfig {
            num_hidden_layers: 1,
            num_attention_heads: 2,
            intermediate_size: 24,
            hidden_act: candle_nn::Activation::Gelu,
            layer_norm_eps: 1e-12,
            layer_scale_init_value: 0.1,
        },
        pretrained: false,
    });
    init
}

/// A batch of 3 pairs, the last caption padded; masked positions never include [CLS] (0).
fn batch(dtype: DType, dev: &Device) -> Batch {
    let mut r = Rng::new(&[5]);
    let pixels: Vec<f32> = (0..3 * 3 * 16 * 16)
        .map(|_| r.uniform_f32() * 2.0 - 1.0)
        .collect();
    let ids: Vec<u32> = vec![1, 7, 9, 12, 2, 1, 5, 30, 8, 2, 1, 33, 2, 0, 0];
    let mask: Vec<u32> = vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0];
    let mut enc_ids = ids.clone();
    enc_ids[2] = 3;
    enc_ids[7] = 3;
    let mut dec_ids = ids.clone();
    for p in [1, 3, 6, 8, 11] {
        dec_ids[p] = 3;
    }
    let view: Vec<f32> = pixels.iter().map(|p| p * 0.8 + 0.05).collect();
    let t = |v: Vec<u32>| Tensor::from_vec(v.clone(), v.len(), dev).unwrap();
    let bt = |v: Vec<u32>| Tensor::from_vec(v, (3, 5), dev).unwrap();
    let image = |v: Vec<f32>| {
        Tensor::from_vec(v, (3, 3, 16, 16), dev)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    Batch {
        pixels: image(pixels),
        pixels_view: Some(image(view)),
        ids: bt(ids),
        mask: bt(mask),
        enc_ids: bt(enc_ids),
        enc_rows: t(vec![2, 7]),
        enc_targets: t(vec![9, 30]),
        dec_ids: bt(dec_ids),
        dec_rows: t(vec![1, 3, 6, 8, 11]),
        dec_targets: t(vec![7, 12, 5, 8, 33]),
        text_lexicon: None,
        patches: None,
    }
}

/// `batch` with image patches masked (16-px images of 8-px patches: a 2 × 2 grid): patches 1
/// and 2 of image 0, 3 of image 1, 0 of image 2.
fn batch_with_patches(dtype: DType, dev: &Device) -> Batch {
    let masked = [(0, 1), (0, 2), (1, 3), (2, 0)];
    let mut keep = vec![1f32; 3 * 4];
    for (i, k) in masked {
        keep[i * 4 + k] = 0.0;
    }
    let rows = |stride: usize, skip: usize| -> Tensor {
        let v: Vec<u32> = masked
            .iter()
            .map(|&(i, k)| (i * stride + skip + k) as u32)
            .collect();
        Tensor::new(v.as_slice(), dev).unwrap()
    };
    Batch {
        patches: Some(PatchMask {
            grid: 2,
            keep: Tensor::from_vec(keep, (3, 4), dev).unwrap(),
            rows: rows(4, 0),
            state_rows: rows(5, 1),
        }),
        ..batch(dtype, dev)
    }
}

/// With COOKIE's single-modal losses on, so their gradients are checked too (phase 1 and
/// dense; phase 2 has none). Not the ITC consistency: its targets are stop-gradients, so its
/// gradient is by design not the derivative of its value (it is checked against PyTorch's in
/// `losses_vs_torch.rs`).
const OBJ: Objectives = Objectives {
    tau: 0.5,
    flops: Flops::both(0.01),
    grounding: 0.0,
    image_top_k: 0,
    momentum: 0.9,
    consistency: 0.0,
    image_contrastive: 0.4,
    text_contrastive: 0.2,
    dense_loss: DenseLoss::Infonce,
    dense_token: DenseToken::None,
};

fn loss(model: &mut LexLipModel, phase: u8, b: &Batch) -> Tensor {
    let off = Dropout::off();
    if phase == 1 {
        model.phase1(b, &off, &OBJ).unwrap().total
    } else {
        model.phase2(b, &off, &OBJ).unwrap().0.total
    }
}

/// The loss of `phase` with dropout on: the training path.
fn training_loss(model: &mut LexLipModel, phase: u8, b: &Batch) -> Tensor {
    let drop = Dropout::new(0.1, Rng::new(&[3]));
    if phase == 1 {
        model.phase1(b, &drop, &OBJ).unwrap().total
    } else {
        model.phase2(b, &drop, &OBJ).unwrap().0.total
    }
}

/// Asserts that every parameter has a non-zero, finite gradient in `grads`; returns the groups
/// (`text`, `image`, …) the parameters belong to.
fn nonzero_gradients<'a>(params: &'a [Param], grads: &GradStore) -> BTreeSet<&'a str> {
    for p in params {
        let g = grads
            .get(p.var.as_tensor())
            .unwrap_or_else(|| panic!("{} has no gradient", p.name));
        let norm = g
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(norm > 0.0, "{} has a zero gradient", p.name);
        assert!(norm.is_finite(), "{} has a non-finite gradient", p.name);
    }
    params
        .iter()
        .filter_map(|p| p.name.split('/').next())
        .collect()
}

fn every_param_has_a_gradient(phase: u8, head: HeadInit, image_hidden: usize) {
    let dev = Device::Cpu;
    let queue = (phase == 2).then_some(6);
    let mut model = LexLipModel::build(
        &tiny_init(head, image_hidden),
        2,
        queue,
        1,
        DType::F32,
        &dev,
    )
    .unwrap();
    let b = batch(DType::F32, &dev);
    if phase == 2 {
        // A queue with entries, so the negatives path runs too.
        let l = model.phase2(&b, &Dropout::off(), &OBJ).unwrap();
        model.enqueue(&l.1, &l.2).unwrap();
    }
    let grads = training_loss(&mut model, phase, &b).backward().unwrap();
    let params = model.params(phase, 1.0);
    let expected = if phase == 1 { 4 } else { 2 };
    let groups = nonzero_gradients(&params, &grads);
    assert_eq!(groups.len(), expected, "{groups:?}");
    // Nothing else was differentiated into: the momentum encoders stay out of the graph.
    if let Some(m) = &model.momentum {
        for store in [&m.text_store, &m.image_store] {
            for (name, v) in lexlip_train::params::sorted_vars(store) {
                assert!(
                    grads.get(v.as_tensor()).is_none(),
                    "momentum {name} got a gradient"
                );
            }
        }
    }
}

#[test]
fn phase1_every_parameter_gets_a_gradient() {
    every_param_has_a_gradient(1, HeadInit::Auto, 24);
    every_param_has_a_gradient(1, HeadInit::Text, 16);
}

#[test]
fn phase2_every_parameter_gets_a_gradient() {
    every_param_has_a_gradient(2, HeadInit::Random, 24);
}

/// Analytic gradients of the full loss against central differences in f64.
fn finite_differences(phase: u8) {
    finite_differences_of(phase, &tiny_init(HeadInit::Auto, 24), false);
}

/// [`finite_differences`] of the model `init` builds; `frozen`: with `--freeze-text`.
fn finite_differences_of(phase: u8, init: &Init, frozen: bool) {
    let dev = Device::Cpu;
    let queue = (phase == 2).then_some(6);
    let mut model = LexLipModel::build(init, 2, queue, 7, DType::F64, &dev).unwrap();
    model.frozen_text = frozen;
    let b = batch(DType::F64, &dev);
    if phase == 2 {
        let l = model.phase2(&b, &Dropout::off(), &OBJ).unwrap();
        model.enqueue(&l.1, &l.2).unwrap();
        // The EMA moves the momentum encoders at each phase-2 call; make it a fixed point so the
        // loss is a function of the parameters alone.
    }
    let obj_m1 = Objectives {
        momentum: 1.0,
        ..OBJ
    };
    let eval = |model: &mut LexLipModel| -> Tensor {
        if phase == 1 {
            loss(model, 1, &b)
        } else {
            model.phase2(&b, &Dropout::off(), &obj_m1).unwrap().0.total
        }
    };
    let params = model.params(phase, 1.0);
    let worst = check_gradients(&params, &mut || eval(&mut model), &dev);
    eprintln!("phase {phase}: worst relative error {worst:.2e}");
}

/// Analytic gradients of `eval` (the loss, a function of `params`) against central differences
/// at two coordinates per parameter: its largest gradient and a random one. Returns the worst
/// relative error.
fn check_gradients(params: &[Param], eval: &mut dyn FnMut() -> Tensor, dev: &Device) -> f64 {
    let grads = eval().backward().unwrap();
    let mut r = Rng::new(&[11]);
    let mut checked = 0;
    let mut worst = 0f64;
    for p in params {
        let g = grads
            .get(p.var.as_tensor())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f64>()
            .unwrap();
        let base = p
            .var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f64>()
            .unwrap();
        // Two coordinates per parameter: the largest gradient and a random one.
        let largest = (0..g.len())
            .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
            .unwrap();
        for i in [largest, r.below(g.len())] {
            let h = 1e-6;
            let mut at = |d: f64| {
                let mut v = base.clone();
                v[i] += d;
                p.var
                    .set(&Tensor::from_vec(v, p.var.shape(), dev).unwrap())
                    .unwrap();
                eval().to_scalar::<f64>().unwrap()
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            at(0.0);
            let err = (fd - g[i]).abs() / (fd.abs().max(g[i].abs()).max(1e-4));
            worst = worst.max(err);
            assert!(
                err < 2e-3,
                "{}[{i}]: analytic {} vs finite difference {fd} (rel err {err})",
                p.name,
                g[i]
            );
            checked += 1;
        }
    }
    assert!(checked >= 2 * params.len());
    worst
}

#[test]
fn phase1_gradients_match_finite_differences() {
    finite_differences(1);
}

#[test]
fn phase2_gradients_match_finite_differences() {
    finite_differences(2);
}

/// Shared layers get a gradient in both phases, with the text tower trained or frozen (then
/// they are what trains on the text side), and from each tower on its own: both read the same
/// variables. Momentum copies stay out of the graph.
/// The lexicon recipe (issue 35) on: image lexicons cut to their top 8 of 40 terms, caption-word
/// grounding with an IDF, FLOPS weights per side, fixed vocabulary biases.
const RECIPE: Objectives = Objectives {
    flops: Flops {
        image: 0.05,
        text: 0.01,
    },
    grounding: 0.7,
    image_top_k: 8,
    ..OBJ
};

fn recipe_model(phase: u8, dtype: DType, dev: &Device) -> LexLipModel {
    let queue = (phase == 2).then_some(6);
    let init = tiny_init(HeadInit::Auto, 24);
    let mut model = LexLipModel::build(&init, 2, queue, 7, dtype, dev).unwrap();
    model.image_top_k = 8;
    model.fix_vocab_bias().unwrap();
    // Terms 0-3 play the special tokens (no grounding weight).
    let idf: Vec<f64> = (0..VOCAB)
        .map(|t| {
            if t < 4 {
                0.0
            } else {
                0.5 + (t % 5) as f64 * 0.3
            }
        })
        .collect();
    let idf = Tensor::from_vec(idf, VOCAB, dev).unwrap();
    model.idf = Some(idf.to_dtype(dtype).unwrap());
    model
}

#[test]
fn lexicon_recipe_gradients_match_finite_differences() {
    let dev = Device::Cpu;
    for phase in [1u8, 2] {
        let mut model = recipe_model(phase, DType::F64, &dev);
        let b = batch(DType::F64, &dev);
        let objectives = Objectives {
            momentum: 1.0,
            ..RECIPE
        };
        if phase == 2 {
            let l = model.phase2(&b, &Dropout::off(), &objectives).unwrap();
            model.enqueue(&l.1, &l.2).unwrap();
        }
        let step = |model: &mut LexLipModel| {
            if phase == 1 {
                model.phase1(&b, &Dropout::off(), &objectives).unwrap()
            } else {
                model.phase2(&b, &Dropout::off(), &objectives).unwrap().0
            }
        };
        let losses = step(&mut model);
        let names: Vec<&str> = losses.parts.iter().map(|(n, _)| *n).collect();
        assert!(names.contains(&"grounding"), "{names:?}");
        // Top-K pooling: no image lexicon keeps more than 8 terms.
        let nnz = losses.nnz_image.unwrap();
        assert!(nnz > 0.0 && nnz <= 8.0, "{nnz} terms per image");
        let params = model.params(phase, 1.0);
        assert!(
            params
                .iter()
                .all(|p| p.name != "text/cls.predictions.bias"
                    && p.name != "image/cls.predictions.bias"),
            "a fixed vocabulary bias is not trained (the decoders' own heads still train theirs)"
        );
        let worst = check_gradients(&params, &mut || step(&mut model).total, &dev);
        eprintln!("recipe, phase {phase}: worst relative error {worst:.2e}");
    }
}

#[test]
fn fixed_vocabulary_bias_stays_zero_in_the_image_head() {
    let dev = Device::Cpu;
    let model = recipe_model(1, DType::F32, &dev);
    let image = lexlip_train::params::sorted_vars(&model.image_store);
    let (_, bias) = image
        .iter()
        .find(|(n, _)| n == "cls.predictions.bias")
        .expect("the image head has a bias variable (exported as zeros)");
    let largest = bias.as_tensor().abs().unwrap().max_all().unwrap();
    assert_eq!(largest.to_scalar::<f32>().unwrap(), 0.0);
    // Every other parameter still trains, and gets a gradient.
    let b = batch(DType::F32, &dev);
    let total = model.phase1(&b, &Dropout::off(), &RECIPE).unwrap().total;
    let params = model.params(1, 1.0);
    let groups = nonzero_gradients(&params, &total.backward().unwrap());
    assert_eq!(groups.len(), 4, "{groups:?}");
}

#[test]
fn shared_layers_take_gradients_from_both_towers() {
    let dev = Device::Cpu;
    let b = batch(DType::F32, &dev);
    for phase in [1u8, 2] {
        for frozen in [false, true] {
            let queue = (phase == 2).then_some(6);
            let mut model =
                LexLipModel::build(&tiny_init_shared(), 2, queue, 1, DType::F32, &dev).unwrap();
            model.frozen_text = frozen;
            let grads = training_loss(&mut model, phase, &b).backward().unwrap();
            let params = model.params(phase, 1.0);
            let groups = nonzero_gradients(&params, &grads);
            let want: BTreeSet<&str> = match (phase, frozen) {
                (1, false) => ["text", "image", "decoder_image", "decoder_text", "shared"].into(),
                (1, true) => ["image", "decoder_image", "shared"].into(),
                (_, false) => ["text", "image", "shared"].into(),
                (_, true) => ["image", "shared"].into(),
            };
            assert_eq!(groups, want, "phase {phase}, frozen {frozen}");
            if let Some(m) = &model.momentum {
                for store in [&m.text_store, &m.image_store, &m.shared_store] {
                    for (name, v) in lexlip_train::params::sorted_vars(store) {
                        assert!(grads.get(v.as_tensor()).is_none(), "momentum {name}");
                    }
                }
            }
        }
    }
    let model = LexLipModel::build(&tiny_init_shared(), 2, None, 1, DType::F32, &dev).unwrap();
    let off = Dropout::off();
    let image =
        lexlip_train::losses::splade(&model.image.logits(&b.pixels, &off).unwrap(), None).unwrap();
    let text = lexlip_train::losses::splade(
        &model.text.logits(&b.ids, &b.mask, &off).unwrap(),
        Some(&b.mask),
    )
    .unwrap();
    let shared = lexlip_train::params::sorted_vars(&model.shared_store);
    assert_eq!(shared.len(), 17, "one BEiT layer without position bias");
    for side in [image, text] {
        let grads = side.sum_all().unwrap().backward().unwrap();
        for (name, v) in &shared {
            let g = grads.get(v.as_tensor());
            let norm = g.map(|g| {
                g.sqr()
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap()
            });
            assert!(
                norm.is_some_and(|n| n > 0.0),
                "{name} got no gradient from one side"
            );
        }
    }
}

#[test]
fn shared_layers_gradients_match_finite_differences() {
    for phase in [1, 2] {
        finite_differences_of(phase, &tiny_init_shared(), false);
        finite_differences_of(phase, &tiny_init_shared(), true);
    }
}

/// The dense model over [`tiny_init`] (projection to 8), seeded with `seed`.
fn dense_model(seed: u64, dtype: DType, dev: &Device) -> DenseModel {
    DenseModel::build(&tiny_init(HeadInit::Auto, 24), 8, seed, dtype, dev).unwrap()
}

/// [`check_gradients`] of the dense step's total loss under `objectives`, dropout off.
fn check_dense_gradients(
    model: &DenseModel,
    b: &Batch,
    objectives: &Objectives,
    dev: &Device,
) -> f64 {
    let params = model.params(1.0);
    check_gradients(
        &params,
        &mut || model.step(b, &Dropout::off(), objectives).unwrap().0.total,
        dev,
    )
}

#[test]
fn dense_every_parameter_gets_a_gradient() {
    let dev = Device::Cpu;
    let model = dense_model(1, DType::F32, &dev);
    let b = batch(DType::F32, &dev);
    let drop = Dropout::new(0.1, Rng::new(&[3]));
    let grads = model
        .step(&b, &drop, &OBJ)
        .unwrap()
        .0
        .total
        .backward()
        .unwrap();
    let params = model.params(1.0);
    let groups = nonzero_gradients(&params, &grads);
    assert_eq!(
        groups.into_iter().collect::<Vec<_>>(),
        ["image", "projection", "text"]
    );
    assert!(
        params.iter().all(|p| !p.name.contains("/cls.")),
        "no MLM head"
    );
}

#[test]
fn dense_gradients_match_finite_differences() {
    let dev = Device::Cpu;
    let model = dense_model(7, DType::F64, &dev);
    let b = batch(DType::F64, &dev);
    for loss in [DenseLoss::Infonce, DenseLoss::Dcl] {
        let objectives = Objectives {
            dense_loss: loss,
            ..OBJ
        };
        let worst = check_dense_gradients(&model, &b, &objectives, &dev);
        eprintln!("dense ({loss:?}): worst relative error {worst:.2e}");
    }
}

/// ConLIP's MoCo (`--dense-momentum`): against the momentum keys and a half-filled queue, with
/// InfoNCE and DCL. The EMA is made a fixed point (momentum 1) so the loss is a function of the
/// online parameters alone; only they get gradients, and the step returns keys to queue.
#[test]
fn dense_momentum_gradients_match_finite_differences() {
    let dev = Device::Cpu;
    let mut model = dense_model(9, DType::F64, &dev)
        .with_momentum(6, DType::F64)
        .unwrap();
    let mut r = Rng::new(&[4]);
    let mut keys = || {
        let v: Vec<f64> = (0..3 * 8).map(|_| r.normal()).collect();
        Tensor::from_vec(v, (3, 8), &dev).unwrap()
    };
    let (ki, kt) = (keys(), keys());
    model.enqueue(&ki, &kt).unwrap();
    let b = batch(DType::F64, &dev);
    let params = model.params(1.0);
    assert!(params.iter().all(|p| !p.name.starts_with("momentum")));
    for loss in [DenseLoss::Infonce, DenseLoss::Dcl] {
        let objectives = Objectives {
            dense_loss: loss,
            momentum: 1.0,
            ..OBJ
        };
        let (_, queued) = model.step(&b, &Dropout::off(), &objectives).unwrap();
        let (key_image, key_text) = queued.expect("keys to queue");
        assert_eq!(
            (key_image.dims(), key_text.dims()),
            (&[3, 8][..], &[3, 8][..])
        );
        let worst = check_dense_gradients(&model, &b, &objectives, &dev);
        eprintln!("dense momentum ({loss:?}): worst relative error {worst:.2e}");
    }
}

/// ConLIP's token-level heads (`--dense-token`), with towers of different widths (text 16,
/// image 24) so the cross-attention reads another width: every parameter, the heads' included,
/// gets a gradient, and gradients match finite differences, for both variants.
#[test]
fn dense_token_heads_gradients() {
    let dev = Device::Cpu;
    for token in [DenseToken::Vanilla, DenseToken::Conditioned] {
        let objectives = Objectives {
            dense_token: token,
            dense_loss: DenseLoss::Dcl,
            ..OBJ
        };
        let model = dense_model(1, DType::F32, &dev)
            .with_token_heads(1, DType::F32)
            .unwrap();
        let b = batch_with_patches(DType::F32, &dev);
        let drop = Dropout::new(0.1, Rng::new(&[3]));
        let (losses, _) = model.step(&b, &drop, &objectives).unwrap();
        let names: Vec<&str> = losses.parts.iter().map(|(n, _)| *n).collect();
        assert!(
            names.contains(&"mlm") && names.contains(&"mim"),
            "{names:?}"
        );
        let grads = losses.total.backward().unwrap();
        let params = model.params(1.0);
        let groups = nonzero_gradients(&params, &grads);
        assert_eq!(
            groups.into_iter().collect::<Vec<_>>(),
            ["image", "projection", "text", "token_heads"]
        );

        let model = dense_model(7, DType::F64, &dev)
            .with_token_heads(7, DType::F64)
            .unwrap();
        let b = batch_with_patches(DType::F64, &dev);
        let worst = check_dense_gradients(&model, &b, &objectives, &dev);
        eprintln!("dense token heads ({token:?}): worst relative error {worst:.2e}");
    }
}
