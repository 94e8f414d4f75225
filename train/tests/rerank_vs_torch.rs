//! The MaskVLM re-ranker equals a PyTorch reference written from the paper
//! (`scripts/make_rerank_fixtures.py`): fusion encoder and ITM logits, the ITM, MLM, MIM and
//! ITC losses, and gradients of their sum. The served fusion encoder (`lexlip_model::rerank`, candle's
//! BERT layers) gives the same ITM logits as the training one on the same weights.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use lexlip_model::Weights;
use lexlip_model::rerank::{Fusion, FusionConfig};
use lexlip_train::losses::cross_entropy;
use lexlip_train::losses::l1;
use lexlip_train::objectives::rerank::{RerankModel, Weights as LossWeights};
use lexlip_train::params::Source;

mod common;

const TOL: f64 = 1e-4;

fn fixture() -> HashMap<String, Tensor> {
    let path = common::fixtures().join("rerank_vs_torch.safetensors");
    candle_core::safetensors::load(&path, &Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn config() -> FusionConfig {
    FusionConfig {
        hidden_size: 16,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        intermediate_size: 32,
    }
}

/// Every component within `TOL` of the largest expected magnitude.
fn assert_close(name: &str, got: &Tensor, want: &Tensor) {
    common::assert_close_within(TOL, name, got, want);
}

fn model(f: &HashMap<String, Tensor>, weights: &Weights) -> RerankModel {
    RerankModel::new(
        config(),
        16,
        10,
        f["in.word_embeddings"].clone(),
        12,
        Source::Weights(weights),
        &Device::Cpu,
    )
    .unwrap()
}

fn params(f: &HashMap<String, Tensor>) -> Weights {
    let tensors = f
        .iter()
        .filter(|(k, _)| !k.starts_with("in.") && !k.starts_with("out."))
        .map(|(k, t)| (k.clone(), t.clone()))
        .collect();
    Weights::from_tensors(tensors, "rerank_vs_torch.safetensors")
}

#[test]
fn fusion_and_losses_equal_the_torch_reference() {
    let f = fixture();
    let weights = params(&f);
    let m = model(&f, &weights);
    let fused = m
        .fuse(&f["in.text"], &f["in.mask"], &f["in.image"])
        .unwrap();
    let logits = m.itm_logits(&fused).unwrap();
    assert_close("itm logits", &logits, &f["out.itm_logits"]);
    let ids = |n: &str| f[n].to_dtype(DType::U32).unwrap();
    let itm = cross_entropy(&logits, &ids("in.labels")).unwrap();
    let mlm = cross_entropy(
        &m.mlm_logits(&fused, &ids("in.mlm_rows")).unwrap(),
        &ids("in.mlm_targets"),
    )
    .unwrap();
    let mim = l1(
        &m.mim_pixels(&fused, &ids("in.mim_rows")).unwrap(),
        &f["in.mim_pixels"],
    )
    .unwrap();
    assert_close("itm", &itm, &f["out.itm"]);
    assert_close("mlm", &mlm, &f["out.mlm"]);
    assert_close("mim", &mim, &f["out.mim"]);
    let (i, t) = m
        .itc_features(&f["in.text"], &f["in.mask"], &f["in.image"])
        .unwrap();
    let (itc, _, _) =
        lexlip_train::losses::info_nce(&i, &t, lexlip_train::objectives::rerank::ITC_TAU).unwrap();
    assert_close("itc", &itc, &f["out.itc"]);
    let total = (((itm + mlm).unwrap() + mim).unwrap() + itc).unwrap();
    let grads = total.backward().unwrap();
    let var = |name: &str| {
        m.params(LossWeights {
            mlm: 1.0,
            mim: 1.0,
            itc: 1.0,
        })
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no parameter {name}"))
    };
    for (name, want) in [
        ("fusion.modality_embeddings.weight", "out.grad.modality"),
        ("mlm.bias", "out.grad.mlm_bias"),
    ] {
        let p = var(name);
        let g = grads.get(p.var.as_tensor()).expect("a gradient");
        assert_close(name, g, &f[want]);
    }
    // Every parameter trains.
    for p in m.params(LossWeights {
        mlm: 1.0,
        mim: 1.0,
        itc: 1.0,
    }) {
        assert!(
            grads.get(p.var.as_tensor()).is_some(),
            "{} gets no gradient",
            p.name
        );
    }
}

#[test]
fn the_served_fusion_encoder_equals_the_trained_one() {
    let f = fixture();
    let weights = params(&f);
    let served = Fusion::new(
        &weights.var_builder(DType::F32, &Device::Cpu),
        &config(),
        16,
        10,
    )
    .unwrap();
    let logits = served
        .itm_logits(&f["in.text"], &f["in.mask"], &f["in.image"])
        .unwrap();
    assert_close("served itm logits", &logits, &f["out.itm_logits"]);
    let m = model(&f, &weights);
    let trained = m
        .itm_logits(
            &m.fuse(&f["in.text"], &f["in.mask"], &f["in.image"])
                .unwrap(),
        )
        .unwrap();
    assert_close("served vs trained", &logits, &trained);
}
