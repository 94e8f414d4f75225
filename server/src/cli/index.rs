//! `lexlip index`: build or extend a collection from precomputed vectors, or (with `--model`)
//! from a corpus of images and captions (see `index_corpus`).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use lexlip_index::ingest::{LineError, open_lines, parse_line};
use lexlip_index::{Collection, CollectionSettings};
use lexlip_proto::{
    Document, Modality, QuantizedVector, TermSpace, term_space::tokens_from_tokenizer_json,
};
use rayon::prelude::*;
use serde::Serialize;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true)
    .args(["vectors", "tsv", "manifest", "webdataset", "images"])))]
pub struct IndexArgs {
    /// Collection directory (created when it holds no collection yet).
    #[arg(long)]
    pub collection: PathBuf,
    /// Anserini JsonVectorCollection JSONL, plain or .gz: {"id", "contents", "vector": {"token": weight}}.
    #[arg(long)]
    pub vectors: Option<PathBuf>,
    /// LexLIP/ViLT caption TSV (`title<TAB>filepath<TAB>image_id`, header): one image document
    /// per image_id, one text document `IMAGE_ID#N` per caption. Needs --model.
    #[arg(long)]
    pub tsv: Option<PathBuf>,
    /// Directory the TSV's file paths are relative to (default: the TSV's directory).
    #[arg(long, requires = "tsv")]
    pub images_root: Option<PathBuf>,
    /// JSONL manifest `{"id", "image"?, "text"?, "uri"?, "metadata"?}`. Needs --model.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// img2dataset WebDataset shards: .tar files or directories of them. Needs --model.
    #[arg(long, num_args = 1..)]
    pub webdataset: Vec<PathBuf>,
    /// A directory of images (recursive; id = relative path). Needs --model.
    #[arg(long)]
    pub images: Option<PathBuf>,
    /// Encoders for corpus inputs: a LexLIP .ckpt or directory, an HF encoder directory, or
    /// hf:OWNER/NAME.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// tokenizer.json for a .ckpt (default: next to the checkpoint).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Items per encoder batch.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Index only a deterministic part i/n of the inputs (an image and its captions stay
    /// together); merge the parts with `lexlip merge`.
    #[arg(long)]
    pub shard: Option<lexlip_pipeline::Shard>,
    /// Stop with an error at the first bad item instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    /// Run the encoders on the GPU (build with --features cuda).
    #[arg(long)]
    pub gpu: bool,
    /// Vocabulary of the term space (tokenizer.json or vocab.txt). Documents with other terms are
    /// skipped. Without it the collection accepts any term.
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// Modality of lines that do not name one.
    #[arg(long, value_parser = parse_modality, default_value = "text")]
    pub modality: Modality,
    /// Quantization scale for a new collection: impact = floor(scale · weight).
    #[arg(long, default_value_t = 100.0)]
    pub scale: f32,
    /// Keep only the K largest weights of each document (new collection only).
    #[arg(long)]
    pub top_k_terms: Option<usize>,
    /// Commit every N documents (an interrupted run keeps what was committed; a corpus run
    /// resumes from the last commit). Default: 500,000 for vectors, 10,000 for corpora.
    #[arg(long)]
    pub commit_every: Option<usize>,
    /// Write skipped lines here as JSONL {"line", "reason"}.
    #[arg(long)]
    pub errors: Option<PathBuf>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_modality(s: &str) -> Result<Modality, String> {
    s.parse()
        .map_err(|e: lexlip_proto::DocumentError| e.to_string())
}

/// The final summary.
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    pub read: u64,
    pub indexed: u64,
    pub skipped: BTreeMap<String, u64>,
    pub seconds: f64,
    pub items_per_s: f64,
    pub index_bytes: u64,
    /// Index bytes per live document.
    pub bytes_per_item: f64,
    pub bytes_per_nnz: f64,
    /// Corpus runs: busy seconds per stage (decode, encode, write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_seconds: Option<lexlip_pipeline::StageSeconds>,
}

impl Summary {
    /// Prints the summary (one JSON object with `json`) and fails when nothing was indexed.
    pub fn report(&self, json: bool) -> anyhow::Result<()> {
        if json {
            println!("{}", serde_json::to_string(self)?);
        } else {
            println!(
                "read {}, indexed {}, skipped {} {:?}, {:.1} s, {:.0} items/s, index {} bytes ({:.0} bytes per item, {:.2} bytes per non-zero)",
                self.read,
                self.indexed,
                self.skipped.values().sum::<u64>(),
                self.skipped,
                self.seconds,
                self.items_per_s,
                self.index_bytes,
                self.bytes_per_item,
                self.bytes_per_nnz
            );
        }
        if self.read > 0 && self.indexed == 0 {
            bail!("nothing was indexed (every item was skipped; see the reasons above)");
        }
        Ok(())
    }
}

/// The term space (and its tokens) named by a vocabulary file.
pub fn load_vocab(path: &Path) -> anyhow::Result<(TermSpace, Vec<String>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read vocabulary {}", path.display()))?;
    let name = path
        .parent()
        .and_then(|p| p.file_name())
        .or(path.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "vocabulary".into());
    let tokens = if path.extension().is_some_and(|e| e == "json") {
        tokens_from_tokenizer_json(&text)
            .with_context(|| format!("{} is not a usable tokenizer.json", path.display()))?
    } else {
        text.lines().map(str::to_string).collect()
    };
    if tokens.is_empty() {
        bail!("vocabulary {} is empty", path.display());
    }
    Ok((
        TermSpace::from_tokens(name, tokens.iter().map(String::as_str)),
        tokens,
    ))
}

pub(crate) fn open_or_create(args: &IndexArgs) -> anyhow::Result<Collection> {
    let vocab = args.vocab.as_deref().map(load_vocab).transpose()?;
    if lexlip_index::Manifest::path(&args.collection).exists() {
        let c = Collection::open(&args.collection)?;
        if let Some((space, _)) = &vocab {
            c.check_term_space(space)?;
        }
        return Ok(c);
    }
    let settings = CollectionSettings {
        scale: args.scale,
        top_k_terms: args.top_k_terms,
        dense_dim: None,
    };
    let (space, tokens) = match vocab {
        Some((s, t)) => (s, Some(t)),
        None => (TermSpace::from_tokens("unspecified", []), None),
    };
    Ok(Collection::create(
        &args.collection,
        space,
        settings,
        tokens.as_deref(),
    )?)
}

pub fn run(args: IndexArgs) -> anyhow::Result<()> {
    let Some(vectors) = args.vectors.clone() else {
        return super::index_corpus::run(args);
    };
    if args.model.is_some() {
        bail!(
            "--model is for corpus inputs (--tsv, --manifest, --webdataset, --images); --vectors are already encoded"
        );
    }
    let commit_every = args.commit_every.unwrap_or(500_000);
    // The input first: a missing file changes nothing.
    let mut lines = open_lines(&vectors)?;
    let collection = open_or_create(&args)?;
    let mut errors_out = match &args.errors {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {human_pos} documents read, {per_sec}, {elapsed}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    if args.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let start = Instant::now();
    let (mut read, mut indexed, mut since_commit) = (0u64, 0u64, 0usize);
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    let mut chunk: Vec<(u64, String)> = Vec::with_capacity(CHUNK);
    let mut line_no = 0u64;
    let skip = |e: LineError,
                skipped: &mut BTreeMap<String, u64>,
                out: &mut Option<std::io::BufWriter<std::fs::File>>|
     -> anyhow::Result<()> {
        *skipped.entry(e.kind.to_string()).or_default() += 1;
        if let Some(out) = out {
            serde_json::to_writer(
                &mut *out,
                &serde_json::json!({"line": e.line, "reason": e.reason}),
            )?;
            out.write_all(b"\n")?;
        }
        Ok(())
    };
    loop {
        chunk.clear();
        let mut buf = String::new();
        while chunk.len() < CHUNK {
            buf.clear();
            let n = lines
                .read_line(&mut buf)
                .with_context(|| format!("reading {}", vectors.display()))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if !buf.trim().is_empty() {
                chunk.push((line_no, buf.clone()));
            }
        }
        if chunk.is_empty() {
            break;
        }
        let parsed: Vec<Result<(Document, QuantizedVector), LineError>> = chunk
            .par_iter()
            .map(|(n, text)| {
                let record = parse_line(text, *n, args.modality)?;
                let vector = collection
                    .prepare_vector(record.vector)
                    .map_err(|e| LineError {
                        line: *n,
                        kind: "vector",
                        reason: e.to_string(),
                    })?;
                Ok((record.doc, vector))
            })
            .collect();
        for r in parsed {
            read += 1;
            match r {
                Ok((doc, v)) => {
                    collection.add(doc, v)?;
                    indexed += 1;
                    since_commit += 1;
                }
                Err(e) => skip(e, &mut skipped, &mut errors_out)?,
            }
        }
        if since_commit >= commit_every {
            collection.commit()?;
            since_commit = 0;
        }
        bar.set_position(read);
    }
    collection.commit()?;
    bar.finish_and_clear();
    if let Some(out) = errors_out.as_mut() {
        out.flush()?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let stats = collection.stats()?;
    let summary = Summary {
        read,
        indexed,
        skipped,
        seconds,
        items_per_s: indexed as f64 / seconds.max(1e-9),
        index_bytes: stats.bytes,
        bytes_per_item: stats.bytes as f64 / stats.documents.max(1) as f64,
        bytes_per_nnz: stats.bytes_per_nnz,
        stage_seconds: None,
    };
    summary.report(args.json)
}

const CHUNK: usize = 20_000;
