//! Runs a [`SearchPlan`] on one snapshot.

use lexlip_index::{Cancel, ScoredDoc, SearchOptions, Snapshot};
use lexlip_proto::api::{Hit, Mode, Precision, SearchPath};
use lexlip_proto::{DenseVector, QuantizedVector};

use crate::error::SearchError;
use crate::fusion;
use crate::plan::SearchPlan;

/// Candidates each list gives hybrid fusion, at least (more when k is larger).
pub const HYBRID_DEPTH: usize = 50;

/// Why the searcher asks for the dense query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseNeed {
    /// Mode dense or hybrid: without one the search fails (dense) or fuses nothing (hybrid).
    Required,
    /// The sparse index matched fewer than k documents; without a dense query its result
    /// stands, so a caller with no dense encoder answers `Ok(None)`.
    Fallback,
}

/// One ranked document, by address in the snapshot that ranked it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    pub segment_ord: u32,
    pub doc: u32,
    /// The integer dot product of impacts (sparse), the cosine (dense) or the fused score.
    pub score: f64,
}

/// A search's ranking, before its stored fields are read.
#[derive(Debug, Clone)]
pub struct Ranking {
    /// Best first, at most k.
    pub docs: Vec<Ranked>,
    pub path: SearchPath,
    /// Documents the sparse query matched among the first k (when the sparse index ran).
    pub sparse_matches: Option<usize>,
    /// The sparse query as searched, when the plan weighted it ([`SearchPlan::idf`]): the
    /// sparse scores are its dot products.
    pub weighted: Option<QuantizedVector>,
}

/// A search's answer.
#[derive(Debug, Clone)]
pub struct Found {
    /// Best first, at most k.
    pub hits: Vec<Hit>,
    pub path: SearchPath,
    /// Documents the sparse query matched among the first k (when the sparse index ran).
    pub sparse_matches: Option<usize>,
}

/// Searches one snapshot: every list a plan needs comes from the same commit.
///
/// ```no_run
/// # fn demo(snapshot: &lexlip_index::Snapshot, q: &lexlip_proto::QuantizedVector)
/// #     -> Result<(), lexlip_search::SearchError> {
/// use lexlip_search::{SearchPlan, Searcher};
/// let no_dense = |_| Ok::<_, lexlip_search::SearchError>(None);
/// let found = Searcher::new(snapshot).search(&SearchPlan::top(10), Some(q), no_dense)?;
/// for hit in &found.hits {
///     println!("{} {}", hit.id, hit.score);
/// }
/// # Ok(()) }
/// ```
pub struct Searcher<'a> {
    snapshot: &'a Snapshot,
    cancel: Cancel,
}

impl<'a> Searcher<'a> {
    pub fn new(snapshot: &'a Snapshot) -> Self {
        Self {
            snapshot,
            cancel: Cancel::new(),
        }
    }

    /// Sparse searches stop (with `IndexError::Cancelled`) once `cancel` is set.
    pub fn with_cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = cancel;
        self
    }

    /// Runs `plan` with the sparse query `sparse` (none only in dense mode) and reads the
    /// hits' stored fields. `dense` is called at most once, only when the plan needs the dense
    /// query (see [`DenseNeed`]), so a caller pays for the dense encoder only then. The plan is
    /// assumed [`SearchPlan::check`]ed.
    pub fn search<E: From<SearchError>>(
        &self,
        plan: &SearchPlan,
        sparse: Option<&QuantizedVector>,
        dense: impl FnOnce(DenseNeed) -> Result<Option<DenseVector>, E>,
    ) -> Result<Found, E> {
        let ranking = self.rank(plan, sparse, dense)?;
        Ok(Found {
            hits: self.hits(&ranking, sparse, plan)?,
            path: ranking.path,
            sparse_matches: ranking.sparse_matches,
        })
    }

    /// The ranking of [`Searcher::search`], without reading stored fields (what `lexlip eval`
    /// times).
    pub fn rank<E: From<SearchError>>(
        &self,
        plan: &SearchPlan,
        sparse: Option<&QuantizedVector>,
        dense: impl FnOnce(DenseNeed) -> Result<Option<DenseVector>, E>,
    ) -> Result<Ranking, E> {
        let k = plan.k;
        let weighted = match sparse {
            Some(q) if plan.idf > 0.0 && plan.mode != Mode::Dense => {
                let frequencies = self
                    .snapshot
                    .term_frequencies(q, &plan.filter)
                    .map_err(SearchError::from)?;
                Some(crate::idf::weighted(q, &frequencies, plan.idf))
            }
            _ => None,
        };
        let sparse = weighted.as_ref().or(sparse);
        let ranking = |docs, path, sparse_matches| Ranking {
            docs,
            path,
            sparse_matches,
            weighted: weighted.clone(),
        };
        match plan.mode {
            Mode::Sparse => {
                let q = sparse.ok_or_else(|| SearchError::invalid("no sparse query to search"))?;
                let found = self.sparse(q, plan, k)?;
                let matched = found.len();
                if matched < k
                    && self.snapshot.has_dense()
                    && let Some(v) = dense(DenseNeed::Fallback)?
                {
                    let docs = self.dense(&v, plan, k)?;
                    return Ok(ranking(docs, SearchPath::DenseFallback, Some(matched)));
                }
                Ok(ranking(found, SearchPath::Sparse, Some(matched)))
            }
            Mode::Dense => {
                let v = dense(DenseNeed::Required)?.ok_or_else(|| {
                    SearchError::invalid("a sparse query cannot be searched in the dense index")
                })?;
                Ok(ranking(self.dense(&v, plan, k)?, SearchPath::Dense, None))
            }
            Mode::Hybrid => {
                let depth = k.clamp(HYBRID_DEPTH, lexlip_index::MAX_K);
                let found = match sparse {
                    Some(q) => self.sparse(q, plan, depth)?,
                    None => Vec::new(),
                };
                let dense = match dense(DenseNeed::Required)? {
                    Some(v) => self.dense(&v, plan, depth)?,
                    None => Vec::new(),
                };
                let address = |r: &Ranked| (r.segment_ord, r.doc);
                let lists = [
                    found.iter().map(address).collect(),
                    dense.iter().map(address).collect(),
                ];
                let docs = fusion::reciprocal_rank(&lists, k)
                    .into_iter()
                    .map(|((segment_ord, doc), score)| Ranked {
                        segment_ord,
                        doc,
                        score,
                    })
                    .collect();
                let matched = Some(found.len().min(k));
                Ok(ranking(docs, SearchPath::Hybrid, matched))
            }
        }
    }

    /// The ranked documents as API hits. Sparse hits carry their match strength and, with the
    /// plan's `explain`, their matched terms (with the impacts searched); dense hits their
    /// cosine clamped to [0, 1] as the strength; fused hits none.
    ///
    /// A sparse hit's strength is its score over what a document equal to the query `sparse`
    /// would score, stored as this collection stores documents (cut to its top-K terms, if it
    /// cuts them), times the query's confidence when the plan has a `query_norm`: the squared
    /// share of it that the query's own weights reach, at most 1. The first part asks how much
    /// of the query the document holds. The second asks how much the model made of the query:
    /// it puts little weight on a string it does not understand ("qwzx"), and that string's
    /// few terms are easily met in full, so without it a nonsense query's hits look as strong
    /// as a real one's.
    ///
    /// ```text
    /// query  dog 60, face 80 (norm 100 at scale 100: 1.0 in weights); query_norm 2.0
    /// hit    dog 60, face 80  → score 10,000 of 10,000 · (1.0 / 2.0)² = 0.25
    /// ```
    pub fn hits(
        &self,
        ranking: &Ranking,
        sparse: Option<&QuantizedVector>,
        plan: &SearchPlan,
    ) -> Result<Vec<Hit>, SearchError> {
        let searched = ranking.weighted.as_ref().or(sparse);
        let explain = searched.filter(|_| plan.explain);
        let confidence = match (plan.query_norm, sparse) {
            (Some(norm), Some(q)) => confidence(q, self.snapshot.scale(), norm),
            _ => 1.0,
        };
        // What a document equal to the query scores against the query searched (Σ impact²
        // unweighted). A collection that keeps K terms a document would keep the query's K
        // largest: without the cut, no match in it could reach 1, and strengths would depend
        // on K rather than on how well the document matches.
        let own = sparse
            .zip(searched)
            .map(|(q, s)| match self.snapshot.top_k_terms() {
                Some(k) => s.dot(&q.top_k(k)),
                None => s.dot(q),
            });
        let hit = |r: &Ranked| -> Result<Hit, SearchError> {
            Ok(match ranking.path {
                SearchPath::Sparse => {
                    let scored = ScoredDoc {
                        segment_ord: r.segment_ord,
                        doc: r.doc,
                        score: r.score as u64,
                    };
                    let mut hit = self.snapshot.hit(&scored, explain)?;
                    hit.match_strength =
                        own.map(|own| lexlip_proto::sparse::share_of(hit.score, own) * confidence);
                    hit
                }
                SearchPath::Dense | SearchPath::DenseFallback => {
                    let mut hit = self.snapshot.hit_at(r.segment_ord, r.doc, r.score)?;
                    hit.match_strength = Some(r.score.clamp(0.0, 1.0));
                    hit
                }
                SearchPath::Hybrid => self.snapshot.hit_at(r.segment_ord, r.doc, r.score)?,
            })
        };
        // The response's text budget: later hits carry less (or none) once it is spent.
        let mut budget = lexlip_proto::api::MAX_RESPONSE_TEXT_BYTES;
        ranking
            .docs
            .iter()
            .map(|r| {
                let mut h = hit(r)?;
                h.cap_text(budget);
                budget -= h.text.as_ref().map_or(0, String::len);
                Ok(h)
            })
            .collect()
    }

    /// The sparse top `n` (an empty query matches nothing).
    fn sparse(
        &self,
        q: &QuantizedVector,
        plan: &SearchPlan,
        n: usize,
    ) -> Result<Vec<Ranked>, SearchError> {
        if q.is_empty() {
            return Ok(Vec::new());
        }
        let options = SearchOptions {
            k: n,
            precision: plan.precision,
            term_cut: plan.term_cut,
            filter: plan.filter.clone(),
            cancel: self.cancel.clone(),
            threads: plan.threads,
            ..SearchOptions::top(n)
        };
        let found = self.snapshot.search(q, &options)?.hits;
        Ok(found
            .iter()
            .map(|s| Ranked {
                segment_ord: s.segment_ord,
                doc: s.doc,
                score: s.score as f64,
            })
            .collect())
    }

    /// The dense top `n`: exact for an exact plan, else through the graph.
    fn dense(
        &self,
        v: &DenseVector,
        plan: &SearchPlan,
        n: usize,
    ) -> Result<Vec<Ranked>, SearchError> {
        let exact = plan.precision == Precision::Exact;
        let found = self.snapshot.search_dense(v, n, exact, &plan.filter)?;
        Ok(found
            .iter()
            .map(|d| Ranked {
                segment_ord: d.segment_ord,
                doc: d.doc,
                score: f64::from(d.score),
            })
            .collect())
    }
}

/// `min(1, (‖q‖ / norm)²)` with the query's weights (its impacts over `scale`): how much of a
/// typical query's weight the model gave this one.
fn confidence(q: &QuantizedVector, scale: f32, norm: f32) -> f64 {
    let own = q.self_score() as f64 / f64::from(scale).powi(2);
    (own / f64::from(norm).powi(2)).min(1.0)
}
