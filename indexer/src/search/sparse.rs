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
//!     blocks::search_segment(&mut search, &segment)   (or pruned::, exhaustive::)
//!   search.finish()                          hits best first, counters
//! ```

use lexlip_proto::QuantizedVector;
use tantivy::SegmentReader;
use tantivy::schema::Field;

use super::filter::AllowedDocs;
use super::{Algorithm, Cancel, ScoredDoc, SearchOptions, SearchStats, TopK};
use crate::error::{IndexError, Result};
use crate::maxima::SegmentMaxima;

/// A search in progress.
pub struct SparseSearch<'q> {
    pub(crate) query: &'q QuantizedVector,
    /// Ranges whose bound is below `factor ·` the k-th score are skipped (1 = exact).
    pub(crate) factor: f64,
    /// Share of the query's largest possible score its lightest terms may take and still be
    /// left out of the block bounds ([`SearchOptions::term_cut`]).
    pub(crate) term_cut: f64,
    pub(crate) algorithm: Algorithm,
    pub(crate) top: TopK,
    pub(crate) stats: SearchStats,
    /// One score per document of a segment (term-at-a-time), reused across segments.
    pub(crate) doc_scores: Vec<u64>,
    /// One score per document of a range (range-at-a-time), reused across ranges.
    pub(crate) range_scores: Vec<u64>,
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
    pub maxima: &'a SegmentMaxima,
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
            range_scores: Vec::new(),
            cancel: options.cancel.clone(),
            threads: options.threads.max(1),
            share_from_docs: options
                .share_from_docs
                .unwrap_or(super::blocks::SHARE_FROM_DOCS),
        })
    }

    /// Scores the segments of a snapshot into the running top k: block-max search takes them
    /// all at once, the others one after the other.
    pub(crate) fn segments(&mut self, segments: &[Segment]) -> Result<()> {
        if self.algorithm == Algorithm::BlockMax {
            return super::blocks::search(self, segments);
        }
        for segment in segments {
            self.check()?;
            self.stats.segments += 1;
            match self.algorithm {
                Algorithm::Postings => super::pruned::search_segment(self, segment)?,
                _ => super::exhaustive::search_segment(self, segment)?,
            }
        }
        Ok(())
    }

    /// Stops with [`IndexError::Cancelled`] once the caller has cancelled.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        self.cancel.check()
    }

    /// Whether a range bounded by `bound` cannot enter the top k (exact when `factor` is 1).
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
