//! `lexlip index`: build or extend a collection from precomputed vectors.

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
pub struct IndexArgs {
    /// Collection directory (created when it holds no collection yet).
    #[arg(long)]
    pub collection: PathBuf,
    /// Anserini JsonVectorCollection JSONL, plain or .gz: {"id", "contents", "vector": {"token": weight}}.
    #[arg(long)]
    pub vectors: PathBuf,
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
    /// Commit every N documents (an interrupted run keeps what was committed).
    #[arg(long, default_value_t = 500_000)]
    pub commit_every: usize,
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
struct Summary {
    read: u64,
    indexed: u64,
    skipped: BTreeMap<String, u64>,
    seconds: f64,
    items_per_s: f64,
    index_bytes: u64,
    bytes_per_nnz: f64,
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

fn open_or_create(args: &IndexArgs) -> anyhow::Result<Collection> {
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
    let collection = open_or_create(&args)?;
    let mut lines = open_lines(&args.vectors)?;
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
                .with_context(|| format!("reading {}", args.vectors.display()))?;
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
        if since_commit >= args.commit_every {
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
        bytes_per_nnz: stats.bytes_per_nnz,
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "read {read}, indexed {indexed}, skipped {} {:?}, {seconds:.1} s, {:.0} docs/s, index {} bytes ({:.2} bytes per non-zero)",
            summary.skipped.values().sum::<u64>(),
            summary.skipped,
            summary.items_per_s,
            summary.index_bytes,
            summary.bytes_per_nnz
        );
    }
    if read > 0 && indexed == 0 {
        bail!("no document was indexed (every line was skipped; see the reasons above)");
    }
    Ok(())
}

const CHUNK: usize = 20_000;
