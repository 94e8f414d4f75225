//! Exact (or explicitly approximate) top-k with block-max pruning over doc-id ranges.
//!
//! For each segment, using the per-range maxima of [`crate::maxima`]:
//!
//! 1. bound every range: `ub[r] = Σ_t q_t · max_t(r)` (cheap: one pass over the query terms'
//!    range maxima, not their postings);
//! 2. score the ranges with the highest bounds first, so the k-th best score (the threshold θ)
//!    is high early;
//! 3. walk the remaining ranges in doc order and score only those with `ub[r] ≥ θ` (θ only grows).
//!    A skipped range holds no document that could enter the top k: every score in it is
//!    `≤ ub[r] < θ`, and ties at θ are never skipped, so the result equals the exhaustive one,
//!    ties included.
//!
//! Scoring a range is term-at-a-time into a [`RANGE_SIZE`]-entry accumulator, reading each
//! term's postings forward from the range start with tantivy's block postings.
//!
//! When the bounds are too loose to skip much (more than [`FALLBACK_FRACTION`] of the ranges
//! would still be scored after phase 1 — typical when doc ids carry no locality), the rest of the
//! segment is scored term-at-a-time like the exhaustive search, which is cheaper per posting;
//! the result is the same.
//!
//! Approximate mode multiplies θ by a factor `f ≥ 1` in the skip test (`ub[r] < f·θ` is
//! skipped): fewer ranges are scored and recall drops; `lexlip bench engine` measures how much.
//!
//! ```text
//! query {dog: 120, grass: 80}, θ = 30_000 after phase 2
//! range 17: ub = 120·200 + 80·90 = 31_200 ≥ θ → scored
//! range 18: ub = 120·100 + 80·0  = 12_000 < θ → skipped, no posting read
//! ```

use lexlip_proto::QuantizedVector;
use tantivy::postings::BlockSegmentPostings;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{InvertedIndexReader, SegmentReader};

use super::filter::AllowedDocs;
use super::{ScoredDoc, SearchStats, TopK};
use crate::error::Result;
use crate::maxima::{RANGE_SHIFT, RANGE_SIZE, SegmentMaxima, TermMaxima};

/// Ranges scored first, best bound first, to raise the threshold early.
const FIRST_PASS_RANGES: usize = 8;

/// Above this fraction of ranges left to score, switch to term-at-a-time for the segment.
pub const FALLBACK_FRACTION: f64 = 0.3;

/// A query term's reader over one segment, opened lazily and moved forward only.
struct Cursor<'a> {
    q: u64,
    maxima: &'a TermMaxima,
    block: Option<BlockSegmentPostings>,
}

impl Cursor<'_> {
    /// Adds `q · impact` of every posting in `[start, start + RANGE_SIZE)` into `acc`.
    fn score_range(
        &mut self,
        inverted: &InvertedIndexReader,
        start: u32,
        acc: &mut [u64],
    ) -> Result<u64> {
        if self.block.is_none() {
            self.block = Some(inverted.read_block_postings_from_terminfo(
                &self.maxima.term_info,
                IndexRecordOption::WithFreqs,
            )?);
        }
        let Some(block) = self.block.as_mut() else {
            return Ok(0);
        };
        let end = start + RANGE_SIZE;
        let mut i = block.seek(start);
        let mut read = 0u64;
        loop {
            let docs = block.docs();
            if docs.is_empty() {
                break;
            }
            let freqs = block.freqs();
            while i < docs.len() && docs[i] < end {
                acc[(docs[i] - start) as usize] += self.q * u64::from(freqs[i]);
                i += 1;
                read += 1;
            }
            if i < docs.len() {
                break;
            }
            block.advance();
            i = 0;
        }
        Ok(read)
    }
}

/// Searches one segment, pushing into `top` (which may already hold other segments' hits).
#[allow(clippy::too_many_arguments)]
pub fn search_segment(
    segment_ord: u32,
    reader: &SegmentReader,
    impacts: Field,
    maxima: &SegmentMaxima,
    query: &QuantizedVector,
    factor: f64,
    allowed: Option<&AllowedDocs>,
    top: &mut TopK,
    stats: &mut SearchStats,
) -> Result<()> {
    let terms: Vec<(u64, &TermMaxima)> = query
        .iter()
        .filter_map(|(t, q)| maxima.term(t.as_bytes()).map(|m| (u64::from(q), m)))
        .collect();
    if terms.is_empty() {
        return Ok(());
    }
    let inverted = reader.inverted_index(impacts)?;
    let mut ub = vec![0u64; maxima.num_ranges as usize];
    for (q, m) in &terms {
        m.add_bounds(*q, &mut ub);
    }
    let mut candidates: Vec<u32> = (0..maxima.num_ranges)
        .filter(|&r| ub[r as usize] > 0)
        .collect();
    stats.ranges_candidate += candidates.len() as u64;

    let ctx = RangeScorer {
        segment_ord,
        reader,
        inverted: &inverted,
        allowed,
        max_doc: reader.max_doc(),
    };

    // Flat bounds (many ranges within 2x of the best bound) leave nothing to skip: the k-th
    // score is far below every bound. Score the segment term-at-a-time straight away.
    let best = ub.iter().copied().max().unwrap_or(0);
    let near_best = ub.iter().filter(|&&u| u.saturating_mul(2) >= best).count();
    let flat = near_best as f64 > FALLBACK_FRACTION * f64::from(maxima.num_ranges);
    if flat
        && top
            .threshold()
            .is_none_or(|t| (t as f64) * factor * 2.0 < best as f64)
    {
        stats.ranges_scored += candidates.len() as u64;
        return ctx.score_term_at_a_time(impacts, query, |_| true, top, stats);
    }

    let mut acc = vec![0u64; RANGE_SIZE as usize];

    // Phase 1: the best-bounded ranges, visited in doc order with their own cursors.
    let first = FIRST_PASS_RANGES.min(candidates.len());
    if first < candidates.len() {
        candidates.select_nth_unstable_by(first, |a, b| {
            ub[*b as usize].cmp(&ub[*a as usize]).then(a.cmp(b))
        });
    }
    let (head, tail) = candidates.split_at_mut(first);
    head.sort_unstable();
    ctx.score_in_order(head, &terms, &ub, factor, &mut acc, top, stats)?;

    // Phase 2: every other range in doc order, skipped when its bound cannot reach θ — or all of
    // them term-at-a-time when too few could be skipped.
    let left = tail
        .iter()
        .filter(|&&r| !skips(ub[r as usize], top, factor))
        .count();
    if left as f64 > FALLBACK_FRACTION * f64::from(maxima.num_ranges) {
        stats.ranges_scored += left as u64;
        let not_done = |doc: u32| head.binary_search(&(doc >> RANGE_SHIFT)).is_err();
        return ctx.score_term_at_a_time(impacts, query, not_done, top, stats);
    }
    tail.sort_unstable();
    ctx.score_in_order(tail, &terms, &ub, factor, &mut acc, top, stats)
}

/// Whether a range bounded by `bound` cannot enter the top k (exact when `factor` is 1).
fn skips(bound: u64, top: &TopK, factor: f64) -> bool {
    top.threshold()
        .is_some_and(|theta| (bound as f64) < theta as f64 * factor)
}

struct RangeScorer<'a> {
    segment_ord: u32,
    reader: &'a SegmentReader,
    inverted: &'a InvertedIndexReader,
    allowed: Option<&'a AllowedDocs>,
    max_doc: u32,
}

impl RangeScorer<'_> {
    /// Scores `ranges` (sorted) with one set of forward-only cursors, skipping those whose bound
    /// cannot reach the threshold.
    #[allow(clippy::too_many_arguments)]
    fn score_in_order(
        &self,
        ranges: &[u32],
        terms: &[(u64, &TermMaxima)],
        ub: &[u64],
        factor: f64,
        acc: &mut [u64],
        top: &mut TopK,
        stats: &mut SearchStats,
    ) -> Result<()> {
        let mut cursors: Vec<Cursor> = terms
            .iter()
            .map(|&(q, maxima)| Cursor {
                q,
                maxima,
                block: None,
            })
            .collect();
        for &r in ranges {
            if skips(ub[r as usize], top, factor) {
                continue;
            }
            self.score(r, &mut cursors, acc, top, stats)?;
        }
        Ok(())
    }

    /// The whole segment term-at-a-time, pushing the documents `keep` accepts.
    fn score_term_at_a_time(
        &self,
        impacts: Field,
        query: &QuantizedVector,
        keep: impl Fn(u32) -> bool,
        top: &mut TopK,
        stats: &mut SearchStats,
    ) -> Result<()> {
        let mut dense = Vec::new();
        super::exhaustive::accumulate(self.reader, impacts, query, &mut dense, stats)?;
        super::exhaustive::collect(
            self.segment_ord,
            self.reader,
            self.allowed,
            &dense,
            keep,
            top,
        );
        Ok(())
    }

    fn score(
        &self,
        range: u32,
        cursors: &mut [Cursor],
        acc: &mut [u64],
        top: &mut TopK,
        stats: &mut SearchStats,
    ) -> Result<()> {
        let start = range << RANGE_SHIFT;
        for c in cursors.iter_mut() {
            if c.maxima.bound_in(range) > 0 {
                stats.postings_scored += c.score_range(self.inverted, start, acc)?;
            }
        }
        stats.ranges_scored += 1;
        let alive = self.reader.alive_bitset();
        for (i, slot) in acc.iter_mut().enumerate() {
            let score = std::mem::take(slot);
            if score == 0 {
                continue;
            }
            let doc = start + i as u32;
            if doc >= self.max_doc
                || alive.is_some_and(|a| a.is_deleted(doc))
                || self.allowed.is_some_and(|f| !f.contains(doc))
            {
                continue;
            }
            top.push(ScoredDoc {
                segment_ord: self.segment_ord,
                doc,
                score,
            });
        }
        Ok(())
    }
}
