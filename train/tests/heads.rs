//! Lexicon heads over a frozen dense model (`--objective heads`): the step's losses against a
//! PyTorch reference, the embedding cache (resume to the same bytes, corrupt shards and another
//! backbone refused), whole runs (cache = backbone, export → every lexlip loader, batched =
//! one by one, resume bitwise) and clear errors.

mod common;

use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use lexlip_model::Encoders;
use lexlip_train::cache::{CacheMeta, EmbeddingCache, Section};
use lexlip_train::lexicon;
use lexlip_train::objectives::heads::{HeadsModel, StepInputs, StepWeights, step_losses};
use lexlip_train::{Objective, TrainOptions, VocabBias};

use common::{corpus, err_of, fast_options, run_collecting, run_for, run_quietly, train_json};

/// Relative tolerance on losses; on gradients, relative to the largest expected component.
const TOL: f64 = 1e-5;

fn fixture() -> std::collections::HashMap<String, Tensor> {
    let path = common::fixtures().join("heads_vs_torch.safetensors");
    candle_core::safetensors::load(&path, &Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn scalar(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap()
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor) {
    common::assert_tensor_close(what, got, want, TOL);
}

/// The reference's heads (its weights, centres and allowed terms).
fn fixture_model(f: &std::collections::HashMap<String, Tensor>) -> HeadsModel {
    let g = |n: &str| f[n].clone();
    HeadsModel::from_tensors(
        [g("input.wv"), g("input.bv"), g("input.wl"), g("input.bl")],
        [g("input.cv"), g("input.cl")],
        g("input.allowed"),
    )
    .unwrap()
}

/// The reference's loss weights.
fn fixture_weights(f: &std::collections::HashMap<String, Tensor>) -> StepWeights {
    let g = |n: &str| f[n].clone();
    let k = |n: &str| g(n).to_scalar::<i64>().unwrap() as usize;
    StepWeights {
        image_k: k("config.k_image"),
        text_k: k("config.k_text"),
        text_expansion: None,
        own_floor: None,
        tau: scalar(&g("config.tau")),
        teacher_tau: scalar(&g("config.teacher_tau")),
        distill: scalar(&g("config.distill")),
        flops_image: scalar(&g("config.lambda_image")),
        flops_text: scalar(&g("config.lambda_text")),
        grounding: scalar(&g("config.grounding")),
        caption_words: scalar(&g("config.caption_words")),
        caption_words_text: scalar(&g("config.caption_words_text")),
        caption_words_tau: scalar(&g("config.caption_words_tau")),
    }
}

/// The reference's batch (embeddings, caption ids, mask, grounding targets) every step test feeds.
struct FixtureBatch {
    xv: Tensor,
    xl: Tensor,
    ids: Tensor,
    mask: Tensor,
    bags: Tensor,
    has: Tensor,
}

impl FixtureBatch {
    /// Reads the batch from the fixture `f`, its floats through `g` (as they are, or in f64).
    fn read(f: &std::collections::HashMap<String, Tensor>, g: &dyn Fn(&str) -> Tensor) -> Self {
        let ids = f["input.ids"].to_dtype(DType::U32).unwrap();
        let mask = f["input.mask"].to_dtype(DType::U32).unwrap();
        let (bags, has) = lexicon::grounding_targets(&ids, &mask, &g("input.idf")).unwrap();
        let (xv, xl) = (g("input.xv"), g("input.xl"));
        Self {
            xv,
            xl,
            ids,
            mask,
            bags,
            has,
        }
    }

    /// The step's inputs; `own`: the captions' own words and allowed terms (expansion control).
    fn inputs<'a>(&'a self, own: Option<(&'a Tensor, &'a Tensor)>) -> StepInputs<'a> {
        StepInputs {
            image: &self.xv,
            text: &self.xl,
            bags: &self.bags,
            has: &self.has,
            own,
        }
    }
}

/// Every head parameter's gradient of `total` against the reference's `expect.grad_*` in `want`.
fn assert_head_gradients(
    model: &HeadsModel,
    total: &Tensor,
    want: &std::collections::HashMap<String, Tensor>,
) {
    let grads = total.backward().unwrap();
    for (var, name) in [
        (&model.image_weight, "wv"),
        (&model.image_bias, "bv"),
        (&model.text_weight, "wl"),
        (&model.text_bias, "bl"),
    ] {
        let got = grads.get(var.as_tensor()).expect("a gradient");
        assert_close(
            &format!("d total / d {name}"),
            got,
            &want[&format!("expect.grad_{name}")],
        );
    }
}

#[test]
fn the_heads_step_equals_the_pytorch_reference() {
    let f = fixture();
    let g = |n: &str| f[n].clone();
    let model = fixture_model(&f);
    let weights = fixture_weights(&f);
    let batch = FixtureBatch::read(&f, &g);
    let inputs = batch.inputs(None);
    let pv = model.lexicons(&batch.xv, true, weights.image_k).unwrap();
    assert_close("image lexicons", &pv, &g("expect.pv"));
    let pl = model.lexicons(&batch.xl, false, weights.text_k).unwrap();
    assert_close("text lexicons", &pl, &g("expect.pl"));
    let lexlip_train::objectives::heads::HeadsLosses {
        total,
        parts,
        nnz: (nnz_v, nnz_l),
    } = step_losses(&model, &inputs, weights).unwrap();
    // The reference's counts: images keep K = 7 terms but one has only 5 above zero;
    // captions keep k = 5.
    assert_eq!((nnz_v, nnz_l), (6.5, 5.0), "top-K per side");
    for (name, t) in &parts {
        let want = scalar(&g(&format!("expect.{name}")));
        let got = scalar(t);
        assert!(
            (got - want).abs() <= TOL * want.abs().max(1e-2),
            "{name}: candle {got}, torch {want}"
        );
    }
    assert_eq!(parts.len(), 9, "every part is checked");
    let want = scalar(&g("expect.total"));
    assert!((scalar(&total) - want).abs() <= TOL * want.abs(), "total");
    assert_head_gradients(&model, &total, &f);
}

/// A text-side variant of the step (`scripts/make_heads_fixtures.py`): the first fixture's
/// inputs, the variant's file `e`, and the captions' own words without its template word.
struct TextVariant {
    f: std::collections::HashMap<String, Tensor>,
    e: std::collections::HashMap<String, Tensor>,
    model: HeadsModel,
    batch: FixtureBatch,
    words: Tensor,
    own: Tensor,
}

impl TextVariant {
    fn read(file: &str) -> Self {
        use lexlip_train::expansion::{own_words, words_without};
        let f = fixture();
        let e =
            candle_core::safetensors::load(common::fixtures().join(file), &Device::Cpu).unwrap();
        let g = |n: &str| f[n].clone();
        let model = fixture_model(&f);
        let batch = FixtureBatch::read(&f, &g);
        let template: Vec<u32> = e["input.template"]
            .to_vec1::<i64>()
            .unwrap()
            .into_iter()
            .map(|t| t as u32)
            .collect();
        let words = words_without(&f["input.allowed"], &template).unwrap();
        let own = own_words(&batch.ids, &batch.mask, &words).unwrap();
        Self {
            f,
            e,
            model,
            batch,
            words,
            own,
        }
    }

    /// The step's total and gradients with `weights` against the variant's reference; without
    /// the captions' own words the step refuses rather than cutting silently.
    fn assert_step(&self, weights: StepWeights) {
        let inputs = self.batch.inputs(Some((&self.own, &self.words)));
        let total = step_losses(&self.model, &inputs, weights).unwrap().total;
        let want = scalar(&self.e["expect.total"]);
        assert!((scalar(&total) - want).abs() <= TOL * want.abs(), "total");
        assert_head_gradients(&self.model, &total, &self.e);
        let bare = StepInputs {
            own: None,
            ..inputs
        };
        assert!(step_losses(&self.model, &bare, weights).is_err());
    }
}

/// Expansion control on the text side (`--query-expansion 2`, word 13 a template word): the
/// cut caption lexicons, the step's total and its gradients against the PyTorch reference on
/// the same inputs (`scripts/make_heads_fixtures.py`).
#[test]
fn the_heads_step_with_expansion_control_equals_the_pytorch_reference() {
    use lexlip_train::expansion::expansion_control;
    let v = TextVariant::read("heads_expansion_vs_torch.safetensors");
    let expansion = v.e["config.expansion"].to_scalar::<i64>().unwrap() as usize;
    let full_l = v.model.full_lexicons(&v.batch.xl, false).unwrap();
    let pl = expansion_control(&full_l, &v.own, &v.words, expansion).unwrap();
    assert_close("text lexicons", &pl, &v.e["expect.pl"]);
    let weights = StepWeights {
        text_expansion: Some(expansion),
        ..fixture_weights(&v.f)
    };
    v.assert_step(weights);
}

/// The own-word floor on the top-K text lexicons (`--own-floor 0.4`, word 13 a template word):
/// the caption lexicons, the step's total and its gradients against the PyTorch reference on
/// the same inputs (`scripts/make_heads_fixtures.py`; the fixture lifts at least one word).
#[test]
fn the_heads_step_with_an_own_word_floor_equals_the_pytorch_reference() {
    use lexlip_train::expansion::own_floor;
    let v = TextVariant::read("heads_own_floor_vs_torch.safetensors");
    let share = scalar(&v.e["config.own_floor"]);
    let weights = StepWeights {
        own_floor: Some(share),
        ..fixture_weights(&v.f)
    };
    let full_l = v.model.full_lexicons(&v.batch.xl, false).unwrap();
    let cut = lexlip_train::lexicon::top_k(&full_l, weights.text_k).unwrap();
    let pl = own_floor(&cut, &full_l, &v.own, share).unwrap();
    assert_close("text lexicons", &pl, &v.e["expect.pl"]);
    let lifted = (&pl - &cut).unwrap().abs().unwrap().gt(0.0).unwrap();
    let lifted = lifted.to_dtype(DType::F32).unwrap().sum_all().unwrap();
    assert!(lifted.to_scalar::<f32>().unwrap() > 0.0, "a word is lifted");
    v.assert_step(weights);
}

/// The gradient of the step's loss with respect to the image head's bias equals central
/// finite differences (f64, no top-K cut so the loss is smooth where no logit crosses 0).
#[test]
fn the_heads_gradient_matches_finite_differences() {
    let dev = Device::Cpu;
    let f = fixture();
    let g = |n: &str| f[n].to_dtype(DType::F64).unwrap();
    let batch = FixtureBatch::read(&f, &g);
    let weights = StepWeights {
        image_k: 20,
        text_k: 20,
        text_expansion: None,
        own_floor: None,
        tau: 0.5,
        teacher_tau: 0.1,
        distill: 0.8,
        flops_image: 0.03,
        flops_text: 0.01,
        grounding: 0.6,
        caption_words: 0.7,
        caption_words_text: 0.4,
        caption_words_tau: 0.2,
    };
    let loss_with = |bv: &Tensor| -> (f64, Option<Tensor>) {
        let model = HeadsModel::from_tensors(
            [g("input.wv"), bv.clone(), g("input.wl"), g("input.bl")],
            [g("input.cv"), g("input.cl")],
            g("input.allowed"),
        )
        .unwrap();
        let total = step_losses(&model, &batch.inputs(None), weights)
            .unwrap()
            .total;
        let grads = total.backward().unwrap();
        let grad = grads.get(model.image_bias.as_tensor()).cloned();
        (scalar(&total), grad)
    };
    let bv = g("input.bv");
    let (_, grad) = loss_with(&bv);
    let grad = grad.unwrap().to_vec1::<f64>().unwrap();
    let eps = 1e-6;
    let base = bv.to_vec1::<f64>().unwrap();
    let mut checked = 0;
    for (j, &analytic) in grad.iter().enumerate() {
        let at = |d: f64| {
            let mut v = base.clone();
            v[j] += d;
            loss_with(&Tensor::from_vec(v, base.len(), &dev).unwrap()).0
        };
        let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
        assert!(
            (numeric - analytic).abs() <= 1e-6 + 1e-4 * analytic.abs(),
            "term {j}: finite differences {numeric}, backward {analytic}"
        );
        checked += usize::from(analytic != 0.0);
    }
    assert!(checked >= 5, "only {checked} terms carry a gradient");
    let _ = Var::from_tensor(&bv);
}

/// Rows `start..end` of a made-up section: row r is `[r, r + 0.5, …]`.
fn rows(start: usize, end: usize, dim: usize) -> Vec<f32> {
    (start..end)
        .flat_map(|r| (0..dim).map(move |c| r as f32 + c as f32 * 0.5))
        .collect()
}

fn meta_for(backbone: &Path, n: usize) -> CacheMeta {
    let mut m = CacheMeta::new(
        backbone,
        "corpus-1".into(),
        3,
        &[("images", n), ("texts", 2)],
    )
    .unwrap();
    m.shard_rows = 2;
    m
}

fn sections<'a>(n: usize, fail_after: Option<usize>) -> Vec<Section<'a>> {
    let mut calls = 0;
    vec![
        Section {
            name: "images",
            rows: n,
            encode: Box::new(move |s, e| {
                calls += 1;
                if fail_after.is_some_and(|f| calls > f) {
                    return Err(lexlip_train::TrainError::invalid("killed"));
                }
                Ok(rows(s, e, 3))
            }),
        },
        Section {
            name: "texts",
            rows: 2,
            encode: Box::new(|s, e| Ok(rows(100 + s, 100 + e, 3))),
        },
    ]
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// A stand-in backbone: only a `config.json` holding `config` (the cache is keyed by its files).
fn fake_backbone(dir: &Path, config: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), config).unwrap();
    dir.to_path_buf()
}

/// Builds the cache of `n` made-up images into `dir`, killed after `fail_after` image shards.
fn build_cache(
    dir: &Path,
    backbone: &Path,
    n: usize,
    fail_after: Option<usize>,
) -> lexlip_train::Result<EmbeddingCache> {
    EmbeddingCache::build(
        dir,
        meta_for(backbone, n),
        sections(n, fail_after),
        &mut |_, _| {},
    )
}

/// The message of the error a cache build or open must stop with.
fn refusal(r: lexlip_train::Result<EmbeddingCache>) -> String {
    r.err().unwrap().to_string()
}

#[test]
fn a_killed_cache_build_resumes_to_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let backbone = fake_backbone(&tmp.path().join("backbone"), "{}");
    let (whole, parts) = (tmp.path().join("whole"), tmp.path().join("parts"));
    let c = build_cache(&whole, &backbone, 5, None).unwrap();
    let dev = Device::Cpu;
    let got = c.rows("images", &[4, 0, 3], &dev).unwrap();
    assert_eq!(
        got.to_vec2::<f32>().unwrap(),
        vec![
            vec![4.0, 4.5, 5.0],
            vec![0.0, 0.5, 1.0],
            vec![3.0, 3.5, 4.0]
        ]
    );
    assert_eq!(
        c.rows("texts", &[1], &dev)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap()[0][0],
        101.0
    );
    // Killed after the first shard: the shards so far are whole and kept.
    let e = refusal(build_cache(&parts, &backbone, 5, Some(1)));
    assert!(e.contains("killed"), "{e}");
    assert!(parts.join("images-00000.f32").is_file());
    assert!(!parts.join("images-00001.f32").exists());
    // The next start encodes only what is missing (a section that fails at once would stop it).
    let mut encoded = Vec::new();
    let mut s = sections(5, None);
    s[0].encode = Box::new(|st, en| {
        encoded.push(st);
        Ok(rows(st, en, 3))
    });
    EmbeddingCache::build(&parts, meta_for(&backbone, 5), s, &mut |_, _| {}).unwrap();
    assert_eq!(encoded, vec![2, 4], "shard 0 was kept");
    assert_eq!(files(&whole), files(&parts));
}

#[test]
fn a_corrupt_shard_or_another_backbone_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let backbone = fake_backbone(&tmp.path().join("backbone"), "{}");
    let dir = tmp.path().join("cache");
    build_cache(&dir, &backbone, 5, None).unwrap();
    let before = files(&dir);
    // Another backbone (its files differ): refused, nothing written.
    let other = fake_backbone(&tmp.path().join("other"), "{\"x\": 1}");
    let e = refusal(build_cache(&dir, &other, 5, None));
    assert!(
        e.contains("another backbone") && e.contains("--cache"),
        "{e}"
    );
    // Another corpus: refused too.
    let e = refusal(build_cache(&dir, &backbone, 4, None));
    assert!(e.contains("another corpus"), "{e}");
    assert_eq!(files(&dir), before);
    // One flipped byte in a shard: refused with the shard's name.
    let shard = dir.join("images-00001.f32");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[5] ^= 0x40;
    std::fs::write(&shard, &bytes).unwrap();
    let e = refusal(EmbeddingCache::open(&dir, &meta_for(&backbone, 5)));
    assert!(
        e.contains("images-00001.f32") && e.contains("corrupt"),
        "{e}"
    );
    // A truncated one too.
    std::fs::write(&shard, &bytes[..10]).unwrap();
    let e = refusal(EmbeddingCache::open(&dir, &meta_for(&backbone, 5)));
    assert!(e.contains("corrupt") && e.contains("bytes"), "{e}");
}

fn heads_options(tsv: &Path, backbone: &Path, out: &Path) -> TrainOptions {
    let mut o = fast_options(tsv, out);
    o.model.tokenizer = None;
    o.method.objective = Objective::Heads;
    o.model.backbone = Some(backbone.to_path_buf());
    o.method.tau = 0.5;
    o.lexicon.image_top_k = 8;
    o.lexicon.text_top_k = 4;
    o.lexicon.teacher_tau = 0.1;
    o.optim.steps = Some(10);
    o.optim.lr = 1e-3;
    o.run.checkpoint_every = 4;
    o
}

/// [`heads_options`] reading the embedding cache at `cache` (runs that share one cache).
fn cached_heads_options(tsv: &Path, backbone: &Path, out: &Path, cache: &Path) -> TrainOptions {
    let mut o = heads_options(tsv, backbone, out);
    o.model.cache = Some(cache.to_path_buf());
    o
}

/// The exported heads' weights of a run into `dir` (runs are compared bit for bit).
fn head_weights(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("heads/model.safetensors")).unwrap()
}

#[test]
fn heads_train_on_the_cache_and_export_a_model_every_command_loads() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let out = tmp.path().join("heads");
    let o = heads_options(&tsv, &dense, &out);
    let (s, seen) = run_collecting(&o);
    for l in &seen.logs {
        let (v, t) = (l.nnz_image.unwrap_or(99.0), l.nnz_text.unwrap_or(99.0));
        assert!(v <= 8.0 && t <= 4.0, "step {}: {v} / {t} terms", l.step);
        for part in ["i2t", "t2i", "distill", "flops_image", "flops_text"] {
            assert!(l.parts[part].is_finite(), "{part} at step {}", l.step);
        }
    }
    assert_eq!((s.steps_done, s.pairs, s.images), (10, 32, 16));
    let dev = Device::Cpu;
    // The cache holds what the backbone gives for the same images and captions (a batch of
    // one rounds differently from the cache's batches in the last bits).
    let backbone = Encoders::load(&dense, &dev).unwrap();
    let d = backbone.dense().unwrap();
    let png = common::shape_png([220, 30, 30], "square", 24);
    let img = d.preprocess_image(&png, "red-square").unwrap();
    let want = d.encode_images(std::slice::from_ref(&img)).unwrap();
    let meta: CacheMeta =
        serde_json::from_str(&std::fs::read_to_string(out.join("cache/cache.json")).unwrap())
            .unwrap();
    let cache = EmbeddingCache::open(&out.join("cache"), &meta).unwrap();
    // red-square is the first image of the TSV, "a red square" its first caption.
    let row = cache
        .rows("images", &[0], &dev)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert!(common::max_abs_diff(&row[0], want[0].as_slice()) < 1e-5);
    let text = cache
        .rows("texts", &[0], &dev)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let want = d.encode_texts(&["a red square"]).unwrap();
    assert!(common::max_abs_diff(&text[0], want[0].as_slice()) < 1e-5);
    assert_eq!(cache.len("words"), 30522);

    // The exported directory: dense/ + heads/, loaded as any model.
    let model = Encoders::load(&out, &dev).unwrap();
    assert!(model.has_text() && model.has_image() && model.dense().is_some());
    let image = model.image().unwrap();
    assert_eq!(image.image_size(), 16);
    let pngs: Vec<_> = [("red", "disc"), ("blue", "bar"), ("green", "cross")]
        .iter()
        .map(|(c, s)| {
            let rgb = common::COLOURS.iter().find(|(n, _)| n == c).unwrap().1;
            image
                .preprocess_named(&common::shape_png(rgb, s, 30), s)
                .unwrap()
        })
        .collect();
    let batched = image.encode(&pngs).unwrap();
    // A 40-step backbone's cosines are nearly flat, so some lexicons of this tiny model are
    // empty; the real models' are measured by `lexlip eval` (docs/benchmarks.md).
    assert!(
        batched.iter().any(|v| !v.is_empty()),
        "every image lexicon is empty"
    );
    for (i, p) in pngs.iter().enumerate() {
        let one = image.encode(std::slice::from_ref(p)).unwrap();
        let (a, b) = (&one[0], &batched[i]);
        assert_eq!(a.len(), b.len(), "batched = one by one");
        for ((ta, wa), (tb, wb)) in a.iter().zip(b.iter()) {
            assert!(ta == tb && (wa - wb).abs() < 1e-4, "{ta} {wa} vs {tb} {wb}");
        }
        assert!(one[0].len() <= 8, "{} terms", one[0].len());
    }
    let texts = model
        .text()
        .unwrap()
        .encode(&["a red disc", "bar in blue"])
        .unwrap();
    for t in &texts {
        assert!(t.len() <= 4, "{} terms", t.len());
        for (term, _) in t.iter() {
            assert!(!term.starts_with('['), "special token {term} in a lexicon");
        }
    }
    let meta = train_json(&out);
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["options"]["objective"], "heads");
    // A second start finds it complete and changes nothing.
    let record = std::fs::read(out.join("train.json")).unwrap();
    assert!(run_quietly(&o).already_complete);
    assert_eq!(std::fs::read(out.join("train.json")).unwrap(), record);

    // Resume is bitwise: stopped at step 4 and resumed equals the uninterrupted run.
    let parts = tmp.path().join("parts");
    let p = cached_heads_options(&tsv, &dense, &parts, &out.join("cache"));
    common::train_stopped_and_resumed(&p, 4, "heads/config.json");
    assert_eq!(head_weights(&parts), head_weights(&out));
    // The shared cache was reused, not rebuilt in parts/.
    assert!(!parts.join("cache").exists());
}

/// The heads' biases of a run: (image, text).
fn biases(out: &Path) -> [Vec<f32>; 2] {
    let w =
        candle_core::safetensors::load(out.join("heads/model.safetensors"), &Device::Cpu).unwrap();
    ["image_head.bias", "text_head.bias"].map(|name| {
        w[name]
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    })
}

/// `--vocab-bias fixed` (the default) keeps each head's one shared starting bias, so no term
/// is raised for every item alike; `--vocab-bias train` lets each term learn its own.
#[test]
fn a_fixed_bias_stays_shared_and_a_trained_one_moves() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let fixed = tmp.path().join("fixed");
    let o = heads_options(&tsv, &dense, &fixed);
    assert_eq!(o.lexicon.vocab_bias, VocabBias::Fixed);
    run_for(o, 4);
    for b in biases(&fixed) {
        assert!(
            b.iter().all(|&x| x == b[0] && x.is_finite()),
            "one shared bias"
        );
    }
    let trained = tmp.path().join("trained");
    let mut t = cached_heads_options(&tsv, &dense, &trained, &fixed.join("cache"));
    t.lexicon.vocab_bias = VocabBias::Train;
    run_for(t, 4);
    for (b, start) in biases(&trained).iter().zip(biases(&fixed)) {
        assert!(b.iter().any(|&x| x != start[0]), "a trained bias moved");
    }
}

#[test]
fn heads_options_and_inputs_are_checked() {
    let (tmp, tsv) = corpus();
    let out = tmp.path().join("out");
    // No backbone.
    let mut o = heads_options(&tsv, Path::new("unused"), &out);
    o.model.backbone = None;
    assert!(err_of(&o).contains("--backbone"), "{}", err_of(&o));
    // --backbone without --objective heads.
    let mut o = fast_options(&tsv, &out);
    o.model.backbone = Some(tmp.path().to_path_buf());
    assert!(err_of(&o).contains("--objective heads"), "{}", err_of(&o));
    // A backbone that is no dense model (the tiny SPLADE text model).
    let o = heads_options(&tsv, &common::splade_dir(), &out);
    let e = err_of(&o);
    assert!(e.contains("not a dense model"), "{e}");
    // A path that is nothing.
    let o = heads_options(&tsv, &tmp.path().join("missing"), &out);
    assert!(!err_of(&o).is_empty());
    assert!(!out.join("heads").exists(), "nothing exported");
}

/// A corpus smaller than --batch-size trains with batches of the whole corpus and says so
/// (recipe 3 on a handful of pairs), rather than failing.
#[test]
fn a_batch_larger_than_the_corpus_fits_it() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let mut o = heads_options(&tsv, &dense, &tmp.path().join("heads"));
    o.optim.batch_size = 64;
    o.optim.steps = Some(2);
    let (s, seen) = run_collecting(&o);
    assert_eq!((s.steps_done, s.pairs), (2, 32));
    let note = seen
        .messages
        .iter()
        .find(|m| m.contains("--batch-size 64 is more than the 32 usable pairs"))
        .unwrap_or_else(|| panic!("{:?}", seen.messages));
    assert!(note.contains("batches of 32"), "{note}");
}

/// A cache built with one vocabulary is refused under another (`--tokenizer`).
#[test]
fn a_cache_of_another_vocabulary_is_refused() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let out = tmp.path().join("heads");
    run_for(heads_options(&tsv, &dense, &out), 1);
    let other = tmp.path().join("other");
    let mut other = cached_heads_options(&tsv, &dense, &other, &out.join("cache"));
    other.model.tokenizer = Some(common::small_tokenizer());
    let e = err_of(&other);
    assert!(e.contains("another corpus or vocabulary"), "{e}");
}

/// `--sampler grouped` over heads: the backbone's embeddings group each epoch's pairs (the
/// first epoch too), so the run differs from the random order's; it is drawn from the seed and
/// the epoch alone, so a run stopped mid-epoch resumes to the same bytes.
#[test]
fn grouped_heads_batches_resume_bitwise() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let cache = tmp.path().join("cache");
    let random = |out: &Path| cached_heads_options(&tsv, &dense, out, &cache);
    let grouped = |out: &Path| {
        let mut o = random(out);
        o.optim.sampler = lexlip_train::sampler::Sampler::Grouped;
        o.optim.group_size = 16;
        o
    };
    let whole = tmp.path().join("whole");
    run_quietly(&grouped(&whole));
    let parts = tmp.path().join("parts");
    common::train_stopped_and_resumed(&grouped(&parts), 6, "heads/config.json");
    assert_eq!(head_weights(&parts), head_weights(&whole));
    let unordered = tmp.path().join("random");
    run_quietly(&random(&unordered));
    assert_ne!(
        head_weights(&unordered),
        head_weights(&whole),
        "grouping changed no batch"
    );
}

/// `--image-views` over heads: with augmentation off every view's row equals its picture's;
/// with it on the views differ and the same run rebuilds them to the same bytes; each pair is
/// trained once per input, the run changes, and it resumes bitwise, with the grouped sampler
/// too.
#[test]
fn heads_train_over_augmented_views() {
    let (tmp, dense, tsv) = common::dense_backbone();
    let cache = tmp.path().join("cache");
    let viewed = |out: &Path, views: usize, identity: bool| {
        let mut o = cached_heads_options(&tsv, &dense, out, &cache);
        common::with_views(&mut o, views, identity);
        o
    };
    let shard = |path: &str| std::fs::read(cache.join(path)).unwrap();
    let views_shard = || std::fs::read(common::views_dir(&cache).join("views-00000.f32")).unwrap();
    let s = run_quietly(&viewed(&tmp.path().join("identity"), 2, true));
    assert_eq!((s.pairs, s.images), (32 * 3, 16));
    let images = shard("images-00000.f32");
    assert_eq!(views_shard(), [images.clone(), images.clone()].concat());
    // Augmented: other views, in a directory of their own beside the same pictures.
    std::fs::remove_dir_all(common::views_dir(&cache)).unwrap();
    let whole = tmp.path().join("whole");
    run_quietly(&viewed(&whole, 1, false));
    let views = views_shard();
    assert_eq!(views.len(), images.len());
    assert_ne!(views, images, "the views are augmented");
    std::fs::remove_dir_all(common::views_dir(&cache)).unwrap();
    run_quietly(&viewed(&tmp.path().join("again"), 1, false));
    assert_eq!(views_shard(), views, "the same views again");
    assert_eq!(shard("images-00000.f32"), images, "the pictures' rows kept");
    let plain = tmp.path().join("plain");
    run_quietly(&cached_heads_options(&tsv, &dense, &plain, &cache));
    assert_ne!(
        head_weights(&plain),
        head_weights(&whole),
        "the views changed no step"
    );
    let parts = tmp.path().join("parts");
    common::train_stopped_and_resumed(&viewed(&parts, 1, false), 4, "heads/config.json");
    assert_eq!(head_weights(&parts), head_weights(&whole));
    assert_eq!(train_json(&whole)["options"]["image_views"], 1);
    // The grouped sampler orders pairs and views alike (every epoch all of them, two epochs
    // here), changes the run and resumes to the same bytes.
    let grouped = |out: &Path| {
        let mut o = viewed(out, 1, false);
        o.optim.sampler = lexlip_train::sampler::Sampler::Grouped;
        o.optim.group_size = 16;
        o.optim.steps = Some(10);
        o
    };
    let g = tmp.path().join("grouped");
    run_quietly(&grouped(&g));
    let mut uniform = grouped(&tmp.path().join("uniform"));
    uniform.optim.sampler = lexlip_train::sampler::Sampler::Random;
    run_quietly(&uniform);
    assert_ne!(
        head_weights(&tmp.path().join("uniform")),
        head_weights(&g),
        "grouping changed no batch"
    );
    let parts = tmp.path().join("grouped-parts");
    common::train_stopped_and_resumed(&grouped(&parts), 9, "heads/config.json");
    assert_eq!(head_weights(&parts), head_weights(&g));
}
