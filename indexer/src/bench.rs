//! `lexlip bench engine`: the engine on LexLIP-shaped synthetic data, every figure a ratio
//! against a baseline measured in the same run.

use std::time::Instant;

use lexlip_proto::api::Precision;
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};
use serde::Serialize;

use crate::collection::Collection;
use crate::collection::snapshot::Snapshot;
use crate::error::Result;
use crate::forward_index::{ForwardIndex, ForwardPlan, Layout};
use crate::manifest::CollectionSettings;
use crate::search::Algorithm;
use crate::search::ScoredDoc;
use crate::search::SearchOptions;
use crate::synth::{Corpus, Generator, Rng};

/// What to measure.
#[derive(Debug, Clone)]
pub struct EngineBenchConfig {
    pub docs: usize,
    pub queries: usize,
    pub seed: u64,
    pub k: usize,
    /// Approximation factors to sweep.
    pub approx: Vec<f32>,
    /// Term cuts ([`SearchOptions::term_cut`]) to sweep, each at factor 1.
    pub term_cuts: Vec<f32>,
    /// Which synthetic corpus.
    pub corpus: Corpus,
    /// Documents per pruning block (8-64); `None`: each segment's layout's own.
    pub block_size: Option<u32>,
    /// Forward index layout; `None`: chosen per segment.
    pub layout: Option<Layout>,
    /// Thread counts per query to measure exact search with (besides one).
    pub threads: Vec<usize>,
    /// Keep forward index files with the segments (the default of collections).
    pub forward_files: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub qps: f64,
    pub mean_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExactFigures {
    pub qps: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub speedup: f64,
    pub recall_at_10: f64,
    /// Fraction of candidate doc-id blocks actually scored.
    pub blocks_scored_fraction: f64,
    /// Segments per query scored term-at-a-time because their bounds skipped too little
    /// ([`crate::search::SearchStats::segments_unpruned`]), on average.
    pub segments_unpruned_per_query: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApproxFigures {
    /// The approximation factor.
    pub knob: f32,
    /// [`SearchOptions::term_cut`] (0: off).
    pub term_cut: f32,
    pub qps: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub speedup: f64,
    pub recall_at_10: f64,
}

impl ApproxFigures {
    /// `approx 1.1` or `term cut 0.1` (a cut runs at factor 1): how reports name the setting.
    pub fn label(&self) -> String {
        if self.term_cut > 0.0 {
            format!("term cut {}", self.term_cut)
        } else {
            format!("approx {}", self.knob)
        }
    }
}

/// The report; `--json` prints it as one object.
#[derive(Debug, Clone, Serialize)]
pub struct EngineBenchReport {
    pub corpus: Corpus,
    pub docs: usize,
    pub queries: usize,
    /// Non-zeros per query, on average.
    pub mean_query_nnz: f64,
    pub ingest_docs_per_s: f64,
    pub merge_seconds: f64,
    /// Opening the collection again and taking its first snapshot (what a restarted server
    /// pays before its first search): the forward index read from the segment's file, or
    /// built from the postings without files.
    pub open_seconds: f64,
    /// The same forward index built from the postings, timed in the same run.
    pub build_seconds: f64,
    pub forward_file_bytes: u64,
    pub nnz: u64,
    pub bytes: u64,
    pub bytes_per_nnz: f64,
    /// The sparse index search reads (postings, dictionary, forward index files), without the
    /// stored fields.
    pub index_bytes: u64,
    pub index_bytes_per_nnz: f64,
    /// Of that, the sparse vectors' own structures (impacts postings and dictionary, forward
    /// index files), without the documents' keys.
    pub vector_index_bytes: u64,
    pub vector_index_bytes_per_nnz: f64,
    pub stored_bytes: u64,
    pub pruning_memory_bytes: u64,
    /// The block size asked for (`None`: each segment's layout's own).
    pub block_size: Option<u32>,
    /// What the searched segments have: layout and documents per block, per segment.
    pub forward: Vec<crate::collection::snapshot::ForwardSummary>,
    /// Every algorithm's figures on the queries, measured in one run.
    #[serde(flatten)]
    pub search: SearchFigures,
    /// The queries searched, for running other engines on the same ones (`--write-queries`).
    #[serde(skip)]
    pub query_vectors: Vec<QuantizedVector>,
}

struct Timed {
    results: Vec<Vec<ScoredDoc>>,
    latencies_ms: Vec<f64>,
    total_s: f64,
    blocks_candidate: u64,
    blocks_scored: u64,
    segments_unpruned: u64,
}

fn run_queries(
    snap: &Snapshot,
    queries: &[QuantizedVector],
    options: &SearchOptions,
) -> Result<Timed> {
    let mut results = Vec::with_capacity(queries.len());
    let mut latencies_ms = Vec::with_capacity(queries.len());
    let (mut blocks_candidate, mut blocks_scored) = (0, 0);
    let mut segments_unpruned = 0;
    let start = Instant::now();
    for q in queries {
        let t = Instant::now();
        let out = snap.search(q, options)?;
        latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
        blocks_candidate += out.stats.blocks_candidate;
        blocks_scored += out.stats.blocks_scored;
        segments_unpruned += u64::from(out.stats.segments_unpruned);
        results.push(out.hits);
    }
    let total_s = start.elapsed().as_secs_f64();
    latencies_ms.sort_by(f64::total_cmp);
    Ok(Timed {
        results,
        latencies_ms,
        total_s,
        blocks_candidate,
        blocks_scored,
        segments_unpruned,
    })
}

/// Non-zeros per query, on average (0 for no queries).
pub fn mean_nnz(queries: &[QuantizedVector]) -> f64 {
    queries.iter().map(QuantizedVector::len).sum::<usize>() as f64 / queries.len().max(1) as f64
}

/// Search figures of one set of queries against one snapshot, every algorithm in the same run.
#[derive(Debug, Clone, Serialize)]
pub struct SearchFigures {
    pub exhaustive: Throughput,
    /// The default: block-max over the forward index.
    pub exact: ExactFigures,
    /// The previous default: block pruning over tantivy's postings cursors.
    pub exact_postings: ExactFigures,
    pub approx: Vec<ApproxFigures>,
    /// Exact block-max search with several threads per query.
    pub exact_threads: Vec<ThreadFigures>,
    /// The exhaustive (= exact) top k of every query: the ground truth.
    #[serde(skip)]
    pub truth: Vec<Vec<ScoredDoc>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadFigures {
    pub threads: usize,
    pub figures: ExactFigures,
}

/// Runs `queries` one at a time (each with `exact`'s k and filter) with the exhaustive
/// baseline, both exact algorithms, every approximation factor and every term cut (at factor 1)
/// on this thread, then exact block-max
/// with each count of `threads` per query; recall is against the exhaustive results. Every
/// query is first run once, unmeasured, exhaustively and block-max, so that no figure pays for
/// reading the postings or the forward files into the page cache (a collection just exported
/// or copied: exact block-max measured 1.32 ms cold against 0.49 ms warm on the 1M synthetic).
pub fn measure(
    snap: &Snapshot,
    queries: &[QuantizedVector],
    exact: &SearchOptions,
    approx_factors: &[f32],
    term_cuts: &[f32],
    threads: &[usize],
    progress: &mut dyn FnMut(&str, f64),
) -> Result<SearchFigures> {
    let exact_opts = exact.clone();
    let base = SearchOptions {
        algorithm: Algorithm::Exhaustive,
        ..exact_opts.clone()
    };
    progress("warm-up", 0.0);
    run_queries(snap, queries, &base)?;
    run_queries(snap, queries, &exact_opts)?;
    progress("exhaustive", 0.0);
    let exhaustive = run_queries(snap, queries, &base)?;
    progress("exact", 0.0);
    let exact = run_queries(snap, queries, &exact_opts)?;
    progress("exact (postings)", 0.0);
    let postings = run_queries(
        snap,
        queries,
        &SearchOptions {
            algorithm: Algorithm::Postings,
            ..exact_opts.clone()
        },
    )?;
    let mut approx = Vec::new();
    let settings = approx_factors
        .iter()
        .map(|&f| (f, 0.0))
        .chain(term_cuts.iter().map(|&c| (1.0, c)));
    for (knob, term_cut) in settings {
        progress(
            if term_cut > 0.0 { "term cut" } else { "approx" },
            f64::from(if term_cut > 0.0 { term_cut } else { knob }),
        );
        let o = SearchOptions {
            precision: Precision::Approx(knob),
            term_cut,
            ..exact_opts.clone()
        };
        let a = run_queries(snap, queries, &o)?;
        let f = exact_figures(&a, &exhaustive);
        approx.push(ApproxFigures {
            knob,
            term_cut,
            qps: f.qps,
            mean_ms: f.mean_ms,
            p50_ms: f.p50_ms,
            p99_ms: f.p99_ms,
            speedup: f.speedup,
            recall_at_10: f.recall_at_10,
        });
    }
    let mut exact_threads = Vec::new();
    for &t in threads.iter().filter(|&&t| t > 1) {
        progress("exact (threads)", t as f64);
        let o = SearchOptions {
            threads: t,
            ..exact_opts.clone()
        };
        let run = run_queries(snap, queries, &o)?;
        exact_threads.push(ThreadFigures {
            threads: t,
            figures: exact_figures(&run, &exhaustive),
        });
    }
    let n = queries.len().max(1) as f64;
    Ok(SearchFigures {
        exhaustive: Throughput {
            qps: n / exhaustive.total_s,
            mean_ms: exhaustive.total_s * 1e3 / n,
        },
        exact: exact_figures(&exact, &exhaustive),
        exact_postings: exact_figures(&postings, &exhaustive),
        approx,
        exact_threads,
        truth: exhaustive.results,
    })
}

fn exact_figures(run: &Timed, exhaustive: &Timed) -> ExactFigures {
    let qps = run.results.len() as f64 / run.total_s;
    ExactFigures {
        qps,
        mean_ms: run.total_s * 1e3 / run.results.len().max(1) as f64,
        p50_ms: percentile(&run.latencies_ms, 0.5),
        p99_ms: percentile(&run.latencies_ms, 0.99),
        speedup: qps * exhaustive.total_s / exhaustive.results.len() as f64,
        recall_at_10: recall_at_10(&run.results, &exhaustive.results),
        blocks_scored_fraction: if run.blocks_candidate == 0 {
            0.0
        } else {
            run.blocks_scored as f64 / run.blocks_candidate as f64
        },
        segments_unpruned_per_query: run.segments_unpruned as f64 / run.results.len().max(1) as f64,
    }
}

/// The `p`-th percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Mean over queries of |returned ∩ truth| / |truth| for the first 10 of each.
fn recall_at_10(got: &[Vec<ScoredDoc>], truth: &[Vec<ScoredDoc>]) -> f64 {
    let mut sum = 0.0;
    let mut n = 0;
    for (g, t) in got.iter().zip(truth) {
        let t: Vec<_> = t.iter().take(10).collect();
        if t.is_empty() {
            continue;
        }
        let hit = g
            .iter()
            .take(10)
            .filter(|d| {
                t.iter()
                    .any(|x| x.segment_ord == d.segment_ord && x.doc == d.doc)
            })
            .count();
        sum += hit as f64 / t.len() as f64;
        n += 1;
    }
    if n == 0 { 1.0 } else { sum / n as f64 }
}

/// Builds the synthetic collection in `dir` and measures everything, reporting progress on
/// `progress` (a phase name and a fraction).
pub fn run(
    config: &EngineBenchConfig,
    dir: &std::path::Path,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<EngineBenchReport> {
    let generator = Generator::default();
    let mut rng = Rng::new(config.seed);
    let vocab = generator.vocabulary();
    let space = TermSpace::from_tokens("synthetic-bert-30522", vocab.iter().map(String::as_str));
    let settings = CollectionSettings {
        forward_files: config.forward_files,
        ..CollectionSettings::default()
    };
    let mut collection = Collection::create(dir, space, settings, None)?;
    collection.set_block_size(config.block_size)?;
    collection.set_forward_layout(config.layout);

    // Vectors are generated before timing: ingest measures the engine, not the generator.
    let chunk = 100_000;
    let mut ingest_s = 0.0;
    let mut done = 0;
    while done < config.docs {
        let n = chunk.min(config.docs - done);
        let batch: Vec<(Document, QuantizedVector)> = (done..done + n)
            .map(|i| {
                let id = DocId::new(format!("doc{i}"))
                    .map_err(|e| crate::error::IndexError::InvalidSetting(e.to_string()))?;
                Ok((
                    Document::new(id, Modality::Image),
                    generator.document_of(config.corpus, &mut rng),
                ))
            })
            .collect::<Result<_>>()?;
        let t = Instant::now();
        for (d, v) in batch {
            collection.add(d, v)?;
        }
        if done + n >= config.docs {
            collection.commit()?;
        }
        ingest_s += t.elapsed().as_secs_f64();
        done += n;
        progress("ingest", done as f64 / config.docs as f64);
    }
    let ingest_docs_per_s = config.docs as f64 / ingest_s;

    progress("merge", 0.0);
    let t = Instant::now();
    collection.merge_all()?;
    let merge_seconds = t.elapsed().as_secs_f64();
    let snap = collection.snapshot()?;
    let t = Instant::now();
    let mut reopened = Collection::open(dir)?;
    reopened.set_block_size(config.block_size)?;
    reopened.set_forward_layout(config.layout);
    drop(reopened.snapshot()?);
    let open_seconds = t.elapsed().as_secs_f64();
    drop(reopened);
    let plan = ForwardPlan {
        shift: config.block_size.map(u32::trailing_zeros),
        layout: config.layout,
    };
    let t = Instant::now();
    for reader in snap.searcher().segment_readers() {
        ForwardIndex::compute(reader, snap.fields().impacts, plan)?;
    }
    let build_seconds = t.elapsed().as_secs_f64();
    let stats = collection.stats()?;

    let queries: Vec<QuantizedVector> = (0..config.queries)
        .map(|_| generator.query_of(config.corpus, &mut rng))
        .collect();
    let m = measure(
        &snap,
        &queries,
        &SearchOptions::top(config.k),
        &config.approx,
        &config.term_cuts,
        &config.threads,
        progress,
    )?;
    Ok(EngineBenchReport {
        corpus: config.corpus,
        docs: config.docs,
        queries: config.queries,
        mean_query_nnz: mean_nnz(&queries),
        ingest_docs_per_s,
        merge_seconds,
        open_seconds,
        build_seconds,
        forward_file_bytes: stats.forward_file_bytes,
        nnz: stats.nnz,
        bytes: stats.bytes,
        bytes_per_nnz: stats.bytes_per_nnz,
        index_bytes: stats.index_bytes,
        index_bytes_per_nnz: stats.index_bytes_per_nnz,
        vector_index_bytes: stats.vector_index_bytes,
        vector_index_bytes_per_nnz: stats.vector_index_bytes_per_nnz,
        stored_bytes: stats.stored_bytes,
        pruning_memory_bytes: stats.pruning_memory_bytes,
        block_size: config.block_size,
        forward: snap.forward_summary(),
        search: m,
        query_vectors: queries,
    })
}
