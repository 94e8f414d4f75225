//! Retrieval evaluation of a model on a test corpus, as LexLIP's Tables 1 and 2 report it:
//! text → image and image → text recall at 1, 5 and 10, with what the index costs (bytes and
//! non-zeros per item) and how fast it answers (queries per second), for full vectors and for
//! documents cut to their K largest terms.
//!
//! ```text
//! corpus ──▶ encode every image and caption once ([`encode`]) ──▶ vectors in memory
//!        ──▶ per setting: a real collection in a temporary directory, searched like the
//!            server searches it ([`sweep`]) ──▶ rankings ──▶ R@K ([`recall`])
//! ```
//!
//! Every caption is a text → image query whose answer is its image; every image with captions
//! is an image → text query, answered when any of its captions is retrieved.
//!
//! With `single_modal` (COOKIE's image retrieval and text matching), images that share a
//! caption (the same text up to case and spaces, e.g. one emoji in two art styles) show one
//! concept: every image with another image of its concept is an image → image query answered by
//! those images, and every caption is a text → text query answered by the other, differently
//! worded captions of its concept. The query itself, and captions worded exactly like it, are
//! left out of its ranking.

pub mod compose;
pub mod encode;
pub mod impacts;
pub mod lexicon;
pub mod plot;
pub mod queries;
pub mod recall;
pub mod report;
pub mod rerank;
pub mod stored;
pub mod sweep;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use lexlip_model::Encoders;
use lexlip_proto::api::Precision;
use lexlip_proto::{DEFAULT_SCALE, DenseVector, DocId, Document, TermSpace};

use lexlip_corpus::BadItem;
use lexlip_corpus::Input;
use lexlip_pipeline::{PipelineError, Result};

pub use encode::encode;
pub use impacts::{Impacts, Interner};
pub use queries::{Queries, Relevance};
pub use report::{EvalReport, SettingReport};
pub use sweep::evaluate;

/// Which of the model's encoders is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The lexicon encoders (text and image), through the sparse index.
    #[default]
    Sparse,
    /// The dense encoder, through the dense index (cosine similarity, exact scan).
    Dense,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Sparse => "sparse",
            Mode::Dense => "dense",
        }
    }
}

#[derive(Debug, Clone)]
pub struct EvalOptions {
    pub mode: Mode,
    /// Document top-K cuts to evaluate after the full vectors (sparse mode only).
    pub top_ks: Vec<usize>,
    /// Approximation factors (> 1) to also search the full vectors and each top-K collection
    /// with (sparse mode only).
    pub approx: Vec<f32>,
    /// Term cuts (shares of a query's largest possible score, in (0, 1)) to also search the
    /// full vectors and each top-K collection with, each at factor 1 (sparse mode only).
    pub term_cuts: Vec<f32>,
    /// Also search the dense index through its HNSW graph (dense mode only).
    pub hnsw: bool,
    /// At most this many queries per direction, spread evenly over the corpus (None: all):
    /// every item stays a document, so a large corpus is searched at its size with fewer
    /// queries.
    pub max_queries: Option<usize>,
    /// What answers a query: its own item, or any item of the same caption wording.
    pub relevance: Relevance,
    /// Quantization scale of the collections: impact = floor(scale · w).
    pub scale: f32,
    /// Items per encoder batch.
    pub batch_size: usize,
    /// Where the temporary collections are built (default: the system's temporary directory).
    pub work_dir: Option<PathBuf>,
    /// Also image → image and text → text recall (see the module doc).
    pub single_modal: bool,
    /// Also re-rank each text → image and image → text query's first candidates.
    pub rerank: Option<RerankOptions>,
    /// A collection indexed with the same model whose pictures and captions join every search
    /// as distractors, never asked and never an answer (LexLIP's Table 2: a test set among a
    /// million other pictures).
    pub distractors: Option<PathBuf>,
    /// The distractors' lexicons are computed by the model's heads from the dense vectors the
    /// collection stores ([`stored::read_from_dense`]), not read as it indexed them.
    pub distractors_from_dense: bool,
    /// Exponent of the sparse queries' IDF weighting (`SearchPlan::idf`; 0: off).
    pub idf: f32,
}

/// A second stage to evaluate: `model` re-scores the first `top` candidates of each query.
#[derive(Debug, Clone)]
pub struct RerankOptions {
    pub model: std::sync::Arc<lexlip_model::Reranker>,
    pub top: usize,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            mode: Mode::Sparse,
            top_ks: Vec::new(),
            approx: Vec::new(),
            term_cuts: Vec::new(),
            hnsw: false,
            max_queries: None,
            relevance: Relevance::Item,
            scale: DEFAULT_SCALE,
            batch_size: 32,
            work_dir: None,
            single_modal: false,
            rerank: None,
            distractors: None,
            distractors_from_dense: false,
            idf: 0.0,
        }
    }
}

impl EvalOptions {
    /// The settings to evaluate: full vectors searched exactly first, then the full vectors
    /// at each approximation factor (smallest first) and each term cut, then each top-K once
    /// (largest first), searched exactly, at each factor and with each cut; in dense mode the
    /// exact scan, then the HNSW graph.
    pub fn settings(&self) -> Result<Vec<Setting>> {
        let refuse = |m: &str| Err(PipelineError::Input(m.into()));
        if self.mode == Mode::Dense {
            if !self.top_ks.is_empty() {
                return refuse(
                    "a top-K sweep cuts lexicon vectors; the dense mode has one setting (leave out --top-k)",
                );
            }
            if !self.approx.is_empty() || !self.term_cuts.is_empty() {
                return refuse(
                    "--approx and --term-cut approximate the sparse search; the dense index's approximate search is its HNSW graph (--hnsw)",
                );
            }
            if self.idf > 0.0 {
                return refuse(
                    "--idf weights the sparse queries' terms: leave it out with --mode dense",
                );
            }
        } else if self.hnsw {
            return refuse("--hnsw searches the dense index's graph: use it with --mode dense");
        }
        lexlip_search::plan::check_idf(self.idf)
            .map_err(|e| PipelineError::Input(format!("--idf: {e}")))?;
        if self.top_ks.contains(&0) {
            return refuse("a top-K must be at least 1");
        }
        if self.max_queries == Some(0) {
            return refuse("--max-queries must be at least 1");
        }
        if let Some(x) = self.approx.iter().find(|x| !(x.is_finite() && **x > 1.0)) {
            return Err(PipelineError::Input(format!(
                "an approximation factor must be above 1 (1 is the exact search), got {x}"
            )));
        }
        if let Some(c) = self.term_cuts.iter().find(|c| !(**c > 0.0 && **c < 1.0)) {
            return Err(PipelineError::Input(format!(
                "a term cut is a share of the query's largest possible score, above 0 and below 1, got {c}"
            )));
        }
        let mut factors = self.approx.clone();
        factors.sort_by(f32::total_cmp);
        factors.dedup();
        let mut cuts = self.term_cuts.clone();
        cuts.sort_by(f32::total_cmp);
        cuts.dedup();
        let mut ks = self.top_ks.clone();
        ks.sort_unstable_by(|a, b| b.cmp(a));
        ks.dedup();
        // Each collection's exact search first, then its approximations, so that they share
        // its documents and are measured against its first results.
        let mut out = Vec::new();
        for top_k in std::iter::once(None).chain(ks.into_iter().map(Some)) {
            out.push(Setting {
                top_k,
                ..Setting::default()
            });
            out.extend(factors.iter().map(|&x| Setting {
                top_k,
                precision: Precision::Approx(x),
                ..Setting::default()
            }));
            out.extend(cuts.iter().map(|&c| Setting {
                top_k,
                precision: Precision::Approx(1.0),
                term_cut: c,
                ..Setting::default()
            }));
        }
        if self.mode == Mode::Dense && self.hnsw {
            out.push(Setting {
                precision: Precision::Approx(1.0),
                ..Setting::default()
            });
        }
        for s in &mut out {
            s.max_queries = self.max_queries;
            s.relevance = self.relevance;
            s.idf = self.idf;
        }
        Ok(out)
    }
}

/// One evaluated setting: which documents the collection stores and how queries search it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Setting {
    /// Documents cut to their K largest terms (None: full vectors).
    pub top_k: Option<usize>,
    /// Sparse: exact, or approximate at a factor; dense: an exact scan of every vector, or
    /// (`Approx`, whatever the factor) the HNSW graph.
    pub precision: Precision,
    /// Sparse: the share of the query's largest possible score left out of the block bounds
    /// (with `Approx(1.0)`: the cut alone).
    pub term_cut: f32,
    /// At most this many queries per direction ([`EvalOptions::max_queries`]).
    pub max_queries: Option<usize>,
    /// What answers a query ([`EvalOptions::relevance`]).
    pub relevance: Relevance,
    /// The sparse queries' IDF weighting ([`EvalOptions::idf`]).
    pub idf: f32,
}

impl Setting {
    /// How the queries search: "exact", "approx" (factor or term cut) or, dense, "hnsw".
    pub fn search(&self, mode: Mode) -> &'static str {
        match (self.precision, mode) {
            (Precision::Approx(_), Mode::Dense) => "hnsw",
            (Precision::Approx(_), Mode::Sparse) => "approx",
            (Precision::Exact, _) => "exact",
        }
    }

    /// The setting's name ([`report::label`]).
    pub fn label(&self, mode: Mode) -> String {
        report::label(
            self.top_k,
            self.search(mode),
            self.factor(mode),
            (self.term_cut > 0.0).then_some(self.term_cut),
        )
    }

    /// The sparse approximation factor (None: exact, or the dense graph).
    pub fn factor(&self, mode: Mode) -> Option<f32> {
        match (self.precision, mode) {
            (Precision::Approx(x), Mode::Sparse) => Some(x),
            _ => None,
        }
    }
}

/// An item's vector, kept in memory between the encoders and the collections.
#[derive(Debug, Clone, PartialEq)]
pub enum Vector {
    /// Lexicon impacts quantized with the evaluation's scale, uncut (each setting cuts them
    /// with its collection's quantizer).
    Sparse(Impacts),
    Dense(DenseVector),
}

impl Vector {
    /// Non-zero entries.
    pub fn nnz(&self) -> usize {
        match self {
            Vector::Sparse(q) => q.len(),
            Vector::Dense(d) => d.as_slice().iter().filter(|x| **x != 0.0).count(),
        }
    }
}

/// One encoded item: the document a collection stores (as `lexlip index` stores it) and its
/// vector.
#[derive(Debug, Clone)]
pub struct Entry {
    pub doc: Document,
    /// The vector as stored (a document).
    pub vector: Vector,
    /// A text's vector as a query, where the model encodes queries otherwise than the
    /// documents it stores (expansion control: `TextTerms::for_documents`); `None`: the same.
    pub query: Option<Vector>,
    /// The image as the encoder saw it, kept for a re-ranker (`EvalOptions::rerank`) only.
    pub pixels: Option<lexlip_model::PreprocessedImage>,
}

impl Entry {
    /// The vector this item searches with.
    pub fn as_query(&self) -> &Vector {
        self.query.as_ref().unwrap_or(&self.vector)
    }
}

/// `doc` with only the metadata an evaluation reads: `image_id`, which links a caption to its
/// picture. Its collections filter by modality alone, and the rest (a composed picture's placed
/// objects, a shard's url) took more memory than the vectors: about 4 GB at a million pictures.
pub(crate) fn lean(mut doc: Document) -> Document {
    doc.metadata.retain(|key, _| key == IMAGE_ID);
    doc
}

/// The metadata key that links a caption to its picture, as the corpus readers set it.
pub(crate) const IMAGE_ID: &str = "image_id";

/// Every item of the corpus, encoded once.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub mode: Mode,
    pub images: Vec<Entry>,
    /// Captions and other texts.
    pub texts: Vec<Entry>,
    /// For each text, the position in `images` of its image (None: a text of no image, which
    /// is a candidate for image → text queries but no query itself).
    pub text_image: Vec<Option<usize>>,
    /// The term space of the sparse collections (free for dense).
    pub term_space: TermSpace,
    /// Its tokens, which sparse collections are bound to.
    pub tokens: Option<Vec<String>>,
    /// Items read from the input (good and bad).
    pub read: u64,
    /// Skipped items by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Seconds spent reading, decoding and encoding.
    pub encode_seconds: f64,
    /// The distractors added at the end of `images` and `texts` ([`Encoded::add_distractors`]).
    pub distractors: Option<Distractors>,
}

/// Where an evaluation's distractors came from, and how many joined each side.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Distractors {
    pub collection: String,
    pub images: usize,
    pub captions: usize,
    /// Seconds spent reading them back.
    pub read_seconds: f64,
}

/// What a distractor's id starts with, so that it never takes the id of a test item.
pub const DISTRACTOR_PREFIX: &str = "distractor/";

impl Encoded {
    /// Nothing read yet, for `mode`'s collections over `term_space` (bound to `tokens`).
    pub fn new(mode: Mode, term_space: TermSpace, tokens: Option<Vec<String>>) -> Self {
        Self {
            mode,
            images: Vec::new(),
            texts: Vec::new(),
            text_image: Vec::new(),
            term_space,
            tokens,
            read: 0,
            skipped: BTreeMap::new(),
            encode_seconds: 0.0,
            distractors: None,
        }
    }

    /// Adds the pictures and texts of `other` (read from the collection `name`) as
    /// distractors: documents of every search, after this corpus's, that answer no query and
    /// ask none. They lose their links and metadata, and their ids take [`DISTRACTOR_PREFIX`].
    pub fn add_distractors(&mut self, other: Encoded, name: String) -> Result<()> {
        if self.mode != other.mode || self.term_space != other.term_space {
            return Err(PipelineError::Input(format!(
                "the distractors at {name} were not encoded like the test corpus ({} mode, term \
                 space {:?}): index them with the same model",
                self.mode.as_str(),
                self.term_space
            )));
        }
        let dim = |e: Option<&Entry>| match e.map(|e| &e.vector) {
            Some(Vector::Dense(d)) => Some(d.dim()),
            _ => None,
        };
        let (ours, theirs) = (dim(self.images.first()), dim(other.images.first()));
        if let (Some(a), Some(b)) = (ours, theirs)
            && a != b
        {
            return Err(PipelineError::Input(format!(
                "the distractors at {name} hold dense vectors of {b} dimensions, the model's \
                 have {a}: index them with the same model"
            )));
        }
        let rename = |entry: Entry| -> Result<Entry> {
            let id = DocId::new(format!("{DISTRACTOR_PREFIX}{}", entry.doc.id))
                .map_err(|e| PipelineError::Input(format!("a distractor's id: {e}")))?;
            let mut doc = Document::new(id, entry.doc.modality);
            doc.text = entry.doc.text;
            Ok(Entry {
                doc,
                vector: entry.vector,
                query: None,
                pixels: None,
            })
        };
        let counts = Distractors {
            collection: name,
            images: other.images.len(),
            captions: other.texts.len(),
            read_seconds: other.encode_seconds,
        };
        self.images.reserve(counts.images);
        for entry in other.images {
            self.images.push(rename(entry)?);
        }
        self.texts.reserve(counts.captions);
        self.text_image.reserve(counts.captions);
        for entry in other.texts {
            self.texts.push(rename(entry)?);
            self.text_image.push(None);
        }
        self.distractors = Some(counts);
        Ok(())
    }

    /// The image → text queries: each image with at least one caption, and its captions.
    pub fn captions_of_images(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.images.len()];
        for (t, image) in self.text_image.iter().enumerate() {
            if let Some(i) = image {
                out[*i].push(t);
            }
        }
        out
    }

    /// Text → image queries (captions with an image).
    pub fn t2i_queries(&self) -> usize {
        self.text_image.iter().flatten().count()
    }

    /// Image → text queries (images with a caption).
    pub fn i2t_queries(&self) -> usize {
        self.captions_of_images()
            .iter()
            .filter(|c| !c.is_empty())
            .count()
    }

    /// The concept of each image (numbered from 0): images linked by a shared caption wording
    /// (`wording[t]` of text `t`, from [`Encoded::wordings`]), transitively.
    pub fn image_concepts(&self, wording: &[String]) -> Vec<usize> {
        let mut parent: Vec<usize> = (0..self.images.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut first_with: HashMap<&str, usize> = HashMap::new();
        for (t, image) in self.text_image.iter().enumerate() {
            let Some(i) = *image else { continue };
            let j = *first_with.entry(wording[t].as_str()).or_insert(i);
            let (a, b) = (root(&mut parent, i), root(&mut parent, j));
            parent[a.max(b)] = a.min(b);
        }
        let mut ids: HashMap<usize, usize> = HashMap::new();
        (0..self.images.len())
            .map(|i| {
                let r = root(&mut parent, i);
                let next = ids.len();
                *ids.entry(r).or_insert(next)
            })
            .collect()
    }

    /// Every text lower-cased with runs of white space made one space (how concepts compare).
    pub fn wordings(&self) -> Vec<String> {
        self.texts
            .iter()
            .map(|e| {
                let text = e.doc.text.as_deref().unwrap_or_default();
                text.split_whitespace()
                    .map(str::to_lowercase)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    /// Fails when nothing can be evaluated: no image-caption pair survived.
    pub fn check(&self) -> Result<()> {
        if self.t2i_queries() == 0 {
            let skipped: u64 = self.skipped.values().sum();
            return Err(PipelineError::Input(format!(
                "nothing to evaluate: {} items read, {} images and {} texts encoded, no caption \
                 of an encoded image ({skipped} skipped: {:?})",
                self.read,
                self.images.len(),
                self.texts.len(),
                self.skipped
            )));
        }
        Ok(())
    }
}

/// Hears about the evaluation's progress (a progress bar).
pub trait EvalObserver {
    /// `done` of `total` input items encoded (`total` when cheap to count).
    fn encoding(&mut self, _done: u64, _total: Option<u64>) {}
    /// `done` of a collection's `total` documents read back ([`Source::Collection`]).
    fn reading(&mut self, _done: u64, _total: u64) {}
    /// An item was skipped (missing or corrupt image, empty caption, …).
    fn skipped(&mut self, _bad: &BadItem) {}
    /// Setting `label` is being evaluated: `done` of `total` queries searched (0 while its
    /// collection is built).
    fn searching(&mut self, _label: &str, _done: u64, _total: u64) {}
}

/// An observer that ignores everything.
impl EvalObserver for () {}

/// A temporary directory for the collections (removed when dropped), in `dir` (made if it does
/// not exist yet, as `mkdir -p`) or the system's temporary directory.
fn work_dir(dir: Option<&Path>) -> Result<tempfile::TempDir> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("lexlip-eval");
    match dir {
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|()| builder.tempdir_in(dir))
            .map_err(|e| PipelineError::io(dir, e)),
        None => builder
            .tempdir()
            .map_err(|e| PipelineError::io(std::env::temp_dir(), e)),
    }
}

/// What an evaluation reads: a corpus, encoded once, or a collection's stored vectors
/// ([`stored::read`]: nothing is encoded again).
#[derive(Debug, Clone)]
pub enum Source {
    Corpus(Input),
    /// A collection made by `lexlip index`, with the model that indexed it.
    Collection(PathBuf),
}

impl Source {
    /// How a report names it: the corpus's path (or its shards' paths), or the collection's.
    pub fn name(&self) -> String {
        match self {
            Source::Corpus(input) => report::corpus_name(input),
            Source::Collection(dir) => dir.display().to_string(),
        }
    }
}

/// Reads `source` once with `encoders` (encoding a corpus, or reading a collection's vectors),
/// then evaluates every setting of `options`.
pub fn run(
    source: &Source,
    encoders: &Encoders,
    options: &EvalOptions,
    observer: &mut dyn EvalObserver,
) -> Result<EvalReport> {
    let started = std::time::Instant::now();
    let settings = options.settings()?;
    if (matches!(source, Source::Collection(_)) || options.distractors.is_some())
        && options.rerank.is_some()
    {
        return Err(PipelineError::Input(
            "a re-ranker reads the pictures, which a collection does not keep: evaluate the \
             corpus itself (--tsv, --manifest or --webdataset), without distractors, to re-rank"
                .into(),
        ));
    }
    if options.distractors.is_some() && options.single_modal {
        return Err(PipelineError::Input(
            "single-modal recall asks every picture and caption of the collection: leave \
             --single-modal out with distractors"
                .into(),
        ));
    }
    if options.distractors_from_dense
        && (options.distractors.is_none() || options.mode != Mode::Sparse)
    {
        return Err(PipelineError::Input(
            "lexicons are computed from stored dense vectors for the distractors of a sparse \
             evaluation only: give --distractors, and leave out --mode dense"
                .into(),
        ));
    }
    // Before the encoding, which can take an hour: a work directory that cannot be made fails
    // now, not after it.
    let work = work_dir(options.work_dir.as_deref())?;
    let mut encoded = match source {
        Source::Corpus(input) => encode(input, encoders, options, observer)?,
        Source::Collection(dir) => stored::read(dir, encoders, options, observer)?,
    };
    encoded.check()?;
    // The test corpus's lexicons alone.
    let lexicons = match options.mode {
        Mode::Sparse => measure_lexicons(&encoded, encoders)?,
        Mode::Dense => None,
    };
    if let Some(dir) = &options.distractors {
        let others = if options.distractors_from_dense {
            stored::read_from_dense(dir, encoders, options, observer)?
        } else {
            stored::read(dir, encoders, options, observer)?
        };
        encoded.add_distractors(others, dir.display().to_string())?;
    }
    // The same queries for every setting; the report counts every query the rule asks, before
    // --max-queries (each wording once under the caption rule).
    let queries = Queries::new(&encoded, options.relevance, options.max_queries);
    let asked = match options.max_queries {
        None => (queries.t2i.len(), queries.i2t.len()),
        Some(_) => {
            let every = Queries::new(&encoded, options.relevance, None);
            (every.t2i.len(), every.i2t.len())
        }
    };
    let mut results: Vec<SettingReport> = Vec::with_capacity(settings.len());
    // One collection on disk at a time, kept while the settings that follow search the same
    // documents (a collection's exact search, its factors and its term cuts).
    let mut built: Option<(sweep::Built, PathBuf)> = None;
    // Each collection's exact first results, by top-K (None: the full vectors).
    let mut exact: HashMap<Option<usize>, recall::Rankings> = HashMap::new();
    for (n, setting) in settings.into_iter().enumerate() {
        let current = match built.take() {
            Some((b, dir)) if b.serves(&setting, encoded.mode) => (b, dir),
            old => {
                if let Some(old) = old {
                    remove(old)?;
                }
                let dir = work.path().join(format!("setting-{n}"));
                observer.searching(&setting.label(encoded.mode), 0, 0);
                (sweep::build(&encoded, &setting, options.scale, &dir)?, dir)
            }
        };
        let mut result = sweep::evaluate_on(
            &encoded,
            &current.0,
            setting,
            &queries,
            options.single_modal,
            options.rerank.as_ref(),
            observer,
        )?;
        built = Some(current);
        // An approximate search (a factor, a cut, the graph) is measured against the exact
        // search of the same documents, which `settings` puts before it; a top-K collection's
        // exact search against the full vectors' (the run's first setting).
        let rankings = std::mem::take(&mut result.rankings);
        let reference = match setting.precision {
            Precision::Approx(_) => exact.get(&setting.top_k),
            Precision::Exact => exact.get(&None),
        };
        if let Some(reference) = reference {
            result.t2i_overlap = recall::overlap(&rankings.t2i, &reference.t2i);
            result.i2t_overlap = recall::overlap(&rankings.i2t, &reference.i2t);
        }
        if setting.precision == Precision::Exact {
            exact.insert(setting.top_k, rankings);
        }
        results.push(result);
    }
    if let Some(last) = built {
        remove(last)?;
    }
    let mut report = EvalReport::new(
        encoders.path().display().to_string(),
        source.name(),
        &encoded,
        options.relevance,
        asked,
        results,
        started.elapsed().as_secs_f64(),
    );
    report.lexicon = lexicons;
    report.idf = (options.idf > 0.0).then_some(options.idf);
    Ok(report)
}

/// Closes a setting's collection and removes its directory.
fn remove((built, dir): (sweep::Built, PathBuf)) -> Result<()> {
    drop(built);
    std::fs::remove_dir_all(&dir).map_err(|e| PipelineError::io(&dir, e))
}

/// The lexicon figures ([`lexicon::LexiconReport`]) of the encoded corpus, with each caption's
/// words as the text encoder's tokenizer splits it.
fn measure_lexicons(
    encoded: &Encoded,
    encoders: &Encoders,
) -> Result<Option<lexicon::LexiconReport>> {
    let text = encoders.text()?;
    let tokens = text.vocabulary().tokens();
    let mut words = Vec::with_capacity(encoded.texts.len());
    for chunk in encoded.texts.chunks(256) {
        let texts: Vec<&str> = chunk
            .iter()
            .map(|e| e.doc.text.as_deref().unwrap_or_default())
            .collect();
        for ids in text.tokenize(&texts)? {
            words.push(lexicon::caption_words(
                ids.iter().filter_map(|&i| tokens.get(i as usize).cloned()),
            ));
        }
    }
    Ok(lexicon::LexiconReport::measure(encoded, &words))
}

#[cfg(test)]
mod tests;
