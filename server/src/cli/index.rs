//! `lexlip index`: build or extend a collection from precomputed vectors, or (with `--model`)
//! from a corpus of images and captions (see `index_corpus`).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use lexlip_index::ingest::{LineError, open_lines, parse_line};
use lexlip_index::{Collection, CollectionSettings};
use lexlip_pipeline::{Counts, ErrorsFile, Progress};
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
    /// img2dataset WebDataset shards: .tar files, directories of them, or quoted patterns
    /// ('shards/*.tar', 'shards/{00000..00099}.tar'). Needs --model.
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
    /// Commit every N documents (at the end of a chunk). An interrupted run keeps what was
    /// committed and the same command resumes from there (progress in
    /// DIR/pipeline-progress.json). Default: 500,000 for vectors, 10,000 for corpora.
    #[arg(long)]
    pub commit_every: Option<usize>,
    /// Write skipped items here, one JSON object per line (vectors: {"line", "reason"}; corpora:
    /// {"position", "id", "reason", "message"}). A resumed run keeps the lines of the part it
    /// resumes after, so the file ends as a clean run's.
    #[arg(long)]
    pub errors: Option<PathBuf>,
    /// Ignore the progress an earlier run of the same command saved (resume point, or "already
    /// indexed") and index the input from the start (same ids replace).
    #[arg(long)]
    pub restart: bool,
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
    /// The input position this run resumed after (the counts cover the whole job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<u64>,
    /// An earlier run had indexed this input completely: nothing was done.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub already_complete: bool,
    /// Stopped by Ctrl-C/SIGTERM after committing what was read; the same command resumes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
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
        if self.interrupted {
            bail!(
                "interrupted after committing {} items; run the same command again to resume",
                self.read
            );
        }
        if self.indexed == 0 {
            if self.read == 0 {
                bail!("nothing was indexed: the input holds no items (for this shard)");
            }
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
    let commit_every = args.commit_every.unwrap_or(500_000).max(1);
    // The input first: a missing file changes nothing.
    let mut lines = open_lines(&vectors)?;
    let input = lexlip_pipeline::Input::Manifest(vectors.clone()).signature()?;
    let collection = open_or_create(&args)?;
    let fp = lexlip_pipeline::progress::fingerprint(&format!(
        "vectors|{input}|{:?}|{}|{:?}",
        args.shard,
        args.modality,
        args.vocab.as_deref().map(Path::display)
    ));
    let saved = match args.restart {
        true => None,
        false => Progress::load(collection.dir(), &fp)?,
    };
    let mut errors = args.errors.as_deref().map(ErrorsFile::open).transpose()?;
    let start = Instant::now();
    if let Some(p) = saved.as_ref().filter(|p| p.complete) {
        eprintln!(
            "{}: {} was already indexed completely by an earlier run; nothing to do (--restart indexes it again)",
            args.collection.display(),
            vectors.display()
        );
        return summary(&collection, p.counts.clone(), 0, start, &args, |s| {
            s.already_complete = true;
            s.resumed_from = Some(p.position);
        });
    }
    if let Some(out) = errors.as_mut() {
        out.rewind(saved.as_ref().map_or(0, |p| p.mark))?;
    }
    let resume = saved.as_ref().map_or(0, |p| p.position);
    let mut counts = saved.map(|p| p.counts).unwrap_or_default();
    let stop = stop_on_signal();
    // A plain file shows a bar over its bytes with an ETA; a gzip one a spinner.
    let total_bytes = plain_size(&vectors);
    let bar = match total_bytes {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(match total_bytes {
            Some(_) => {
                "{bar:30} {percent}% of {binary_total_bytes}, {binary_bytes_per_sec}, ETA {eta}: {msg}"
            }
            None => "{spinner} {elapsed}: {msg}",
        })
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    if args.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let (mut since_commit, mut processed) = (0usize, 0u64);
    let (mut line_no, mut bytes) = (0u64, 0u64);
    let mut buf = String::new();
    // Lines committed by an earlier run of this job.
    while line_no < resume {
        buf.clear();
        let n = lines
            .read_line(&mut buf)
            .with_context(|| format!("reading {}", vectors.display()))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        bytes += n as u64;
    }
    if total_bytes.is_some() {
        bar.set_position(bytes);
        bar.reset_eta();
    }
    // A reader thread reads and parses chunk N+1 (rayon) while this one adds chunk N.
    let (tx, rx) = std::sync::mpsc::sync_channel::<anyhow::Result<ParsedChunk>>(1);
    let mut interrupted = false;
    let (shard, modality) = (args.shard, args.modality);
    let parse_collection = &collection;
    let vectors_path = &vectors;
    std::thread::scope(|scope| -> anyhow::Result<()> {
        scope.spawn(move || {
            let (mut line_no, mut bytes) = (line_no, bytes);
            loop {
                let chunk = match read_chunk(&mut lines, &mut line_no, &mut bytes) {
                    Ok(c) if c.is_empty() => return,
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Err(anyhow::Error::new(e)
                            .context(format!("reading {}", vectors_path.display()))));
                        return;
                    }
                };
                let items = parse_chunk(&chunk, parse_collection, modality, shard);
                if tx
                    .send(Ok(ParsedChunk {
                        items,
                        end: line_no,
                        bytes,
                    }))
                    .is_err()
                {
                    return;
                }
            }
        });
        for chunk in rx {
            if stop.load(Ordering::Relaxed) {
                interrupted = true;
                break;
            }
            let chunk = chunk?;
            for r in chunk.items {
                counts.read += 1;
                processed += 1;
                match r {
                    Ok((doc, v)) => {
                        collection.add(doc, v)?;
                        counts.indexed += 1;
                        since_commit += 1;
                    }
                    Err(e) if args.strict => bail!("--strict: {}: {e}", vectors.display()),
                    Err(e) => {
                        counts.skip(e.kind);
                        if let Some(out) = errors.as_mut() {
                            out.write(&serde_json::json!({"line": e.line, "reason": e.reason}))?;
                        }
                    }
                }
            }
            line_no = chunk.end;
            if since_commit >= commit_every {
                commit(&collection, &fp, line_no, false, &counts, errors.as_mut())?;
                since_commit = 0;
            }
            if total_bytes.is_some() {
                bar.set_position(chunk.bytes);
            } else {
                bar.tick();
            }
            bar.set_message(format!("{} documents read", counts.read));
        }
        Ok(())
    })?;
    commit(
        &collection,
        &fp,
        line_no,
        !interrupted,
        &counts,
        errors.as_mut(),
    )?;
    bar.finish_and_clear();
    if resume > 0 {
        eprintln!("resumed after line {resume} (committed by an earlier run)");
    }
    summary(&collection, counts, processed, start, &args, |s| {
        s.resumed_from = (resume > 0).then_some(resume);
        s.interrupted = interrupted;
    })
}

/// Parsed lines of one chunk (lines of other shards left out) and the line number it ends at.
struct ParsedChunk {
    items: Vec<Result<(Document, QuantizedVector), LineError>>,
    end: u64,
    /// Bytes of the (inflated) input read up to `end`.
    bytes: u64,
}

/// The size of a plain (not gzip) file, for a progress bar over its bytes.
fn plain_size(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut magic = [0u8; 2];
    let mut f = std::fs::File::open(path).ok()?;
    let n = f.read(&mut magic).ok()?;
    let gzip = n == 2 && magic == [0x1f, 0x8b];
    (!gzip)
        .then(|| f.metadata().ok().map(|m| m.len()))
        .flatten()
}

/// Up to `CHUNK` non-blank lines with their numbers.
fn read_chunk(
    lines: &mut Box<dyn BufRead + Send>,
    line_no: &mut u64,
    bytes: &mut u64,
) -> std::io::Result<Vec<(u64, String)>> {
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut buf = String::new();
    while chunk.len() < CHUNK {
        let n = lines.read_line(&mut buf)?;
        if n == 0 {
            break;
        }
        *line_no += 1;
        *bytes += n as u64;
        if buf.trim().is_empty() {
            buf.clear();
        } else {
            chunk.push((*line_no, std::mem::take(&mut buf)));
        }
    }
    Ok(chunk)
}

/// Parses and quantizes a chunk in parallel; lines of other shards are left out (malformed
/// lines belong to shard 0).
fn parse_chunk(
    chunk: &[(u64, String)],
    collection: &Collection,
    modality: Modality,
    shard: Option<lexlip_pipeline::Shard>,
) -> Vec<Result<(Document, QuantizedVector), LineError>> {
    chunk
        .par_iter()
        .filter_map(|(n, text)| {
            let record = match parse_line(text, *n, modality) {
                Ok(r) => r,
                Err(e) => return shard.is_none_or(|s| s.owns(None)).then_some(Err(e)),
            };
            if shard.is_some_and(|s| !s.owns(Some(record.doc.id.as_str()))) {
                return None;
            }
            Some(
                collection
                    .prepare_vector(record.vector)
                    .map(|v| (record.doc, v))
                    .map_err(|e| LineError {
                        line: *n,
                        kind: "vector",
                        reason: e.to_string(),
                    }),
            )
        })
        .collect()
}

/// Commits, then saves the resume point (see `lexlip_pipeline::progress`).
fn commit(
    collection: &Collection,
    fp: &str,
    position: u64,
    complete: bool,
    counts: &Counts,
    errors: Option<&mut ErrorsFile>,
) -> anyhow::Result<()> {
    let mark = errors.map_or(Ok(0), ErrorsFile::checkpoint)?;
    lexlip_pipeline::progress::commit_and_save(collection, fp, position, complete, counts, mark)?;
    Ok(())
}

/// Prints the run's summary; sizes are those of the settled index.
pub(crate) fn summary(
    collection: &Collection,
    counts: Counts,
    processed: u64,
    start: Instant,
    args: &IndexArgs,
    extra: impl FnOnce(&mut Summary),
) -> anyhow::Result<()> {
    let seconds = start.elapsed().as_secs_f64();
    // Sizes of the settled index: background merges finish first (their inputs still count
    // until then).
    collection.wait_merges()?;
    let stats = collection.stats()?;
    let mut s = Summary {
        read: counts.read,
        indexed: counts.indexed,
        skipped: counts.skipped,
        seconds,
        items_per_s: processed as f64 / seconds.max(1e-9),
        index_bytes: stats.bytes,
        bytes_per_item: stats.bytes as f64 / stats.documents.max(1) as f64,
        bytes_per_nnz: stats.bytes_per_nnz,
        stage_seconds: None,
        resumed_from: None,
        already_complete: false,
        interrupted: false,
    };
    extra(&mut s);
    s.report(args.json)
}

/// A flag set by the first Ctrl-C (or SIGTERM): the run stops reading, commits what it read and
/// exits; a second one exits at once (the last commit is kept either way).
pub(crate) fn stop_on_signal() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    if let Ok(runtime) = runtime {
        std::thread::spawn(move || {
            runtime.block_on(async move {
                loop {
                    if wait_for_signal().await.is_err() {
                        return; // no signal handling: the default (exit) stays
                    }
                    if set.swap(true, Ordering::Relaxed) {
                        eprintln!("interrupted again: exiting (the last commit is kept)");
                        std::process::exit(130);
                    }
                    eprintln!(
                        "interrupted: committing the batch being written (Ctrl-C again to exit at once)"
                    );
                }
            })
        });
    }
    flag
}

async fn wait_for_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

const CHUNK: usize = 20_000;
