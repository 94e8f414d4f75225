//! `lexlip encode`: text or image → sparse lexicon terms (and the dense embedding when the model
//! has a dense encoder).

use std::path::PathBuf;

use anyhow::Context;
use lexlip_index::Quantizer;
use lexlip_model::{Encoders, LoadOptions};
use lexlip_proto::{DenseVector, SparseVector};

use super::model_args::ModelArgs;

#[derive(clap::Args, Debug)]
#[command(mut_arg("model", |a| a.required(true)))]
pub struct EncodeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text to encode.
    #[arg(long, required_unless_present = "image", conflicts_with = "image")]
    pub text: Option<String>,
    /// Image file to encode (JPEG, PNG, WebP, GIF).
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// Keep only the K highest-weighted terms, as a collection would.
    ///
    /// LexLIP's sparsification, cut after quantizing with scale 100, exactly as a collection
    /// with this top-K stores them.
    #[arg(long, value_name = "K")]
    pub top_k_terms: Option<usize>,
    /// Print one JSON object instead of a table.
    ///
    /// `{"terms": {token: weight}, "dense": [...]}`.
    #[arg(long)]
    pub json: bool,
    /// Maximum tokens per text (default 40, LexLIP's caption length).
    #[arg(long, value_name = "N")]
    pub max_length: Option<usize>,
    /// Image input size (default: the model's).
    ///
    /// E.g. 384 for LexLIP's fine-tuned checkpoints.
    #[arg(long, value_name = "PX")]
    pub image_size: Option<usize>,
}

pub fn run(args: EncodeArgs) -> anyhow::Result<()> {
    let options = LoadOptions {
        max_length: args.max_length,
        image_size: args.image_size,
        ..Default::default()
    };
    let (_, model) = args.model.load("lexlip encode", options)?;
    let (sparse, dense) = match (&args.text, &args.image) {
        (Some(text), _) => encode_text(&model, text)?,
        (None, Some(path)) => encode_image(&model, path)?,
        (None, None) => anyhow::bail!("give --text or --image"),
    };
    // The same quantizer a collection with this top-K uses, so the terms shown are the terms
    // it would store.
    let scale = model.scale().unwrap_or(lexlip_proto::DEFAULT_SCALE);
    let quantizer = Quantizer::new(scale, args.top_k_terms, None)?;
    let sparse = sparse
        .map(|v| quantizer.encode(&v).map(|(shown, _)| shown))
        .transpose()?;
    if args.json {
        let mut out = serde_json::Map::new();
        if let Some(v) = &sparse {
            out.insert("terms".into(), serde_json::to_value(v)?);
        }
        if let Some(d) = &dense {
            out.insert("dense".into(), serde_json::to_value(d)?);
        }
        println!("{}", serde_json::Value::Object(out));
        return Ok(());
    }
    if let Some(v) = &sparse {
        println!("# {} terms", v.len());
        for (term, weight) in v.by_weight() {
            println!("{term}\t{weight:.4}");
        }
    }
    if let Some(d) = &dense {
        let shown: Vec<String> = d
            .as_slice()
            .iter()
            .take(8)
            .map(|x| format!("{x:.4}"))
            .collect();
        println!("# dense ({} dims): [{}, …]", d.dim(), shown.join(", "));
    }
    Ok(())
}

type Encoded = (Option<SparseVector>, Option<DenseVector>);

fn encode_text(model: &Encoders, text: &str) -> anyhow::Result<Encoded> {
    let sparse = if model.has_text() {
        Some(model.text()?.encode_queries(&[text])?.remove(0))
    } else {
        None
    };
    let dense = match model.dense() {
        Some(d) => Some(d.encode_texts(&[text])?.remove(0)),
        None => None,
    };
    if sparse.is_none() && dense.is_none() {
        model.text()?; // the error that says there is no text encoder
    }
    Ok((sparse, dense))
}

fn encode_image(model: &Encoders, path: &std::path::Path) -> anyhow::Result<Encoded> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let name = path.display().to_string();
    let sparse = if model.has_image() {
        let enc = model.image()?;
        let img = enc.preprocess_named(&bytes, &name)?;
        Some(enc.encode(&[img])?.remove(0))
    } else {
        None
    };
    let dense = match model.dense() {
        Some(d) => {
            let img = d.preprocess_image(&bytes, &name)?;
            Some(d.encode_images(&[img])?.remove(0))
        }
        None => None,
    };
    if sparse.is_none() && dense.is_none() {
        model.image()?; // "the model at … has no image encoder"
    }
    Ok((sparse, dense))
}
