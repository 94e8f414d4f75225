//! The lexicon recipe's objectives (issue 35) equal a PyTorch reference written from their
//! descriptions (`scripts/make_lexicon_fixtures.py`): top-K pooling (torch.topk), caption-word
//! grounding (image lexicons contrasted with IDF-weighted bags of caption words), and BaCo with
//! a FLOPS weight per side. Losses
//! and the gradients with respect to the inputs, in f32, to a relative 1e-5.

use candle_core::{DType, Device, Tensor, Var};
use lexlip_train::lexicon::{self, Flops};
use lexlip_train::losses;

mod common;

const TOL: f64 = 1e-5;

struct Fixture(std::collections::HashMap<String, Tensor>);

impl Fixture {
    fn load() -> Self {
        let path = common::fixtures().join("lexicon_vs_torch.safetensors");
        Self(
            candle_core::safetensors::load(&path, &Device::Cpu)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
    }

    fn get(&self, name: &str) -> Tensor {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("the fixture has no tensor {name}"))
            .clone()
    }

    fn scalar(&self, name: &str) -> f64 {
        self.get(name)
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    }

    fn ids(&self, name: &str) -> Tensor {
        self.get(name).to_dtype(DType::U32).unwrap()
    }
}

fn max_abs(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

fn assert_tensor(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    let diff =
        max_abs(&(got.to_dtype(DType::F64).unwrap() - want.to_dtype(DType::F64).unwrap()).unwrap());
    let scale = max_abs(want).max(1e-6);
    assert!(
        diff <= TOL * scale,
        "{what}: differs by {diff} (scale {scale})"
    );
}

fn assert_scalar(what: &str, got: &Tensor, want: f64) {
    let got = got
        .to_dtype(DType::F64)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    assert!(
        (got - want).abs() <= TOL * want.abs().max(1e-6),
        "{what}: {got} against {want}"
    );
}

#[test]
fn top_k_grounding_and_flops_per_side_equal_torch() {
    let f = Fixture::load();
    let k = f.get("config.k").to_scalar::<i64>().unwrap() as usize;
    let tau = f.scalar("config.tau");
    let flops = Flops {
        image: f.scalar("config.lambda_image"),
        text: f.scalar("config.lambda_text"),
    };
    let weight = f.scalar("config.grounding");
    let logits = Var::from_tensor(&f.get("input.image_logits")).unwrap();
    let pl = Var::from_tensor(&f.get("input.pl")).unwrap();
    let (ids, mask) = (f.ids("input.ids"), f.ids("input.mask"));

    let pooled = losses::max_pool(logits.as_tensor(), None).unwrap();
    let pv = lexicon::top_k(&losses::splade_pooled(&pooled).unwrap(), k).unwrap();
    assert_tensor("top-K p_v", &pv, &f.get("expect.pv"));
    let (targets, has) = lexicon::grounding_targets(&ids, &mask, &f.get("input.idf")).unwrap();
    assert_tensor("grounding targets", &targets, &f.get("expect.targets"));
    assert_tensor("rows with targets", &has, &f.get("expect.has"));

    let g = lexicon::grounding(&pv, &targets, &has, tau).unwrap();
    assert_scalar("grounding", &g, f.scalar("expect.grounding"));
    let grads = g.backward().unwrap();
    assert_tensor(
        "grounding d/dlogits",
        grads.get(logits.as_tensor()).unwrap(),
        &f.get("expect.grounding.grad_image_logits"),
    );

    let baco = losses::baco(&pv, pl.as_tensor(), tau, flops).unwrap();
    assert_scalar("BaCo with λ per side", &baco.loss, f.scalar("expect.baco"));
    let total = (&baco.loss + (g * weight).unwrap()).unwrap();
    assert_scalar("total", &total, f.scalar("expect.total"));
    let grads = total.backward().unwrap();
    assert_tensor(
        "total d/dlogits (through top-K and grounding)",
        grads.get(logits.as_tensor()).unwrap(),
        &f.get("expect.grad_image_logits"),
    );
    assert_tensor(
        "total d/dp_l",
        grads.get(pl.as_tensor()).unwrap(),
        &f.get("expect.grad_pl"),
    );
}
