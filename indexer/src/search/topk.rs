//! The k best documents seen so far, with a deterministic order.
//!
//! Better = higher score; among equal scores, earlier in document order (segment ordinal, then
//! doc id). Both the pruned and the exhaustive search push into this, so they return the same
//! list, ties included.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A scored document of a searcher: segment ordinal, doc id within the segment, score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScoredDoc {
    pub segment_ord: u32,
    pub doc: u32,
    pub score: u64,
}

impl ScoredDoc {
    /// Larger = worse.
    fn badness(&self) -> (Reverse<u64>, u32, u32) {
        (Reverse(self.score), self.segment_ord, self.doc)
    }
}

impl Ord for ScoredDoc {
    fn cmp(&self, other: &Self) -> Ordering {
        self.badness().cmp(&other.badness())
    }
}

impl PartialOrd for ScoredDoc {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Bounded max-heap on badness: its top is the worst kept document.
#[derive(Debug)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<ScoredDoc>,
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// How many documents it keeps.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Score of the k-th best document once k are held: a document must score at least this to
    /// enter (and beat it on document order when equal).
    #[inline]
    pub fn threshold(&self) -> Option<u64> {
        if self.heap.len() < self.k {
            None
        } else {
            self.heap.peek().map(|d| d.score)
        }
    }

    /// Whether a document scoring `score` cannot enter, whatever its document order (one
    /// scoring exactly the threshold still may, on document order).
    #[inline]
    pub fn falls_short(&self, score: u64) -> bool {
        self.threshold().is_some_and(|t| score < t)
    }

    #[inline]
    pub fn push(&mut self, candidate: ScoredDoc) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(candidate);
        } else if let Some(mut worst) = self.heap.peek_mut()
            && candidate < *worst
        {
            *worst = candidate;
        }
    }

    /// Best first.
    pub fn into_sorted(self) -> Vec<ScoredDoc> {
        self.heap.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_best_with_document_order_ties() {
        let mut t = TopK::new(2);
        for (seg, doc, score) in [(1, 5, 10), (0, 9, 10), (0, 3, 7), (1, 0, 10)] {
            t.push(ScoredDoc {
                segment_ord: seg,
                doc,
                score,
            });
        }
        let got: Vec<_> = t
            .into_sorted()
            .iter()
            .map(|d| (d.segment_ord, d.doc))
            .collect();
        assert_eq!(got, vec![(0, 9), (1, 0)]);
    }
}
