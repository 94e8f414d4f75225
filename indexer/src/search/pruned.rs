//! Exact (or explicitly approximate) top-k with block-max pruning over doc-id blocks.
//!
//! For each segment, using the per-block maxima of [`crate::forward_index`]:
//!
//! 1. bound every block: `ub[r] = Σ_t q_t · max_t(r)` (cheap: one pass over the query terms'
//!    block maxima, not their postings);
//! 2. score the blocks with the highest bounds first, so the k-th best score (the threshold θ)
//!    is high early;
//! 3. walk the remaining blocks in doc order and score only those with `ub[r] ≥ θ` (θ only grows).
//!    A skipped block holds no document that could enter the top k: every score in it is
//!    `≤ ub[r] < θ`, and ties at θ are never skipped, so the result equals the exhaustive one,
//!    ties included.
//!
//! Scoring a block is term-at-a-time into a block-sized accumulator, reading each
//! term's postings forward from the block start with tantivy's block postings.
//!
//! When the bounds are too loose to skip much (more than [`FALLBACK_FRACTION`] of the blocks
//! would still be scored after phase 1 — typical when doc ids carry no locality), the rest of the
//! segment is scored term-at-a-time like the exhaustive search, which is cheaper per posting;
//! the result is the same.
//!
//! Approximate mode multiplies θ by a factor `f ≥ 1` in the skip test (`ub[r] < f·θ` is
//! skipped): fewer blocks are scored and recall drops; `lexlip bench engine` measures how much.
//!
//! ```text
//! query {dog: 120, grass: 80}, θ = 30_000 after phase 2
//! block 17: ub = 120·200 + 80·90 = 31_200 ≥ θ → scored
//! block 18: ub = 120·100 + 80·0  = 12_000 < θ → skipped, no posting read
//! ```

use tantivy::InvertedIndexReader;
use tantivy::postings::BlockSegmentPostings;
use tantivy::schema::IndexRecordOption;

use super::ScoredDoc;
use super::sparse::{Segment, SparseSearch};
use crate::error::Result;
use crate::forward_index::ForwardTerm;

/// Blocks scored first, best bound first, to raise the threshold early.
const FIRST_PASS_BLOCKS: usize = 8;

/// Above this fraction of blocks left to score, switch to term-at-a-time for the segment.
pub const FALLBACK_FRACTION: f64 = 0.3;

/// A query term's reader over one segment, opened lazily and moved forward only.
struct Cursor<'a> {
    q: u64,
    maxima: &'a ForwardTerm,
    block: Option<BlockSegmentPostings>,
}

impl Cursor<'_> {
    /// Adds `q · impact` of every posting in `[start, start + acc.len())` into `acc`.
    fn score_block(
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
        let end = start + acc.len() as u32;
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

/// Searches one segment, pushing into the search's top k (which may already hold other
/// segments' hits).
pub(crate) fn search_segment(search: &mut SparseSearch, segment: &Segment) -> Result<()> {
    if segment.allowed.is_some_and(|a| a.is_empty()) {
        return Ok(());
    }
    let maxima = segment.maxima;
    let terms: Vec<(u64, &ForwardTerm)> = search
        .query
        .iter()
        .filter_map(|(t, q)| maxima.term(t.as_bytes()).map(|m| (u64::from(q), m)))
        .collect();
    if terms.is_empty() {
        return Ok(());
    }
    let inverted = segment.reader.inverted_index(segment.impacts)?;
    let mut ub = vec![0u64; maxima.num_blocks as usize];
    for (q, m) in &terms {
        search.check()?;
        m.add_bounds(*q, &mut ub, &inverted)?;
    }
    let mut candidates: Vec<u32> = (0..maxima.num_blocks)
        .filter(|&r| ub[r as usize] > 0)
        .collect();
    search.stats.blocks_candidate += candidates.len() as u64;

    // Flat bounds (many blocks within 2x of the best bound) leave nothing to skip: the k-th
    // score is far below every bound. Score the segment term-at-a-time straight away.
    let best = ub.iter().copied().max().unwrap_or(0);
    let near_best = ub.iter().filter(|&&u| u.saturating_mul(2) >= best).count();
    let flat = near_best as f64 > FALLBACK_FRACTION * f64::from(maxima.num_blocks);
    if flat
        && search
            .top
            .threshold()
            .is_none_or(|t| (t as f64) * search.factor * 2.0 < best as f64)
    {
        search.stats.blocks_scored += candidates.len() as u64;
        search.stats.segments_unpruned += 1;
        return super::exhaustive::score_segment(search, segment, &[]);
    }

    let blocks = BlockScorer {
        segment,
        inverted: &inverted,
        terms: &terms,
        ub: &ub,
    };

    // Phase 1: the best-bounded blocks, visited in doc order with their own cursors.
    let first = FIRST_PASS_BLOCKS.min(candidates.len());
    if first < candidates.len() {
        candidates.select_nth_unstable_by(first, |a, b| {
            ub[*b as usize].cmp(&ub[*a as usize]).then(a.cmp(b))
        });
    }
    let (head, tail) = candidates.split_at_mut(first);
    head.sort_unstable();
    blocks.score_in_order(search, head)?;

    // Phase 2: every other block in doc order, skipped when its bound cannot reach θ — or all of
    // them term-at-a-time when too few could be skipped.
    let left = tail
        .iter()
        .filter(|&&r| !search.skips(ub[r as usize]))
        .count();
    if left as f64 > FALLBACK_FRACTION * f64::from(maxima.num_blocks) {
        search.stats.blocks_scored += left as u64;
        search.stats.segments_unpruned += 1;
        return super::exhaustive::score_segment(search, segment, head);
    }
    tail.sort_unstable();
    blocks.score_in_order(search, tail)
}

/// Block-at-a-time scoring of one segment.
struct BlockScorer<'a> {
    segment: &'a Segment<'a>,
    inverted: &'a InvertedIndexReader,
    terms: &'a [(u64, &'a ForwardTerm)],
    /// Score bound of every block.
    ub: &'a [u64],
}

impl BlockScorer<'_> {
    /// Scores `blocks` (sorted) with one set of forward-only cursors, skipping those whose bound
    /// cannot reach the threshold.
    fn score_in_order(&self, search: &mut SparseSearch, blocks: &[u32]) -> Result<()> {
        let mut cursors: Vec<Cursor> = self
            .terms
            .iter()
            .map(|&(q, maxima)| Cursor {
                q,
                maxima,
                block: None,
            })
            .collect();
        let mut acc = std::mem::take(&mut search.block_scores);
        acc.clear();
        acc.resize(1 << self.segment.maxima.shift, 0);
        let mut result = Ok(());
        for &r in blocks {
            if search.skips(self.ub[r as usize]) {
                continue;
            }
            result = search
                .check()
                .and_then(|()| self.score(search, r, &mut cursors, &mut acc));
            if result.is_err() {
                acc.fill(0);
                break;
            }
        }
        search.block_scores = acc;
        result
    }

    fn score(
        &self,
        search: &mut SparseSearch,
        block: u32,
        cursors: &mut [Cursor],
        acc: &mut [u64],
    ) -> Result<()> {
        let start = block << self.segment.maxima.shift;
        for c in cursors.iter_mut() {
            if c.maxima.may_occur_in(block) {
                search.stats.postings_scored += c.score_block(self.inverted, start, acc)?;
            }
        }
        search.stats.blocks_scored += 1;
        let max_doc = self.segment.reader.max_doc();
        for (i, slot) in acc.iter_mut().enumerate() {
            let score = std::mem::take(slot);
            let doc = start + i as u32;
            if score == 0 || doc >= max_doc || !self.segment.returns(doc) {
                continue;
            }
            search.top.push(ScoredDoc {
                segment_ord: self.segment.ord,
                doc,
                score,
            });
        }
        Ok(())
    }
}
