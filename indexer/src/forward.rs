//! The block forward index: each term's postings grouped by block (a range of `2^shift` doc
//! ids) and addressed directly by block, so scoring one block reads only that block's
//! postings of the query's terms.
//!
//! tantivy's postings serve a whole-list traversal well, but scoring one block through them
//! means opening a cursor per term, walking a skip list and decoding a 128-posting block to use
//! a few postings. Here a term's postings for block `b` are found in O(1) (terms present in many
//! blocks: a start per block) or by a binary search over the term's own block list (the others),
//! and read as `(doc offset in block, impact)`:
//!
//! ```text
//! term "dog", sparse: blocks [4, 17, 90]  starts [0, 2, 3, 5]
//!                     postings (offset, impact) [(3, 80) (9, 12) | (0, 7) | (1, 30) (2, 5)]
//! block 17 → postings 2..3 → doc 17·32 + 0 scores q · 7
//! ```
//!
//! Built with the range maxima ([`crate::maxima::SegmentMaxima::compute`], one pass over the
//! postings) when a segment is first searched and cached with them, so it follows the segment's
//! life: never stale (deleted documents are filtered at collection time, as on every path),
//! dropped with the segment. tantivy stays the store of record.

/// One term's postings, block by block.
#[derive(Debug)]
pub struct TermBlocks {
    /// Entry `i`'s postings are `starts[i]..starts[i + 1]`; entry `i` is block `i` for a term
    /// with dense maxima, the term's `i`-th block otherwise.
    starts: Box<[u32]>,
    docs: Box<[u8]>,
    impacts: Box<[u16]>,
}

impl TermBlocks {
    /// Groups `postings` (doc, impact), in doc order, into blocks; `dense` gives every block of
    /// the segment an entry, otherwise only the blocks the term occurs in have one.
    pub(crate) fn build(postings: &[(u32, u32)], shift: u32, dense: bool, num_blocks: u32) -> Self {
        let mask = (1u32 << shift) - 1;
        let n = postings.len() as u32;
        let starts = if dense {
            // starts[b] = index of the first posting in block b or later.
            let mut starts = vec![n; num_blocks as usize + 1];
            let mut b = 0usize;
            for (i, &(doc, _)) in postings.iter().enumerate() {
                while b <= (doc >> shift) as usize {
                    starts[b] = i as u32;
                    b += 1;
                }
            }
            starts
        } else {
            let mut starts = Vec::new();
            let mut current = None;
            for (i, &(doc, _)) in postings.iter().enumerate() {
                if current != Some(doc >> shift) {
                    current = Some(doc >> shift);
                    starts.push(i as u32);
                }
            }
            starts.push(n);
            starts
        };
        Self {
            starts: starts.into_boxed_slice(),
            docs: postings.iter().map(|&(d, _)| (d & mask) as u8).collect(),
            impacts: postings
                .iter()
                .map(|&(_, w)| w.min(u32::from(u16::MAX)) as u16)
                .collect(),
        }
    }

    /// Where entry `i`'s postings lie.
    #[inline]
    pub fn span(&self, i: usize) -> (u32, u32) {
        (self.starts[i], self.starts[i + 1])
    }

    /// Asks the CPU to start loading a span's postings, so that the loads of many terms and
    /// blocks overlap instead of waiting one after the other.
    #[inline]
    pub fn prefetch(&self, (s, e): (u32, u32)) {
        #[cfg(target_arch = "x86_64")]
        if s < e {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let (s, e) = (s as usize, e as usize);
            // SAFETY: prefetching is only a hint and never faults; the pointers are in bounds.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(self.docs[s..e].as_ptr().cast());
                _mm_prefetch::<_MM_HINT_T0>(self.impacts[s..e].as_ptr().cast());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (s, e);
    }

    /// Adds `q · impact` of a span's postings into `acc[doc offset]`; returns how many.
    #[inline]
    pub fn accumulate(&self, (s, e): (u32, u32), q: u64, acc: &mut [u64]) -> u64 {
        let (s, e) = (s as usize, e as usize);
        for (&d, &w) in self.docs[s..e].iter().zip(&self.impacts[s..e]) {
            acc[d as usize] += q * u64::from(w);
        }
        (e - s) as u64
    }

    /// Memory held.
    pub fn heap_bytes(&self) -> usize {
        self.starts.len() * 4 + self.docs.len() + self.impacts.len() * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block's span holds exactly that block's postings, dense or sparse.
    #[test]
    fn spans_hold_each_blocks_postings() {
        let postings = [(1, 5), (3, 7), (40, 2), (70, 9), (71, 1), (200, 4)];
        let shift = 5;
        let num_blocks = 7;
        let dense = TermBlocks::build(&postings, shift, true, num_blocks);
        let sparse = TermBlocks::build(&postings, shift, false, num_blocks);
        let blocks_present = [0u32, 1, 2, 6];
        for b in 0..num_blocks {
            let want: Vec<(u8, u16)> = postings
                .iter()
                .filter(|(d, _)| d >> shift == b)
                .map(|&(d, w)| ((d & 31) as u8, w as u16))
                .collect();
            let read = |t: &TermBlocks, entry: Option<usize>| -> Vec<(u8, u16)> {
                let Some(i) = entry else { return Vec::new() };
                let (s, e) = t.span(i);
                (s as usize..e as usize)
                    .map(|j| (t.docs[j], t.impacts[j]))
                    .collect()
            };
            assert_eq!(read(&dense, Some(b as usize)), want, "dense block {b}");
            let entry = blocks_present.iter().position(|&p| p == b);
            assert_eq!(read(&sparse, entry), want, "sparse block {b}");
        }
        let mut acc = vec![0u64; 32];
        assert_eq!(dense.accumulate(dense.span(2), 3, &mut acc), 2);
        assert_eq!((acc[6], acc[7]), (27, 3));
    }
}
