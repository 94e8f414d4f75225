//! A segment's forward index ([`ForwardIndex`]): for pruning, per term ([`ForwardTerm`]) the
//! maximum impact in every block of document ids, kept with the term's postings in the
//! layout of [`crate::forward`] (or the documents' vectors in the documents layout); read from
//! the file written with the segment ([`crate::forward_file`]) or built from its postings.
//!
//! tantivy keeps no usable per-term or per-block maximum term frequency (its block-max data is
//! BM25-specific), so lexlip computes them when a segment is first searched and caches them by
//! segment id. A *block* is `2^shift` consecutive doc ids of a segment ([`DEFAULT_BLOCK_SHIFT`]
//! unless the collection says otherwise). For a query `q`, `Σ_t q_t · max_t(block)` bounds the
//! score of every document in the block, which lets the search skip whole blocks (block-max
//! pruning, as in BMP).
//!
//! Common terms store their maxima as a code per block, `ceil(max / step)` with a per-term
//! `step` chosen so the largest impact fits the code: a byte for the densest terms (step 1 for
//! LexLIP's 1..=255 impacts, where the bound is exact), four bits for terms in fewer blocks
//! (within `step` of exact). The others compute exact maxima from their postings: the forward
//! index's in the terms layout, tantivy's in the documents layout (see [`Layout`]).

use tantivy::postings::{BlockSegmentPostings, TermInfo};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{InvertedIndexReader, SegmentReader, TERMINATED};

use crate::doc_vectors::{DocVectors, DocVectorsBuilder, EntryLayout};
use crate::error::Result;
use crate::forward::{BoundCodes, TermPostings};

/// log2 of the number of doc ids per block of a segment in the terms layout unless the
/// collection sets another.
pub const DEFAULT_BLOCK_SHIFT: u32 = 5;
/// The same for the documents layout: blocks of 8 documents, whose bounds are much tighter on
/// real short-document vectors (`docs/journal/benchmarks-2026-11-to-12.md`, "The documents
/// layout"); scoring a block reads its documents, so
/// small blocks cost little.
pub const DOCUMENTS_BLOCK_SHIFT: u32 = 3;
/// Mean non-zeros per document up to which a segment takes the documents layout: a document's
/// whole vector is read to score it, which pays for short documents (text) but not for long
/// ones (LexLIP image lexicons have hundreds of terms), whose query terms are found faster in
/// the postings.
pub const DOCUMENTS_LAYOUT_MAX_MEAN: u64 = 128;

/// How a segment's forward index is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Each term's postings, addressed by block ([`crate::forward`]).
    Terms,
    /// The documents' vectors ([`crate::doc_vectors`]), and bound codes for common terms.
    Documents,
}

/// How the forward index of a segment is planned: block size and layout, each fixed or chosen
/// per segment (the layout from its mean document length, the block size from the layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ForwardPlan {
    /// log2 of the documents per block; `None`: the layout's default.
    pub shift: Option<u32>,
    /// `None`: from the segment's mean document length.
    pub layout: Option<Layout>,
}

impl ForwardPlan {
    /// Fits one integer, for sharing with the segment plugin.
    pub(crate) fn pack(self) -> u32 {
        let layout = match self.layout {
            None => 0,
            Some(Layout::Terms) => 1,
            Some(Layout::Documents) => 2,
        };
        self.shift.map_or(0, |s| s + 1) | (layout << 8)
    }

    pub(crate) fn unpack(v: u32) -> Self {
        Self {
            shift: match v & 0xff {
                0 => None,
                s => Some(clamp_shift(s - 1)),
            },
            layout: match v >> 8 {
                1 => Some(Layout::Terms),
                2 => Some(Layout::Documents),
                _ => None,
            },
        }
    }

    /// Whether a forward index of this shift and layout (read from a file) is what the plan
    /// asks for.
    pub(crate) fn accepts(&self, shift: u32, layout: Layout) -> bool {
        self.shift.is_none_or(|s| s == shift) && self.layout.is_none_or(|l| l == layout)
    }
}

/// What is handed every term's (doc, impact) postings, in doc order, and their largest impact.
pub(crate) type TermVisitor<'a> = dyn FnMut(&[(u32, u32)], u32) -> Result<()> + 'a;

/// What a first pass over a segment's postings learns, to plan its forward index.
pub(crate) struct SegmentStats {
    max_doc: u32,
    num_terms: u32,
    nnz: u64,
    max_impact: u32,
    /// Non-zeros of every document.
    lengths: Vec<u32>,
    /// Sample documents, for choosing the block size ([`crate::block_size`]).
    samples: Option<crate::block_size::Samples>,
    /// The block shift the samples chose.
    probed_shift: Option<u32>,
}

impl SegmentStats {
    pub(crate) fn new(max_doc: u32) -> Self {
        Self {
            max_doc,
            num_terms: 0,
            nnz: 0,
            max_impact: 0,
            lengths: vec![0; max_doc as usize],
            samples: crate::block_size::Samples::new(max_doc),
            probed_shift: None,
        }
    }

    /// The next term's (doc, impact) postings, in doc order, and their largest impact.
    pub(crate) fn add(&mut self, postings: &[(u32, u32)], max: u32) {
        self.num_terms += 1;
        self.max_impact = self.max_impact.max(max);
        for &(d, _) in postings {
            self.lengths[d as usize] += 1;
        }
        self.nnz += postings.len() as u64;
        if let Some(s) = &mut self.samples {
            s.observe(postings);
        }
    }

    /// Walks a segment's postings (`walk` hands every term's, in dictionary order, to its
    /// argument) to plan its forward index: once for the statistics, and once more over the
    /// sample queries' terms where `plan` leaves the documents layout's block size to the
    /// segment ([`crate::block_size`]).
    pub(crate) fn gather(
        max_doc: u32,
        plan: ForwardPlan,
        mut walk: impl FnMut(&mut TermVisitor) -> Result<()>,
    ) -> Result<Self> {
        let mut stats = Self::new(max_doc);
        walk(&mut |postings, max| {
            stats.add(postings, max);
            Ok(())
        })?;
        let samples = stats.samples.take();
        if let (Some(samples), (Layout::Documents, None, _)) = (samples, stats.resolve_layout(plan))
        {
            let mut probe = samples.run(max_doc);
            walk(&mut |postings, _| {
                probe.term(postings);
                Ok(())
            })?;
            stats.probed_shift = probe.choose();
        }
        Ok(stats)
    }

    /// The layout `plan` gives this segment (the documents layout where asked for or, by
    /// default, where documents are short, if their entries fit: [`EntryLayout`]), the shift
    /// the plan fixes, and the entries' layout.
    fn resolve_layout(&self, plan: ForwardPlan) -> (Layout, Option<u32>, Option<EntryLayout>) {
        let entries = EntryLayout::new(self.num_terms, self.max_impact)
            .filter(|_| self.nnz < u64::from(u32::MAX));
        let short = self.nnz <= DOCUMENTS_LAYOUT_MAX_MEAN * u64::from(self.max_doc.max(1));
        let layout = match (plan.layout, entries) {
            (_, None) | (Some(Layout::Terms), _) => Layout::Terms,
            (Some(Layout::Documents), Some(_)) => Layout::Documents,
            (None, Some(_)) if short => Layout::Documents,
            (None, Some(_)) => Layout::Terms,
        };
        (layout, plan.shift, entries)
    }

    /// [`Self::resolve_layout`] with the shift: the plan's, or the one the samples chose, or
    /// the layout's default.
    fn resolve(&self, plan: ForwardPlan) -> (Layout, u32, Option<EntryLayout>) {
        let (layout, shift, entries) = self.resolve_layout(plan);
        let shift = shift.unwrap_or(match layout {
            Layout::Terms => DEFAULT_BLOCK_SHIFT,
            Layout::Documents => self.probed_shift.unwrap_or(DOCUMENTS_BLOCK_SHIFT),
        });
        (layout, clamp_shift(shift), entries)
    }
}

/// The second pass: each term's part of the forward index in the planned layout, in term
/// order, and the documents' vectors in the documents layout.
pub(crate) struct ForwardBuilder {
    pub(crate) layout: Layout,
    pub(crate) shift: u32,
    pub(crate) num_blocks: u32,
    docs: Option<DocVectorsBuilder>,
    next_ord: u32,
}

impl ForwardBuilder {
    pub(crate) fn new(stats: &SegmentStats, plan: ForwardPlan) -> Self {
        let (mut layout, shift, entries) = stats.resolve(plan);
        let docs = match (layout, entries) {
            (Layout::Documents, Some(e)) => DocVectorsBuilder::new(&stats.lengths, e),
            _ => None,
        };
        if docs.is_none() {
            layout = Layout::Terms;
        }
        Self {
            layout,
            shift,
            num_blocks: num_blocks(stats.max_doc, shift),
            docs,
            next_ord: 0,
        }
    }

    /// The next term's (doc, impact) postings in doc order, and their largest impact.
    pub(crate) fn term(&mut self, postings: &[(u32, u32)], max: u32) -> TermPostings {
        let ord = self.next_ord;
        self.next_ord += 1;
        match &mut self.docs {
            Some(docs) => {
                docs.add(ord, postings);
                TermPostings::build_bounds(postings, max, self.shift, self.num_blocks)
            }
            None => TermPostings::build(postings, max, self.shift, self.num_blocks),
        }
    }

    pub(crate) fn finish(self) -> Option<DocVectors> {
        self.docs.map(DocVectorsBuilder::finish)
    }

    /// How the documents' vectors lay out their entries (documents layout only).
    pub(crate) fn entry_layout(&self) -> Option<EntryLayout> {
        self.docs.as_ref().map(DocVectorsBuilder::layout)
    }
}
/// Smallest and largest block shift (8 and 64 documents): a doc offset within a block fits a
/// byte in the forward index.
pub const BLOCK_SHIFTS: std::ops::RangeInclusive<u32> = 3..=MAX_BLOCK_SHIFT;
/// The largest block shift (64 documents).
pub const MAX_BLOCK_SHIFT: u32 = 6;

/// What the search needs to know about one term of one segment.
#[derive(Debug)]
pub struct ForwardTerm {
    pub term_info: TermInfo,
    /// Largest impact of the term in the segment.
    pub max: u32,
    /// log2 of the documents per block.
    shift: u32,
    /// The term's postings with their block bounds.
    pub postings: TermPostings,
    /// Its rank in the segment's term dictionary (how [`crate::doc_vectors`] names it).
    pub ord: u32,
}

impl ForwardTerm {
    pub(crate) fn new(term_info: TermInfo, max: u32, shift: u32, postings: TermPostings) -> Self {
        Self {
            term_info,
            max,
            shift,
            postings,
            ord: 0,
        }
    }

    /// Whether the term may have postings in `block` (false: it has none there). Exact for
    /// terms with bound codes or postings here; `true` for a term of the documents layout
    /// without codes (its postings are only in tantivy).
    pub fn may_occur_in(&self, block: u32) -> bool {
        match (&self.postings, self.postings.block_maxima()) {
            (_, Some((codes, _))) => codes.get(block as usize) > 0,
            (TermPostings::Bounds { .. }, None) => true,
            (_, None) => {
                self.postings.span(block, self.shift).0 < self.postings.span(block, self.shift).1
            }
        }
    }

    /// Largest bound the term can give a block.
    pub fn largest_bound(&self) -> u32 {
        self.postings.largest_bound(self.max)
    }

    /// Where the term's postings in `block` lie (empty when absent).
    #[inline]
    pub fn span_in(&self, block: u32) -> (u32, u32) {
        self.postings.span(block, self.shift)
    }

    /// [`Self::span_in`] in two steps: see [`TermPostings::locate`].
    #[inline]
    pub fn locate(&self, block: u32) -> (u32, u32) {
        self.postings.locate(block)
    }

    /// The second step of [`Self::span_in`]: see [`TermPostings::span_within`].
    #[inline]
    pub fn span_within(&self, block: u32, located: (u32, u32)) -> (u32, u32) {
        self.postings.span_within(block, self.shift, located)
    }

    /// Adds `q · impact` of a span's postings into `acc[doc offset]`; returns how many.
    #[inline]
    pub fn accumulate(&self, span: (u32, u32), q: u64, acc: &mut [u64]) -> u64 {
        self.postings
            .accumulate(span, q, (1 << self.shift) - 1, acc)
    }

    /// Adds `q · bound(block)` to `ub[block]` for every block the term occurs in; a term
    /// without codes or postings here (documents layout) reads its postings from `inverted`.
    pub fn add_bounds(&self, q: u64, ub: &mut [u64], inverted: &InvertedIndexReader) -> Result<()> {
        match (&self.postings, self.postings.block_maxima()) {
            (_, Some((codes, step))) => {
                let f = q * u64::from(step);
                codes.for_each_nonzero(|b, c| ub[b as usize] += f * u64::from(c));
            }
            (TermPostings::Bounds { .. }, None) => {
                for_each_block_max(self.read_postings(inverted)?, self.shift, |r, m| {
                    ub[r as usize] += q * u64::from(m)
                })
            }
            (_, None) => self
                .postings
                .for_each_bound(self.shift, |r, m| ub[r as usize] += q * u64::from(m)),
        }
        Ok(())
    }

    /// [`Self::add_bounds`] into 32-bit bounds, for queries whose bounds fit 32 bits (the
    /// caller checks `Σ q_t · largest_bound_t ≤ u32::MAX`). Dense maxima go through a
    /// vectorized kernel where the CPU has one.
    pub fn add_bounds_u32(
        &self,
        q: u32,
        ub: &mut [u32],
        inverted: &InvertedIndexReader,
    ) -> Result<()> {
        match (&self.postings, self.postings.block_maxima()) {
            (_, Some((codes, step))) => add_codes(codes, q * step, 0, ub),
            (TermPostings::Bounds { .. }, None) => {
                add_block_maxima(self.read_postings(inverted)?, self.shift, q, ub)
            }
            (_, None) => self
                .postings
                .for_each_bound(self.shift, |r, m| ub[r as usize] += q * m),
        }
        Ok(())
    }

    /// The term's tantivy postings, from the start.
    fn read_postings(&self, inverted: &InvertedIndexReader) -> Result<BlockSegmentPostings> {
        Ok(inverted
            .read_block_postings_from_terminfo(&self.term_info, IndexRecordOption::WithFreqs)?)
    }

    /// Whether the term keeps a bound byte per block (otherwise its bounds come from its
    /// postings).
    pub fn has_bound_bytes(&self) -> bool {
        self.postings.block_maxima().is_some()
    }

    /// [`Self::add_bounds_u32`] for a term without bound bytes (the caller checks
    /// [`Self::has_bound_bytes`]), handing each of its blocks' postings span to `mark` as well
    /// (the pass walks its postings anyway).
    pub fn add_bounds_u32_marking(
        &self,
        q: u32,
        ub: &mut [u32],
        mut mark: impl FnMut(u32, (u32, u32)),
    ) {
        self.postings.for_each_block_span(self.shift, |r, m, span| {
            ub[r as usize] += q * m;
            mark(r, span);
        });
    }

    fn heap_bytes(&self) -> usize {
        self.postings.heap_bytes()
    }
}

/// Blocks per tile of [`add_code_bounds_u32`]: 4 KiB of bounds, which stay in the fastest cache
/// while every term's codes are added to them.
const TILE: usize = 1024;

/// [`ForwardTerm::add_bounds_u32`] for terms with bound codes (`(q, term)`), tile by tile of
/// `ub`: each term on its own would read and write all of `ub` again.
pub(crate) fn add_code_bounds_u32(
    terms: &[(u32, &ForwardTerm)],
    ub: &mut [u32],
    cancel: &crate::cancel::Cancel,
) -> Result<()> {
    for (t, tile) in ub.chunks_mut(TILE).enumerate() {
        cancel.check()?;
        for (q, m) in terms {
            if let Some((codes, step)) = m.postings.block_maxima() {
                add_codes(codes, q * step, t * TILE, tile);
            }
        }
    }
    Ok(())
}

/// `ub[i] += f · codes[first + i]` (`first` even: nibbles come in pairs), as far as both go.
fn add_codes(codes: &BoundCodes, f: u32, first: usize, ub: &mut [u32]) {
    match codes {
        BoundCodes::Bytes(c) => add_scaled(f, c.get(first..).unwrap_or(&[]), ub),
        BoundCodes::Nibbles(c) => add_scaled_nibbles(f, c.get(first / 2..).unwrap_or(&[]), ub),
    }
}

/// `ub[i] += f · m[i]` over equal-length prefixes.
fn add_scaled(f: u32, m: &[u8], ub: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { add_scaled_avx2(f, m, ub) };
        return;
    }
    add_scaled_plain(f, m, ub);
}

#[inline(always)]
fn add_scaled_plain(f: u32, m: &[u8], ub: &mut [u32]) {
    for (u, &b) in ub.iter_mut().zip(m) {
        *u += f * u32::from(b);
    }
}

/// `ub[i] += f · code(i)` for 4-bit codes packed two per byte ([`BoundCodes::Nibbles`]).
fn add_scaled_nibbles(f: u32, m: &[u8], ub: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::doc_vectors::has_avx512() {
        // SAFETY: the CPU has AVX-512 F (checked by `has_avx512`).
        unsafe { add_scaled_nibbles_avx512(f, m, ub) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { add_scaled_nibbles_avx2(f, m, ub) };
        return;
    }
    add_scaled_nibbles_plain(f, m, ub);
}

#[inline(always)]
fn add_scaled_nibbles_plain(f: u32, m: &[u8], ub: &mut [u32]) {
    let (pairs, last) = ub.as_chunks_mut::<2>();
    for (u, &b) in pairs.iter_mut().zip(m) {
        u[0] += f * u32::from(b & 0x0f);
        u[1] += f * u32::from(b >> 4);
    }
    if let ([u], Some(&b)) = (last, m.get(pairs.len())) {
        *u += f * u32::from(b & 0x0f);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_scaled_nibbles_avx2(f: u32, m: &[u8], ub: &mut [u32]) {
    add_scaled_nibbles_plain(f, m, ub);
}

/// 16 blocks at a time: 8 bytes of codes split into their low and high halves, interleaved
/// back into block order, widened to 32 bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn add_scaled_nibbles_avx512(f: u32, m: &[u8], ub: &mut [u32]) {
    use std::arch::x86_64::*;
    let full = (ub.len() / 16).min(m.len() / 8);
    let (codes, rest_codes) = m.split_at(8 * full);
    let (bounds, rest) = ub.split_at_mut(16 * full);
    let low = 0x0f0f_0f0f_0f0f_0f0fu64;
    for (c, u) in codes.chunks_exact(8).zip(bounds.chunks_exact_mut(16)) {
        let b = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // SAFETY: plain register arithmetic; `u` is 16 values, read and written whole.
        unsafe {
            let pairs = _mm_unpacklo_epi8(
                _mm_cvtsi64_si128((b & low) as i64),
                _mm_cvtsi64_si128(((b >> 4) & low) as i64),
            );
            let add = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(pairs), _mm512_set1_epi32(f as i32));
            let p = u.as_mut_ptr();
            _mm512_storeu_si512(
                p.cast(),
                _mm512_add_epi32(_mm512_loadu_si512(p.cast()), add),
            );
        }
    }
    add_scaled_nibbles_plain(f, rest_codes, rest);
}

/// The same loop compiled for AVX2 (8 lanes of 32-bit multiply-add).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_scaled_avx2(f: u32, m: &[u8], ub: &mut [u32]) {
    add_scaled_plain(f, m, ub);
}

/// Adds `q ·` the largest impact of `postings` in every block of `2^shift` documents to that
/// block's bound, without a branch per posting: a rare term has one or two postings per block,
/// so "same block as the previous posting?" would be mispredicted about once per block.
/// Instead each posting adds to its block's bound what it raises the term's maximum there by
/// (its whole impact when it opens a block).
fn add_block_maxima(postings: BlockSegmentPostings, shift: u32, q: u32, ub: &mut [u32]) {
    let (mut block, mut max) = (u32::MAX, 0u32);
    for_each_posting(postings, |doc, w| {
        let b = doc >> shift;
        let base = if b == block { max } else { 0 };
        let raised = base.max(w);
        ub[b as usize] += q * (raised - base);
        (block, max) = (b, raised);
    });
}

/// Calls `f(block, largest impact in it)`, in block order, for every block of `2^shift`
/// documents that `postings` has documents in.
pub(crate) fn for_each_block_max(
    postings: BlockSegmentPostings,
    shift: u32,
    mut f: impl FnMut(u32, u32),
) {
    let (mut block, mut max) = (u32::MAX, 0u32);
    for_each_posting(postings, |doc, w| {
        let b = doc >> shift;
        if b != block {
            if block != u32::MAX {
                f(block, max);
            }
            (block, max) = (b, w);
        } else {
            max = max.max(w);
        }
    });
    if block != u32::MAX {
        f(block, max);
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

/// `shift` brought into [`BLOCK_SHIFTS`].
pub(crate) fn clamp_shift(shift: u32) -> u32 {
    shift.clamp(*BLOCK_SHIFTS.start(), *BLOCK_SHIFTS.end())
}

/// Blocks of `2^shift` documents of a segment of `max_doc` documents (at least one).
pub(crate) fn num_blocks(max_doc: u32, shift: u32) -> u32 {
    max_doc.div_ceil(1 << shift).max(1)
}

/// Calls `f(term, term info, postings, largest impact)` for every term of the impacts field of
/// a segment, in term order, with the term's (doc, impact) postings in doc order.
pub(crate) fn for_each_term(
    reader: &SegmentReader,
    impacts: Field,
    mut f: impl FnMut(&[u8], &TermInfo, &[(u32, u32)], u32) -> Result<()>,
) -> Result<()> {
    let inverted = reader.inverted_index(impacts)?;
    let mut stream = inverted.terms().stream()?;
    let mut postings: Vec<(u32, u32)> = Vec::new();
    while stream.advance() {
        let term_info = stream.value();
        let block =
            inverted.read_block_postings_from_terminfo(term_info, IndexRecordOption::WithFreqs)?;
        postings.clear();
        let mut max = 0u32;
        for_each_posting(block, |doc, freq| {
            max = max.max(freq);
            postings.push((doc, freq));
        });
        f(stream.key(), term_info, &postings, max)?;
    }
    Ok(())
}

/// Block maxima of every term of the impacts field of one segment.
#[derive(Debug)]
pub struct ForwardIndex {
    /// log2 of the documents per block.
    pub shift: u32,
    pub num_blocks: u32,
    /// By term bytes; a fast non-cryptographic hash (keys are the segment's own terms).
    terms: rustc_hash::FxHashMap<Box<[u8]>, ForwardTerm>,
    heap_bytes: usize,
    /// The documents' vectors: the segment is in the documents layout.
    pub docs: Option<DocVectors>,
}

impl ForwardIndex {
    /// Builds it from the segment's postings: two passes over them (~ns per posting each), the
    /// first to plan the layout.
    pub fn compute(reader: &SegmentReader, impacts: Field, plan: ForwardPlan) -> Result<Self> {
        let stats = SegmentStats::gather(reader.max_doc(), plan, |f| {
            for_each_term(reader, impacts, |_, _, postings, max| f(postings, max))
        })?;
        let mut builder = ForwardBuilder::new(&stats, plan);
        let (shift, num_blocks) = (builder.shift, builder.num_blocks);
        let num_terms = reader.inverted_index(impacts)?.terms().num_terms();
        let mut out = Self::empty(shift, num_blocks, num_terms);
        for_each_term(reader, impacts, |key, term_info, postings, max| {
            let postings = builder.term(postings, max);
            out.insert(
                key,
                ForwardTerm::new(term_info.clone(), max, shift, postings),
            );
            Ok(())
        })?;
        out.set_docs(builder.finish());
        Ok(out)
    }

    pub(crate) fn empty(shift: u32, num_blocks: u32, num_terms: usize) -> Self {
        let mut terms = rustc_hash::FxHashMap::default();
        terms.reserve(num_terms);
        Self {
            shift,
            num_blocks,
            terms,
            heap_bytes: 0,
            docs: None,
        }
    }

    /// Adds the next term, in dictionary order (its ordinal is its rank).
    pub(crate) fn insert(&mut self, key: &[u8], mut term: ForwardTerm) {
        term.ord = self.terms.len() as u32;
        self.heap_bytes += term.heap_bytes() + key.len();
        self.terms.insert(key.into(), term);
    }

    pub(crate) fn set_docs(&mut self, docs: Option<DocVectors>) {
        self.heap_bytes += docs.as_ref().map_or(0, DocVectors::heap_bytes);
        self.docs = docs;
    }

    /// Terms held.
    pub fn num_terms(&self) -> u32 {
        self.terms.len() as u32
    }

    pub fn layout(&self) -> Layout {
        if self.docs.is_some() {
            Layout::Documents
        } else {
            Layout::Terms
        }
    }

    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &ForwardTerm)> {
        self.terms.iter().map(|(k, t)| (&k[..], t))
    }

    pub fn term(&self, term: &[u8]) -> Option<&ForwardTerm> {
        self.terms.get(term)
    }

    /// Memory held by these maxima: the terms' own (keys, bounds and postings held on the
    /// heap) and the table that finds them, whose slots (sized for every term of the segment's
    /// dictionary) are most of it for small segments.
    pub fn heap_bytes(&self) -> usize {
        self.heap_bytes + self.table_bytes()
    }

    /// The table's slots (a table holding `capacity` entries has about 8/7 as many).
    pub(crate) fn table_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(Box<[u8]>, ForwardTerm)>() + 1;
        self.terms.capacity() * 8 / 7 * slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 4-bit kernel adds what one code at a time adds, for even and odd block counts.
    #[test]
    fn nibble_kernel_equals_one_code_at_a_time() {
        for blocks in [0usize, 1, 2, 7, 15, 16, 17, 32, 33, 100, 1001] {
            let codes: Vec<u8> = (0..blocks).map(|i| (i * 7 % 16) as u8).collect();
            let packed = BoundCodes::from_codes(codes.clone(), true);
            let BoundCodes::Nibbles(bytes) = &packed else {
                unreachable!()
            };
            let want: Vec<u32> = (0..blocks)
                .map(|i| i as u32 + 3 * u32::from(codes[i]))
                .collect();
            // The kernel this CPU runs, and the plain loop.
            let mut ub: Vec<u32> = (0..blocks as u32).collect();
            add_scaled_nibbles(3, bytes, &mut ub);
            assert_eq!(ub, want, "{blocks} blocks");
            let mut ub: Vec<u32> = (0..blocks as u32).collect();
            add_scaled_nibbles_plain(3, bytes, &mut ub);
            assert_eq!(ub, want, "{blocks} blocks, plain");
            for (i, &c) in codes.iter().enumerate() {
                assert_eq!(packed.get(i), u32::from(c));
            }
            assert_eq!(packed.get(blocks), 0);
        }
    }
}
