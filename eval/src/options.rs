//! What an evaluation is asked to do (the encoders, the settings swept, the re-ranker) and
//! who hears its progress.

use std::path::PathBuf;

use lexlip_corpus::BadItem;
use lexlip_pipeline::{PipelineError, Result};
use lexlip_proto::DEFAULT_SCALE;
use lexlip_proto::api::Precision;

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

    /// The setting's name ([`label`]).
    pub fn label(&self, mode: Mode) -> String {
        label(
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

/// What counts as a correct answer (reports name it "item" or "caption").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Relevance {
    /// The picture a caption belongs to; a picture's own captions.
    #[default]
    Item,
    /// Every picture with a caption worded like the query; every caption worded like one of the
    /// picture's own. Each wording is asked once.
    Caption,
    /// As [`Relevance::Item`], but a picture whose file is byte-identical to the right one's
    /// answers too (and its captions a picture's query): some corpora draw two names with one
    /// file (Noto's flags of France and of Clipperton Island), and no model can tell them apart.
    Picture,
}

/// A setting's name in the table and on the progress bar: the documents ("full", "top-K") and,
/// unless searched exactly, how ("full ×1.2", "full cut 0.1", "hnsw").
pub fn label(
    top_k: Option<usize>,
    search: &str,
    approx: Option<f32>,
    term_cut: Option<f32>,
) -> String {
    let docs = top_k.map_or_else(|| "full".to_string(), |k| format!("top-{k}"));
    match (search, approx, term_cut) {
        ("hnsw", _, _) => "hnsw".into(),
        (_, _, Some(c)) => format!("{docs} cut {c}"),
        (_, Some(x), None) => format!("{docs} ×{x}"),
        _ => docs,
    }
}
