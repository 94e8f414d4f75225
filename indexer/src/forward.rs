//! The block forward index of a segment: its postings regrouped range by range, so that scoring
//! one range of `2^shift` documents reads only that range's postings of the query's terms.
//!
//! tantivy's postings are term-major: scoring a range through them means opening a cursor per
//! term, walking its skip list and decoding a 128-posting block to use a few postings. Here each
//! range holds its terms (by term-dictionary ordinal, ascending) and, per term, the postings of
//! the range as `(doc offset, impact)`:
//!
//! ```text
//! range r:  terms     [ 12,      407,          9_113 ]
//!           postings  [ (3, 80) | (0, 12) (5, 9) | (3, 150) ]
//! query {407: 2, 9_113: 1} → acc[0] += 24, acc[5] += 18, acc[3] += 150
//! ```
//!
//! Built from the tantivy postings when a segment is first searched (two passes, see
//! [`crate::maxima::SegmentMaxima::compute`]) and cached with the range maxima, so it follows
//! the segment's life: never stale (deleted documents are filtered at collection time, as on
//! every path), dropped with the segment. tantivy stays the store of record.

use tantivy::InvertedIndexReader;
use tantivy::schema::IndexRecordOption;

use crate::error::Result;
use crate::maxima::for_each_posting;

/// Term ordinals: two bytes when the segment's dictionary allows it (word-piece vocabularies
/// have ~30k terms), four otherwise.
#[derive(Debug)]
enum TermIds {
    Narrow(Box<[u16]>),
    Wide(Box<[u32]>),
}

/// Postings of one segment, range-major.
#[derive(Debug)]
pub struct ForwardIndex {
    /// Range `r`'s (term, postings) pairs are `range_pairs[r]..range_pairs[r + 1]`.
    range_pairs: Box<[u32]>,
    /// Term ordinal of every pair, ascending within a range.
    pair_term: TermIds,
    /// Pair `p`'s postings are `pair_post[p]..pair_post[p + 1]`.
    pair_post: Box<[u32]>,
    /// Document offset within its range.
    post_doc: Box<[u8]>,
    post_impact: Box<[u16]>,
}

/// First pass: how many pairs and postings each range holds.
#[derive(Debug)]
pub(crate) struct ForwardShape {
    pairs: Vec<u32>,
    postings: Vec<u32>,
}

impl ForwardShape {
    pub(crate) fn new(num_ranges: u32) -> Self {
        Self {
            pairs: vec![0; num_ranges as usize],
            postings: vec![0; num_ranges as usize],
        }
    }

    /// One term has `postings` postings in `range`.
    pub(crate) fn count(&mut self, range: u32, postings: u32) {
        self.pairs[range as usize] += 1;
        self.postings[range as usize] += postings;
    }

    /// Second pass: reads every term's postings again, in dictionary order, into their ranges.
    pub(crate) fn fill(self, inverted: &InvertedIndexReader, shift: u32) -> Result<ForwardIndex> {
        let starts = |counts: &[u32]| {
            let mut s = Vec::with_capacity(counts.len() + 1);
            let mut total = 0u32;
            s.push(0);
            for &c in counts {
                total += c;
                s.push(total);
            }
            s
        };
        let range_pairs = starts(&self.pairs);
        let range_posts = starts(&self.postings);
        let num_pairs = *range_pairs.last().unwrap_or(&0) as usize;
        let num_posts = *range_posts.last().unwrap_or(&0) as usize;
        let mut pair_cursor = range_pairs.clone();
        let mut post_cursor = range_posts;
        let mut pair_term = vec![0u32; num_pairs];
        let mut pair_post = vec![0u32; num_pairs + 1];
        pair_post[num_pairs] = num_posts as u32;
        let mut post_doc = vec![0u8; num_posts];
        let mut post_impact = vec![0u16; num_posts];
        let mask = (1u32 << shift) - 1;

        let mut stream = inverted.terms().stream()?;
        let mut ord = 0u32;
        while stream.advance() {
            let block = inverted
                .read_block_postings_from_terminfo(stream.value(), IndexRecordOption::WithFreqs)?;
            let mut last = u32::MAX;
            for_each_posting(block, |doc, impact| {
                let r = (doc >> shift) as usize;
                if r as u32 != last {
                    last = r as u32;
                    let p = pair_cursor[r] as usize;
                    pair_cursor[r] += 1;
                    pair_term[p] = ord;
                    pair_post[p] = post_cursor[r];
                }
                let i = post_cursor[r] as usize;
                post_cursor[r] += 1;
                post_doc[i] = (doc & mask) as u8;
                post_impact[i] = impact.min(u32::from(u16::MAX)) as u16;
            });
            ord += 1;
        }
        let pair_term = if ord <= u32::from(u16::MAX) + 1 {
            TermIds::Narrow(pair_term.iter().map(|&t| t as u16).collect())
        } else {
            TermIds::Wide(pair_term.into_boxed_slice())
        };
        Ok(ForwardIndex {
            range_pairs: range_pairs.into_boxed_slice(),
            pair_term,
            pair_post: pair_post.into_boxed_slice(),
            post_doc: post_doc.into_boxed_slice(),
            post_impact: post_impact.into_boxed_slice(),
        })
    }
}

impl ForwardIndex {
    /// Adds `q · impact` of every posting of `range` whose term is in `query` into
    /// `acc[doc offset]`; returns the number of postings read. `query` holds
    /// `(term ordinal, q)` sorted by ordinal.
    #[inline]
    pub fn score_range(&self, range: u32, query: &[(u32, u64)], acc: &mut [u64]) -> u64 {
        let (a, b) = (
            self.range_pairs[range as usize] as usize,
            self.range_pairs[range as usize + 1] as usize,
        );
        match &self.pair_term {
            TermIds::Narrow(t) => self.score_pairs(&t[a..b], a, query, acc),
            TermIds::Wide(t) => self.score_pairs(&t[a..b], a, query, acc),
        }
    }

    /// Intersects the range's sorted terms with the query's (each query term's position is
    /// searched after the previous one's), then accumulates the matches' postings.
    #[inline]
    fn score_pairs<T: Copy + Into<u32>>(
        &self,
        terms: &[T],
        first_pair: usize,
        query: &[(u32, u64)],
        acc: &mut [u64],
    ) -> u64 {
        let mut lo = 0;
        let mut read = 0u64;
        for &(ord, q) in query {
            let rest = &terms[lo..];
            let i = lo + rest.partition_point(|&t| t.into() < ord);
            if i == terms.len() {
                break;
            }
            lo = i;
            if terms[i].into() != ord {
                continue;
            }
            lo = i + 1;
            let p = first_pair + i;
            let (s, e) = (self.pair_post[p] as usize, self.pair_post[p + 1] as usize);
            for (&d, &w) in self.post_doc[s..e].iter().zip(&self.post_impact[s..e]) {
                acc[d as usize] += q * u64::from(w);
            }
            read += (e - s) as u64;
        }
        read
    }

    /// Memory held.
    pub fn heap_bytes(&self) -> usize {
        let terms = match &self.pair_term {
            TermIds::Narrow(t) => t.len() * 2,
            TermIds::Wide(t) => t.len() * 4,
        };
        self.range_pairs.len() * 4
            + terms
            + self.pair_post.len() * 4
            + self.post_doc.len()
            + self.post_impact.len() * 2
    }

    /// Stored postings.
    pub fn num_postings(&self) -> usize {
        self.post_doc.len()
    }
}
