//! The adapter (`--objective adapter`): a pretrained image tower projected beside a tiny dense
//! teacher. The exported fused model encodes as its parts do, taken one by one (teacher,
//! MobileNetV2, the projection computed by hand); texts stay the teacher's; a batch equals its
//! images one by one; a stopped run resumes bitwise (grouped batches too); heads train over the
//! fused model; the loss equals a plain computation and its gradient finite differences; bad
//! options are refused.

mod common;

use std::path::Path;

use candle_core::{D, Device, Tensor};
use lexlip_model::mobilenet_v2::MobileNetV2;
use lexlip_model::{Encoders, Weights};
use lexlip_train::losses::in_batch;
use lexlip_train::objectives::adapter::masked_info_nce;
use lexlip_train::sampler::Sampler;
use lexlip_train::{Objective, TrainOptions};

use common::{assert_near, err_of, fast_options, run_collecting, run_for, run_quietly, train_json};

fn adapter_options(tsv: &Path, teacher: &Path, out: &Path) -> TrainOptions {
    let mut o = fast_options(tsv, out);
    o.model.tokenizer = None;
    o.method.objective = Objective::Adapter;
    o.model.backbone = Some(teacher.to_path_buf());
    o.model.image_backbone = Some(common::mobilenet_dir());
    o.optim.steps = Some(8);
    o.run.checkpoint_every = 3;
    o
}

/// One preprocessed image as a `(1, 3, size, size)` pixel tensor (what [`by_hand`] reads).
fn pixels(img: &lexlip_model::PreprocessedImage, dev: &Device) -> Tensor {
    common::pixels_of(std::slice::from_ref(img), img.size(), dev)
}

/// The fused model's image embedding computed from its parts' files, step by step.
fn by_hand(fused: &Path, pixels: &Tensor) -> Vec<f32> {
    let dev = Device::Cpu;
    let teacher = Encoders::load(&fused.join("teacher"), &dev).unwrap();
    let teacher = teacher.dense().unwrap();
    let t = teacher.image_features(pixels).unwrap();
    let t = t
        .broadcast_div(&t.sqr().unwrap().sum_keepdim(1).unwrap().sqrt().unwrap())
        .unwrap();
    // The teacher's pixels back to [0, 1] (its mean and deviation are BEiT's 0.5), then
    // ImageNet's normalisation, at the side in the model's config.json.
    let p = teacher.image_processor();
    let (_, _, s, _) = pixels.dims4().unwrap();
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fused.join("config.json")).unwrap()).unwrap();
    let side = config["backbone_size"].as_u64().unwrap() as usize;
    let mut x = Vec::new();
    for (c, plane) in pixels
        .squeeze(0)
        .unwrap()
        .to_vec3::<f32>()
        .unwrap()
        .iter()
        .enumerate()
    {
        let (m, sd) = ([0.485f32, 0.456, 0.406][c], [0.229f32, 0.224, 0.225][c]);
        for row in plane {
            for v in row {
                x.push((v * p.std[c] + p.mean[c] - m) / sd);
            }
        }
    }
    let x = Tensor::from_vec(x, (1, 3, s, s), &dev)
        .unwrap()
        .upsample_bilinear2d(side, side, false)
        .unwrap();
    let tower = Weights::from_safetensors_dir(&fused.join("image-backbone")).unwrap();
    let f = MobileNetV2::load(&tower, "", &dev)
        .unwrap()
        .forward(&x)
        .unwrap();
    let input: Vec<f32> = [t.flatten_all().unwrap(), f.flatten_all().unwrap()]
        .iter()
        .flat_map(|v| v.to_vec1::<f32>().unwrap())
        .collect();
    let w = Weights::from_safetensors_dir(&fused.join("adapter")).unwrap();
    let get = |n: &str| -> Vec<f32> {
        w.get(n)
            .unwrap()
            .to_dtype(candle_core::DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let (mean, std) = (get("input.mean"), get("input.std"));
    let z: Vec<f32> = input
        .iter()
        .zip(mean.iter().zip(&std))
        .map(|(v, (m, s))| (v - m) / s)
        .collect();
    let dense = |x: &[f32], name: &str, gelu: bool| -> Vec<f32> {
        let (w, b) = (get(&format!("{name}.weight")), get(&format!("{name}.bias")));
        b.iter()
            .enumerate()
            .map(|(o, b)| {
                let y = b + x
                    .iter()
                    .zip(&w[o * x.len()..(o + 1) * x.len()])
                    .map(|(a, w)| a * w)
                    .sum::<f32>();
                if gelu {
                    let y = y as f64;
                    (0.5 * y * (1.0 + libm_erf(y / std::f64::consts::SQRT_2))) as f32
                } else {
                    y
                }
            })
            .collect()
    };
    let v = dense(&dense(&z, "fc1", true), "fc2", false);
    let norm = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.iter().map(|a| a / norm).collect()
}

/// erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7), for the hand-computed GELU.
fn libm_erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    if x >= 0.0 { y } else { -y }
}

#[test]
fn the_adapter_trains_and_exports_a_fused_model_that_encodes_as_its_parts() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let out = tmp.path().join("fused");
    let (s, seen) = run_collecting(&adapter_options(&tsv, &dense, &out));
    assert_eq!((s.steps_done, s.pairs, s.images), (8, 32, 16));
    for l in &seen.logs {
        assert!(l.parts["i2t"].is_finite() && l.parts["t2i"].is_finite());
    }
    assert_eq!(train_json(&out)["options"]["objective"], "adapter");

    // Every lexlip loader reads it as a dense model; texts are the teacher's.
    let dev = Device::Cpu;
    let model = Encoders::load(&out, &dev).unwrap();
    let fused = model.dense().unwrap();
    let teacher = Encoders::load(&dense, &dev).unwrap();
    let teacher = teacher.dense().unwrap();
    assert_eq!(fused.dim(), teacher.dim());
    let t = ["a red disc", "bar in blue"];
    let (a, b) = (
        fused.encode_texts(&t).unwrap(),
        teacher.encode_texts(&t).unwrap(),
    );
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.as_slice(), y.as_slice());
    }
    // An image: as its parts compute it, and batched as alone.
    let images: Vec<_> = [([220, 30, 30], "disc"), ([30, 30, 220], "bar")]
        .iter()
        .map(|(c, s)| {
            fused
                .preprocess_image(&common::shape_png(*c, s, 30), s)
                .unwrap()
        })
        .collect();
    let batched = fused.encode_images(&images).unwrap();
    for (i, img) in images.iter().enumerate() {
        let want = by_hand(&out, &pixels(img, &dev));
        let one = fused.encode_images(std::slice::from_ref(img)).unwrap();
        let diff = common::max_abs_diff(one[0].as_slice(), &want);
        assert!(diff < 1e-4, "image {i}: by hand {diff} away");
        let diff = common::max_abs_diff(one[0].as_slice(), batched[i].as_slice());
        assert!(diff < 1e-5, "image {i}: batched {diff} away");
    }

    // Stopped at step 3 and resumed equals the uninterrupted run.
    let parts = tmp.path().join("parts");
    let mut p = adapter_options(&tsv, &dense, &parts);
    p.model.cache = Some(out.join("cache"));
    common::train_stopped_and_resumed(&p, 3, "config.json");
    assert_eq!(
        std::fs::read(parts.join("adapter/model.safetensors")).unwrap(),
        std::fs::read(out.join("adapter/model.safetensors")).unwrap()
    );

    // Lexicon heads train over it as over any dense model, and their model loads.
    let heads = tmp.path().join("heads");
    let mut h = fast_options(&tsv, &heads);
    h.model.tokenizer = None;
    h.method.objective = Objective::Heads;
    h.model.backbone = Some(out.clone());
    h.lexicon.image_top_k = 8;
    h.lexicon.text_top_k = 4;
    run_for(h, 3);
    let m = Encoders::load(&heads, &dev).unwrap();
    let image = m.image().unwrap();
    let lexicons = image.encode(&images).unwrap();
    assert!(lexicons.iter().all(|v| v.len() <= 8));
    let dense_of_heads = m.dense().unwrap().encode_images(&images).unwrap();
    for (x, y) in dense_of_heads.iter().zip(&batched) {
        assert!(common::max_abs_diff(x.as_slice(), y.as_slice()) < 1e-5);
    }
}

/// `--image-backbone-size` sets the side the tower reads, in training and in the exported model.
#[test]
fn the_tower_reads_the_side_it_was_trained_at() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let out = tmp.path().join("fused");
    let mut o = adapter_options(&tsv, &dense, &out);
    o.model.image_backbone_size = Some(96);
    run_for(o, 2);
    assert_eq!(train_json(&out)["options"]["image_backbone_size"], 96);
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["backbone_size"], 96);
    let dev = Device::Cpu;
    let model = Encoders::load(&out, &dev).unwrap();
    let fused = model.dense().unwrap();
    let img = fused
        .preprocess_image(&common::shape_png([30, 200, 30], "disc", 30), "disc")
        .unwrap();
    let one = fused.encode_images(std::slice::from_ref(&img)).unwrap();
    let diff = common::max_abs_diff(one[0].as_slice(), &by_hand(&out, &pixels(&img, &dev)));
    assert!(diff < 1e-4, "by hand {diff} away");
}

/// `--image-views`: with augmentation off, every view equals its picture's own row; with it
/// on, views differ from the pictures and are the same on every build; a run trains over each
/// pair once per input (the picture and each view).
#[test]
fn augmented_views_are_cached_beside_the_pictures() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let shard = |out: &Path, section: &str| {
        let dir = if section == "views" {
            common::views_dir(&out.join("cache"))
        } else {
            out.join("cache").join(section)
        };
        std::fs::read(dir.join(format!("{section}-00000.f32"))).unwrap()
    };
    let run = |name: &str, views: usize, identity: bool| {
        let out = tmp.path().join(name);
        let mut o = adapter_options(&tsv, &dense, &out);
        common::with_views(&mut o, views, identity);
        (out, run_for(o, 2))
    };
    let (plain, s) = run("plain", 2, true);
    assert_eq!((s.pairs, s.images), (32 * 3, 16));
    let images = shard(&plain, "images");
    assert_eq!(shard(&plain, "views"), [images.clone(), images].concat());
    assert_eq!(train_json(&plain)["options"]["image_views"], 2);

    let (a, _) = run("a", 1, false);
    let (b, _) = run("b", 1, false);
    let (images, views) = (shard(&a, "images"), shard(&a, "views"));
    assert_eq!(images.len(), views.len());
    assert_ne!(images, views, "the views are augmented");
    assert_eq!(views, shard(&b, "views"), "the same views on every build");
}

/// `--sampler grouped`: the teacher's embeddings group every epoch's pairs and views (hard
/// negatives for the projection), which changes the run; a run stopped in its second epoch
/// resumes to the same bytes.
#[test]
fn grouped_batches_over_views_change_the_run_and_resume_bitwise() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let cache = tmp.path().join("cache");
    let options = |name: &str, sampler: Sampler| {
        let mut o = adapter_options(&tsv, &dense, &tmp.path().join(name));
        common::with_views(&mut o, 1, false);
        o.model.cache = Some(cache.clone());
        o.optim.sampler = sampler;
        o.optim.group_size = 16;
        o.optim.steps = Some(10);
        o
    };
    let weights = |name: &str| {
        std::fs::read(tmp.path().join(name).join("adapter/model.safetensors")).unwrap()
    };
    let s = run_quietly(&options("grouped", Sampler::Grouped));
    assert_eq!((s.steps_done, s.pairs), (10, 32 * 2));
    run_quietly(&options("random", Sampler::Random));
    assert_ne!(
        weights("grouped"),
        weights("random"),
        "grouping changed no batch"
    );
    assert_eq!(
        train_json(&tmp.path().join("grouped"))["options"]["sampler"],
        "grouped"
    );
    common::train_stopped_and_resumed(&options("parts", Sampler::Grouped), 9, "config.json");
    assert_eq!(weights("parts"), weights("grouped"));
}

/// With every picture apart the loss is CLIP's in-batch InfoNCE; with two captions of one
/// picture, each leaves the other out of its negatives.
#[test]
fn the_masked_loss_equals_a_plain_computation() {
    let dev = Device::Cpu;
    let unit = |t: Tensor| {
        t.broadcast_div(
            &t.sqr()
                .unwrap()
                .sum_keepdim(D::Minus1)
                .unwrap()
                .sqrt()
                .unwrap(),
        )
        .unwrap()
    };
    let v = unit(Tensor::randn(0f32, 1.0, (4, 6), &dev).unwrap());
    let t = unit(Tensor::randn(0f32, 1.0, (4, 6), &dev).unwrap());
    let tau = 0.1;
    let (loss, i2t, t2i) = masked_info_nce(&v, &t, &[0, 1, 2, 3], tau).unwrap();
    let (want_i2t, want_t2i) = in_batch(&v, &t, tau).unwrap();
    let s = |x: &Tensor| x.to_scalar::<f32>().unwrap() as f64;
    assert_near(s(&i2t), s(&want_i2t), 1e-5);
    assert_near(s(&t2i), s(&want_t2i), 1e-5);
    assert_near(s(&loss), (s(&want_i2t) + s(&want_t2i)) / 2.0, 1e-5);
    // Pairs 0 and 1 show one picture.
    let images = [7, 7, 8, 9];
    let (_, i2t, t2i) = masked_info_nce(&v, &t, &images, tau).unwrap();
    let sim = v.matmul(&t.t().unwrap()).unwrap().to_vec2::<f32>().unwrap();
    let ce = |row: &dyn Fn(usize) -> f64, i: usize| -> f64 {
        let logits: Vec<f64> = (0..4)
            .filter(|&j| j == i || images[j] != images[i])
            .map(|j| row(j) / tau)
            .collect();
        let max = logits.iter().cloned().fold(f64::MIN, f64::max);
        let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
        lse - row(i) / tau
    };
    let want_i2t = (0..4).map(|i| ce(&|j| sim[i][j] as f64, i)).sum::<f64>() / 4.0;
    let want_t2i = (0..4).map(|i| ce(&|j| sim[j][i] as f64, i)).sum::<f64>() / 4.0;
    assert_near(s(&i2t), want_i2t, 1e-4);
    assert_near(s(&t2i), want_t2i, 1e-4);
}

#[test]
fn adapter_options_are_checked() {
    let (tmp, tsv) = common::corpus();
    let out = tmp.path().join("out");
    let mut o = adapter_options(&tsv, tmp.path(), &out);
    o.model.image_backbone = None;
    assert!(err_of(&o).contains("--image-backbone"), "{}", err_of(&o));
    let mut o = fast_options(&tsv, &out);
    o.model.image_backbone = Some(common::mobilenet_dir());
    assert!(err_of(&o).contains("--objective adapter"), "{}", err_of(&o));
    let mut o = fast_options(&tsv, &out);
    o.model.image_backbone_size = Some(128);
    assert!(err_of(&o).contains("--objective adapter"), "{}", err_of(&o));
    let mut o = fast_options(&tsv, &out);
    o.model.image_views = 2;
    assert!(err_of(&o).contains("--objective adapter"), "{}", err_of(&o));
    let mut o = adapter_options(&tsv, tmp.path(), &out);
    o.model.image_views = 17;
    assert!(err_of(&o).contains("--image-views"), "{}", err_of(&o));
    for bad in [0, 16, 4096] {
        let mut o = adapter_options(&tsv, tmp.path(), &out);
        o.model.image_backbone_size = Some(bad);
        assert!(
            err_of(&o).contains("--image-backbone-size"),
            "{}",
            err_of(&o)
        );
    }
    // A teacher that is no dense dual encoder (the tiny SPLADE text model).
    let o = adapter_options(&tsv, &common::splade_dir(), &out);
    assert!(err_of(&o).contains("dense dual encoder"), "{}", err_of(&o));
    assert!(!out.join("config.json").exists(), "nothing exported");
}

/// The gradient of the whole step (projection, normalisation, masked loss) with respect to the
/// projection's weights matches central finite differences, in f64.
#[test]
fn the_adapter_gradient_matches_finite_differences() {
    use candle_core::{DType, Var};
    use lexlip_model::fused::Adapter;
    use lexlip_model::nn::Linear;
    let dev = Device::Cpu;
    let seeded = |shape: (usize, usize), seed: u64| -> Tensor {
        let mut rng = lexlip_train::rng::Rng::new(&[seed]);
        let v: Vec<f64> = (0..shape.0 * shape.1).map(|_| rng.normal() * 0.5).collect();
        Tensor::from_vec(v, shape, &dev).unwrap()
    };
    let (inputs, hidden, dim, batch) = (5, 4, 3, 4);
    let x = seeded((batch, inputs), 1);
    let t = seeded((batch, dim), 2);
    let t = t
        .broadcast_div(&t.sqr().unwrap().sum_keepdim(1).unwrap().sqrt().unwrap())
        .unwrap();
    let images = [0usize, 0, 1, 2];
    let w1 = Var::from_tensor(&seeded((hidden, inputs), 3)).unwrap();
    let w2 = Var::from_tensor(&seeded((dim, hidden), 4)).unwrap();
    let b1 = Tensor::zeros(hidden, DType::F64, &dev).unwrap();
    let b2 = Tensor::zeros(dim, DType::F64, &dev).unwrap();
    let loss_of = |w1: &Tensor, w2: &Tensor| -> Tensor {
        let a = Adapter {
            mean: Tensor::zeros(inputs, DType::F64, &dev).unwrap(),
            std: Tensor::ones(inputs, DType::F64, &dev).unwrap(),
            fc1: Linear {
                weight: w1.clone(),
                bias: Some(b1.clone()),
            },
            fc2: Linear {
                weight: w2.clone(),
                bias: Some(b2.clone()),
            },
        };
        let v = a.forward(&x).unwrap();
        let v = v
            .broadcast_div(&v.sqr().unwrap().sum_keepdim(1).unwrap().sqrt().unwrap())
            .unwrap();
        masked_info_nce(&v, &t, &images, 0.2).unwrap().0
    };
    let grads = loss_of(w1.as_tensor(), w2.as_tensor()).backward().unwrap();
    let eps = 1e-6;
    for (var, other, first) in [(&w1, &w2, true), (&w2, &w1, false)] {
        let g = grads.get(var.as_tensor()).unwrap().flatten_all().unwrap();
        let g: Vec<f64> = g.to_vec1().unwrap();
        let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
        let largest = g.iter().fold(0f64, |m, v| m.max(v.abs()));
        assert!(largest > 1e-6, "no gradient");
        for i in 0..base.len() {
            let at = |d: f64| -> f64 {
                let mut w = base.clone();
                w[i] += d;
                let w = Tensor::from_vec(w, var.as_tensor().dims(), &dev).unwrap();
                let l = if first {
                    loss_of(&w, other.as_tensor())
                } else {
                    loss_of(other.as_tensor(), &w)
                };
                l.to_scalar::<f64>().unwrap()
            };
            let fd = (at(eps) - at(-eps)) / (2.0 * eps);
            assert!(
                (fd - g[i]).abs() < 1e-5 * largest.max(1.0),
                "component {i}: autograd {} vs finite differences {fd}",
                g[i]
            );
        }
    }
}
