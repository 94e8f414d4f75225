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
//! [`crate::forward::ForwardIndex`]. A range whose bound *equals* θ is scored (a document
//! scoring θ may win its tie on document order), so the result equals the exhaustive search's,
//! ties included. Approximate mode stops when a bound falls below `f · θ` (`f ≥ 1`).
//!
//! ```text
//! query {dog: 120, grass: 80}; after step 2, θ = 30_000
//! ranges sorted by bound: r17 (31_200) → scored, θ rises to 31_000
//!                         r4  (30_900) → below θ: stop; r4 and every range after it skipped
//! ```

use super::ScoredDoc;
use super::sparse::{Segment, SparseSearch};
use crate::error::Result;

/// Ranges scored before the bounds are sorted: enough to make θ meaningful, so that most ranges
/// are dropped before the sort.
const FIRST_RANGES: usize = 16;

/// Searches one segment, pushing into the search's top k (which may already hold other
/// segments' hits).
pub(crate) fn search_segment(search: &mut SparseSearch, segment: &Segment) -> Result<()> {
    let maxima = segment.maxima;
    let mut terms: Vec<(u32, u64)> = Vec::with_capacity(search.query.len());
    let mut ub = std::mem::take(&mut search.range_bounds);
    ub.clear();
    ub.resize(maxima.num_ranges as usize, 0);
    for (t, q) in search.query.iter() {
        if let Some(m) = maxima.term(t.as_bytes()) {
            m.add_bounds(u64::from(q), &mut ub);
            terms.push((m.ord, u64::from(q)));
        }
    }
    if terms.is_empty() {
        search.range_bounds = ub;
        return Ok(());
    }
    terms.sort_unstable();

    let mut order: Vec<u32> = (0..maxima.num_ranges)
        .filter(|&r| ub[r as usize] > 0)
        .collect();
    search.stats.ranges_candidate += order.len() as u64;
    let by_bound = |a: &u32, b: &u32| ub[*b as usize].cmp(&ub[*a as usize]).then(a.cmp(b));

    let mut acc = std::mem::take(&mut search.range_scores);
    acc.clear();
    acc.resize(1 << maxima.shift, 0);
    let mut scorer = RangeScorer {
        search,
        segment,
        terms: &terms,
        acc: &mut acc,
    };
    let result = (|| {
        let first = FIRST_RANGES.min(order.len());
        if first < order.len() {
            order.select_nth_unstable_by(first, by_bound);
        }
        let (head, tail) = order.split_at_mut(first);
        head.sort_unstable_by(by_bound);
        for &r in head.iter() {
            scorer.score(r)?;
        }
        let mut rest: Vec<u32> = tail
            .iter()
            .copied()
            .filter(|&r| !scorer.search.skips(ub[r as usize]))
            .collect();
        rest.sort_unstable_by(by_bound);
        for r in rest {
            if scorer.search.skips(ub[r as usize]) {
                break;
            }
            scorer.score(r)?;
        }
        Ok(())
    })();
    search.range_scores = acc;
    search.range_bounds = ub;
    result
}

/// Range-at-a-time scoring through the forward index.
struct RangeScorer<'s, 'q, 'a> {
    search: &'s mut SparseSearch<'q>,
    segment: &'a Segment<'a>,
    /// Query terms present in the segment: (term ordinal, q), by ordinal.
    terms: &'a [(u32, u64)],
    acc: &'a mut Vec<u64>,
}

impl RangeScorer<'_, '_, '_> {
    fn score(&mut self, range: u32) -> Result<()> {
        self.search.check()?;
        let maxima = self.segment.maxima;
        self.search.stats.postings_scored +=
            maxima.forward.score_range(range, self.terms, self.acc);
        self.search.stats.ranges_scored += 1;
        let start = range << maxima.shift;
        let max_doc = self.segment.reader.max_doc();
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
        Ok(())
    }
}
