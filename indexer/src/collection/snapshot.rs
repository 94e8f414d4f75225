//! A snapshot: one commit of a collection, searched by the sparse and the dense index alike, so
//! every list of one request sees the same documents.

use std::sync::Arc;

use lexlip_proto::api::Filter;
use lexlip_proto::{DenseVector, QuantizedVector, SparseVector};
use tantivy::Searcher;

use super::Collection;
use crate::dense::{DenseCache, DenseHit, DenseParams};
use crate::error::{IndexError, Result};
use crate::forward_index::ForwardIndex;
use crate::schema::Fields;
use crate::search::filter::CompiledFilter;
use crate::search::sparse::Segment;
use crate::search::sparse::SparseSearch;
use crate::search::{ScoredDoc, SearchOptions, SearchStats};

/// The result of a search against a snapshot.
#[derive(Debug, Clone)]
pub struct SearchOutcome {
    pub hits: Vec<ScoredDoc>,
    pub stats: SearchStats,
}

/// A point-in-time view of a collection: what one commit contains.
pub struct Snapshot {
    pub(super) searcher: Searcher,
    pub(super) maxima: Vec<Arc<ForwardIndex>>,
    pub(super) fields: Fields,
    scale: f32,
    top_k_terms: Option<usize>,
    dense: Arc<DenseCache>,
    dense_dim: Option<usize>,
    dense_params: DenseParams,
}

impl Collection {
    /// A consistent view of the last commit, with the pruning maxima of its segments (read from
    /// their forward index files, or computed, once per segment and cached).
    pub fn snapshot(&self) -> Result<Snapshot> {
        let searcher = self.reader.searcher();
        let mut maxima = Vec::with_capacity(searcher.segment_readers().len());
        for reader in searcher.segment_readers() {
            let id = reader.segment_id();
            let cached = self
                .maxima
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .cloned();
            let m = match cached {
                Some(m) => m,
                None => {
                    let m = Arc::new(crate::forward_file::open(
                        reader,
                        self.fields.impacts,
                        self.forward_plan(),
                    )?);
                    self.maxima
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(id, m.clone());
                    m
                }
            };
            maxima.push(m);
        }
        Ok(Snapshot {
            searcher,
            maxima,
            fields: self.fields,
            scale: self.manifest.settings.scale,
            top_k_terms: self.manifest.settings.top_k_terms,
            dense: self.dense.clone(),
            dense_dim: self.manifest.settings.dense_dim,
            dense_params: self.dense_params,
        })
    }
}

impl Snapshot {
    pub fn num_docs(&self) -> u64 {
        self.searcher.num_docs()
    }

    pub fn searcher(&self) -> &Searcher {
        &self.searcher
    }

    /// The most terms a document keeps in this collection (`--top-k-terms`), when it cuts them.
    pub fn top_k_terms(&self) -> Option<usize> {
        self.top_k_terms
    }

    pub(crate) fn fields(&self) -> &Fields {
        &self.fields
    }

    /// Top-k documents by the integer dot product with `query`. Fails with `Cancelled` when
    /// `options.cancel` is set while it runs.
    pub fn search(
        &self,
        query: &QuantizedVector,
        options: &SearchOptions,
    ) -> Result<SearchOutcome> {
        let mut search = SparseSearch::new(query, options)?;
        let filter = CompiledFilter::new(&options.filter, &self.fields)?;
        let allowed = filter.allowed(&self.searcher)?;
        let segments: Vec<Segment> = self
            .searcher
            .segment_readers()
            .iter()
            .enumerate()
            .map(|(ord, reader)| Segment {
                ord: ord as u32,
                reader,
                impacts: self.fields.impacts,
                maxima: &self.maxima[ord],
                allowed: allowed[ord].as_ref(),
            })
            .collect();
        crate::search::dispatch::search_segments(&mut search, &segments)?;
        let (hits, stats) = search.finish();
        Ok(SearchOutcome { hits, stats })
    }

    /// Every term of the impacts, distinct and in byte order: the union of the segments' term
    /// dictionaries (what names the dimensions of a collection built without a vocabulary).
    pub fn terms(&self) -> Result<Vec<String>> {
        let mut terms = std::collections::BTreeSet::new();
        for reader in self.searcher.segment_readers() {
            let inverted = reader.inverted_index(self.fields.impacts)?;
            let mut stream = inverted.terms().stream()?;
            while stream.advance() {
                if !terms.contains(stream.key()) {
                    terms.insert(stream.key().to_vec());
                }
            }
        }
        Ok(terms
            .into_iter()
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .collect())
    }

    /// Whether this collection keeps dense vectors.
    pub fn has_dense(&self) -> bool {
        self.dense_dim.is_some()
    }

    /// Whether every segment's dense vectors (and graph) are loaded, so that a dense search
    /// builds nothing; true without dense vectors.
    pub fn dense_ready(&self) -> bool {
        if self.dense_dim.is_none() {
            return true;
        }
        let live: Vec<_> = self
            .searcher
            .segment_readers()
            .iter()
            .map(|r| r.segment_id())
            .collect();
        self.dense.holds(&live)
    }

    /// Loads the dense vectors (and graphs) of every segment now, rather than on first search.
    pub fn warm_dense(&self) -> Result<()> {
        if let Some(dim) = self.dense_dim {
            for reader in self.searcher.segment_readers() {
                self.dense
                    .get_or_load(reader, &self.fields, dim, &self.dense_params)?;
            }
        }
        Ok(())
    }

    /// Top-k live documents by cosine similarity with `query` (dense fallback). `exact` scans
    /// every vector; otherwise large segments are searched through their HNSW graph.
    pub fn search_dense(
        &self,
        query: &DenseVector,
        k: usize,
        exact: bool,
        filter: &Filter,
    ) -> Result<Vec<DenseHit>> {
        let Some(dim) = self.dense_dim else {
            return Err(IndexError::InvalidQuery(
                "this collection has dense search off".into(),
            ));
        };
        if query.dim() != dim {
            return Err(IndexError::InvalidQuery(format!(
                "dense query has dimension {}, the collection's vectors have {dim}",
                query.dim()
            )));
        }
        if query.norm() == 0.0 {
            return Err(IndexError::InvalidQuery(
                "the dense query is all zeros: it has no direction to compare (cosine)".into(),
            ));
        }
        if k == 0 || k > crate::search::MAX_K {
            return Err(IndexError::InvalidQuery(format!(
                "k must be between 1 and {}, got {k}",
                crate::search::MAX_K
            )));
        }
        let allowed = CompiledFilter::new(filter, &self.fields)?.allowed(&self.searcher)?;
        let mut segments = Vec::new();
        for reader in self.searcher.segment_readers() {
            let d = self
                .dense
                .get_or_load(reader, &self.fields, dim, &self.dense_params)?;
            segments.push((reader, d));
        }
        Ok(crate::dense::search(
            &segments,
            query,
            k,
            exact,
            &self.dense_params,
            &allowed,
        ))
    }

    /// Each segment's forward index: its layout and documents per block.
    pub fn forward_summary(&self) -> Vec<ForwardSummary> {
        self.maxima
            .iter()
            .map(|m| ForwardSummary {
                layout: m.layout(),
                block_size: 1 << m.shift,
            })
            .collect()
    }

    /// Memory held by the pruning maxima of the snapshot's segments.
    pub fn pruning_memory_bytes(&self) -> u64 {
        self.maxima.iter().map(|m| m.heap_bytes() as u64).sum()
    }

    /// The collection's quantization scale (impact = floor(scale · weight)).
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Impacts back to float weights with the collection's scale.
    pub fn to_weights(&self, q: &QuantizedVector) -> SparseVector {
        q.to_sparse(self.scale)
    }
}

/// How one segment's forward index is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ForwardSummary {
    pub layout: crate::forward_index::Layout,
    pub block_size: u32,
}
