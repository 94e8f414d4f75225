//! Upper bounds for pruning: per term, the maximum impact in every range (block) of document
//! ids; and, built in the same pass, the segment's block forward index ([`crate::forward`]).
//!
//! tantivy keeps no usable per-term or per-block maximum term frequency (its block-max data is
//! BM25-specific), so lexlip computes them when a segment is first searched and caches them by
//! segment id. A *range* is `2^shift` consecutive doc ids of a segment ([`DEFAULT_RANGE_SHIFT`]
//! unless the collection says otherwise). For a query `q`, `Σ_t q_t · max_t(range)` bounds the
//! score of every document in the range, which lets the search skip whole ranges (block-max
//! pruning, as in BMP).
//!
//! Maxima are stored in one byte per range: `ceil(max / step)` with a per-term `step` chosen so
//! the largest impact fits (step 1 for LexLIP's 1..=255 impacts, where the bound is exact).

use std::collections::HashMap;

use tantivy::postings::{BlockSegmentPostings, TermInfo};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{SegmentReader, TERMINATED};

use crate::error::Result;
use crate::forward::{ForwardIndex, ForwardShape};

/// log2 of the number of doc ids per range unless the collection sets another.
pub const DEFAULT_RANGE_SHIFT: u32 = 5;
/// Smallest and largest range shift (8 and 64 documents): a doc offset within a range fits a
/// byte in the forward index.
pub const RANGE_SHIFTS: std::ops::RangeInclusive<u32> = 3..=6;

/// Range maxima of one term, dense (one byte per range) when the term covers many ranges.
#[derive(Debug)]
pub enum RangeMaxima {
    Dense(Box<[u8]>),
    Sparse {
        ranges: Box<[u32]>,
        maxima: Box<[u8]>,
    },
}

/// What the search needs to know about one term of one segment.
#[derive(Debug)]
pub struct TermMaxima {
    pub term_info: TermInfo,
    /// The term's ordinal in the segment's term dictionary (its id in the forward index).
    pub ord: u32,
    /// Largest impact of the term in the segment.
    pub max: u32,
    /// Multiply a stored byte by `step` to get a bound on the impact.
    pub step: u32,
    pub ranges: RangeMaxima,
}

impl TermMaxima {
    /// Bound on the impact of this term in `range` (0 when absent).
    pub fn bound_in(&self, range: u32) -> u32 {
        let b = match &self.ranges {
            RangeMaxima::Dense(m) => m.get(range as usize).copied().unwrap_or(0),
            RangeMaxima::Sparse { ranges, maxima } => match ranges.binary_search(&range) {
                Ok(i) => maxima[i],
                Err(_) => 0,
            },
        };
        u32::from(b) * self.step
    }

    /// Adds `q · bound(range)` to `ub[range]` for every range the term occurs in.
    pub fn add_bounds(&self, q: u64, ub: &mut [u64]) {
        let f = q * u64::from(self.step);
        match &self.ranges {
            RangeMaxima::Dense(m) => {
                for (u, &b) in ub.iter_mut().zip(m.iter()) {
                    *u += f * u64::from(b);
                }
            }
            RangeMaxima::Sparse { ranges, maxima } => {
                for (&r, &b) in ranges.iter().zip(maxima.iter()) {
                    ub[r as usize] += f * u64::from(b);
                }
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        match &self.ranges {
            RangeMaxima::Dense(m) => m.len(),
            RangeMaxima::Sparse { ranges, .. } => ranges.len() * 5,
        }
    }
}

/// Calls `f(doc, impact)` for every posting of a list, block by block (tantivy's fastest
/// traversal); returns the number of postings.
pub(crate) fn for_each_posting(
    mut block: BlockSegmentPostings,
    mut f: impl FnMut(u32, u32),
) -> u64 {
    let mut n = 0;
    loop {
        let docs = block.docs();
        if docs.is_empty() {
            return n;
        }
        for (&doc, &freq) in docs.iter().zip(block.freqs()) {
            if doc == TERMINATED {
                return n;
            }
            f(doc, freq);
            n += 1;
        }
        block.advance();
    }
}

/// Range maxima of every term of the impacts field of one segment.
#[derive(Debug)]
pub struct SegmentMaxima {
    /// log2 of the documents per range.
    pub shift: u32,
    pub num_ranges: u32,
    terms: HashMap<Box<[u8]>, TermMaxima>,
    /// The same postings, range by range.
    pub forward: ForwardIndex,
    heap_bytes: usize,
}

impl SegmentMaxima {
    /// Reads every posting of the impacts field twice (~ns per posting): once for the maxima
    /// and the forward index's shape, once to fill the forward index.
    pub fn compute(reader: &SegmentReader, impacts: Field, shift: u32) -> Result<Self> {
        let shift = shift.clamp(*RANGE_SHIFTS.start(), *RANGE_SHIFTS.end());
        let num_ranges = reader.max_doc().div_ceil(1 << shift).max(1);
        let inverted = reader.inverted_index(impacts)?;
        let mut terms = HashMap::with_capacity(inverted.terms().num_terms());
        let mut stream = inverted.terms().stream()?;
        let mut pairs: Vec<(u32, u32, u32)> = Vec::new();
        let mut shape = ForwardShape::new(num_ranges);
        let mut heap_bytes = 0;
        let mut ord = 0u32;
        while stream.advance() {
            let term_info = stream.value().clone();
            let block = inverted
                .read_block_postings_from_terminfo(&term_info, IndexRecordOption::WithFreqs)?;
            pairs.clear();
            let mut max = 0u32;
            for_each_posting(block, |doc, freq| {
                let range = doc >> shift;
                max = max.max(freq);
                match pairs.last_mut() {
                    Some((r, m, n)) if *r == range => {
                        *m = (*m).max(freq);
                        *n += 1;
                    }
                    _ => pairs.push((range, freq, 1)),
                }
            });
            for &(r, _, n) in &pairs {
                shape.count(r, n);
            }
            let step = max.div_ceil(255).max(1);
            let to_byte = |m: u32| m.div_ceil(step) as u8;
            let ranges = if pairs.len() * 5 >= num_ranges as usize {
                let mut dense = vec![0u8; num_ranges as usize];
                for &(r, m, _) in &pairs {
                    dense[r as usize] = to_byte(m);
                }
                RangeMaxima::Dense(dense.into_boxed_slice())
            } else {
                RangeMaxima::Sparse {
                    ranges: pairs.iter().map(|p| p.0).collect(),
                    maxima: pairs.iter().map(|p| to_byte(p.1)).collect(),
                }
            };
            let tm = TermMaxima {
                term_info,
                ord,
                max,
                step,
                ranges,
            };
            heap_bytes += tm.heap_bytes() + stream.key().len() + 64;
            terms.insert(stream.key().into(), tm);
            ord += 1;
        }
        let forward = shape.fill(&inverted, shift)?;
        heap_bytes += forward.heap_bytes();
        Ok(Self {
            shift,
            num_ranges,
            terms,
            forward,
            heap_bytes,
        })
    }

    pub fn term(&self, term: &[u8]) -> Option<&TermMaxima> {
        self.terms.get(term)
    }

    /// Memory held by these maxima.
    pub fn heap_bytes(&self) -> usize {
        self.heap_bytes
    }
}
