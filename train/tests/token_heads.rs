//! ConLIP's token-level heads (`--dense-token`) equal a PyTorch reference written from the paper
//! (`scripts/make_conlip_fixtures.py`): the MLM and MIM losses of both variants, and gradients of
//! the conditioned ones with respect to the tower states and two head parameters. The device-side
//! patch masking equals the per-image host functions the re-ranker uses.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use lexlip_model::{PreprocessedImage, Weights};
use lexlip_train::beit;
use lexlip_train::bert::BertConfig;
use lexlip_train::data::mask_patches;
use lexlip_train::init::beit_config;
use lexlip_train::nn::Dropout;
use lexlip_train::objectives::rerank::patch_pixels;
use lexlip_train::options::DenseToken;
use lexlip_train::params::{ParamBuilder, Source, sorted_vars};
use lexlip_train::rng::Rng;
use lexlip_train::token_heads::{PatchMask, TokenHeads, TokenInputs};

mod common;

const TOL: f64 = 1e-4;

fn fixture() -> HashMap<String, Tensor> {
    let path = common::fixtures().join("conlip_vs_torch.safetensors");
    candle_core::safetensors::load(&path, &Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

use common::values;

/// Every component within `TOL` of the largest expected magnitude.
fn assert_close(name: &str, got: &Tensor, want: &Tensor) {
    common::assert_close_within(TOL, name, got, want);
}

#[test]
fn token_losses_equal_the_torch_reference() {
    let f = fixture();
    let tensors = f
        .iter()
        .filter(|(k, _)| !k.starts_with("in.") && !k.starts_with("out."))
        .map(|(k, t)| (k.clone(), t.clone()))
        .collect();
    let weights = Weights::from_tensors(tensors, "conlip_vs_torch.safetensors");
    let store = VarMap::new();
    let dev = Device::Cpu;
    let pb = ParamBuilder::new(&store, Source::Weights(&weights), DType::F32, &dev);
    // Text 16 wide (2 heads, feed-forward 24); image 12 wide (2 heads, feed-forward 20), 8-px
    // images of 4-px patches (48 pixels per patch); vocabulary 30.
    let heads = TokenHeads::new(
        &pb,
        &BertConfig::sized(30, 16, 1, 2, 24),
        &beit_config(12, 1, 2, 20, 8, 4),
        &f["in.word_embeddings"],
    )
    .unwrap();
    let var = |n: &str| Var::from_tensor(&f[n]).unwrap();
    let (text, text_masked, image, image_masked) = (
        var("in.text"),
        var("in.text_masked"),
        var("in.image"),
        var("in.image_masked"),
    );
    let ids = |n: &str| f[n].to_dtype(DType::U32).unwrap();
    let (text_rows, text_targets, patch_rows) = (
        ids("in.text_rows"),
        ids("in.text_targets"),
        ids("in.patch_rows"),
    );
    let inputs = TokenInputs {
        text: text.as_tensor(),
        text_masked: text_masked.as_tensor(),
        mask: &f["in.mask"],
        image: image.as_tensor(),
        image_masked: image_masked.as_tensor(),
        text_rows: &text_rows,
        text_targets: &text_targets,
        patch_rows: &patch_rows,
        patch_targets: &f["in.patch_targets"],
    };
    let off = Dropout::off();
    for (kind, name) in [
        (DenseToken::Vanilla, "vanilla"),
        (DenseToken::Conditioned, "conditioned"),
    ] {
        let (mlm, mim) = heads.losses(&inputs, kind, &off).unwrap();
        assert_close(&format!("{name} mlm"), &mlm, &f[&format!("out.{name}.mlm")]);
        assert_close(&format!("{name} mim"), &mim, &f[&format!("out.{name}.mim")]);
        if kind != DenseToken::Conditioned {
            continue;
        }
        let grads = (mlm + mim).unwrap().backward().unwrap();
        for (v, want) in [
            (&text, "out.grad.text"),
            (&text_masked, "out.grad.text_masked"),
            (&image, "out.grad.image"),
            (&image_masked, "out.grad.image_masked"),
        ] {
            assert_close(
                want,
                grads.get(v.as_tensor()).expect("a gradient"),
                &f[want],
            );
        }
        // Conditioned, the complete inputs reach the heads through their [CLS] alone.
        for v in [&text, &image] {
            let g = grads.get(v.as_tensor()).unwrap();
            let rest = g.narrow(1, 1, g.dim(1).unwrap() - 1).unwrap();
            assert!(values(&rest).iter().all(|x| *x == 0.0));
            assert!(
                values(&g.narrow(1, 0, 1).unwrap())
                    .iter()
                    .any(|x| *x != 0.0)
            );
        }
        let params: HashMap<String, Var> = sorted_vars(&store).into_iter().collect();
        for (name, want) in [
            ("text.crossattention.self.key.weight", "out.grad.key"),
            ("mim.weight", "out.grad.mim"),
        ] {
            let g = grads.get(params[name].as_tensor()).expect("a gradient");
            assert_close(name, g, &f[want]);
        }
        // Every head parameter trains except the mask token, which the tower reads.
        for (name, v) in &params {
            assert_eq!(
                grads.get(v.as_tensor()).is_some(),
                name != "mask_token",
                "{name}"
            );
        }
    }
}

fn random_pixels(batch: usize, size: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(&[seed]);
    (0..batch * 3 * size * size)
        .map(|_| r.uniform_f32() * 2.0 - 1.0)
        .collect()
}

/// Masks for `batch` images of `grid²` patches from seeded draws, as the batch builder does.
fn patch_mask(batch: usize, grid: usize, rate: f64, seed: u64, dev: &Device) -> PatchMask {
    let n = grid * grid;
    let (mut keep, mut rows, mut state_rows) = (vec![1f32; batch * n], Vec::new(), Vec::new());
    for i in 0..batch {
        for k in mask_patches(n, rate, &mut Rng::new(&[seed, i as u64])) {
            keep[i * n + k] = 0.0;
            rows.push((i * n + k) as u32);
            state_rows.push((i * (n + 1) + 1 + k) as u32);
        }
    }
    PatchMask {
        grid,
        keep: Tensor::from_vec(keep, (batch, n), dev).unwrap(),
        rows: Tensor::new(rows.as_slice(), dev).unwrap(),
        state_rows: Tensor::new(state_rows.as_slice(), dev).unwrap(),
    }
}

/// The device-side targets (a reshape of the whole batch) equal the host function that cuts
/// one patch out of one image.
#[test]
fn patch_targets_equal_the_host_patches() {
    let dev = Device::Cpu;
    let (batch, size, grid) = (3, 16, 4);
    let pixels = random_pixels(batch, size, 2);
    let mask = patch_mask(batch, grid, 0.5, 9, &dev);
    let tensor = Tensor::from_vec(pixels.clone(), (batch, 3, size, size), &dev).unwrap();
    let got = mask.targets(&tensor).unwrap();
    let n = grid * grid;
    let rows: Vec<u32> = mask.rows.to_vec1().unwrap();
    let mut want = Vec::new();
    for r in rows {
        let (i, k) = (r as usize / n, r as usize % n);
        let chw = pixels[i * 3 * size * size..(i + 1) * 3 * size * size].to_vec();
        let image = PreprocessedImage::from_chw(size, chw).unwrap();
        want.extend(patch_pixels(&image, size / grid, k));
    }
    assert_eq!(got.dims(), &[want.len() / (3 * 4 * 4), 3 * 4 * 4]);
    assert_eq!(
        values(&got),
        want.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()
    );
}

/// The masked image pass: with nothing masked it is the plain pass; with patches masked, their
/// pixels no longer matter, and the kept ones still do.
#[test]
fn masked_image_pass_reads_only_kept_patches() {
    let dev = Device::Cpu;
    let (batch, size, grid) = (2, 16, 2);
    let store = VarMap::new();
    let pb = ParamBuilder::new(&store, Source::Random(5), DType::F32, &dev);
    let tower = beit::tower(&pb, &beit_config(12, 1, 2, 20, size, size / grid)).unwrap();
    let token = Tensor::from_vec(random_pixels(1, 2, 7)[..12].to_vec(), 12, &dev).unwrap();
    let off = Dropout::off();
    let image = |p: Vec<f32>| Tensor::from_vec(p, (batch, 3, size, size), &dev).unwrap();
    let a = image(random_pixels(batch, size, 1));
    let all = Tensor::ones((batch, grid * grid), DType::F32, &dev).unwrap();
    let plain = tower.hidden(&a, &off).unwrap();
    let kept = tower.hidden_masked(&a, &all, &token, &off).unwrap();
    assert_close("nothing masked", &kept, &plain);

    // Patch 0 of image 0 and patch 3 of image 1 masked: changing their pixels changes nothing.
    let keep = Tensor::new(&[[0f32, 1., 1., 1.], [1., 1., 1., 0.]], &dev).unwrap();
    let half = size / grid;
    let set = |px: &mut [f32], i: usize, r0: usize, c0: usize, v: f32| {
        for c in 0..3 {
            for r in r0..r0 + half {
                for x in c0..c0 + half {
                    px[((i * 3 + c) * size + r) * size + x] = v;
                }
            }
        }
    };
    let mut changed = random_pixels(batch, size, 1);
    set(&mut changed, 0, 0, 0, 0.9);
    set(&mut changed, 1, half, half, -0.7);
    let masked = tower.hidden_masked(&a, &keep, &token, &off).unwrap();
    let b = image(changed.clone());
    assert_close(
        "masked pixels ignored",
        &tower.hidden_masked(&b, &keep, &token, &off).unwrap(),
        &masked,
    );
    assert_ne!(values(&masked), values(&plain));
    // A kept patch (patch 1 of image 0) still matters.
    set(&mut changed, 0, 0, half, 0.5);
    let c = image(changed);
    assert_ne!(
        values(&tower.hidden_masked(&c, &keep, &token, &off).unwrap()),
        values(&masked)
    );
}
