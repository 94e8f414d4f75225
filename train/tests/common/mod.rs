//! Shared helpers of the training tests: the tiny SPLADE model, fixture paths, a synthetic corpus.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// lexlip-model's test fixtures (tiny BEiT, tiny LexLIP checkpoint).
pub fn model_fixtures() -> PathBuf {
    workspace().join("model/tests/fixtures")
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

// The test models' fetch helpers are the end-to-end harness's (`tests/src/models.rs`).
#[path = "../../../tests/src/models.rs"]
mod models;
#[allow(unused_imports)] // not every test binary fetches both
pub use models::{mobilenet_dir, splade_dir};

/// A tiny dense dual encoder over BERT's vocabulary (a backbone for the heads and the adapter),
/// trained in `tmp/dense` on the synthetic corpus of `tmp/data`.
pub fn tiny_dense(tmp: &Path) -> PathBuf {
    let tsv = synthetic_tsv(&tmp.join("data"), &[]);
    let out = tmp.join("dense");
    let mut o = fast_options(&tsv, &out);
    o.method.objective = lexlip_train::Objective::Dense;
    // BERT's real vocabulary (the tiny SPLADE model's tokenizer), whose words a lexicon can
    // hold; the dense towers have no vocabulary-sized layer, so it costs little.
    o.model.tokenizer = Some(splade_dir().join("tokenizer.json"));
    o.method.dense_dim = 16;
    o.optim.warmup = 0.05;
    run_for(o, 40);
    out
}

/// Max |a - b| over two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The 1,000-token BERT word-piece tokenizer of lexlip-model's fixtures (fast tests).
pub fn small_tokenizer() -> PathBuf {
    model_fixtures().join("vocab1000/tokenizer.json")
}

pub const COLOURS: [(&str, [u8; 3]); 4] = [
    ("red", [220, 30, 30]),
    ("green", [30, 200, 40]),
    ("blue", [30, 40, 220]),
    ("yellow", [230, 220, 30]),
];
pub const SHAPES: [&str; 4] = ["square", "disc", "bar", "cross"];

/// A `size`×`size` PNG of a coloured shape on white.
pub fn shape_png(colour: [u8; 3], shape: &str, size: u32) -> Vec<u8> {
    let c = size as i64 / 2;
    let img = image::RgbImage::from_fn(size, size, |x, y| {
        let (dx, dy) = (x as i64 - c, y as i64 - c);
        let r = size as i64 / 3;
        let inside = match shape {
            "square" => dx.abs() < r && dy.abs() < r,
            "disc" => dx * dx + dy * dy < r * r,
            "bar" => dy.abs() < r / 3,
            _ => dx.abs() < r / 4 || dy.abs() < r / 4,
        };
        image::Rgb(if inside { colour } else { [255, 255, 255] })
    });
    let mut out = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

/// Writes 16 shape images and a caption TSV (two captions per image) into `dir`; returns the
/// TSV path. `extra` lines are appended verbatim (bad items for error tests).
pub fn synthetic_tsv(dir: &Path, extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir.join("img")).unwrap();
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    for (ci, (colour, rgb)) in COLOURS.iter().enumerate() {
        for (si, shape) in SHAPES.iter().enumerate() {
            let id = format!("{colour}-{shape}");
            let rel = format!("img/{id}.png");
            std::fs::write(
                dir.join(&rel),
                shape_png(*rgb, shape, 24 + 4 * (ci + si) as u32),
            )
            .unwrap();
            tsv.push_str(&format!("a {colour} {shape}\t{rel}\t{id}\n"));
            tsv.push_str(&format!("{shape} in {colour}\t{rel}\t{id}\n"));
        }
    }
    for e in extra {
        tsv.push_str(e);
        tsv.push('\n');
    }
    let path = dir.join("captions.tsv");
    std::fs::write(&path, tsv).unwrap();
    path
}

/// Options for a fast run on [`synthetic_tsv`]: vocabulary 1,000, text and image towers from
/// scratch (tiny preset, 16 px images, patch 8), no dropout or augmentation.
pub fn fast_options(tsv: &Path, out: &Path) -> lexlip_train::TrainOptions {
    let mut o = lexlip_train::TrainOptions::new(out);
    o.data.tsv = Some(tsv.to_path_buf());
    o.model.tokenizer = Some(small_tokenizer());
    o.model.image_size = Some(16);
    o.model.patch_size = Some(8);
    o.model.image_config = lexlip_train::Preset::Tiny;
    o.optim.batch_size = 8;
    o.optim.steps = Some(6);
    o.optim.lr = 1e-3;
    o.optim.dropout = 0.0;
    o.data.crop_scale = 1.0;
    o.data.color_jitter = 0.0;
    o.run.log_every = 1;
    o.data.max_length = 12;
    o
}

/// Collects the logged steps.
#[derive(Default)]
pub struct Collect {
    pub logs: Vec<lexlip_train::StepLog>,
    pub messages: Vec<String>,
}

impl lexlip_train::Observer for Collect {
    fn message(&mut self, text: &str) {
        self.messages.push(text.to_string());
    }
    fn step(&mut self, log: &lexlip_train::StepLog) {
        self.logs.push(log.clone());
    }
}

/// The bytes of every file under `dir`'s `text/` and `image/` model files.
pub fn model_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    ["text/model.safetensors", "image/model.safetensors"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
        .collect()
}

/// The message of the error `train` stops with (it must stop with one).
pub fn err_of(o: &lexlip_train::TrainOptions) -> String {
    lexlip_train::train(
        o,
        &lexlip_train::RunControl::default(),
        &mut Collect::default(),
    )
    .map(|_| ())
    .unwrap_err()
    .to_string()
}

/// [`fast_options`] for the resume tests: 6 steps, a checkpoint every 2, dropout and every
/// augmentation on (all of them must resume bit for bit).
pub fn resume_options(tsv: &Path, out: &Path) -> lexlip_train::TrainOptions {
    let mut o = fast_options(tsv, out);
    o.optim.steps = Some(6);
    o.optim.dropout = 0.1;
    o.data.crop_scale = 0.6;
    o.data.color_jitter = 0.2;
    o.data.hflip = true;
    o.run.checkpoint_every = 2;
    o
}

/// Runs `o` stopped after `stop` steps (which exports the model so far: `marker` in `--out`),
/// then the same options again, which must resume there and finish.
pub fn train_stopped_and_resumed(o: &lexlip_train::TrainOptions, stop: u64, marker: &str) {
    let control = lexlip_train::RunControl::default();
    let mut first = o.clone();
    first.run.stop_at = Some(stop);
    let s = lexlip_train::train(&first, &control, &mut Collect::default()).unwrap();
    assert!(s.interrupted);
    assert_eq!(s.steps_done, stop);
    assert!(
        o.run.out.join(marker).is_file(),
        "a stopped run leaves a usable model ({marker})"
    );
    let mut seen = Collect::default();
    let s = lexlip_train::train(o, &control, &mut seen).unwrap();
    assert_eq!((s.resumed_from, s.steps_done), (stop, s.total_steps));
    assert!(seen.messages.iter().any(|m| m.contains("resuming")));
}

/// Copies the model directory `from` (its `files` and `model.safetensors`) into `to`, leaving
/// out the tensors whose names start with `prefix` (e.g. `cls.`: a model without its MLM head).
pub fn copy_without(from: &Path, to: &Path, files: &[&str], prefix: &str) {
    std::fs::create_dir_all(to).unwrap();
    for f in files {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    let w =
        candle_core::safetensors::load(from.join("model.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    let w: std::collections::HashMap<_, _> = w
        .into_iter()
        .filter(|(k, _)| !k.starts_with(prefix))
        .collect();
    candle_core::safetensors::save(&w, to.join("model.safetensors")).unwrap();
}

/// `n` images of normalised pixels in [-1, 1] from a fixed stream.
pub fn random_images(n: usize, size: usize, seed: u64) -> Vec<lexlip_model::PreprocessedImage> {
    let mut r = lexlip_train::rng::Rng::new(&[seed]);
    (0..n)
        .map(|_| {
            let data = (0..3 * size * size)
                .map(|_| r.uniform_f32() * 2.0 - 1.0)
                .collect();
            lexlip_model::PreprocessedImage::from_chw(size, data).unwrap()
        })
        .collect()
}

/// The arithmetic mean.
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sets `o` to 40 steps, runs it on the 32 pairs of [`synthetic_tsv`] and checks that the mean
/// loss of the last 5 steps is under 0.7 times that of the first 5; returns what was logged.
pub fn forty_steps_lower_the_loss(o: &mut lexlip_train::TrainOptions) -> Collect {
    o.optim.steps = Some(40);
    o.optim.warmup = 0.05;
    let (s, seen) = run_collecting(o);
    assert_eq!(
        (s.steps_done, s.total_steps, s.pairs, s.images),
        (40, 40, 32, 16)
    );
    assert!(!s.interrupted);
    let losses: Vec<f64> = seen.logs.iter().map(|l| l.loss).collect();
    assert_eq!(losses.len(), 40);
    let (first, last) = (mean(&losses[..5]), mean(&losses[35..]));
    eprintln!("{:?} loss {first:.3} → {last:.3}", o.method.objective);
    assert!(
        last < 0.7 * first,
        "loss {first:.3} → {last:.3}: {losses:?}"
    );
    seen
}

/// How most tests start: a fresh temporary directory with the synthetic corpus' TSV in `data/`.
pub fn corpus() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let tsv = synthetic_tsv(&tmp.path().join("data"), &[]);
    (tmp, tsv)
}

/// How the heads and adapter tests start: a temporary directory, [`tiny_dense`] in it, its TSV.
pub fn dense_backbone() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dense = tiny_dense(tmp.path());
    let tsv = tmp.path().join("data/captions.tsv");
    (tmp, dense, tsv)
}

/// Trains `o` to the end, keeping what it logged (for tests that read the steps or messages).
pub fn run_collecting(o: &lexlip_train::TrainOptions) -> (lexlip_train::Summary, Collect) {
    let mut seen = Collect::default();
    let s = lexlip_train::train(o, &lexlip_train::RunControl::default(), &mut seen).unwrap();
    (s, seen)
}

/// `got` within `tol` of the hand-computed `want` (a loss against its plain computation).
pub fn assert_near(got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() < tol, "{got} vs {want}");
}

/// A short run of `o` (`steps` steps whatever its own count) whose output a test then reads.
pub fn run_for(mut o: lexlip_train::TrainOptions, steps: u64) -> lexlip_train::Summary {
    o.optim.steps = Some(steps);
    run_quietly(&o)
}

/// Trains `o` to the end (or its `--stop-at`) without looking at the progress.
pub fn run_quietly(o: &lexlip_train::TrainOptions) -> lexlip_train::Summary {
    lexlip_train::train(
        o,
        &lexlip_train::RunControl::default(),
        &mut Collect::default(),
    )
    .unwrap()
}

/// The `train.json` of a run into `out`.
pub fn train_json(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("train.json")).unwrap()).unwrap()
}

/// A tensor's values as f64, flattened.
pub fn values(t: &candle_core::Tensor) -> Vec<f64> {
    t.to_dtype(candle_core::DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Every component of `got` within `tol` of the largest magnitude in `want` (candle against a
/// PyTorch reference).
pub fn assert_close_within(
    tol: f64,
    name: &str,
    got: &candle_core::Tensor,
    want: &candle_core::Tensor,
) {
    let (g, w) = (values(got), values(want));
    assert_eq!(g.len(), w.len(), "{name}: sizes differ");
    let scale = w.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= tol * scale,
            "{name}[{k}]: candle {a} vs torch {b}"
        );
    }
}

/// `got` has `want`'s shape and every component within `tol` times the largest magnitude in
/// `want` (no floor: a reference of small values is held to a small bound), which must not be
/// all zeros.
pub fn assert_tensor_close(
    what: &str,
    got: &candle_core::Tensor,
    want: &candle_core::Tensor,
    tol: f64,
) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    let f32s =
        |t: &candle_core::Tensor| -> Vec<f32> { values(t).into_iter().map(|v| v as f32).collect() };
    let (got, want) = (f32s(got), f32s(want));
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{what}: the reference is all zeros");
    let err = max_abs_diff(&got, &want);
    assert!(
        f64::from(err) <= tol * f64::from(scale),
        "{what}: max |diff| {err:e} against a largest component of {scale}"
    );
}

/// Token ids `(rows, t)`, each row padded with 0 to `t` (what the text encoder's batch pads to).
pub fn padded_ids(ids: &[Vec<u32>], t: usize, dev: &candle_core::Device) -> candle_core::Tensor {
    let flat: Vec<u32> = ids
        .iter()
        .flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(0, t - r.len())))
        .collect();
    candle_core::Tensor::from_vec(flat, (ids.len(), t), dev).unwrap()
}

/// Preprocessed images of side `size` as one `(n, 3, size, size)` pixel tensor.
pub fn pixels_of(
    images: &[lexlip_model::PreprocessedImage],
    size: usize,
    dev: &candle_core::Device,
) -> candle_core::Tensor {
    let flat: Vec<f32> = images.iter().flat_map(|i| i.data().to_vec()).collect();
    candle_core::Tensor::from_vec(flat, (images.len(), 3, size, size), dev).unwrap()
}

/// `(rows, tokens, vocab)` logits of `got` and `want` agree within `tol` on each row's first
/// `lens[row]` tokens (padding may differ).
pub fn assert_rows_close(
    got: &candle_core::Tensor,
    want: &candle_core::Tensor,
    lens: &[usize],
    tol: f32,
    what: &str,
) {
    let row = |t: &candle_core::Tensor, i: usize, n: usize| -> Vec<f32> {
        let r = t.get(i).unwrap().narrow(0, 0, n).unwrap();
        r.flatten_all().unwrap().to_vec1().unwrap()
    };
    for (i, &n) in lens.iter().enumerate() {
        let d = max_abs_diff(&row(got, i, n), &row(want, i, n));
        assert!(d < tol, "{what} row {i}: max abs diff {d}");
    }
}

/// A training text tower's `logits(ids, mask)` row-close to `enc`'s on `texts`; returns both.
pub fn assert_text_logits_close(
    enc: &lexlip_model::TextEncoder,
    texts: &[&str],
    tol: f32,
    logits: &dyn Fn(&candle_core::Tensor, &candle_core::Tensor) -> candle_core::Tensor,
) -> (candle_core::Tensor, candle_core::Tensor) {
    let (want, mask) = enc.logits(texts).unwrap();
    let ids = enc.tokenize(texts).unwrap();
    let ids_t = padded_ids(&ids, mask.dim(1).unwrap(), mask.device());
    let got = logits(&ids_t, &mask);
    let lens: Vec<usize> = ids.iter().map(Vec::len).collect();
    assert_rows_close(&got, &want, &lens, tol, "text");
    (got, want)
}

/// The one directory of augmented views (`views-HASH`) in a cache directory.
pub fn views_dir(cache: &Path) -> PathBuf {
    let found: Vec<_> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("views-"))
        })
        .collect();
    assert_eq!(found.len(), 1, "one views directory in {}", cache.display());
    found[0].clone()
}

/// `--image-views N` with augmentation off (every view is its picture) or on (crops, jitter,
/// flips and flat redraws).
pub fn with_views(o: &mut lexlip_train::TrainOptions, views: usize, identity: bool) {
    o.model.image_views = views;
    if identity {
        (o.data.crop_scale, o.data.color_jitter) = (1.0, 0.0);
    } else {
        (o.data.crop_scale, o.data.color_jitter) = (0.5, 0.3);
        (o.data.hflip, o.data.style_augment) = (true, 1.0);
    }
}
