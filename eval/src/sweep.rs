//! One setting of the evaluation: a real collection (tantivy, in a temporary directory) built
//! from the encoded corpus ([`build`]; settings that store the same documents share it),
//! measured, then searched with every query exactly as the server searches
//! (`Snapshot::search` with a modality filter for the sparse index, `Snapshot::search_dense`
//! for the dense one), one query at a time on this thread ([`evaluate_on`]).

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use lexlip_index::dense::DenseParams;
use lexlip_index::{Collection, CollectionSettings, Snapshot};
use lexlip_proto::api::{Filter, Hit};
use lexlip_proto::{Modality, QuantizedVector, VectorInput};
use lexlip_search::{DenseNeed, Mode as SearchMode, SearchError, SearchPlan};

use crate::encoded::{Encoded, Entry, Vector};
use crate::options::{EvalObserver, Mode, Setting};
use crate::queries::Queries;
use crate::recall::{DEPTH, recall};
use crate::report::SettingReport;
use lexlip_pipeline::{PipelineError, Result};

/// The collection of a setting ([`build`]), searched by every setting that stores the same
/// documents: the exact search of the full vectors, each factor and each term cut share one,
/// so that a million pictures are written once rather than once per setting.
pub struct Built {
    /// Documents cut to this many terms (None: full vectors).
    top_k: Option<usize>,
    /// Whether its dense segments have HNSW graphs.
    graphs: bool,
    collection: Collection,
    snapshot: Snapshot,
    stats: lexlip_proto::api::CollectionStats,
    image_bytes: u64,
    image_vector_bytes: u64,
    image_nnz: usize,
    text_nnz: usize,
    index_seconds: f64,
}

impl Built {
    /// Whether `setting` searches the documents this collection holds.
    pub fn serves(&self, setting: &Setting, mode: Mode) -> bool {
        self.top_k == setting.top_k && self.graphs == searches_graphs(setting, mode)
    }
}

/// Whether `setting` searches HNSW graphs (its collection then builds them).
fn searches_graphs(setting: &Setting, mode: Mode) -> bool {
    setting.search(mode) == "hnsw"
}

/// Builds the collection of `setting` in `dir`: documents cut to their K largest impacts by
/// the collection's own quantizer; dense: with HNSW graphs when the setting searches them.
pub fn build(encoded: &Encoded, setting: &Setting, scale: f32, dir: &Path) -> Result<Built> {
    let built = Instant::now();
    let top_k = setting.top_k;
    let dense_dim = match encoded.mode {
        Mode::Dense => encoded.images.first().map(|e| match &e.vector {
            Vector::Dense(d) => d.dim(),
            Vector::Sparse(_) => 0,
        }),
        Mode::Sparse => None,
    };
    let settings = CollectionSettings {
        scale,
        top_k_terms: top_k,
        dense_dim,
        // Evaluation measures the index of vectors alone: no thumbnails are given anyway.
        thumbnails: false,
        ..CollectionSettings::default()
    };
    let (image_bytes, image_vector_bytes) =
        images_only_bytes(encoded, &settings, &dir.join("images-only"))?;
    let mut collection = Collection::create(
        dir,
        encoded.term_space.clone(),
        settings,
        encoded.tokens.as_deref(),
    )?;
    // Exact: queries scan every dense vector (the server's exact dense search), no graphs to
    // build; the graph setting builds one for every segment (in `warm_dense`, so its cost
    // counts in `index_seconds`).
    let graphs = searches_graphs(setting, encoded.mode);
    collection.set_dense_params(DenseParams {
        hnsw_min_docs: if graphs { 1 } else { usize::MAX },
        ..DenseParams::default()
    });
    let image_nnz = add_all(&collection, &encoded.images)?;
    let text_nnz = add_all(&collection, &encoded.texts)?;
    collection.commit()?;
    collection.wait_merges()?;
    let stats = collection.stats()?;
    let snapshot = collection.snapshot()?;
    snapshot.warm_dense()?;
    Ok(Built {
        top_k,
        graphs,
        collection,
        snapshot,
        stats,
        image_bytes,
        image_vector_bytes,
        image_nnz,
        text_nnz,
        index_seconds: built.elapsed().as_secs_f64(),
    })
}

/// [`build`]s the collection of `setting` in `dir`, then [`evaluate_on`] it with the queries
/// of the setting's relevance rule and `max_queries`.
pub fn evaluate(
    encoded: &Encoded,
    setting: Setting,
    scale: f32,
    single_modal: bool,
    rerank: Option<&crate::options::RerankOptions>,
    dir: &Path,
    observer: &mut dyn EvalObserver,
) -> Result<SettingReport> {
    observer.searching(&setting.label(encoded.mode), 0, 0);
    let built = build(encoded, &setting, scale, dir)?;
    let queries = Queries::new(encoded, setting.relevance, setting.max_queries);
    evaluate_on(
        encoded,
        &built,
        setting,
        &queries,
        single_modal,
        rerank,
        observer,
    )
}

/// Answers `queries` (text → image: captions against the images; image → text: images with
/// captions against the texts; [`Queries::new`] of the setting's relevance rule and
/// `max_queries`, the same for every setting of a run) against `built` as `setting` says (its
/// precision and term cut; `built` must [`Built::serves`] it).
pub fn evaluate_on(
    encoded: &Encoded,
    built: &Built,
    setting: Setting,
    queries: &Queries,
    single_modal: bool,
    rerank: Option<&crate::options::RerankOptions>,
    observer: &mut dyn EvalObserver,
) -> Result<SettingReport> {
    // With a re-ranker, the first stage returns its candidates; recall reads the first DEPTH.
    let depth = rerank.map_or(DEPTH, |r| r.top.max(DEPTH));
    let top_k = setting.top_k;
    let label = setting.label(encoded.mode);
    let Queries { t2i, i2t } = queries;
    let mut queries = t2i.len() + i2t.len();
    if single_modal {
        // At most one image → image query per image and one text → text query per caption.
        queries += encoded.images.len() + encoded.t2i_queries();
    }
    observer.searching(&label, 0, queries as u64);

    let mut searcher = QueryRunner {
        setting,
        collection: &built.collection,
        snapshot: &built.snapshot,
        observer,
        label: &label,
        done: 0,
        total: queries as u64,
    };
    let image_ids = positions(&encoded.images);
    let (t2i_rankings, t2i_seconds, t2i_recall) =
        searcher.direction(t2i, &encoded.texts, Modality::Image, &image_ids, depth)?;
    let text_ids = positions(&encoded.texts);
    let (i2t_rankings, i2t_seconds, i2t_recall) =
        searcher.direction(i2t, &encoded.images, Modality::Text, &text_ids, depth)?;
    let reranked = match rerank {
        None => None,
        Some(r) => {
            use crate::rerank::Direction::{ImageToText, TextToImage};
            let again = |direction, queries: &[(usize, Vec<usize>)], rankings| {
                let positions = queries.iter().map(|(q, _)| *q);
                crate::rerank::rerank(&r.model, r.top, encoded, direction, positions, rankings)
            };
            let (t2i_reranked, t2i_seconds) = again(TextToImage, t2i, &t2i_rankings)?;
            let (i2t_reranked, i2t_seconds) = again(ImageToText, i2t, &i2t_rankings)?;
            Some(crate::report::RerankReport {
                top: r.top,
                t2i: recall_of(&t2i_reranked, t2i),
                i2t: recall_of(&i2t_reranked, i2t),
                t2i_ms_per_query: 1000.0 * t2i_seconds / t2i.len().max(1) as f64,
                i2t_ms_per_query: 1000.0 * i2t_seconds / i2t.len().max(1) as f64,
            })
        }
    };

    let single = if single_modal {
        Some(single_modal_recall(
            encoded,
            &mut searcher,
            &image_ids,
            &text_ids,
        )?)
    } else {
        None
    };

    let documents = (encoded.images.len() + encoded.texts.len()).max(1) as f64;
    let per = |n: usize, of: usize| n as f64 / of.max(1) as f64;
    let qps = |n: usize, seconds: f64| n as f64 / seconds.max(1e-9);
    Ok(SettingReport {
        top_k,
        search: setting.search(encoded.mode),
        t2i_queries: t2i.len(),
        i2t_queries: i2t.len(),
        approx: setting.factor(encoded.mode),
        term_cut: (setting.term_cut > 0.0).then_some(setting.term_cut),
        t2i: t2i_recall,
        i2t: i2t_recall,
        i2i: single.map(|s| s.i2i),
        t2t: single.map(|s| s.t2t),
        i2i_queries: single.map(|s| s.i2i_queries),
        t2t_queries: single.map(|s| s.t2t_queries),
        bytes_per_item: built.stats.bytes as f64 / documents,
        bytes_per_image: per(built.image_bytes as usize, encoded.images.len()),
        vector_bytes_per_image: per(built.image_vector_bytes as usize, encoded.images.len()),
        nnz_per_item: (built.image_nnz + built.text_nnz) as f64 / documents,
        nnz_per_image: per(built.image_nnz, encoded.images.len()),
        nnz_per_text: per(built.text_nnz, encoded.texts.len()),
        qps: qps(t2i.len() + i2t.len(), t2i_seconds + i2t_seconds),
        t2i_qps: qps(t2i.len(), t2i_seconds),
        i2t_qps: qps(i2t.len(), i2t_seconds),
        index_bytes: built.stats.bytes,
        index_seconds: built.index_seconds,
        rerank: reranked,
        t2i_overlap: None,
        i2t_overlap: None,
        rankings: crate::recall::Rankings {
            t2i: t2i_rankings.iter().map(|r| first(r).to_vec()).collect(),
            i2t: i2t_rankings.iter().map(|r| first(r).to_vec()).collect(),
        },
    })
}

/// A collection of the images alone with `settings` (what an image index costs, without the
/// captions an evaluation also stores), built in `dir` and removed: its bytes on disk, and the
/// bytes of its vectors alone (sparse: the impacts' postings, term dictionary and forward
/// file; dense: 4 bytes per dimension, the f32 vectors every dense index keeps).
fn images_only_bytes(
    encoded: &Encoded,
    settings: &CollectionSettings,
    dir: &Path,
) -> Result<(u64, u64)> {
    let stats = {
        let collection = Collection::create(
            dir,
            encoded.term_space.clone(),
            settings.clone(),
            encoded.tokens.as_deref(),
        )?;
        add_all(&collection, &encoded.images)?;
        collection.commit()?;
        collection.wait_merges()?;
        collection.stats()?
    };
    std::fs::remove_dir_all(dir).map_err(|e| PipelineError::io(dir, e))?;
    let vectors = match settings.dense_dim {
        Some(dim) => (4 * dim * encoded.images.len()) as u64,
        None => stats.vector_index_bytes,
    };
    Ok((stats.bytes, vectors))
}

/// The first [`DEPTH`] results of a ranking (what recall reads).
fn first(ranking: &[usize]) -> &[usize] {
    &ranking[..ranking.len().min(DEPTH)]
}

/// Image → image and text → text recall and their query counts.
#[derive(Debug, Clone, Copy)]
struct SingleModal {
    i2i: [f64; 3],
    t2t: [f64; 3],
    i2i_queries: usize,
    t2t_queries: usize,
}

/// The single-modal queries of the module doc (`super`): images against images, captions
/// against captions, by concept; the query and captions worded like it are dropped from each
/// ranking before it is cut to [`DEPTH`].
fn single_modal_recall(
    encoded: &Encoded,
    searcher: &mut QueryRunner<'_>,
    image_ids: &HashMap<&str, usize>,
    text_ids: &HashMap<&str, usize>,
) -> Result<SingleModal> {
    let wording = encoded.wordings();
    let concept = encoded.image_concepts(&wording);
    let concepts = concept.iter().copied().max().map_or(0, |m| m + 1);
    let mut images_of = vec![Vec::new(); concepts];
    for (i, &c) in concept.iter().enumerate() {
        images_of[c].push(i);
    }
    let i2i: Vec<(usize, Vec<usize>)> = (0..encoded.images.len())
        .map(|i| {
            let others = images_of[concept[i]].iter().copied().filter(|&j| j != i);
            (i, others.collect::<Vec<_>>())
        })
        .filter(|(_, rel)| !rel.is_empty())
        .collect();
    let (rankings, _) = searcher.run(
        i2i.iter().map(|(i, _)| &encoded.images[*i]),
        Modality::Image,
        image_ids,
        DEPTH + 1,
    )?;
    let i2i_recall = recall_without(&rankings, &i2i, |q, x| x == q);

    let mut captions_of = vec![Vec::new(); concepts];
    let mut same_wording: HashMap<&str, usize> = HashMap::new();
    for (t, image) in encoded.text_image.iter().enumerate() {
        if let Some(i) = image {
            captions_of[concept[*i]].push(t);
        }
        *same_wording.entry(wording[t].as_str()).or_default() += 1;
    }
    let t2t: Vec<(usize, Vec<usize>)> = encoded
        .text_image
        .iter()
        .enumerate()
        .filter_map(|(t, i)| i.map(|i| (t, i)))
        .map(|(t, i)| {
            let rel = captions_of[concept[i]]
                .iter()
                .copied()
                .filter(|&u| wording[u] != wording[t]);
            (t, rel.collect::<Vec<_>>())
        })
        .filter(|(_, rel)| !rel.is_empty())
        .collect();
    // Deep enough that dropping every caption worded like the query leaves DEPTH.
    let extra = same_wording.values().copied().max().unwrap_or(1);
    let (rankings, _) = searcher.run(
        t2t.iter().map(|(t, _)| &encoded.texts[*t]),
        Modality::Text,
        text_ids,
        DEPTH + extra,
    )?;
    let t2t_recall = recall_without(&rankings, &t2t, |q, x| wording[x] == wording[q]);
    Ok(SingleModal {
        i2i: i2i_recall,
        t2t: t2t_recall,
        i2i_queries: i2i.len(),
        t2t_queries: t2t.len(),
    })
}

/// R@1/5/10 of `queries` (query, relevant items) ranked by `rankings`, each read to [`DEPTH`].
fn recall_of(rankings: &[Vec<usize>], queries: &[(usize, Vec<usize>)]) -> [f64; 3] {
    recall_without(rankings, queries, |_, _| false)
}

/// R@1/5/10 of `queries` (query, relevant items) ranked by `rankings`, each ranking first
/// rid of the items `dropped(query, item)` names and cut to [`DEPTH`].
fn recall_without(
    rankings: &[Vec<usize>],
    queries: &[(usize, Vec<usize>)],
    dropped: impl Fn(usize, usize) -> bool,
) -> [f64; 3] {
    let kept: Vec<Vec<usize>> = rankings
        .iter()
        .zip(queries)
        .map(|(r, (q, _))| {
            r.iter()
                .copied()
                .filter(|&x| !dropped(*q, x))
                .take(DEPTH)
                .collect()
        })
        .collect();
    recall(
        kept.iter()
            .zip(queries)
            .map(|(r, (_, rel))| (r.as_slice(), rel.as_slice())),
    )
}

/// Adds every entry (its impacts cut by the collection's quantizer); returns the non-zeros
/// stored.
fn add_all(collection: &Collection, entries: &[Entry]) -> Result<usize> {
    let mut nnz = 0;
    for e in entries {
        match &e.vector {
            Vector::Sparse(q) => {
                let impacts = collection
                    .quantizer()
                    .document(VectorInput::Impacts(q.vector()))?;
                nnz += impacts.len();
                collection.add(e.doc.clone(), impacts)?;
            }
            Vector::Dense(d) => {
                nnz += e.vector.nnz();
                collection.add_with_dense(
                    e.doc.clone(),
                    QuantizedVector::default(),
                    Some(d.clone()),
                )?;
            }
        }
    }
    Ok(nnz)
}

/// Document id → position in `entries`.
fn positions(entries: &[Entry]) -> HashMap<&str, usize> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.doc.id.as_str(), i))
        .collect()
}

/// Runs queries against one snapshot and reports progress.
struct QueryRunner<'a> {
    /// Sets the searches' precision and term cut.
    setting: Setting,
    collection: &'a Collection,
    snapshot: &'a Snapshot,
    observer: &'a mut dyn EvalObserver,
    label: &'a str,
    done: u64,
    total: u64,
}

impl QueryRunner<'_> {
    /// Searches each entry's vector among the documents of modality `target` (the first
    /// `depth` hits); returns each query's ranking (positions given by `ids`) and the seconds spent in the search calls
    /// alone (queries are prepared before the clock starts, hits read back after it stops).
    /// One direction: `queries` (positions in `from`, with their answers) searched among the
    /// `target` side's documents ([`QueryRunner::run`]); the rankings, their seconds and the
    /// recall.
    fn direction(
        &mut self,
        queries: &[(usize, Vec<usize>)],
        from: &[Entry],
        target: Modality,
        ids: &HashMap<&str, usize>,
        depth: usize,
    ) -> Result<(Vec<Vec<usize>>, f64, [f64; 3])> {
        let (rankings, seconds) =
            self.run(queries.iter().map(|(q, _)| &from[*q]), target, ids, depth)?;
        let recall = recall_of(&rankings, queries);
        Ok((rankings, seconds, recall))
    }

    fn run<'e>(
        &mut self,
        queries: impl Iterator<Item = &'e Entry>,
        target: Modality,
        ids: &HashMap<&str, usize>,
        depth: usize,
    ) -> Result<(Vec<Vec<usize>>, f64)> {
        // The search policy the server and `lexlip search` run, without the dense fallback.
        let mut plan = SearchPlan::top(depth);
        plan.precision = self.setting.precision;
        plan.term_cut = self.setting.term_cut;
        plan.idf = self.setting.idf;
        plan.filter = Filter {
            modality: Some(target),
            ..Filter::default()
        };
        let searcher = lexlip_search::Searcher::new(self.snapshot);
        let mut seconds = 0.0;
        let mut rankings = Vec::new();
        let mut queries = queries.peekable();
        // The first query once unmeasured: no setting pays for opening the segments (their
        // forward files and maxima), which a collection searched by several settings in turn
        // would make the first one pay alone.
        if let Some(first) = queries.peek() {
            self.rank(&searcher, &mut plan, first)?;
        }
        for entry in queries {
            let started = Instant::now();
            let ranked = self.rank(&searcher, &mut plan, entry)?;
            seconds += started.elapsed().as_secs_f64();
            let hits: Vec<Hit> = searcher.hits(&ranked, None, &plan).map_err(search_error)?;
            let ranking = hits
                .iter()
                .map(|h| {
                    ids.get(h.id.as_str()).copied().ok_or_else(|| {
                        PipelineError::Stage(format!(
                            "the {} search returned {:?}, which is no {} of the corpus",
                            target.as_str(),
                            h.id,
                            target.as_str()
                        ))
                    })
                })
                .collect::<Result<Vec<usize>>>()?;
            rankings.push(ranking);
            self.done += 1;
            if self.done.is_multiple_of(64) || self.done == self.total {
                self.observer.searching(self.label, self.done, self.total);
            }
        }
        Ok((rankings, seconds))
    }

    /// One query's ranking under `plan` (its mode set from the query's vector).
    fn rank(
        &self,
        searcher: &lexlip_search::Searcher<'_>,
        plan: &mut SearchPlan,
        entry: &Entry,
    ) -> Result<lexlip_search::Ranking> {
        let (sparse, dense) = match entry.as_query() {
            Vector::Sparse(q) => {
                let q = self
                    .collection
                    .quantizer()
                    .query(VectorInput::Impacts(q.vector()))?;
                (Some(q), None)
            }
            Vector::Dense(d) => (None, Some(d.clone())),
        };
        plan.mode = if dense.is_some() {
            SearchMode::Dense
        } else {
            SearchMode::Sparse
        };
        searcher
            .rank(plan, sparse.as_ref(), |need| match need {
                DenseNeed::Required => Ok::<_, SearchError>(dense),
                DenseNeed::Fallback => Ok(None),
            })
            .map_err(search_error)
    }
}

fn search_error(e: SearchError) -> PipelineError {
    match e {
        SearchError::Index(e) => PipelineError::Index(e),
        other => PipelineError::Stage(format!("search: {other}")),
    }
}
