//! Exact (or explicitly approximate) top-k by block-max pruning over the forward index:
//! ranges are visited best bound first and the search stops at the first range that cannot
//! enter the top k (the idea of Block-Max Pruning, Mallia, Suel & Tonellotto, SIGIR 2024).
//!
//! For each segment:
//!
//! 1. bound every range: `ub[r] = Σ_t q_t · max_t(r)` from the range maxima of
//!    [`crate::maxima`] (one pass over the query terms' maxima, no posting read);
//! 2. score the [`FIRST_RANGES`] best-bounded ranges, which raises the k-th best score θ;
//! 3. keep the other ranges whose bound reaches θ, sort them by bound, best first, and score
//!    them in that order until a bound falls below θ: every later range is bounded lower still,
//!    so none of their documents can enter the top k.
//!
//! Scoring a range reads only that range's postings of the query terms from the
//! block forward index ([`crate::forward`]). A range whose bound *equals* θ is scored (a document
//! scoring θ may win its tie on document order), so the result equals the exhaustive search's,
//! ties included. Approximate mode stops when a bound falls below `f · θ` (`f ≥ 1`).
//!
//! ```text
//! query {dog: 120, grass: 80}; after step 2, θ = 30_000
//! ranges sorted by bound: r17 (31_200) → scored, θ rises to 31_000
//!                         r4  (30_900) → below θ: stop; r4 and every range after it skipped
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::ScoredDoc;
use super::sparse::{Segment, SparseSearch};
use crate::error::Result;
use crate::maxima::TermMaxima;

/// Ranges scored before the bounds are sorted: enough to make θ meaningful, so that most ranges
/// are dropped before the sort.
const FIRST_RANGES: usize = 16;

/// Ranges scored together: their postings are located and prefetched first, so the memory
/// loads of a batch overlap. A batch may score a few ranges a finished search would have
/// skipped; the result is the same.
const BATCH: usize = 8;

/// Searches one segment, pushing into the search's top k (which may already hold other
/// segments' hits).
pub(crate) fn search_segment(search: &mut SparseSearch, segment: &Segment) -> Result<()> {
    let maxima = segment.maxima;
    let found: Vec<(u32, &TermMaxima)> = search
        .query
        .iter()
        .filter_map(|(t, q)| maxima.term(t.as_bytes()).map(|m| (q, m)))
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    // Bounds are summed in 32 bits (a vectorized pass per term); a query whose bounds could
    // overflow that (impacts in the tens of thousands on both sides) takes the 64-bit path.
    let largest: u64 = found
        .iter()
        .map(|(q, m)| u64::from(*q) * u64::from(m.largest_bound()))
        .sum();
    if largest > u64::from(u32::MAX) {
        return super::pruned::search_segment(search, segment);
    }
    let mut ub = std::mem::take(&mut search.range_bounds);
    ub.clear();
    ub.resize(maxima.num_ranges as usize, 0);
    for (q, m) in &found {
        m.add_bounds_u32(*q, &mut ub);
    }
    let terms: Vec<(u64, &TermMaxima)> = found.iter().map(|&(q, m)| (u64::from(q), m)).collect();

    // The FIRST_RANGES best bounds (ties: lower range first), in one pass.
    let mut head: BinaryHeap<Reverse<(u32, Reverse<u32>)>> =
        BinaryHeap::with_capacity(FIRST_RANGES + 1);
    let mut candidates = 0u64;
    for (r, &u) in ub.iter().enumerate() {
        if u == 0 {
            continue;
        }
        candidates += 1;
        if head.len() == FIRST_RANGES && head.peek().is_some_and(|m| u <= m.0.0) {
            continue;
        }
        head.push(Reverse((u, Reverse(r as u32))));
        if head.len() > FIRST_RANGES {
            head.pop();
        }
    }
    search.stats.ranges_candidate += candidates;
    let head: Vec<u32> = head
        .into_sorted_vec()
        .into_iter()
        .map(|Reverse((_, Reverse(r)))| r)
        .collect();

    let mut acc = std::mem::take(&mut search.range_scores);
    acc.clear();
    acc.resize(1 << maxima.shift, 0);
    let mut scorer = RangeScorer {
        search,
        segment,
        terms: &terms,
        acc: &mut acc,
        spans: Vec::with_capacity(BATCH * terms.len()),
    };
    let result = (|| {
        for batch in head.chunks(BATCH) {
            scorer.score(batch)?;
        }
        for &r in &head {
            ub[r as usize] = 0;
        }
        // The others that can still reach θ, popped best bound first until one cannot.
        let mut rest: BinaryHeap<(u32, Reverse<u32>)> = ub
            .iter()
            .enumerate()
            .filter(|&(_, &u)| u > 0 && !scorer.search.skips(u64::from(u)))
            .map(|(r, &u)| (u, Reverse(r as u32)))
            .collect();
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            batch.clear();
            while batch.len() < BATCH
                && let Some(&(u, Reverse(r))) = rest.peek()
                && !scorer.search.skips(u64::from(u))
            {
                rest.pop();
                batch.push(r);
            }
            if batch.is_empty() {
                return Ok(());
            }
            scorer.score(&batch)?;
        }
    })();
    search.range_scores = acc;
    search.range_bounds = ub;
    result
}

/// Range-at-a-time scoring through the forward index.
struct RangeScorer<'s, 'q, 'a> {
    search: &'s mut SparseSearch<'q>,
    segment: &'a Segment<'a>,
    /// Query terms present in the segment, with their weights.
    terms: &'a [(u64, &'a TermMaxima)],
    acc: &'a mut Vec<u64>,
    /// Postings spans of the batch being scored, range-major.
    spans: Vec<(u32, u32)>,
}

impl RangeScorer<'_, '_, '_> {
    fn score(&mut self, ranges: &[u32]) -> Result<()> {
        self.search.check()?;
        self.spans.clear();
        for &r in ranges {
            for &(_, m) in self.terms {
                let span = m.span_in(r);
                m.postings.prefetch(span);
                self.spans.push(span);
            }
        }
        let maxima = self.segment.maxima;
        let max_doc = self.segment.reader.max_doc();
        let per_range = self.terms.len();
        for (i, &range) in ranges.iter().enumerate() {
            let spans = &self.spans[i * per_range..(i + 1) * per_range];
            for (&(q, m), &span) in self.terms.iter().zip(spans) {
                self.search.stats.postings_scored += m.accumulate(span, q, self.acc);
            }
            self.search.stats.ranges_scored += 1;
            let start = range << maxima.shift;
            for (i, slot) in self.acc.iter_mut().enumerate() {
                let score = std::mem::take(slot);
                if score == 0 || self.search.top.threshold().is_some_and(|t| score < t) {
                    continue;
                }
                let doc = start + i as u32;
                if doc >= max_doc || !self.segment.returns(doc) {
                    continue;
                }
                self.search.top.push(ScoredDoc {
                    segment_ord: self.segment.ord,
                    doc,
                    score,
                });
            }
        }
        Ok(())
    }
}
