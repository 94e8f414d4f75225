//! The Candle objectives equal a PyTorch reference written from the paper (LexLIP eq. 3-23):
//! SelfMLM, LexMLM i2t/t2i (importance distribution, CBoW bottleneck with stop-gradient, decoder),
//! SPLADE pooling, BaCo + FLOPS, and MoCo over several steps with its queues. Losses and the
//! gradients with respect to the inputs, in f32, to a relative 1e-5. The fixture is committed;
//! `scripts/make_train_fixtures.py` regenerates it (torch is needed there only). GRIT-VLP's ITC
//! consistency loss, COOKIE's single-modal loss and ConLIP's DCL have their own fixture, from
//! `scripts/make_seed_fixtures.py`; the lexicon recipe's (top-K, grounding, FLOPS per side) from
//! `scripts/make_lexicon_fixtures.py`.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, Var};
use lexlip_model::Weights;
use lexlip_train::bert::{BertConfig, Decoder};
use lexlip_train::lexicon::{self, Flops};
use lexlip_train::losses::{self, DecoderInput};
use lexlip_train::model::Queue;
use lexlip_train::nn::Dropout;
use lexlip_train::params::{ParamBuilder, Source};

mod common;

/// Relative tolerance on losses; on gradients, relative to the largest expected component.
const TOL: f64 = 1e-5;

struct Fixture(HashMap<String, Tensor>);

impl Fixture {
    fn load() -> Self {
        Self::named("losses_vs_torch.safetensors")
    }

    fn named(file: &str) -> Self {
        let path = common::fixtures().join(file);
        let tensors = candle_core::safetensors::load(&path, &Device::Cpu)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self(tensors)
    }

    fn get(&self, name: &str) -> Tensor {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("the fixture has no tensor {name}"))
            .clone()
    }

    fn var(&self, name: &str) -> Var {
        Var::from_tensor(&self.get(name)).unwrap()
    }

    /// Positions and token ids (stored as i64).
    fn ids(&self, name: &str) -> Tensor {
        self.get(name).to_dtype(DType::U32).unwrap()
    }

    fn scalar(&self, name: &str) -> f64 {
        self.get(name)
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    }

    /// The LexMLM decoder stored under `group.` (tied to `word`).
    fn decoder(&self, group: &str, word: &Tensor) -> Decoder {
        let prefix = format!("{group}.");
        let tensors: HashMap<String, Tensor> = self
            .0
            .iter()
            .filter_map(|(k, t)| Some((k.strip_prefix(&prefix)?.to_string(), t.clone())))
            .collect();
        let layers = (0..)
            .take_while(|i| tensors.contains_key(&format!("layer.{i}.attention.self.query.weight")))
            .count();
        let inter = tensors["layer.0.intermediate.dense.weight"].dim(0).unwrap();
        let (vocab, hidden) = word.dims2().unwrap();
        let heads = self.get("config.heads").to_scalar::<i64>().unwrap() as usize;
        let cfg = BertConfig::sized(vocab, hidden, layers, heads, inter);
        let weights = Weights::from_tensors(tensors, format!("<fixture {group}>"));
        let store = candle_nn::VarMap::new();
        let pb = ParamBuilder::new(&store, Source::Weights(&weights), DType::F32, &Device::Cpu);
        Decoder::new(&pb, &cfg, layers, word).unwrap()
    }
}

fn assert_loss(what: &str, got: &Tensor, want: f64) {
    let got = f64::from(got.to_scalar::<f32>().unwrap());
    let err = (got - want).abs();
    assert!(
        err <= TOL * want.abs().max(1e-2),
        "{what}: candle {got}, torch {want} (|diff| {err:e})"
    );
}

fn assert_tensor(what: &str, got: &Tensor, want: &Tensor) {
    common::assert_tensor_close(what, got, want, TOL);
}

fn assert_grad(what: &str, grads: &candle_core::backprop::GradStore, var: &Var, want: &Tensor) {
    let got = grads
        .get(var.as_tensor())
        .unwrap_or_else(|| panic!("{what}: no gradient"));
    assert_tensor(what, got, want);
}

/// Every part of a BaCo / MoCo loss against the fixture's `{prefix}.{part}`.
fn assert_contrastive(what: &str, got: &losses::Contrastive, f: &Fixture, prefix: &str) {
    for (part, t) in [
        ("i2t", &got.i2t),
        ("t2i", &got.t2i),
        ("flops_image", &got.flops_image),
        ("flops_text", &got.flops_text),
        ("loss", &got.loss),
    ] {
        assert_loss(
            &format!("{what} {part}"),
            t,
            f.scalar(&format!("{prefix}.{part}")),
        );
    }
}

#[test]
fn self_mlm_equals_torch() {
    let f = Fixture::load();
    let logits = f.var("input.masked_logits");
    let loss = losses::masked_lm(
        logits.as_tensor(),
        &f.ids("input.enc_rows"),
        &f.ids("input.enc_targets"),
    )
    .unwrap();
    assert_loss("SelfMLM", &loss, f.scalar("expect.self_mlm"));
    let grads = loss.backward().unwrap();
    assert_grad(
        "SelfMLM d/dlogits",
        &grads,
        &logits,
        &f.get("expect.self_mlm.grad_masked_logits"),
    );
}

#[test]
fn lex_mlm_equals_torch() {
    let f = Fixture::load();
    let mask = f.ids("input.mask");
    let word = f.var("input.word_embeddings");
    let embedded = f.var("input.decoder_embedded");
    let (rows, targets) = (f.ids("input.dec_rows"), f.ids("input.dec_targets"));
    let input = DecoderInput {
        embedded: embedded.as_tensor(),
        mask: &mask,
        rows: &rows,
        targets: &targets,
    };
    for (name, logits, text_mask, group) in [
        ("i2t", "input.image_logits", None, "decoder_image"),
        ("t2i", "input.masked_logits", Some(&mask), "decoder_text"),
    ] {
        let logits = f.var(logits);
        let a = losses::lexicon_distribution(logits.as_tensor(), text_mask).unwrap();
        let which = if name == "i2t" { "a_v" } else { "a_l" };
        assert_tensor(
            &format!("importance {which}"),
            &a,
            &f.get(&format!("expect.{which}")),
        );
        let decoder = f.decoder(group, word.as_tensor());
        let loss =
            losses::lex_mlm(&decoder, &a, word.as_tensor(), &input, &Dropout::off()).unwrap();
        let key = format!("expect.lex_mlm_{name}");
        assert_loss(&format!("LexMLM {name}"), &loss, f.scalar(&key));
        let grads = loss.backward().unwrap();
        // Into the logits, and through the tied decoder projection only: the bottleneck stops
        // the gradient (eq. 10).
        for (wrt, var) in [
            ("logits", &logits),
            ("word", &word),
            ("embedded", &embedded),
        ] {
            assert_grad(
                &format!("LexMLM {name} d/d{wrt}"),
                &grads,
                var,
                &f.get(&format!("{key}.grad_{wrt}")),
            );
        }
    }
}

#[test]
fn splade_and_baco_equal_torch() {
    let f = Fixture::load();
    let (tau, lambda) = (f.scalar("config.tau"), f.scalar("config.lambda"));
    let mask = f.ids("input.mask");
    let image_logits = f.var("input.image_logits");
    let text_logits = f.var("input.text_logits");
    let pv = losses::splade(image_logits.as_tensor(), None).unwrap();
    let pl = losses::splade(text_logits.as_tensor(), Some(&mask)).unwrap();
    assert_tensor("SPLADE p_v", &pv, &f.get("expect.pv"));
    assert_tensor("SPLADE p_l", &pl, &f.get("expect.pl"));

    let check = |baco: &losses::Contrastive| assert_contrastive("BaCo", baco, &f, "expect.baco");
    // Through the pooling: gradients with respect to the logits.
    let baco = losses::baco(&pv, &pl, tau, Flops::both(lambda)).unwrap();
    check(&baco);
    let grads = baco.loss.backward().unwrap();
    assert_grad(
        "BaCo d/dimage_logits",
        &grads,
        &image_logits,
        &f.get("expect.baco.grad_image_logits"),
    );
    assert_grad(
        "BaCo d/dtext_logits",
        &grads,
        &text_logits,
        &f.get("expect.baco.grad_text_logits"),
    );
    // On the representations themselves.
    let (pv, pl) = (f.var("expect.pv"), f.var("expect.pl"));
    let baco = losses::baco(pv.as_tensor(), pl.as_tensor(), tau, Flops::both(lambda)).unwrap();
    check(&baco);
    let grads = baco.loss.backward().unwrap();
    assert_grad("BaCo d/dp_v", &grads, &pv, &f.get("expect.baco.grad_pv"));
    assert_grad("BaCo d/dp_l", &grads, &pl, &f.get("expect.baco.grad_pl"));
}

/// The queue's rows from oldest to newest (the ring buffer unrolled at its write pointer).
fn oldest_first(q: &Queue) -> Tensor {
    let cap = q.data.dim(0).unwrap();
    if q.fill < cap {
        return q.data.narrow(0, 0, q.fill).unwrap();
    }
    let newer = q.data.narrow(0, 0, q.ptr).unwrap();
    let older = q.data.narrow(0, q.ptr, cap - q.ptr).unwrap();
    Tensor::cat(&[&older, &newer], 0).unwrap()
}

#[test]
fn moco_with_queues_equals_torch() {
    let f = Fixture::load();
    let (tau, lambda) = (f.scalar("config.tau"), f.scalar("config.lambda"));
    let cap = f.get("moco.capacity").to_scalar::<i64>().unwrap() as usize;
    let vocab = f.get("moco.0.pv").dim(1).unwrap();
    let empty = || Queue {
        data: Tensor::zeros((cap, vocab), DType::F32, &Device::Cpu).unwrap(),
        ptr: 0,
        fill: 0,
    };
    let (mut queue_image, mut queue_text) = (empty(), empty());
    let mut step = 0;
    while f.0.contains_key(&format!("moco.{step}.pv")) {
        let v = |k: &str| f.var(&format!("moco.{step}.{k}"));
        let (pv, pl, pv_m, pl_m) = (v("pv"), v("pl"), v("pv_m"), v("pl_m"));
        let (qi, qt) = (queue_image.rows().unwrap(), queue_text.rows().unwrap());
        let qi = qi.map(|t| Var::from_tensor(&t).unwrap());
        let qt = qt.map(|t| Var::from_tensor(&t).unwrap());
        let moco = losses::moco(
            pv.as_tensor(),
            pl.as_tensor(),
            pv_m.as_tensor(),
            pl_m.as_tensor(),
            qi.as_ref().map(Var::as_tensor),
            qt.as_ref().map(Var::as_tensor),
            tau,
            Flops::both(lambda),
        )
        .unwrap();
        assert_contrastive(
            &format!("MoCo step {step}"),
            &moco,
            &f,
            &format!("moco.{step}"),
        );
        let grads = moco.loss.backward().unwrap();
        for (wrt, var, key) in [("p_v", &pv, "grad_pv"), ("p_l", &pl, "grad_pl")] {
            let want = f.get(&format!("moco.{step}.{key}"));
            assert_grad(&format!("MoCo {step} d/d{wrt}"), &grads, var, &want);
        }
        // Keys and queued negatives are constants (MoCo's stop-gradient).
        for (what, var) in [("p̂_v", Some(&pv_m)), ("p̂_l", Some(&pl_m))]
            .into_iter()
            .chain([("Q_v", qi.as_ref()), ("Q_l", qt.as_ref())])
        {
            if let Some(var) = var {
                assert!(
                    grads.get(var.as_tensor()).is_none(),
                    "MoCo step {step}: {what} got a gradient"
                );
            }
        }
        queue_image.push(pv_m.as_tensor()).unwrap();
        queue_text.push(pl_m.as_tensor()).unwrap();
        step += 1;
    }
    let batch = f.get("moco.0.pv").dim(0).unwrap();
    assert!(
        (step - 1) * batch > cap,
        "the fixture's MoCo run never computes a loss with a wrapped queue"
    );
    assert_tensor(
        "queue Q_v after the run",
        &oldest_first(&queue_image),
        &f.get("moco.queue_image"),
    );
    assert_tensor(
        "queue Q_l after the run",
        &oldest_first(&queue_text),
        &f.get("moco.queue_text"),
    );
}

/// GRIT-VLP's ITC consistency (eq. 6) on lexicon rows and on unit-length dense rows: the loss
/// and the gradients into both sides (each side's distribution is a stop-gradient target in
/// one KL term and a prediction in the other).
#[test]
fn itc_consistency_equals_torch() {
    seed_loss_equals_torch(&["lexicon", "dense"], losses::itc_consistency);
}

/// COOKIE's single-modal InfoNCE between two views (eq. 8-10), on lexicon and dense rows.
#[test]
fn single_modal_contrastive_equals_torch() {
    seed_loss_equals_torch(&["cookie_lexicon", "cookie_dense"], losses::single_modal);
}

/// ConLIP's decoupled contrastive loss (eq. 10-12, in-batch) on unit-length dense rows.
#[test]
fn dcl_equals_torch() {
    seed_loss_equals_torch(&["dcl_dense"], |a, b, tau| Ok(losses::dcl(a, b, tau)?.0));
}

/// ConLIP's loss with MoCo queues (eq. 9-12): InfoNCE and DCL against the batch's momentum
/// keys and the queues; gradients reach the online embeddings only.
#[test]
fn momentum_contrast_equals_torch() {
    let f = Fixture::named("seeds_vs_torch.safetensors");
    for (case, decoupled) in [("moco_infonce", false), ("moco_dcl", true)] {
        let get = |k: &str| f.get(&format!("{case}.{k}"));
        let image = f.var(&format!("{case}.image"));
        let text = f.var(&format!("{case}.text"));
        let (queue_image, queue_text) = (get("queue_image"), get("queue_text"));
        let (loss, _, _) = losses::momentum_contrast(
            image.as_tensor(),
            text.as_tensor(),
            &get("key_image"),
            &get("key_text"),
            Some(&queue_image),
            Some(&queue_text),
            f.scalar(&format!("{case}.tau")),
            decoupled,
        )
        .unwrap();
        assert_loss(case, &loss, f.scalar(&format!("{case}.loss")));
        let grads = loss.backward().unwrap();
        assert_grad(case, &grads, &image, &get("grad_image"));
        assert_grad(case, &grads, &text, &get("grad_text"));
    }
}

type SeedLoss = fn(&Tensor, &Tensor, f64) -> lexlip_train::Result<Tensor>;

/// `loss` on each case of the seed-methods fixture: value and both gradients.
fn seed_loss_equals_torch(cases: &[&str], loss: SeedLoss) {
    let f = Fixture::named("seeds_vs_torch.safetensors");
    for case in cases {
        let image = f.var(&format!("{case}.image"));
        let text = f.var(&format!("{case}.text"));
        let tau = f.scalar(&format!("{case}.tau"));
        let loss = loss(image.as_tensor(), text.as_tensor(), tau).unwrap();
        assert_loss(case, &loss, f.scalar(&format!("{case}.loss")));
        let grads = loss.backward().unwrap();
        for (side, var) in [("image", &image), ("text", &text)] {
            let want = f.get(&format!("{case}.grad_{side}"));
            assert_grad(&format!("{case} {side} gradient"), &grads, var, &want);
        }
    }
}

/// The lexicon recipe's objectives (issue 35; `scripts/make_lexicon_fixtures.py`): top-K
/// pooling (torch.topk), caption-word grounding (image lexicons contrasted with IDF-weighted
/// bags of caption words, on the lexicon before the cut) and BaCo with a FLOPS weight per side;
/// losses and gradients through the cut and the grounding.
#[test]
fn top_k_grounding_and_flops_per_side_equal_torch() {
    let f = Fixture::named("lexicon_vs_torch.safetensors");
    let k = f.get("config.k").to_scalar::<i64>().unwrap() as usize;
    let tau = f.scalar("config.tau");
    let flops = Flops {
        image: f.scalar("config.lambda_image"),
        text: f.scalar("config.lambda_text"),
    };
    let logits = f.var("input.image_logits");
    let pl = f.var("input.pl");
    let (ids, mask) = (f.ids("input.ids"), f.ids("input.mask"));

    let pooled = losses::max_pool(logits.as_tensor(), None).unwrap();
    let full = losses::splade_pooled(&pooled).unwrap();
    let pv = lexicon::top_k(&full, k).unwrap();
    assert_tensor("top-K p_v", &pv, &f.get("expect.pv"));
    let (bags, has) = lexicon::grounding_targets(&ids, &mask, &f.get("input.idf")).unwrap();
    assert_tensor("grounding bags", &bags, &f.get("expect.targets"));
    assert_tensor("rows with targets", &has, &f.get("expect.has"));

    // Grounding reads the lexicon before the cut (as the training step does).
    let g = lexicon::grounding(&full, &bags, &has, tau).unwrap();
    assert_loss("grounding", &g, f.scalar("expect.grounding"));
    let grads = g.backward().unwrap();
    let want = f.get("expect.grounding.grad_image_logits");
    assert_grad("grounding d/dlogits", &grads, &logits, &want);

    let baco = losses::baco(&pv, pl.as_tensor(), tau, flops).unwrap();
    assert_loss("BaCo with λ per side", &baco.loss, f.scalar("expect.baco"));
    let total = (&baco.loss + (g * f.scalar("config.grounding")).unwrap()).unwrap();
    assert_loss("total", &total, f.scalar("expect.total"));
    let grads = total.backward().unwrap();
    let want = f.get("expect.grad_image_logits");
    assert_grad(
        "total d/dlogits (through top-K and grounding)",
        &grads,
        &logits,
        &want,
    );
    assert_grad("total d/dp_l", &grads, &pl, &f.get("expect.grad_pl"));
}
