//! `lexlip index`: arguments, progress bar, errors file and summary around the batch jobs of
//! `lexlip-pipeline` (precomputed vectors, or a corpus encoded with `--model`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use lexlip_index::{Collection, CollectionSettings, DocOrder};
use lexlip_model::LoadOptions;
use lexlip_pipeline::{BadItem, ErrorsFile, Input, Observer, Options, Report, VectorsFile};
use lexlip_proto::{DEFAULT_SCALE, Modality, TermSpace};

use super::meter::{self, Meter};
use super::model_args::ModelArgs;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true)
    .args(["vectors", "tsv", "manifest", "webdataset", "images"])))]
#[command(
    override_usage = "lexlip index [OPTIONS] --collection <DIR> --vectors <FILE>
       lexlip index [OPTIONS] --collection <DIR> --model <MODEL> --tsv <FILE>
       lexlip index [OPTIONS] --collection <DIR> --model <MODEL> --manifest <FILE>
       lexlip index [OPTIONS] --collection <DIR> --model <MODEL> --webdataset <SHARDS>...
       lexlip index [OPTIONS] --collection <DIR> --model <MODEL> --images <DIR>"
)]
pub struct IndexArgs {
    /// Collection directory (created when it holds no collection yet).
    #[arg(long, value_name = "DIR")]
    pub collection: PathBuf,
    /// Precomputed vectors: Anserini JSONL (plain or .gz).
    ///
    /// JsonVectorCollection lines `{"id", "contents", "vector": {"token": weight}}`.
    #[arg(long, value_name = "FILE")]
    pub vectors: Option<PathBuf>,
    /// Caption TSV `title<TAB>filepath<TAB>image_id`; needs --model.
    ///
    /// LexLIP/ViLT's, with a header: one image document per image_id, one text document
    /// `IMAGE_ID#N` per caption.
    #[arg(long, value_name = "FILE")]
    pub tsv: Option<PathBuf>,
    /// Root of the TSV's file paths (default: the TSV's directory).
    #[arg(long, requires = "tsv", value_name = "DIR")]
    pub images_root: Option<PathBuf>,
    /// JSONL manifest; needs --model.
    ///
    /// Lines `{"id", "image"?, "text"?, "uri"?, "metadata"?}`.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// img2dataset WebDataset shards; needs --model.
    ///
    /// .tar files, directories of them, or quoted patterns ('shards/*.tar',
    /// 'shards/{00000..00099}.tar').
    #[arg(long, num_args = 1.., value_name = "SHARDS")]
    pub webdataset: Vec<PathBuf>,
    /// A directory of images (id = relative path); needs --model.
    ///
    /// Read recursively.
    #[arg(long, value_name = "DIR")]
    pub images: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Keep each document's dense embedding too (dense, hybrid search).
    ///
    /// For `mode: dense` and hybrid search (the dense fallback): from the model's own dense encoder
    /// (lexicon heads' backbone, a `dense/` directory beside a LexLIP model), or from
    /// --dense-model. Implied by a dense-only model (`lexlip train --objective dense`, CLIP,
    /// SigLIP, MobileCLIP), whose documents have no lexicon. Taken when the collection is created.
    #[arg(long)]
    pub dense: bool,
    /// A dense model whose embeddings are kept too (implies --dense).
    ///
    /// CLIP, SigLIP, MobileCLIP or `lexlip train --objective dense`; its embeddings are kept
    /// beside the --model's lexicons.
    #[arg(long, value_name = "DIR")]
    pub dense_model: Option<PathBuf>,
    /// Pictures or texts per encoder batch.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Index only part i/n of the input (see `lexlip merge`).
    ///
    /// A deterministic part: an image and its captions stay together. Merge the parts with
    /// `lexlip merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<lexlip_pipeline::Shard>,
    /// Stop with an error at the first bad item instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    /// Vocabulary of the term space (tokenizer.json or vocab.txt).
    ///
    /// Documents with other terms are skipped. Without it the collection accepts any term.
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,
    /// Modality of lines that do not name one.
    #[arg(long, value_parser = parse_modality, default_value = "text")]
    pub modality: Modality,
    /// Quantization scale of a new collection (default: the model's).
    ///
    /// Impact = floor(scale · weight). Default: the model's, else 100; the model's is `scale` in
    /// its lexlip.json (VDR's unit-length lexicons take 10000).
    #[arg(long, value_name = "S")]
    pub scale: Option<f32>,
    /// Keep each document's K largest weights (new collection only).
    #[arg(long, value_name = "K")]
    pub top_k_terms: Option<usize>,
    /// Commit every N documents (default: 500,000; corpora: 10,000).
    ///
    /// At the end of a chunk. An interrupted run keeps what was committed and the same command
    /// resumes from there (progress in DIR/pipeline-progress.json). Default: 500,000 for
    /// vectors, 10,000 for corpora.
    #[arg(long, value_name = "N")]
    pub commit_every: Option<usize>,
    /// Copy the list of skipped items here (JSONL).
    ///
    /// One JSON object per line (vectors: {"line", "reason"}; corpora: {"position", "id",
    /// "reason", "message"}). Every run keeps the list in
    /// DIR/index-skipped.jsonl (the first five are printed as they are found), so a finished
    /// job's list is copied without indexing again. A resumed run keeps the lines of the part it
    /// resumes after, so the list ends as a clean run's.
    #[arg(long)]
    pub errors: Option<PathBuf>,
    /// Ignore saved progress and index the input from the start.
    ///
    /// The progress an earlier run of the same command saved (resume point, or "already
    /// indexed"); same ids replace.
    #[arg(long)]
    pub restart: bool,
    /// Store no image thumbnails.
    ///
    /// They are on by default: a small JPEG per image document, served by `GET
    /// …/documents/{id}/thumbnail`. A collection this run creates keeps thumbnails off for later
    /// adds too.
    #[arg(long)]
    pub no_thumbnails: bool,
    /// Keep no forward index file beside each segment's postings.
    ///
    /// Kept by default: about 6 bytes per stored non-zero. Without them, the first search of every
    /// new or merged segment builds the forward index from the postings instead. Taken when the
    /// collection is created.
    #[arg(long)]
    pub no_forward_files: bool,
    /// How each new segment's documents are ordered.
    ///
    /// `clusters` (k-means, fast), `bisection` (recursive graph bisection: slower to write, can
    /// make search faster) or `input`. Results are the same in every order.
    #[arg(long, default_value = "clusters", value_name = "ORDER")]
    pub doc_order: DocOrder,
    /// Then merge the collection's segments into one per modality.
    ///
    /// As Lucene's force-merge (images and texts always live in segments of their own): a
    /// batch-built collection searches faster as one segment (docs/cli.md). The collection
    /// stays searchable meanwhile.
    #[arg(long)]
    pub merge_segments: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_modality(s: &str) -> Result<Modality, String> {
    s.parse()
        .map_err(|e: lexlip_proto::DocumentError| e.to_string())
}

impl IndexArgs {
    /// The quantization scale of a new collection: `--scale`, else the model's, else 100.
    fn scale(&self, model: Option<f32>) -> f32 {
        self.scale.or(model).unwrap_or(DEFAULT_SCALE)
    }

    /// The settings of a new collection; `dense_dim` where it keeps dense vectors, `scale` its
    /// quantization scale ([`Self::scale`]).
    fn settings(&self, dense_dim: Option<usize>, scale: f32) -> CollectionSettings {
        CollectionSettings {
            scale,
            top_k_terms: self.top_k_terms,
            dense_dim,
            thumbnails: !self.no_thumbnails,
            forward_files: !self.no_forward_files,
        }
    }

    fn options(&self, commit_every: usize, context: String) -> Options {
        Options {
            batch_size: self.batch_size.max(1),
            commit_every: self.commit_every.unwrap_or(commit_every).max(1),
            shard: self.shard,
            strict: self.strict,
            context,
            restart: self.restart,
            stop: Some(crate::signal::stop_flag()),
            thumbnails: !self.no_thumbnails,
        }
    }

    fn corpus_input(&self) -> anyhow::Result<Input> {
        Ok(if let Some(p) = &self.tsv {
            Input::Tsv {
                path: p.clone(),
                images_root: self.images_root.clone(),
            }
        } else if let Some(p) = &self.manifest {
            Input::Manifest(p.clone())
        } else if !self.webdataset.is_empty() {
            Input::WebDataset(self.webdataset.clone())
        } else if let Some(p) = &self.images {
            Input::ImageDir(p.clone())
        } else {
            bail!("give one input: --vectors, --tsv, --manifest, --webdataset or --images")
        })
    }
}

pub fn run(args: IndexArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let (report, collection) = match &args.vectors {
        Some(path) => vectors(&args, path, start)?,
        None => corpus(&args, start)?,
    };
    let skipped: u64 = report.skipped.values().sum();
    let list = collection.dir().join(SKIPPED_FILE);
    if let Some(to) = &args.errors {
        match std::fs::copy(&list, to) {
            Ok(_) => {}
            // A collection indexed before the list existed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::write(to, b"").with_context(|| format!("writing {}", to.display()))?
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "copying {} to {}",
                    list.display(),
                    to.display()
                )));
            }
        }
    }
    if report.already_complete {
        eprintln!(
            "{}: this input was already indexed completely by an earlier run; nothing to do \
             (--restart indexes it again)",
            collection.dir().display()
        );
    } else if let Some(from) = report.resumed_from {
        let unit = if args.vectors.is_some() {
            "line"
        } else {
            "input item"
        };
        eprintln!("resumed after {unit} {from} (committed by an earlier run)");
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", report.human());
    }
    if skipped > 0 {
        let listed = args.errors.as_deref().unwrap_or(&list);
        eprintln!(
            "the {skipped} skipped items are listed in {}",
            listed.display()
        );
    }
    match report.failure() {
        Some(why) => bail!(why),
        None => Ok(()),
    }
}

/// `--vectors`: precomputed vectors, no encoder.
fn vectors(
    args: &IndexArgs,
    path: &std::path::Path,
    start: Instant,
) -> anyhow::Result<(Report, Collection)> {
    if args.model.model.is_some() || args.dense || args.dense_model.is_some() {
        bail!(
            "--model, --dense and --dense-model are for corpus inputs (--tsv, --manifest, \
             --webdataset, --images); --vectors are already encoded"
        );
    }
    // The input first: a missing file changes nothing.
    let file = VectorsFile::open(path)?;
    let (space, tokens) = match &args.vocab {
        Some(v) => {
            let (space, tokens) = lexlip_pipeline::load_vocab(v)?;
            (space, Some(tokens))
        }
        None => (TermSpace::free("unspecified"), None),
    };
    // Only a directory this run makes is removed again on failure.
    let created = !args.collection.exists();
    let mut collection = Collection::open_or_create(
        &args.collection,
        space,
        tokens.as_deref(),
        args.settings(None, args.scale(None)),
    )?;
    collection.set_doc_order(args.doc_order);
    // A batch job: nothing searches the collection while it is written.
    collection.set_warm_dense(false);
    let total = file.plain_size();
    let mut progress = Progress::new(args, total, Unit::Bytes)?;
    let context = format!("{:?}", args.vocab.as_deref().map(std::path::Path::display));
    let result = lexlip_pipeline::index_vectors(
        file,
        args.modality,
        &collection,
        &args.options(500_000, context),
        &mut progress,
    );
    progress.bar.finish();
    let summary = match result {
        Ok(summary) => summary,
        Err(e) => {
            // A collection this run created and never committed to is not left behind empty.
            if created && collection.snapshot().is_ok_and(|s| s.num_docs() == 0) {
                drop(collection);
                let _ = std::fs::remove_dir_all(&args.collection);
            }
            return Err(e.into());
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    Ok((
        finish(args, &collection, &summary, seconds, false)?,
        collection,
    ))
}

/// A corpus encoded with `--model`.
fn corpus(args: &IndexArgs, start: Instant) -> anyhow::Result<(Report, Collection)> {
    let input = args.corpus_input()?;
    if args.vocab.is_some() {
        bail!("--vocab is for --vectors; corpus inputs use the model's vocabulary");
    }
    let what = "--tsv, --manifest, --webdataset and --images";
    let (model_path, mut encoders) = args.model.load(what, LoadOptions::default())?;
    if let Some(dir) = &args.dense_model {
        let dense_args = ModelArgs {
            model: Some(dir.clone()),
            tokenizer: None,
            ..args.model.clone()
        };
        let (_, dense) = dense_args.load(what, LoadOptions::default())?;
        encoders
            .attach_dense(dense)
            .with_context(|| format!("--dense-model {}", dir.display()))?;
    }
    let dense_only = encoders.is_dense_only();
    let dense_dim = match (
        args.dense || args.dense_model.is_some() || dense_only,
        encoders.dense(),
    ) {
        (false, _) => None,
        (true, Some(d)) => Some(d.dim()),
        (true, None) => bail!(
            "--dense needs a dense encoder: the model at {} has none; give one with \
             --dense-model DIR (CLIP, SigLIP, MobileCLIP or lexlip train --objective dense)",
            model_path.display()
        ),
    };
    // A dense-only model's collection has no vocabulary: its documents have no lexicon.
    let (space, tokens) = match encoders.term_space() {
        Some(space) => {
            let tokens = encoders
                .text()
                .map(|t| t.vocabulary().tokens().to_vec())
                .or_else(|_| encoders.image().map(|i| i.vocabulary().tokens().to_vec()))?;
            (space.clone(), Some(tokens))
        }
        None if dense_only => (TermSpace::free("dense-only"), None),
        None => bail!(
            "the model at {} has no sparse (text or image) encoder and no dense one",
            model_path.display()
        ),
    };
    // Opening the input first means a missing or unreadable input changes nothing. A total for
    // the ETA where counting is cheap (not for tar shards).
    let total = match &input {
        Input::WebDataset(paths) => {
            lexlip_pipeline::sources::webdataset::shards(paths)?;
            None
        }
        other => Some(
            other
                .open()?
                .filter(|i| args.shard.is_none_or(|s| s.holds(i)))
                .count() as u64,
        ),
    };
    let mut collection = Collection::open_or_create(
        &args.collection,
        space,
        tokens.as_deref(),
        args.settings(dense_dim, args.scale(encoders.scale())),
    )?;
    match (dense_dim, collection.manifest().settings.dense_dim) {
        (Some(_), None) => bail!(
            "{} keeps no dense vectors (it was made without --dense): index into a new \
             collection",
            args.collection.display()
        ),
        (None, Some(_)) if encoders.dense().is_none() => bail!(
            "{} keeps dense vectors, and the model at {} has no dense encoder: add \
             --dense-model DIR",
            args.collection.display(),
            model_path.display()
        ),
        _ => {}
    }
    collection.set_doc_order(args.doc_order);
    // Nothing searches the collection while it is written: its dense graphs are built when a
    // server searches it, not at every commit.
    collection.set_warm_dense(false);
    let mut progress = Progress::new(args, total, Unit::Items)?;
    let mut model_paths = vec![model_path.clone()];
    model_paths.extend(args.model.tokenizer.clone());
    model_paths.extend(args.dense_model.clone());
    let context = format!(
        "{}|{}|{:?}|{:?}|{:?}{}",
        model_path.display(),
        args.scale(encoders.scale()),
        args.top_k_terms,
        args.dense_model,
        (
            args.model.image_top_k,
            args.model.text_top_k,
            args.model.text_bow
        ),
        lexlip_pipeline::sources::files_signature(&model_files(&model_paths)?)?
    );
    let result = lexlip_pipeline::index_corpus(
        &input,
        &encoders,
        &collection,
        &args.options(10_000, context),
        &mut progress,
    );
    progress.bar.finish();
    let summary = result?;
    let seconds = start.elapsed().as_secs_f64();
    Ok((
        finish(args, &collection, &summary, seconds, true)?,
        collection,
    ))
}

/// Every file under `paths` (files, or directories walked), sorted: the model's files, whose
/// signature (`sources::files_signature`) is part of a corpus run's resume fingerprint, so
/// that a model changed in place (new weights pulled into `models/NAME`) is never taken for
/// the one an earlier run indexed with.
fn model_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    fn walk(path: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        if path.is_dir() {
            let entries =
                std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))?;
            for entry in entries {
                walk(&entry?.path(), out)?;
            }
        } else {
            out.push(path.to_path_buf());
        }
        Ok(())
    }
    let mut files = Vec::new();
    for p in paths {
        walk(p, &mut files)?;
    }
    files.sort();
    Ok(files)
}

/// The report of a finished run, after `--merge-segments` has merged all segments into one per
/// modality (not after an interrupted run, which the same command resumes).
fn finish(
    args: &IndexArgs,
    collection: &Collection,
    summary: &lexlip_pipeline::Summary,
    seconds: f64,
    stages: bool,
) -> anyhow::Result<Report> {
    let mut merge_seconds = None;
    if args.merge_segments && !summary.interrupted {
        let t = Instant::now();
        if !args.json {
            eprintln!("merging the segments into one per modality…");
        }
        collection
            .merge_all()
            .with_context(|| format!("merging the segments of {}", collection.dir().display()))?;
        merge_seconds = Some(t.elapsed().as_secs_f64());
    }
    let mut report = Report::new(collection, summary, seconds, stages)?;
    report.merge_seconds = merge_seconds;
    Ok(report)
}

/// What the progress bar counts.
#[derive(Clone, Copy, PartialEq)]
enum Unit {
    /// Input bytes (vectors files).
    Bytes,
    Items,
}

/// Where a collection keeps the list of the items its last index job skipped.
pub const SKIPPED_FILE: &str = "index-skipped.jsonl";
/// Skipped items printed as they are found (the rest are in the list).
const PRINT_SKIPPED: usize = 5;

/// The progress bar and the list of skipped items of a run.
struct Progress {
    bar: Meter,
    unit: Unit,
    /// The job's list of skipped items, in the collection (`SKIPPED_FILE`).
    errors: ErrorsFile,
    /// Skipped items printed so far (the first [`PRINT_SKIPPED`]).
    shown: usize,
    /// The first progress call (a resumed run starts where the earlier one committed).
    started: bool,
}

impl Progress {
    fn new(args: &IndexArgs, total: Option<u64>, unit: Unit) -> anyhow::Result<Self> {
        let errors = ErrorsFile::open(&args.collection.join(SKIPPED_FILE))?;
        let template = match (unit, total) {
            (Unit::Bytes, Some(_)) => {
                "{bar:30} {percent}% of {binary_total_bytes}, {binary_bytes_per_sec}, ETA {eta}: {msg}"
            }
            (Unit::Items, Some(_)) => {
                "{bar:30} {human_pos}/{human_len} items, {per_sec}, ETA {eta}"
            }
            (Unit::Bytes, None) => "{spinner} {elapsed}: {msg}",
            (Unit::Items, None) => "{spinner} {human_pos} items, {per_sec}, {elapsed}",
        };
        let counts = match unit {
            Unit::Bytes => meter::Unit::Bytes,
            Unit::Items => meter::Unit::Count("items"),
        };
        Ok(Self {
            bar: Meter::new("indexing", counts, total, template, args.json),
            unit,
            errors,
            shown: 0,
            started: false,
        })
    }
}

impl Observer for Progress {
    fn skipped(&mut self, position: u64, bad: &BadItem) -> lexlip_pipeline::Result<()> {
        let line = match self.unit {
            Unit::Bytes => serde_json::json!({"line": position, "reason": bad.message}),
            Unit::Items => serde_json::json!({
                "position": position, "id": bad.id, "reason": bad.reason, "message": bad.message,
            }),
        };
        self.errors.write(&line)?;
        if self.shown <= PRINT_SKIPPED {
            let text = if self.shown == PRINT_SKIPPED {
                format!(
                    "more items skipped: all of them are listed in {}",
                    self.errors.path().display()
                )
            } else {
                match self.unit {
                    Unit::Bytes => format!("skipped line {position}: {}", bad.message),
                    Unit::Items => format!(
                        "skipped {}({}): {}",
                        bad.id
                            .as_deref()
                            .map(|i| format!("{i} "))
                            .unwrap_or_default(),
                        bad.reason,
                        bad.message
                    ),
                }
            };
            self.bar.println(&text);
            self.shown += 1;
        }
        Ok(())
    }

    fn progress(&mut self, read: u64, _indexed: u64) {
        match self.unit {
            Unit::Items => self.bar.set_position(read),
            Unit::Bytes => {
                self.bar.tick();
                self.bar.set_message(format!("{read} documents read"));
            }
        }
        if !self.started {
            self.started = true;
            self.bar.restart_rate(); // the rate counts this run's items only
        }
    }

    fn input_bytes(&mut self, bytes: u64) {
        self.bar.set_position(bytes);
    }

    fn notice(&mut self, text: &str) {
        self.bar.println(text);
    }

    fn checkpoint(&mut self) -> lexlip_pipeline::Result<u64> {
        self.errors.checkpoint()
    }

    fn rewind(&mut self, mark: u64) -> lexlip_pipeline::Result<()> {
        self.errors.rewind(mark)
    }
}
