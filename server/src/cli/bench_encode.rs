//! `lexlip bench encode`: encoder throughput (texts/s, images/s) for several batch sizes.

use std::time::{Duration, Instant};

use lexlip_model::{DType, ImageEncoder, PreprocessedImage, Vocabulary};
use serde::Serialize;

use super::model_args::ModelArgs;

/// The model's text encoder is timed; so is its image encoder unless --random-beit-base
/// replaces it. A dense-only model (CLIP, SigLIP, MobileCLIP, `--objective dense`) has its dense
/// towers timed instead.
#[derive(clap::Args, Debug)]
#[command(mut_arg("model", |a| a.required_unless_present("random_beit_base")))]
pub struct BenchEncodeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Time a random BEiT-B/16 + MLM head as the image encoder.
    ///
    /// At 224 px, random weights (fixed seed): the speed of LexLIP's image tower without a
    /// checkpoint.
    #[arg(long)]
    pub random_beit_base: bool,
    /// Batch sizes to time (`1,8,32` or `1 8 32`).
    #[arg(long, value_delimiter = ',', num_args = 1.., default_values_t = [1usize, 8, 32])]
    pub batch_sizes: Vec<usize>,
    /// Minimum measuring time per batch size, seconds.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Image encoder dtype (default: f32 on CPU, f16 on GPU).
    #[arg(long, value_parser = ["f32", "f16", "bf16"])]
    pub dtype: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Debug)]
struct Row {
    batch: usize,
    items_per_s: f64,
    ms_per_batch: f64,
}

#[derive(Serialize, Debug, Default)]
struct Report {
    device: String,
    threads: usize,
    text_model: Option<String>,
    text: Vec<Row>,
    image_model: Option<String>,
    image_dtype: Option<String>,
    image: Vec<Row>,
    /// Decode + resize + normalise of a 640×480 JPEG on one thread.
    preprocess_images_per_s_one_thread: Option<f64>,
    /// A dense-only model's towers (embeddings, no lexicon).
    dense_model: Option<String>,
    dense_text: Vec<Row>,
    dense_image: Vec<Row>,
}

pub fn run(args: BenchEncodeArgs) -> anyhow::Result<()> {
    let device = lexlip_model::device(args.model.gpu)?;
    let dtype = match args.dtype.as_deref() {
        Some("f16") => Some(DType::F16),
        Some("bf16") => Some(DType::BF16),
        Some(_) => Some(DType::F32),
        None => None,
    };
    let mut report = Report {
        device: lexlip_model::describe_device(&device),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        ..Default::default()
    };
    let options = lexlip_model::LoadOptions {
        dtype,
        ..Default::default()
    };
    let model = match &args.model.model {
        Some(_) => Some(args.model.load("lexlip bench encode", options)?.1),
        None => None,
    };
    let min_time = Duration::from_secs_f64(args.seconds.max(0.1));
    let max_b = args.batch_sizes.iter().copied().max().unwrap_or(1);

    if let Some(text) = model.as_ref().and_then(|m| m.text().ok()) {
        report.text_model = args.model.model.as_ref().map(|p| p.display().to_string());
        let texts = captions(32.max(max_b));
        for &b in &args.batch_sizes {
            let batch: Vec<&str> = texts.iter().take(b).map(String::as_str).collect();
            let row = time(b, min_time, || text.encode(&batch).map(|_| ()))?;
            eprintln!("text  batch {b:>3}: {:>9.1} texts/s", row.items_per_s);
            report.text.push(row);
        }
    }

    let random;
    let image: Option<&ImageEncoder> = if args.random_beit_base {
        let vocab = match model.as_ref().and_then(|m| m.text().ok()) {
            Some(t) => t.vocabulary().clone(),
            None => Vocabulary::new("synthetic", (0..30522).map(|i| format!("[t{i}]")).collect()),
        };
        let dtype = dtype.unwrap_or_else(|| lexlip_model::image::default_dtype(&device));
        random = ImageEncoder::random_beit_base(vocab, &device, dtype, 42)?;
        report.image_model = Some("random BEiT-B/16 224 + MLM head (30522 terms)".into());
        Some(&random)
    } else {
        let i = model.as_ref().and_then(|m| m.image().ok());
        if i.is_some() {
            report.image_model = args.model.model.as_ref().map(|p| p.display().to_string());
        }
        i
    };
    if let Some(enc) = image {
        report.image_dtype = Some(format!("{:?}", enc.dtype()).to_lowercase());
        let size = enc.image_size();
        let images = synthetic_images(max_b, size)?;
        for &b in &args.batch_sizes {
            let row = time(b, min_time, || enc.encode(&images[..b]).map(|_| ()))?;
            eprintln!("image batch {b:>3}: {:>9.2} images/s", row.items_per_s);
            report.image.push(row);
        }
        let jpeg = sample_jpeg()?;
        let row = time(1, Duration::from_secs(1), || {
            enc.preprocess(&jpeg).map(|_| ())
        })?;
        report.preprocess_images_per_s_one_thread = Some(row.items_per_s);
    }
    if let Some(dense) = model
        .as_ref()
        .filter(|m| m.is_dense_only())
        .and_then(|m| m.dense())
    {
        report.dense_model = args.model.model.as_ref().map(|p| p.display().to_string());
        let texts = captions(max_b);
        let size = dense.image_processor().size;
        let images = synthetic_images(max_b, size)?;
        for &b in &args.batch_sizes {
            let batch: Vec<&str> = texts.iter().take(b).map(String::as_str).collect();
            let row = time(b, min_time, || dense.encode_texts(&batch).map(|_| ()))?;
            eprintln!("dense text  batch {b:>3}: {:>9.1} texts/s", row.items_per_s);
            report.dense_text.push(row);
            let row = time(b, min_time, || {
                dense.encode_images(&images[..b]).map(|_| ())
            })?;
            eprintln!(
                "dense image batch {b:>3}: {:>9.2} images/s",
                row.items_per_s
            );
            report.dense_image.push(row);
        }
    }
    if report.text.is_empty() && report.image.is_empty() && report.dense_image.is_empty() {
        anyhow::bail!(
            "nothing to time: the model has no text, image or dense encoder (add --random-beit-base?)"
        );
    }

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("device: {} ({} threads)", report.device, report.threads);
        for (what, unit, rows, name) in [
            ("text", "texts/s", &report.text, &report.text_model),
            ("image", "images/s", &report.image, &report.image_model),
            (
                "dense text",
                "texts/s",
                &report.dense_text,
                &report.dense_model,
            ),
            (
                "dense image",
                "images/s",
                &report.dense_image,
                &report.dense_model,
            ),
        ] {
            if rows.is_empty() {
                continue;
            }
            println!("{what} encoder: {}", name.as_deref().unwrap_or("-"));
            for r in rows {
                println!(
                    "  batch {:>3}: {:>10.2} {unit} ({:.1} ms/batch)",
                    r.batch, r.items_per_s, r.ms_per_batch
                );
            }
        }
        if let Some(p) = report.preprocess_images_per_s_one_thread {
            println!("image preprocessing (640×480 JPEG, 1 thread): {p:.1} images/s");
        }
    }
    Ok(())
}

/// Runs `f` once to warm up, then until `min_time` has passed (at least twice).
fn time(
    batch: usize,
    min_time: Duration,
    mut f: impl FnMut() -> lexlip_model::Result<()>,
) -> anyhow::Result<Row> {
    f()?;
    let start = Instant::now();
    let mut runs = 0usize;
    while runs < 2 || start.elapsed() < min_time {
        f()?;
        runs += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(Row {
        batch,
        items_per_s: (runs * batch) as f64 / secs,
        ms_per_batch: secs * 1000.0 / runs as f64,
    })
}

/// `n` preprocessed images of side `size` with deterministic pixels in [-1, 1].
fn synthetic_images(n: usize, size: usize) -> anyhow::Result<Vec<PreprocessedImage>> {
    (0..n)
        .map(|i| {
            let data = (0..3 * size * size)
                .map(|j| (((i * 7919 + j * 104_729) % 2001) as f32 / 1000.0) - 1.0)
                .collect();
            Ok(PreprocessedImage::from_chw(size, data)?)
        })
        .collect()
}

/// Caption-like texts of 8-20 words (deterministic).
fn captions(n: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "a", "dog", "runs", "across", "the", "green", "grass", "while", "two", "children", "play",
        "with", "red", "ball", "near", "an", "old", "wooden", "fence", "under", "blue", "sky",
        "woman", "riding", "bicycle", "down", "busy", "city", "street", "at", "night", "kitchen",
    ];
    (0..n)
        .map(|i| {
            let len = 8 + (i * 5) % 13;
            (0..len)
                .map(|j| WORDS[(i * 31 + j * 7) % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// A 640×480 JPEG made in memory, for timing preprocessing.
fn sample_jpeg() -> anyhow::Result<Vec<u8>> {
    let img = image::RgbImage::from_fn(640, 480, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8])
    });
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new(&mut out).encode_image(&img)?;
    Ok(out)
}
