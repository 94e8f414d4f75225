//! Each term's part of a segment's forward index. In the *terms layout* (segments of long
//! documents), its postings in the two forms block-max search needs: scoring one block (a run
//! of `2^shift` doc ids) reads only that block's postings of the query's terms, and bounding
//! every block reads one byte per block for common terms. In the *documents layout* (segments
//! of short documents, [`crate::forward_index::Layout`]), scoring reads the documents' vectors
//! ([`crate::doc_vectors`]) and a term keeps only its bound codes where it is common
//! ([`TermPostings::Bounds`]).
//!
//! tantivy's postings serve a whole-list traversal well, but scoring one block through them
//! means opening a cursor per term, walking a skip list and decoding a 128-posting block to use
//! a few postings. Here a term is stored one of two ways, whichever takes fewer bytes:
//!
//! - **dense** (a term with more postings than ~1.7 per block): per block, a bound byte and the
//!   start of its postings; the postings as (doc offset in block, impact). A block's postings
//!   are found in O(1) and all block bounds are one vectorized pass over the bytes.
//! - **sparse** (the others): the postings as (doc, impact), found by binary search; a block's
//!   bound is the exact largest impact among its postings, or, for a term in ≥ 1/4 of the
//!   blocks, a 4-bit bound code per block as well (one vectorized pass instead of one per
//!   posting; half a byte, because such a term has only ~0.25-1.5 postings per block).
//!
//! ```text
//! dense "the":  maxima [80, 0, 12, …]  starts [0, 3, 3, 5, …]
//!               postings (offset, impact) [(1, 80) (4, 9) (30, 2) | | (0, 12) (7, 12) | …]
//! sparse "yak": postings (doc, impact) [(70, 31) (71, 4) (900, 18)]
//! block 2 (docs 64..96), query {yak: 2} → docs 70, 71 score 62, 8
//! ```
//!
//! Impacts take one byte when the term's largest fits, two otherwise. Written with each segment
//! and searched in place from its mapped file ([`crate::forward_file`]), or built from the
//! tantivy postings when a segment is first searched ([`crate::forward_index::ForwardIndex::compute`]);
//! either way it follows the segment's life: never stale (deleted documents are filtered when
//! hits are collected, as on every path), dropped with the segment. tantivy stays the store of
//! record. Its arrays are [`Slab`]s, so both sources are searched by the same code.

use crate::slab::Slab;

/// Impacts of a term's postings.
#[derive(Debug)]
pub enum Impacts {
    Narrow(Slab<u8>),
    Wide(Slab<u16>),
}

impl Impacts {
    fn new(postings: &[(u32, u32)], max: u32) -> Self {
        if max <= u32::from(u8::MAX) {
            Self::Narrow(postings.iter().map(|&(_, w)| w as u8).collect())
        } else {
            Self::Wide(
                postings
                    .iter()
                    .map(|&(_, w)| w.min(u32::from(u16::MAX)) as u16)
                    .collect(),
            )
        }
    }

    #[inline]
    fn get(&self, i: usize) -> u32 {
        match self {
            Self::Narrow(w) => u32::from(w[i]),
            Self::Wide(w) => u32::from(w[i]),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Narrow(w) => w.heap_bytes(),
            Self::Wide(w) => w.heap_bytes(),
        }
    }

    /// Bytes per impact.
    pub(crate) fn width(&self) -> u8 {
        match self {
            Self::Narrow(_) => 1,
            Self::Wide(_) => 2,
        }
    }

    fn prefetch(&self, i: usize) {
        match self {
            Self::Narrow(w) => prefetch(w[i..].as_ptr().cast()),
            Self::Wide(w) => prefetch(w[i..].as_ptr().cast()),
        }
    }
}

/// Doc ids of a sparse term's postings.
#[derive(Debug)]
pub enum Docs {
    /// The doc ids themselves.
    Wide(Slab<u32>),
    /// Each doc id less the first doc id of its skip group (groups then span at most
    /// [`NARROW_SPAN`] documents): half the bytes of the doc ids, which are most of a sparse
    /// term's.
    Narrow(Slab<u16>),
}

impl Docs {
    fn len(&self) -> usize {
        match self {
            Self::Wide(d) => d.len(),
            Self::Narrow(d) => d.len(),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Wide(d) => d.heap_bytes(),
            Self::Narrow(d) => d.heap_bytes(),
        }
    }
}

/// A term's bound per block, as codes: block `b`'s bound is `code(b) · step`.
#[derive(Debug)]
pub enum BoundCodes {
    /// A byte per block: `ceil(max / step)` with the term's largest impact at 255.
    Bytes(Slab<u8>),
    /// Four bits per block (block `2k` in the low half of byte `k`, `2k + 1` in the high one):
    /// `ceil(max / step)` with the term's largest impact at 15. Half the bytes for a looser
    /// bound: what sparse terms keep, whose bound bytes were ~2 per posting.
    Nibbles(Slab<u8>),
}

/// Largest code of [`BoundCodes::Nibbles`].
pub const NIBBLE_MAX: u32 = 15;

impl BoundCodes {
    /// Codes of `num_blocks` blocks from `postings` (doc, impact) at `step`, as nibbles or
    /// bytes.
    fn build(
        postings: &[(u32, u32)],
        shift: u32,
        num_blocks: u32,
        step: u32,
        nibbles: bool,
    ) -> Self {
        let mut codes = vec![0u8; num_blocks as usize];
        for &(doc, w) in postings {
            let block = (doc >> shift) as usize;
            codes[block] = codes[block].max(w.div_ceil(step) as u8);
        }
        Self::from_codes(codes, nibbles)
    }

    /// One code per block stored as bytes, or packed two per byte (each code ≤ 15 then).
    pub(crate) fn from_codes(codes: Vec<u8>, nibbles: bool) -> Self {
        if !nibbles {
            return Self::Bytes(Slab::from(codes));
        }
        Self::Nibbles(
            codes
                .chunks(2)
                .map(|p| p[0] | (p.get(1).copied().unwrap_or(0) << 4))
                .collect(),
        )
    }

    /// The code of `block` (0: the term is not in it, or `block` is past the last block).
    #[inline]
    pub fn get(&self, block: usize) -> u32 {
        match self {
            Self::Bytes(b) => b.get(block).map_or(0, |&c| u32::from(c)),
            Self::Nibbles(n) => n
                .get(block / 2)
                .map_or(0, |&c| u32::from((c >> (4 * (block % 2))) & 0x0f)),
        }
    }

    /// The stored bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Bytes(b) | Self::Nibbles(b) => b,
        }
    }

    /// Calls `f(block, code)` for every block whose code is not 0, in block order.
    pub fn for_each_nonzero(&self, mut f: impl FnMut(u32, u32)) {
        match self {
            Self::Bytes(b) => {
                for (i, &c) in b.iter().enumerate() {
                    if c > 0 {
                        f(i as u32, u32::from(c));
                    }
                }
            }
            Self::Nibbles(n) => {
                for (i, &c) in n.iter().enumerate() {
                    if c & 0x0f > 0 {
                        f(2 * i as u32, u32::from(c & 0x0f));
                    }
                    if c >> 4 > 0 {
                        f(2 * i as u32 + 1, u32::from(c >> 4));
                    }
                }
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Bytes(b) | Self::Nibbles(b) => b.heap_bytes(),
        }
    }
}

/// Documents a skip group of a term with [`Docs::Narrow`] spans at most (doc ids relative to
/// the group fit 16 bits).
pub const NARROW_SPAN: u32 = 1 << 16;

/// One term's postings and block bounds.
#[derive(Debug)]
pub enum TermPostings {
    Dense {
        /// `ceil(max impact in block / step)`, one byte per block ([`BoundCodes::Bytes`]).
        maxima: BoundCodes,
        step: u32,
        /// Block `b`'s postings are `starts[b]..starts[b + 1]`.
        starts: Slab<u32>,
        offsets: Slab<u8>,
        impacts: Impacts,
    },
    Sparse {
        docs: Docs,
        impacts: Impacts,
        /// For a term in many blocks: its block bounds as codes too (nibbles since version 3
        /// of the files, bytes before), so bounding costs a vectorized pass over the blocks
        /// instead of one per posting.
        maxima: Option<(BoundCodes, u32)>,
        /// Skips: the postings of blocks `g << group_shift ..` start at `groups[g]`, so that
        /// a block's postings are found among ~[`GROUP_POSTINGS`] (one or two cache lines)
        /// instead of by a binary search over all of them (a cache miss per step). Empty for
        /// terms with few postings, whose docs are then [`Docs::Wide`].
        groups: Slab<u32>,
        group_shift: u32,
    },
    /// A term of a segment in the documents layout ([`crate::doc_vectors`] holds what scoring
    /// reads): its block bound codes where it is common; no postings here. Bounding a term
    /// without codes reads its tantivy postings ([`crate::forward_index::ForwardTerm::add_bounds_u32`]).
    Bounds { maxima: Option<(BoundCodes, u32)> },
}

impl TermPostings {
    /// Stores `postings` (doc, impact), in doc order, whose largest impact is `max`, in the
    /// smaller layout for a segment of `num_blocks` blocks.
    pub(crate) fn build(postings: &[(u32, u32)], max: u32, shift: u32, num_blocks: u32) -> Self {
        let n = postings.len();
        let impacts = Impacts::new(postings, max);
        let step = max.div_ceil(255).max(1);
        // Dense costs 5 bytes per block and 1 per posting more than the impacts, sparse 2-4 per
        // posting; dense finds a block's postings in O(1), so it is kept for terms in many
        // blocks even where sparse would be a little smaller.
        if 5 * num_blocks as usize >= 3 * n {
            // Half a byte per block is worth it (≤ 2 per posting) when the term is in many
            // blocks.
            let nibble_step = max.div_ceil(NIBBLE_MAX).max(1);
            let maxima = (4 * n >= num_blocks as usize).then(|| {
                let codes = BoundCodes::build(postings, shift, num_blocks, nibble_step, true);
                (codes, nibble_step)
            });
            let (docs, groups, group_shift) = sparse_docs(postings, shift, num_blocks);
            return Self::Sparse {
                docs,
                impacts,
                maxima,
                groups,
                group_shift,
            };
        }
        let mut starts = vec![n as u32; num_blocks as usize + 1];
        let mut b = 0usize;
        for (i, &(doc, _)) in postings.iter().enumerate() {
            while b <= (doc >> shift) as usize {
                starts[b] = i as u32;
                b += 1;
            }
        }
        let mask = (1u32 << shift) - 1;
        Self::Dense {
            maxima: BoundCodes::build(postings, shift, num_blocks, step, false),
            step,
            starts: starts.into(),
            offsets: postings.iter().map(|&(d, _)| (d & mask) as u8).collect(),
            impacts,
        }
    }

    /// The bound codes a term of a segment in the documents layout keeps, for `postings` (doc,
    /// impact) whose largest impact is `max`: a byte per block for a term in most blocks, four
    /// bits per block for one in at least a quarter of them, none for the others.
    pub(crate) fn build_bounds(
        postings: &[(u32, u32)],
        max: u32,
        shift: u32,
        num_blocks: u32,
    ) -> Self {
        let (n, blocks) = (postings.len(), num_blocks as usize);
        let maxima = if 3 * n > 5 * blocks {
            let step = max.div_ceil(255).max(1);
            Some((
                BoundCodes::build(postings, shift, num_blocks, step, false),
                step,
            ))
        } else if 4 * n >= blocks {
            let step = max.div_ceil(NIBBLE_MAX).max(1);
            Some((
                BoundCodes::build(postings, shift, num_blocks, step, true),
                step,
            ))
        } else {
            None
        };
        Self::Bounds { maxima }
    }

    /// Where the postings of `block` lie (an empty span when there are none).
    #[inline]
    pub fn span(&self, block: u32, shift: u32) -> (u32, u32) {
        self.span_within(block, shift, self.locate(block))
    }

    /// The first step of [`Self::span`]: the postings among which `block`'s lie (a sparse
    /// term's skip group; empty when its bound code says it is absent), asking the CPU to
    /// start loading what the second step, [`Self::span_within`], reads. Locating a batch of
    /// blocks in two passes overlaps those loads instead of waiting for each in turn.
    #[inline]
    pub fn locate(&self, block: u32) -> (u32, u32) {
        match self {
            Self::Dense { starts, .. } => {
                prefetch(starts[block as usize..].as_ptr().cast());
                (0, 0)
            }
            Self::Sparse {
                docs,
                maxima,
                groups,
                group_shift,
                ..
            } => {
                if let Some((m, _)) = maxima
                    && m.get(block as usize) == 0
                {
                    return (0, 0);
                }
                let (lo, hi) = if groups.is_empty() {
                    (0, docs.len() as u32)
                } else {
                    let g = (block >> group_shift) as usize;
                    (groups[g], groups[g + 1])
                };
                if lo < hi {
                    match docs {
                        Docs::Wide(d) => prefetch(d[lo as usize..].as_ptr().cast()),
                        Docs::Narrow(d) => prefetch(d[lo as usize..].as_ptr().cast()),
                    }
                }
                (lo, hi)
            }
            Self::Bounds { .. } => (0, 0),
        }
    }

    /// The second step of [`Self::span`], given what [`Self::locate`] returned for `block`.
    #[inline]
    pub fn span_within(&self, block: u32, shift: u32, (lo, hi): (u32, u32)) -> (u32, u32) {
        match self {
            Self::Dense { starts, .. } => (starts[block as usize], starts[block as usize + 1]),
            Self::Sparse {
                docs, group_shift, ..
            } => {
                let (lo, hi) = (lo as usize, hi as usize);
                if lo >= hi {
                    return (0, 0);
                }
                match docs {
                    Docs::Wide(docs) => find_block(&docs[lo..hi], lo, block, shift),
                    Docs::Narrow(docs) => {
                        let in_group = block & ((1 << group_shift) - 1);
                        find_block(&docs[lo..hi], lo, in_group, shift)
                    }
                }
            }
            Self::Bounds { .. } => (0, 0),
        }
    }

    /// Asks the CPU to start loading a span's postings, so that the loads of many terms and
    /// blocks overlap instead of waiting one after the other.
    #[inline]
    pub fn prefetch(&self, (s, e): (u32, u32)) {
        if s >= e {
            return;
        }
        let s = s as usize;
        match self {
            Self::Dense {
                offsets, impacts, ..
            } => {
                prefetch(offsets[s..].as_ptr());
                impacts.prefetch(s);
            }
            Self::Sparse { docs, impacts, .. } => {
                match docs {
                    Docs::Wide(d) => prefetch(d[s..].as_ptr().cast()),
                    Docs::Narrow(d) => prefetch(d[s..].as_ptr().cast()),
                }
                impacts.prefetch(s);
            }
            Self::Bounds { .. } => {}
        }
    }

    /// Adds `q · impact` of a span's postings into `acc[doc offset]`; returns how many.
    #[inline]
    pub fn accumulate(&self, (s, e): (u32, u32), q: u64, mask: u32, acc: &mut [u64]) -> u64 {
        let (s, e) = (s as usize, e as usize);
        match self {
            Self::Dense {
                offsets, impacts, ..
            } => {
                for i in s..e {
                    acc[offsets[i] as usize] += q * u64::from(impacts.get(i));
                }
            }
            // A group starts at a block boundary, so a narrow doc id has the same offset in its
            // block as the doc id.
            Self::Sparse {
                docs: Docs::Wide(docs),
                impacts,
                ..
            } => {
                for i in s..e {
                    acc[(docs[i] & mask) as usize] += q * u64::from(impacts.get(i));
                }
            }
            Self::Sparse {
                docs: Docs::Narrow(docs),
                impacts,
                ..
            } => {
                for i in s..e {
                    acc[(u32::from(docs[i]) & mask) as usize] += q * u64::from(impacts.get(i));
                }
            }
            Self::Bounds { .. } => return 0,
        }
        (e - s) as u64
    }

    /// Largest impact of a span's postings (0 for an empty span).
    pub fn max_in(&self, (s, e): (u32, u32)) -> u32 {
        let impacts = match self {
            Self::Dense { impacts, .. } | Self::Sparse { impacts, .. } => impacts,
            Self::Bounds { .. } => return 0,
        };
        (s as usize..e as usize)
            .map(|i| impacts.get(i))
            .max()
            .unwrap_or(0)
    }

    /// Calls `f(block, bound)`, in block order, for every block holding the term.
    pub fn for_each_bound(&self, shift: u32, mut f: impl FnMut(u32, u32)) {
        match self.block_maxima() {
            Some((codes, step)) => codes.for_each_nonzero(|b, c| f(b, c * step)),
            None => self.for_each_block_span(shift, |b, m, _| f(b, m)),
        }
    }

    /// Calls `f(block, largest impact, span)`, in block order, for every block holding a
    /// sparse term (nothing for a dense one): one pass over its postings.
    pub fn for_each_block_span(&self, shift: u32, mut f: impl FnMut(u32, u32, (u32, u32))) {
        let Self::Sparse {
            docs,
            impacts,
            groups,
            group_shift,
            ..
        } = self
        else {
            return;
        };
        // One loop per doc id and impact width, so that the loop tests neither.
        match (docs, impacts) {
            (Docs::Wide(d), Impacts::Narrow(w)) => block_spans(d, w, shift, &mut f),
            (Docs::Wide(d), Impacts::Wide(w)) => block_spans(d, w, shift, &mut f),
            (Docs::Narrow(d), Impacts::Narrow(w)) => {
                group_spans(d, w, groups, *group_shift, shift, &mut f)
            }
            (Docs::Narrow(d), Impacts::Wide(w)) => {
                group_spans(d, w, groups, *group_shift, shift, &mut f)
            }
        }
    }

    /// Largest bound any block can have.
    pub fn largest_bound(&self, max: u32) -> u32 {
        match self {
            Self::Dense { step, .. }
            | Self::Sparse {
                maxima: Some((_, step)),
                ..
            }
            | Self::Bounds {
                maxima: Some((_, step)),
            } => max.div_ceil(*step) * step,
            Self::Sparse { .. } | Self::Bounds { .. } => max,
        }
    }

    /// The block bound codes and their step, where the term keeps them.
    pub fn block_maxima(&self) -> Option<(&BoundCodes, u32)> {
        match self {
            Self::Dense { maxima, step, .. }
            | Self::Sparse {
                maxima: Some((maxima, step)),
                ..
            }
            | Self::Bounds {
                maxima: Some((maxima, step)),
            } => Some((maxima, *step)),
            Self::Sparse { .. } | Self::Bounds { .. } => None,
        }
    }

    /// Heap held (arrays viewed in a mapped file hold none).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Self::Dense {
                maxima,
                starts,
                offsets,
                impacts,
                ..
            } => {
                maxima.heap_bytes()
                    + starts.heap_bytes()
                    + offsets.heap_bytes()
                    + impacts.heap_bytes()
            }
            Self::Sparse {
                docs,
                impacts,
                maxima,
                groups,
                ..
            } => {
                docs.heap_bytes()
                    + impacts.heap_bytes()
                    + maxima.as_ref().map_or(0, |(m, _)| m.heap_bytes())
                    + groups.heap_bytes()
            }
            Self::Bounds { maxima } => maxima.as_ref().map_or(0, |(m, _)| m.heap_bytes()),
        }
    }
}

/// Postings per skip group of a sparse term, on average (the skips cost ≤ 4 / this many bytes
/// per posting; the narrow doc ids of a group are about a cache line). 16 was as fast and cost
/// 0.09 bytes per non-zero more on the 1M synthetic bench.
const GROUP_POSTINGS: usize = 32;

/// The doc ids and skips of a sparse term (see [`TermPostings::Sparse`]): groups of
/// `2^group_shift` blocks holding ~[`GROUP_POSTINGS`] postings on average; none for a term with
/// few postings. Doc ids are [`Docs::Narrow`] where groups of at most [`NARROW_SPAN`]
/// documents cost fewer bytes than they save.
fn sparse_docs(postings: &[(u32, u32)], shift: u32, num_blocks: u32) -> (Docs, Slab<u32>, u32) {
    let n = postings.len();
    let wide = || Docs::Wide(postings.iter().map(|&(d, _)| d).collect());
    if n <= 2 * GROUP_POSTINGS {
        return (wide(), Slab::from(Vec::new()), 0);
    }
    let blocks_per_group = (GROUP_POSTINGS * num_blocks as usize).div_ceil(n);
    let group_shift = blocks_per_group.next_power_of_two().trailing_zeros();
    let narrow_shift = group_shift.min(NARROW_SPAN.trailing_zeros() - shift);
    let num_groups = |gs: u32| (num_blocks as usize).div_ceil(1 << gs);
    // Narrower groups cost 4 bytes each; narrow doc ids save 2 per posting.
    let narrow = 4 * (num_groups(narrow_shift) - num_groups(group_shift)) < 2 * n;
    let group_shift = if narrow { narrow_shift } else { group_shift };
    let mut groups = vec![n as u32; num_groups(group_shift) + 1];
    let mut g = 0usize;
    for (i, &(doc, _)) in postings.iter().enumerate() {
        while g <= ((doc >> shift) >> group_shift) as usize {
            groups[g] = i as u32;
            g += 1;
        }
    }
    let docs = if narrow {
        let in_group = (1u32 << (shift + group_shift)) - 1;
        Docs::Narrow(
            postings
                .iter()
                .map(|&(d, _)| (d & in_group) as u16)
                .collect(),
        )
    } else {
        wide()
    };
    (docs, groups.into(), group_shift)
}

/// Where the postings of block `block` lie among `docs` (doc ids counted from a block
/// boundary, in order), which start at posting `first`.
#[inline]
fn find_block<D: Copy + Into<u32>>(docs: &[D], first: usize, block: u32, shift: u32) -> (u32, u32) {
    let start = block << shift;
    let s = docs.partition_point(|&d| d.into() < start);
    let e = s + docs[s..]
        .iter()
        .take_while(|&&d| d.into() >> shift == block)
        .count();
    ((first + s) as u32, (first + e) as u32)
}

/// [`block_spans`] over each skip group of narrow doc ids.
#[inline(always)]
fn group_spans<W: Copy + Into<u32>>(
    docs: &[u16],
    impacts: &[W],
    groups: &[u32],
    group_shift: u32,
    shift: u32,
    f: &mut impl FnMut(u32, u32, (u32, u32)),
) {
    let mut runs = Runs::default();
    for (g, w) in groups.windows(2).enumerate() {
        let (s, e) = (w[0] as usize, w[1] as usize);
        let first_block = (g as u32) << group_shift;
        runs.add(&docs[s..e], &impacts[s..e], s, first_block, shift, f);
    }
    runs.finish(f);
}

/// Calls `f(block, largest impact, span)` for the blocks of `docs` (doc ids in order, `impacts`
/// theirs).
#[inline(always)]
fn block_spans<D: Copy + Into<u32>, W: Copy + Into<u32>>(
    docs: &[D],
    impacts: &[W],
    shift: u32,
    f: &mut impl FnMut(u32, u32, (u32, u32)),
) {
    let mut runs = Runs::default();
    runs.add(docs, impacts, 0, 0, shift, f);
    runs.finish(f);
}

/// Postings looked at per pass of [`Runs::add`].
const RUN_CHUNK: usize = 64;

/// Splits postings into blocks (runs of one block) in two passes per [`RUN_CHUNK`] postings,
/// neither with a data-dependent branch: a rare term has one or two postings per block, so a
/// loop that branches on "same block as the previous posting" mispredicts about once per
/// block. The first pass writes every posting's run into a buffer slot that only moves on
/// when the block changes (the last write of a run, with its largest impact, stays); the
/// second hands the finished runs out. The last run of a chunk stays open into the next.
struct Runs {
    /// (block, largest impact so far, first posting) of the runs of the current chunk; the
    /// first may be the open run of the chunk before.
    buf: [(u32, u32, u32); RUN_CHUNK + 1],
    /// Runs in `buf`, the open one included.
    len: usize,
}

impl Default for Runs {
    fn default() -> Self {
        Self {
            buf: [(u32::MAX, 0, 0); RUN_CHUNK + 1],
            len: 0,
        }
    }
}

impl Runs {
    /// Adds postings `first..` (doc ids counted from block `first_block`'s first doc), handing
    /// every run that ends on the way to `f`.
    #[inline(always)]
    fn add<D: Copy + Into<u32>, W: Copy + Into<u32>>(
        &mut self,
        docs: &[D],
        impacts: &[W],
        first: usize,
        first_block: u32,
        shift: u32,
        f: &mut impl FnMut(u32, u32, (u32, u32)),
    ) {
        let impacts = &impacts[..docs.len()];
        for (c, (docs, impacts)) in docs
            .chunks(RUN_CHUNK)
            .zip(impacts.chunks(RUN_CHUNK))
            .enumerate()
        {
            let first = first + c * RUN_CHUNK;
            let (mut len, (mut block, mut max, mut start)) = match self.len {
                0 => (0, (u32::MAX, 0, 0)),
                n => (1, self.buf[n - 1]),
            };
            self.buf[0] = (block, max, start);
            for (i, (&d, &w)) in docs.iter().zip(impacts).enumerate() {
                let (b, w) = (first_block + (d.into() >> shift), w.into());
                let same = b == block;
                max = if same { max.max(w) } else { w };
                start = if same { start } else { (first + i) as u32 };
                len += usize::from(!same);
                block = b;
                self.buf[len - 1] = (block, max, start);
            }
            for k in 0..len - 1 {
                let (b, m, s) = self.buf[k];
                f(b, m, (s, self.buf[k + 1].2));
            }
            // The open run moves to the front; where the postings so far end is kept behind
            // it for `finish`.
            self.buf[0] = self.buf[len - 1];
            self.buf[1].2 = (first + docs.len()) as u32;
            self.len = 1;
        }
    }

    /// Hands the open run, which ends where the postings do, to `f`.
    #[inline(always)]
    fn finish(&mut self, f: &mut impl FnMut(u32, u32, (u32, u32))) {
        if self.len == 1 {
            let (b, m, s) = self.buf[0];
            f(b, m, (s, self.buf[1].2));
        }
    }
}

#[inline]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is only a hint: it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests;
