//! `lexlip bench scale`: whether the integer index keeps a model's float ranking. A corpus's
//! pictures are the documents and its captions the queries; each caption's first 10 pictures by
//! float dot product are compared with its first 10 by the dot product of the impacts
//! (`floor(scale · w)`) at several scales, and with image lexicons cut to their K strongest
//! terms. A model whose weights are not on LexLIP's scale (VDR's are unit length) needs its own
//! scale; this says which keeps the ranking, on the user's own pictures.

use std::path::PathBuf;

use anyhow::Context;
use lexlip_pipeline::Input;
use lexlip_proto::sparse::quantize_weight;
use lexlip_proto::{DEFAULT_SCALE, Modality, SparseVector};
use serde::Serialize;

use super::model_args::ModelArgs;

/// Results compared per query.
const DEPTH: usize = 10;
/// Items per encoder call.
const BATCH: usize = 16;

#[derive(clap::Args, Debug)]
pub struct BenchScaleArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A caption TSV: its pictures are the documents, its captions the queries.
    ///
    /// Lines `title<TAB>filepath<TAB>image_id`.
    #[arg(long, required_unless_present = "manifest", value_name = "FILE")]
    pub tsv: Option<PathBuf>,
    /// A JSONL manifest instead (`{"id", "image"?, "text"?}`).
    #[arg(long, conflicts_with = "tsv", value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Quantization scales to measure (default: 100, the model's, ...).
    ///
    /// By default 100, the model's own, and a third and three times the larger of the two.
    #[arg(long, value_delimiter = ',')]
    pub scales: Vec<f32>,
    /// Image lexicon cuts to measure at the model's scale (0: none).
    ///
    /// Each picture keeps its K strongest terms (0: every term).
    #[arg(long, value_delimiter = ',', default_values_t = [0usize])]
    pub top_k: Vec<usize>,
    /// At most this many pictures, and as many captions.
    ///
    /// The first ones of the corpus.
    #[arg(long, default_value_t = 1000)]
    pub max_items: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Debug)]
struct Row {
    scale: f32,
    /// Image lexicons cut to this many terms (None: every term).
    top_k: Option<usize>,
    /// Of each caption's first 10 pictures by float dot product, the share its first 10 by
    /// impacts also holds, averaged over the captions.
    #[serde(rename = "overlap@10")]
    overlap: f64,
    /// Captions whose first picture is the same.
    same_first: f64,
    /// Non-zero impacts per picture (terms that `floor` does not erase).
    impacts_per_image: f64,
    /// Non-zero impacts per caption.
    impacts_per_text: f64,
    /// The largest impact of any picture or caption.
    max_impact: u32,
}

#[derive(Serialize, Debug)]
struct Report {
    model: String,
    model_scale: Option<f32>,
    images: usize,
    captions: usize,
    rows: Vec<Row>,
}

pub fn run(args: BenchScaleArgs) -> anyhow::Result<()> {
    let input = match (&args.tsv, &args.manifest) {
        (Some(path), _) => Input::Tsv {
            path: path.clone(),
            images_root: None,
        },
        (None, Some(path)) => Input::Manifest(path.clone()),
        (None, None) => anyhow::bail!("give the corpus: --tsv or --manifest"),
    };
    anyhow::ensure!(args.max_items > 0, "--max-items must be at least 1");
    let (images, captions) = read(&input, args.max_items)?;
    anyhow::ensure!(
        !images.is_empty() && !captions.is_empty(),
        "{} has no readable picture or no caption",
        input.describe()
    );
    let (path, encoders) = args.model.load("lexlip bench scale", Default::default())?;
    let image_encoder = encoders.image()?;
    let text_encoder = encoders.text()?;
    let mut docs = Vec::with_capacity(images.len());
    for chunk in images.chunks(BATCH) {
        let pixels = chunk
            .iter()
            .map(|(name, bytes)| image_encoder.preprocess_named(bytes, name))
            .collect::<Result<Vec<_>, _>>()?;
        docs.extend(image_encoder.encode(&pixels)?);
    }
    let mut queries = Vec::with_capacity(captions.len());
    for chunk in captions.chunks(BATCH) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        queries.extend(text_encoder.encode_queries(&refs)?);
    }
    let model_scale = encoders.scale();
    let own = model_scale.unwrap_or(DEFAULT_SCALE);
    let scales = if args.scales.is_empty() {
        let mut s = vec![DEFAULT_SCALE, own / 3.0, own, own * 3.0];
        s.sort_by(f32::total_cmp);
        s.dedup();
        s
    } else {
        args.scales.clone()
    };
    for s in &scales {
        anyhow::ensure!(
            s.is_finite() && *s > 0.0,
            "--scales: {s} is not a positive number"
        );
    }
    let float_first: Vec<Vec<usize>> = queries
        .iter()
        .map(|q| first(&scores(q, &docs, f64::from)))
        .collect();
    let mut rows = Vec::new();
    let settings = scales.iter().map(|&s| (s, None)).chain(
        args.top_k
            .iter()
            .filter(|&&k| k > 0)
            .map(|&k| (own, Some(k))),
    );
    for (scale, top_k) in settings {
        let cut: Vec<SparseVector> = match top_k {
            Some(k) => docs.iter().map(|d| d.top_k(k)).collect(),
            None => docs.clone(),
        };
        let quantize = |w: f32| f64::from(quantize_weight(w, scale));
        let mut overlap = 0.0;
        let mut same = 0usize;
        for (q, want) in queries.iter().zip(&float_first) {
            let got = first(&scores(q, &cut, quantize));
            overlap += want.iter().filter(|d| got.contains(d)).count() as f64 / want.len() as f64;
            same += usize::from(got.first() == want.first());
        }
        let impacts = |v: &[SparseVector]| {
            v.iter()
                .map(|x| {
                    x.iter()
                        .filter(|(_, w)| quantize_weight(*w, scale) > 0)
                        .count()
                })
                .sum::<usize>() as f64
                / v.len() as f64
        };
        let max_impact = cut
            .iter()
            .chain(&queries)
            .flat_map(|v| v.iter().map(|(_, w)| quantize_weight(w, scale)))
            .max()
            .unwrap_or(0);
        rows.push(Row {
            scale,
            top_k,
            overlap: overlap / queries.len() as f64,
            same_first: same as f64 / queries.len() as f64,
            impacts_per_image: impacts(&cut),
            impacts_per_text: impacts(&queries),
            max_impact,
        });
    }
    let report = Report {
        model: path.display().to_string(),
        model_scale,
        images: docs.len(),
        captions: queries.len(),
        rows,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{}: {} pictures, {} captions; the model's scale: {}",
        report.model,
        report.images,
        report.captions,
        model_scale.map_or("none (100)".into(), |s| s.to_string())
    );
    println!("scale    top-k  overlap@10  same first  impacts/image  impacts/text  max impact");
    for r in &report.rows {
        println!(
            "{:<8} {:>5}  {:>10.3}  {:>10.3}  {:>13.1}  {:>12.1}  {:>10}",
            r.scale,
            r.top_k.map_or("all".into(), |k| k.to_string()),
            r.overlap,
            r.same_first,
            r.impacts_per_image,
            r.impacts_per_text,
            r.max_impact
        );
    }
    Ok(())
}

/// The first `max` pictures (name, bytes) and captions of `input`.
type Corpus = (Vec<(String, Vec<u8>)>, Vec<String>);

fn read(input: &Input, max: usize) -> anyhow::Result<Corpus> {
    let (mut images, mut captions) = (Vec::new(), Vec::new());
    for item in input.open()?.flatten() {
        match (item.modality, &item.image, &item.text) {
            (Modality::Image, Some(image), _) if images.len() < max => {
                let bytes = image
                    .read()
                    .with_context(|| format!("reading {}", image.name()))?;
                images.push((image.name(), bytes.into_owned()));
            }
            (Modality::Text, _, Some(text)) if captions.len() < max => captions.push(text.clone()),
            _ => {}
        }
        if images.len() >= max && captions.len() >= max {
            break;
        }
    }
    Ok((images, captions))
}

/// Each document's dot product with `query`, its weights mapped by `value` (the float weight,
/// or its impact).
fn scores(query: &SparseVector, docs: &[SparseVector], value: impl Fn(f32) -> f64) -> Vec<f64> {
    docs.iter()
        .map(|d| {
            query
                .iter()
                .filter_map(|(t, w)| d.get(t).map(|x| value(w) * value(x)))
                .sum()
        })
        .collect()
}

/// The indices of the [`DEPTH`] highest positive scores, ties by document order.
fn first(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] > 0.0).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(DEPTH);
    order
}
