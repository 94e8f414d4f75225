//! `lexlip eval`: text ↔ image retrieval of a model on a test corpus (R@1/5/10, index size,
//! speed) over full vectors and a top-K sweep, around `lexlip_eval`.

use std::path::PathBuf;

use anyhow::Context;
use clap::ValueEnum;
use lexlip_eval::{self as eval, EvalObserver, EvalOptions, Source};
use lexlip_model::LoadOptions;
use lexlip_pipeline::{BadItem, Input};
use lexlip_proto::DEFAULT_SCALE;

use super::meter::{Meter, Unit};
use super::model_args::ModelArgs;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["tsv", "manifest", "webdataset", "collection"])))]
#[command(mut_arg("model", |a| a.required(true)))]
#[command(override_usage = "lexlip eval [OPTIONS] --model <MODEL> --tsv <FILE>
       lexlip eval [OPTIONS] --model <MODEL> --manifest <FILE>
       lexlip eval [OPTIONS] --model <MODEL> --webdataset <SHARDS>...
       lexlip eval [OPTIONS] --model <MODEL> --collection <DIR>")]
pub struct EvalArgs {
    /// Test corpus: a caption TSV `title<TAB>filepath<TAB>image_id`.
    ///
    /// LexLIP/ViLT's, with a header.
    #[arg(long, value_name = "FILE")]
    pub tsv: Option<PathBuf>,
    /// Root of the TSV's file paths (default: the TSV's directory).
    #[arg(long, requires = "tsv", value_name = "DIR")]
    pub images_root: Option<PathBuf>,
    /// Test corpus: a JSONL manifest.
    ///
    /// Lines `{"id", "image", "text"}`, one caption per image line.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Test corpus: img2dataset WebDataset shards.
    ///
    /// Each sample an image and its caption: .tar files, directories of them, or quoted
    /// patterns ('shards/*.tar'), as `lexlip index` takes them.
    #[arg(long, num_args = 1.., value_name = "SHARDS")]
    pub webdataset: Vec<PathBuf>,
    /// Evaluate what a collection made by `lexlip index` stores.
    ///
    /// Instead of encoding a corpus again: its pictures and captions (linked by their image_id)
    /// with the vectors as indexed (lexicons cut to the collection's top-K; with --mode dense, the
    /// vectors of a collection indexed with --dense). --model must be the model that indexed it.
    #[arg(long, value_name = "DIR")]
    pub collection: Option<PathBuf>,
    /// Search the test corpus among the items of this collection.
    ///
    /// Its pictures and captions, indexed by `lexlip index` with --model (with --dense for
    /// --mode dense), join every search but are never asked and never answer, as LexLIP's Table
    /// 2 puts Flickr30k's test set among a million other pictures.
    #[arg(long, conflicts_with_all = ["single_modal", "rerank_model"], value_name = "DIR")]
    pub distractors: Option<PathBuf>,
    /// Compute the distractors' lexicons from their dense vectors.
    ///
    /// With --model's heads, from the dense vectors their collection stores, instead of
    /// reading the lexicons it indexed: the collection was
    /// indexed with --dense by lexicon heads over the same dense model (checked on its first
    /// captions). New heads then meet a million pictures without their being encoded again.
    #[arg(long, requires = "distractors")]
    pub distractors_from_dense: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Which encoders and index: sparse (lexicons) or dense.
    ///
    /// sparse: the lexicon encoders through the sparse index; dense: the model's dense encoder
    /// through the dense index.
    #[arg(long, value_enum, default_value_t = ModeArg::Sparse)]
    pub mode: ModeArg,
    /// Also evaluate documents cut to their K largest terms, for each K.
    ///
    /// E.g. 64,32,16,8; full vectors are always evaluated first. Sparse mode only.
    #[arg(long, value_delimiter = ',', value_name = "K,...")]
    pub top_k: Vec<usize>,
    /// Also search approximately at each factor X > 1 (sparse mode).
    ///
    /// The full vectors and each --top-k collection (e.g. 1.2,1.5: blocks whose bound is below
    /// X times the k-th score are skipped, as `lexlip search --approx`).
    #[arg(long, value_delimiter = ',', value_name = "X,...")]
    pub approx: Vec<f32>,
    /// Also search with each term cut C (sparse mode).
    ///
    /// The full vectors and each --top-k collection (e.g. 0.1: the query's lightest terms, up
    /// to that share of its largest possible score, are left out of the block bounds, as
    /// `lexlip search --term-cut`).
    #[arg(long, value_delimiter = ',', value_name = "C,...")]
    pub term_cut: Vec<f32>,
    /// Also search the dense index through an HNSW graph (dense mode).
    ///
    /// Built for the evaluation (its build time is the setting's index time), searched after
    /// the exact scan.
    #[arg(long)]
    pub hnsw: bool,
    /// Search at most N queries per direction.
    ///
    /// Spread evenly over the corpus (every item stays in the collections): recall and QPS of
    /// a large corpus in less time.
    #[arg(long, value_name = "N")]
    pub max_queries: Option<usize>,
    /// What answers a query: its own items, or any worded alike.
    ///
    /// item: a caption's own picture, a picture's own captions (the Flickr30k / MS-COCO rule).
    /// caption: any picture with a caption worded the same (case and spaces aside), and any caption
    /// worded like one of the picture's own; each wording is asked once. Use caption on corpora
    /// that repeat captions, such as `lexlip bench compose`'s. picture: as item, but a picture
    /// whose file is byte-identical to the right one's answers too (its captions a picture's
    /// query), for corpora that draw two names with one file.
    #[arg(long, value_enum, default_value_t = RelevanceArg::Item)]
    pub relevance: RelevanceArg,
    /// Weight sparse queries' terms by their rarity, as `lexlip search --idf`.
    ///
    /// Each impact times ln(1 + N / df)^ALPHA (0-4; 0 is off). Sparse mode only. Default: in
    /// sparse mode, the model's (`idf` in its lexlip.json), else off.
    #[arg(long, value_name = "ALPHA")]
    pub idf: Option<f32>,
    /// Quantization scale of the collections (default: the model's).
    ///
    /// Impact = floor(scale · weight). Default: the model's, else 100; the model's is `scale` in
    /// its lexlip.json (VDR's takes 10000).
    #[arg(long, value_name = "S")]
    pub scale: Option<f32>,
    /// Pictures or texts per encoder batch.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Maximum tokens per text (default 40, LexLIP's caption length).
    #[arg(long, value_name = "N")]
    pub max_length: Option<usize>,
    /// Image input size (default: the model's).
    ///
    /// E.g. 384 for LexLIP's fine-tuned checkpoints.
    #[arg(long, value_name = "PX")]
    pub image_size: Option<usize>,
    /// Directory for the temporary collections (default: the system's).
    ///
    /// Made if missing; checked before the encoding starts.
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Write recall against bytes per item and QPS as an SVG.
    ///
    /// Across the settings.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Also image → image and text → text recall.
    ///
    /// The single-modal retrieval of COOKIE (ICCV 2021): images that share a caption (same words,
    /// case and spaces aside) show one concept; an image query is answered by another image of its
    /// concept, a caption by a differently worded caption of it.
    #[arg(long)]
    pub single_modal: bool,
    /// Also evaluate a second stage: this re-ranker.
    ///
    /// From `lexlip train --objective rerank`: it re-scores each text → image and image → text
    /// query's first --rerank-top candidates.
    #[arg(long, value_name = "DIR")]
    pub rerank_model: Option<PathBuf>,
    /// Candidates the re-ranker re-scores per query.
    #[arg(long, default_value_t = 32, requires = "rerank_model")]
    pub rerank_top: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum RelevanceArg {
    Item,
    Caption,
    Picture,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Sparse,
    Dense,
}

pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    let source = match (&args.tsv, &args.manifest, &args.collection) {
        (Some(path), _, _) => Source::Corpus(Input::Tsv {
            path: path.clone(),
            images_root: args.images_root.clone(),
        }),
        (None, Some(path), _) => Source::Corpus(Input::Manifest(path.clone())),
        (None, None, Some(dir)) => Source::Collection(dir.clone()),
        // A missing shard is refused below, where the input is opened before the model loads.
        (None, None, None) if !args.webdataset.is_empty() => {
            Source::Corpus(Input::WebDataset(args.webdataset.clone()))
        }
        (None, None, None) => anyhow::bail!(
            "give the test corpus: --tsv, --manifest or --webdataset, or an indexed --collection"
        ),
    };
    let options = EvalOptions {
        mode: match args.mode {
            ModeArg::Sparse => eval::Mode::Sparse,
            ModeArg::Dense => eval::Mode::Dense,
        },
        top_ks: args.top_k.clone(),
        approx: args.approx.clone(),
        term_cuts: args.term_cut.clone(),
        hnsw: args.hnsw,
        max_queries: args.max_queries,
        relevance: match args.relevance {
            RelevanceArg::Item => eval::Relevance::Item,
            RelevanceArg::Caption => eval::Relevance::Caption,
            RelevanceArg::Picture => eval::Relevance::Picture,
        },
        scale: args.scale.unwrap_or(DEFAULT_SCALE),
        batch_size: args.batch_size,
        work_dir: args.work_dir.clone(),
        single_modal: args.single_modal,
        rerank: None,
        distractors: args.distractors.clone(),
        distractors_from_dense: args.distractors_from_dense,
        idf: args.idf.unwrap_or(0.0),
    };
    // Bad options and a missing corpus are reported before the model loads.
    options.settings()?;
    let open_collection = |flag: &str, dir: &PathBuf| {
        lexlip_index::Collection::open(dir)
            .map(drop)
            .with_context(|| {
                format!(
                    "{flag} {}: not a collection lexlip index made",
                    dir.display()
                )
            })
    };
    match &source {
        Source::Corpus(input) => drop(input.open()?),
        Source::Collection(dir) => open_collection("--collection", dir)?,
    }
    if let Some(dir) = &args.distractors {
        open_collection("--distractors", dir)?;
    }
    if let Some(path) = &args.plot {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(dir) = parent.filter(|dir| !dir.is_dir()) {
            anyhow::bail!(
                "--plot {}: no directory {} to write it in (make it first)",
                path.display(),
                dir.display()
            );
        }
    }
    let load = LoadOptions {
        max_length: args.max_length,
        image_size: args.image_size,
        ..Default::default()
    };
    let (_, encoders) = args.model.load("lexlip eval", load)?;
    let mut options = options;
    if args.scale.is_none()
        && let Some(scale) = encoders.scale()
    {
        options.scale = scale;
    }
    // Without --idf, sparse queries are weighted as the model asks.
    if args.idf.is_none()
        && args.mode == ModeArg::Sparse
        && let Some(a) = encoders.idf()
    {
        // In range: the model refuses an `idf` out of it when it loads.
        options.idf = a;
    }
    if let Some(dir) = &args.rerank_model {
        anyhow::ensure!(
            (1..=256).contains(&args.rerank_top),
            "--rerank-top must be between 1 and 256, got {}",
            args.rerank_top
        );
        anyhow::ensure!(
            args.mode == ModeArg::Sparse,
            "--rerank-model evaluates a second stage over the sparse index: leave --mode dense out"
        );
        let dir = super::model_args::resolve_model(dir)?;
        let device = lexlip_model::device(args.model.gpu)?;
        let model = lexlip_model::Reranker::load(&dir, &device)
            .with_context(|| format!("--rerank-model {}", dir.display()))?;
        let lexicon_size = encoders.image()?.image_size();
        anyhow::ensure!(
            model.config().image_size == lexicon_size,
            "the re-ranker reads {0}×{0} images but the lexicon model {1}×{1}: train the \
             re-ranker on this model (--init) or give --image-size {0}",
            model.config().image_size,
            lexicon_size
        );
        options.rerank = Some(eval::RerankOptions {
            model: std::sync::Arc::new(model),
            top: args.rerank_top,
        });
    }
    let mut progress = Progress::new();
    let result = eval::run(&source, &encoders, &options, &mut progress);
    progress.finish();
    let report = result?;
    // The report first: a plot that cannot be written must not lose an hour's figures.
    if args.json {
        println!("{}", report.to_json());
    } else {
        println!("{}", report.human());
    }
    if let Some(path) = &args.plot {
        let title = format!(
            "{} on {} ({} mode)",
            report.model, report.corpus, report.mode
        );
        std::fs::write(path, eval::plot::svg(&title, &report.settings))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Progress on stderr (bars, or timed lines when stderr is no terminal): encoding the corpus,
/// then searching each setting.
struct Progress {
    meter: Option<Meter>,
    label: String,
}

impl Progress {
    fn new() -> Self {
        Self {
            meter: None,
            label: String::new(),
        }
    }

    /// The meter of a new phase (the last one's is finished).
    fn restart(&mut self, what: &str, unit: Unit, total: Option<u64>, template: &str) {
        self.finish();
        self.meter = Some(Meter::new(what, unit, total, template, false));
    }

    fn set(&mut self, done: u64, total: Option<u64>) {
        if let Some(m) = &mut self.meter {
            if let Some(n) = total {
                m.set_length(n);
            }
            m.set_position(done);
        }
    }

    fn finish(&mut self) {
        if let Some(mut m) = self.meter.take() {
            m.finish();
        }
    }
}

impl EvalObserver for Progress {
    fn encoding(&mut self, done: u64, total: Option<u64>) {
        if self.label != "encode" {
            self.label = "encode".into();
            let template = match total {
                Some(_) => "encoding {bar:30} {human_pos}/{human_len} items, {per_sec}, ETA {eta}",
                None => "encoding {spinner} {human_pos} items, {per_sec}, {elapsed}",
            };
            self.restart("encoding", Unit::Count("items"), total, template);
        }
        self.set(done, None);
    }

    fn reading(&mut self, done: u64, total: u64) {
        if self.label != "read" {
            self.label = "read".into();
            self.restart(
                "reading",
                Unit::Count("documents"),
                Some(total),
                "reading {bar:30} {human_pos}/{human_len} documents, {per_sec}, ETA {eta}",
            );
        }
        self.set(done, None);
    }

    fn skipped(&mut self, bad: &BadItem) {
        tracing::info!(id = ?bad.id, reason = bad.reason, "skipped: {}", bad.message);
    }

    fn searching(&mut self, label: &str, done: u64, total: u64) {
        if self.label != label {
            self.label = label.to_string();
            let template = format!(
                "{label:>8} {{bar:30}} {{human_pos}}/{{human_len}} queries, {{per_sec}}, ETA {{eta}}"
            );
            let what = format!("searching {label}");
            self.restart(&what, Unit::Count("queries"), Some(total), &template);
        }
        // A setting is announced with no queries while its collection is built.
        self.set(done, Some(total));
    }
}
