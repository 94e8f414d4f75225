//! One sparse search from start to end: the query and how to run it, and what carries across
//! segments — the top k so far, the work counters, reusable score buffers and the cancellation
//! flag. The scorers ([`super::pruned`], [`super::exhaustive`]) each take this object and one
//! [`Segment`].
//!
//! ```text
//! Snapshot::search(query, options)
//!   SparseSearch::new(query, options)        validate once
//!   for every segment of the snapshot:
//!     Segment { reader, maxima, allowed }
//!   dispatch::search_segments(&mut search, &segments)
//!                                            blocks:: (or pruned::, exhaustive:: per segment)
//!   search.finish()                          hits best first, counters
//! ```

use lexlip_proto::QuantizedVector;
use tantivy::SegmentReader;
use tantivy::schema::Field;

use super::filter::AllowedDocs;
use super::{Algorithm, Cancel, ScoredDoc, SearchOptions, SearchStats, TopK};
use crate::error::{IndexError, Result};
use crate::forward_index::ForwardIndex;

/// Below this many documents in the blocks left after the first ones, one thread finishes the
/// search: waking another (tens of microseconds) and the threshold each thread learns late cost
/// more than sharing saves. (On a 16-core machine, sharing from 8,192 documents on made the
/// real vectors' search slower with every thread added: 0.236 ms on one, 0.282 on 2, 0.409
/// on 16.)
pub(crate) const SHARE_FROM_DOCS: u64 = 1 << 15;

/// A search in progress.
pub struct SparseSearch<'q> {
    pub(crate) query: &'q QuantizedVector,
    /// Blocks whose bound is below `factor ·` the k-th score are skipped (1 = exact).
    pub(crate) factor: f64,
    /// Share of the query's largest possible score its lightest terms may take and still be
    /// left out of the block bounds ([`SearchOptions::term_cut`]).
    pub(crate) term_cut: f64,
    pub(crate) algorithm: Algorithm,
    pub(crate) top: TopK,
    pub(crate) stats: SearchStats,
    /// One score per document of a segment (term-at-a-time), reused across segments.
    pub(crate) doc_scores: Vec<u64>,
    /// One score per document of a block (block-at-a-time), reused across blocks.
    pub(crate) block_scores: Vec<u64>,
    pub(crate) cancel: Cancel,
    /// Threads one segment's search may use.
    pub(crate) threads: usize,
    /// Documents left to score from which threads share a search.
    pub(crate) share_from_docs: u64,
}

/// One segment as the scorers see it.
pub(crate) struct Segment<'a> {
    pub ord: u32,
    pub reader: &'a SegmentReader,
    pub impacts: Field,
    pub maxima: &'a ForwardIndex,
    /// Documents the filter allows (None: all).
    pub allowed: Option<&'a AllowedDocs>,
}

impl Segment<'_> {
    /// Whether a scored document may be returned: alive and allowed.
    #[inline]
    pub fn returns(&self, doc: u32) -> bool {
        self.reader.alive_bitset().is_none_or(|a| a.is_alive(doc))
            && self.allowed.is_none_or(|f| f.contains(doc))
    }
}

impl<'q> SparseSearch<'q> {
    pub fn new(query: &'q QuantizedVector, options: &SearchOptions) -> Result<Self> {
        options.validate().map_err(IndexError::InvalidQuery)?;
        Ok(Self {
            query,
            factor: options.prune_factor(),
            term_cut: f64::from(options.term_cut),
            algorithm: options.algorithm,
            top: TopK::new(options.k),
            stats: SearchStats::default(),
            doc_scores: Vec::new(),
            block_scores: Vec::new(),
            cancel: options.cancel.clone(),
            threads: options.threads.max(1),
            share_from_docs: options.share_from_docs.unwrap_or(SHARE_FROM_DOCS),
        })
    }

    /// The same search with an empty top k, counters and buffers: one thread's share.
    pub(crate) fn fork(&self) -> Self {
        Self {
            top: TopK::new(self.top.k()),
            stats: SearchStats::default(),
            doc_scores: Vec::new(),
            block_scores: Vec::new(),
            cancel: self.cancel.clone(),
            ..*self
        }
    }

    /// Stops with [`IndexError::Cancelled`] once the caller has cancelled.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        self.cancel.check()
    }

    /// Whether a block bounded by `bound` cannot enter the top k (exact when `factor` is 1).
    #[inline]
    pub(crate) fn skips(&self, bound: u64) -> bool {
        self.top
            .threshold()
            .is_some_and(|theta| (bound as f64) < theta as f64 * self.factor)
    }

    /// The hits, best first, and the work counters.
    pub fn finish(self) -> (Vec<ScoredDoc>, SearchStats) {
        (self.top.into_sorted(), self.stats)
    }
}
