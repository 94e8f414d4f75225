//! Every document's terms and impacts, one document after another: what scoring a block reads
//! in the documents layout of the forward index ([`crate::forward`]).
//!
//! Scoring a block through the postings means finding each query term's postings in that block:
//! a lookup, and a cache miss or two, per term and block. Stored document-major instead, a
//! block's vectors are one run of bytes read front to back, each entry's term looked up in a
//! table of the query's weights by term ordinal (the term's rank in the segment's dictionary).
//! That pays where documents are short and blocks small: on real SPLADE vectors (47 non-zeros per
//! document, blocks of 8) it scores the blocks of an exact top 10 about twice as fast as the
//! postings (`docs/journal/benchmarks-2026-11-to-12.md`, "The documents layout").
//!
//! Each non-zero is one little-endian entry of [`EntryLayout::entry_bytes`] bytes, 3 where the
//! ordinal and the impact fit 24 bits together (a 30,522-term vocabulary and impacts below 512),
//! 4 otherwise: the ordinal in the low [`EntryLayout::term_bits`] bits, the impact above it.
//! 64 zero bytes follow the last entry, so that a vector kernel may read a whole register past
//! any entry.
//!
//! ```text
//! dictionary: "dog" 0, "grass" 1, "the" 2                         term_bits 2
//! doc 0 {dog: 120, the: 3}   doc 1 {grass: 80}
//! starts [0, 2, 3]   entries [0 | 120 << 2, 2 | 3 << 2, 1 | 80 << 2]
//! query {dog: 2, grass: 1} → weights by ordinal [2, 1, 0, 0] → doc 0: 240, doc 1: 80
//! ```

use crate::slab::Slab;

/// Zero bytes after the last entry.
pub const PADDING: usize = 64;

/// Most term bits a segment in this layout may have: a query's table of weights by ordinal has
/// `2^term_bits` slots (1 MiB at most).
pub const MAX_TERM_BITS: u32 = 18;

/// Documents' vectors of one segment, in doc id order.
#[derive(Debug)]
pub struct DocVectors {
    /// Document `d`'s entries are `starts[d]..starts[d + 1]`.
    starts: Slab<u32>,
    /// The entries, then [`PADDING`] zero bytes.
    entries: Slab<u8>,
    term_bits: u32,
    entry_bytes: u32,
}

/// Bits of `max` (at least 1).
fn bits(max: u32) -> u32 {
    (32 - max.leading_zeros()).max(1)
}

/// How entries are laid out for a segment: bits of the ordinal and bytes per entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryLayout {
    pub term_bits: u32,
    pub entry_bytes: u32,
}

impl EntryLayout {
    /// The layout for `num_terms` terms and impacts up to `max_impact`; `None` where an entry
    /// would not fit 32 bits or the query table would be too large ([`MAX_TERM_BITS`]).
    pub fn new(num_terms: u32, max_impact: u32) -> Option<Self> {
        let term_bits = bits(num_terms.saturating_sub(1));
        if term_bits > MAX_TERM_BITS {
            return None;
        }
        let entry_bytes = match term_bits + bits(max_impact) {
            0..=24 => 3,
            25..=32 => 4,
            _ => return None,
        };
        Some(Self {
            term_bits,
            entry_bytes,
        })
    }
}

/// Fills a [`DocVectors`] term by term, in ordinal order (so each document's entries come out
/// in ordinal order), once every document's length is known.
pub(crate) struct DocVectorsBuilder {
    starts: Vec<u32>,
    /// Where each document's next entry goes.
    next: Vec<u32>,
    entries: Vec<u8>,
    layout: EntryLayout,
}

impl DocVectorsBuilder {
    /// For documents of `lengths[d]` non-zeros; `None` if they add up to 2^32 or more.
    pub(crate) fn new(lengths: &[u32], layout: EntryLayout) -> Option<Self> {
        let mut starts = Vec::with_capacity(lengths.len() + 1);
        let mut total = 0u32;
        starts.push(0);
        for &n in lengths {
            total = total.checked_add(n)?;
            starts.push(total);
        }
        let next = starts[..lengths.len()].to_vec();
        let entries = vec![0u8; total as usize * layout.entry_bytes as usize + PADDING];
        Some(Self {
            starts,
            next,
            entries,
            layout,
        })
    }

    /// The next term's postings (doc, impact); its ordinal is `ord`. Each document's entries
    /// must come in before its length is used up (the lengths counted these postings).
    pub(crate) fn add(&mut self, ord: u32, postings: &[(u32, u32)]) {
        let eb = self.layout.entry_bytes as usize;
        for &(doc, w) in postings {
            let slot = &mut self.next[doc as usize];
            let at = *slot as usize * eb;
            *slot += 1;
            let x = (ord | (w << self.layout.term_bits)).to_le_bytes();
            self.entries[at..at + eb].copy_from_slice(&x[..eb]);
        }
    }

    pub(crate) fn layout(&self) -> EntryLayout {
        self.layout
    }

    pub(crate) fn finish(self) -> DocVectors {
        debug_assert!(self.next.iter().zip(&self.starts[1..]).all(|(n, s)| n == s));
        DocVectors {
            starts: self.starts.into(),
            entries: self.entries.into(),
            term_bits: self.layout.term_bits,
            entry_bytes: self.layout.entry_bytes,
        }
    }
}

impl DocVectors {
    /// Vectors read from a file: `starts` (`max_doc + 1` of them, from 0, in order) and the
    /// entries with their padding. `None` when they do not fit together.
    pub(crate) fn from_parts(
        starts: Slab<u32>,
        entries: Slab<u8>,
        layout: EntryLayout,
    ) -> Option<Self> {
        let n = *starts.last()? as usize;
        let ordered = starts.first() == Some(&0) && starts.windows(2).all(|w| w[0] <= w[1]);
        let fits = entries.len() == n * layout.entry_bytes as usize + PADDING
            && entries[entries.len() - PADDING..].iter().all(|&b| b == 0);
        (ordered && fits && matches!(layout.entry_bytes, 3 | 4) && layout.term_bits <= 28).then(
            || Self {
                starts,
                entries,
                term_bits: layout.term_bits,
                entry_bytes: layout.entry_bytes,
            },
        )
    }

    pub fn layout(&self) -> EntryLayout {
        EntryLayout {
            term_bits: self.term_bits,
            entry_bytes: self.entry_bytes,
        }
    }

    pub(crate) fn starts(&self) -> &[u32] {
        &self.starts
    }

    pub(crate) fn entries(&self) -> &[u8] {
        &self.entries
    }

    /// Slots of the table of query weights that [`Self::score`] reads.
    pub fn table_len(&self) -> usize {
        1 << self.term_bits
    }

    /// Documents held.
    pub fn num_docs(&self) -> u32 {
        (self.starts.len() - 1) as u32
    }

    /// The (ordinal, impact) entries of document `doc`.
    pub fn vector(&self, doc: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        let (s, e) = self.span(doc);
        let eb = self.entry_bytes as usize;
        let mask = (1u32 << self.term_bits) - 1;
        self.entries[s * eb..e * eb].chunks_exact(eb).map(move |c| {
            let mut b = [0u8; 4];
            b[..eb].copy_from_slice(c);
            let x = u32::from_le_bytes(b);
            (x & mask, x >> self.term_bits)
        })
    }

    #[inline]
    fn span(&self, doc: u32) -> (usize, usize) {
        (
            self.starts[doc as usize] as usize,
            self.starts[doc as usize + 1] as usize,
        )
    }

    /// Scores of documents `first..end` for a query (see [`QueryWeights`], made for this
    /// segment's [`Self::table_len`]) into `out[..end - first]`. Sums are in 32 bits, wrapping:
    /// the caller checks that no score can exceed that.
    pub fn score_docs(&self, first: u32, end: u32, q: &QueryWeights, out: &mut [u32]) {
        let starts = &self.starts[first as usize..=end as usize];
        let out = &mut out[..starts.len() - 1];
        let (eb, tb) = (self.entry_bytes as usize, self.term_bits);
        // The entries hold the padding after the last, and a table (where the query has one) a
        // weight for every ordinal an entry can hold.
        assert!(self.entries.len() >= *starts.last().unwrap_or(&0) as usize * eb + PADDING);
        assert!(!q.hashed.is_empty() || q.table.len() >= self.table_len());
        #[cfg(target_arch = "x86_64")]
        if kernel() == Kernel::Avx512 {
            let base = self.entries.as_ptr();
            // SAFETY: the CPU has the instructions (checked by `kernel`); the rest of the
            // kernel's contract is asserted above.
            unsafe {
                match eb {
                    3 => avx512::score_docs::<3>(base, starts, tb, q, out),
                    _ => avx512::score_docs::<4>(base, starts, tb, q, out),
                }
            }
            return;
        }
        for (w, out) in starts.windows(2).zip(out) {
            let (s, n) = (w[0] as usize, (w[1] - w[0]) as usize);
            let at = &self.entries[s * eb..(s + n) * eb + 4];
            *out = if q.hashed.is_empty() {
                score_plain(at, n, eb, tb, &q.table)
            } else {
                score_plain_hashed(at, n, eb, tb, &q.hashed)
            };
        }
    }

    /// Score of document `doc` (see [`Self::score_docs`]).
    pub fn score(&self, doc: u32, q: &QueryWeights) -> u32 {
        let mut out = [0];
        self.score_docs(doc, doc + 1, q, &mut out);
        out[0]
    }

    /// Non-zeros of documents `first..end`.
    pub fn non_zeros(&self, first: u32, end: u32) -> u64 {
        u64::from(self.starts[end as usize] - self.starts[first as usize])
    }

    /// Asks the CPU to start loading the vectors of documents `first..end`, every cache line of
    /// them: a block's vectors are a kilobyte or more, and waiting for each line in turn would
    /// cost more than scoring them.
    #[inline]
    pub fn prefetch(&self, first: u32, end: u32) {
        let eb = self.entry_bytes as usize;
        let (s, e) = (
            self.starts[first as usize] as usize * eb,
            self.starts[end as usize] as usize * eb,
        );
        for line in (s & !63..e).step_by(64) {
            crate::forward::prefetch(self.entries[line..].as_ptr());
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.starts.heap_bytes() + self.entries.heap_bytes()
    }
}

/// A query's weights for scoring one segment's documents (whose term ordinals are the
/// segment's own). For a query of up to [`HASHED_TERMS`] terms, 64-slot hash tables of its terms
/// ([`GROUP_TERMS`] each) that the vector kernel keeps in registers; for a longer one, a table
/// by ordinal, every slot 0 but the query's terms'. Looking an entry's term up in the table
/// costs the kernel a gather from memory, most of its time; in a hash table, a few
/// permutations between registers.
#[derive(Debug, Clone, Default)]
pub struct QueryWeights {
    hashed: Vec<Hashed>,
    /// Weight by ordinal, where `hashed` is empty.
    table: Vec<u32>,
}

/// Terms per hash table (with more, a collision-free hash is hard to find).
pub const GROUP_TERMS: usize = 20;
/// Hash tables at most: each costs the kernel about what the first does.
pub const HASH_GROUPS: usize = 3;
/// Most query terms held in hash tables.
pub const HASHED_TERMS: usize = GROUP_TERMS * HASH_GROUPS;

/// Query terms by slot `(ordinal · mult) >> 26`: the slot's ordinal (`u32::MAX` if empty) and
/// weight. `mult` is chosen so that no two of the query's terms share a slot.
#[derive(Debug, Clone)]
struct Hashed {
    mult: u32,
    keys: [u32; 64],
    weights: [u32; 64],
}

impl Hashed {
    #[inline]
    fn slot(mult: u32, ord: u32) -> usize {
        (ord.wrapping_mul(mult) >> 26) as usize
    }

    /// Tries multipliers until one puts `terms` in distinct slots.
    fn new(terms: &[(u32, u32)]) -> Option<Self> {
        let mut mult = 0x9e37_79b9u32;
        for _ in 0..512 {
            mult = mult.wrapping_mul(0x2c1b_3c6d).wrapping_add(0x297a_2d39) | 1;
            let mut h = Hashed {
                mult,
                keys: [u32::MAX; 64],
                weights: [0; 64],
            };
            let distinct = terms.iter().all(|&(ord, w)| {
                let s = Self::slot(mult, ord);
                let free = h.keys[s] == u32::MAX;
                h.keys[s] = ord;
                h.weights[s] = w;
                free
            });
            if distinct {
                return Some(h);
            }
        }
        None
    }

    /// The weight of ordinal `ord` (0 if not a query term).
    #[inline]
    fn get(&self, ord: u32) -> u32 {
        let s = Self::slot(self.mult, ord);
        if self.keys[s] == ord {
            self.weights[s]
        } else {
            0
        }
    }
}

impl QueryWeights {
    /// The weights of a query's `terms` (ordinal, weight) for a segment of `table_len` ordinals
    /// ([`DocVectors::table_len`]).
    pub fn new(table_len: usize, terms: &[(u32, u32)]) -> Self {
        let hashed = (!terms.is_empty() && terms.len() <= HASHED_TERMS)
            .then(|| terms.chunks(GROUP_TERMS).map(Hashed::new).collect())
            .flatten();
        match hashed {
            Some(hashed) => Self {
                hashed,
                table: Vec::new(),
            },
            None => {
                let mut table = vec![0; table_len];
                for &(ord, w) in terms {
                    table[ord as usize] = w;
                }
                Self {
                    hashed: Vec::new(),
                    table,
                }
            }
        }
    }
}

/// One entry at a time through the table; the oracle of the vector kernels. `at` holds the
/// `n` entries and 4 bytes more.
#[inline]
fn score_plain(at: &[u8], n: usize, eb: usize, term_bits: u32, weights: &[u32]) -> u32 {
    let mask = (1u32 << term_bits) - 1;
    let entry = if eb == 3 { 0x00ff_ffff } else { u32::MAX };
    let mut sum = 0u32;
    for i in 0..n {
        let c = &at[eb * i..eb * i + 4];
        let x = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) & entry;
        sum = sum.wrapping_add(weights[(x & mask) as usize].wrapping_mul(x >> term_bits));
    }
    sum
}

/// [`score_plain`] through the hash tables.
#[inline]
fn score_plain_hashed(at: &[u8], n: usize, eb: usize, term_bits: u32, hashed: &[Hashed]) -> u32 {
    let mask = (1u32 << term_bits) - 1;
    let entry = if eb == 3 { 0x00ff_ffff } else { u32::MAX };
    let mut sum = 0u32;
    for i in 0..n {
        let c = &at[eb * i..eb * i + 4];
        let x = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) & entry;
        let w: u32 = hashed.iter().map(|h| h.get(x & mask)).sum();
        sum = sum.wrapping_add(w.wrapping_mul(x >> term_bits));
    }
    sum
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    Plain,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// Whether this CPU runs the AVX-512 kernels (detected once; `LEXLIP_PLAIN_KERNELS` set in the
/// environment forces the plain ones, for comparing).
#[inline]
pub(crate) fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return kernel() == Kernel::Avx512;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The scoring kernel this CPU runs (detected once).
#[inline]
fn kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        static DETECTED: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| {
            let forced_plain = std::env::var_os("LEXLIP_PLAIN_KERNELS").is_some();
            if !forced_plain
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vbmi")
            {
                Kernel::Avx512
            } else {
                Kernel::Plain
            }
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    Kernel::Plain
}

/// 16 entries at a time: their bytes spread into 32-bit lanes (one byte permutation for 3-byte
/// entries), their weights looked up, multiplied by their impacts and added up; a whole block
/// of documents per call, so that the query's tables are loaded into registers once.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Hashed, QueryWeights};

    /// Lane i takes bytes 3i, 3i + 1, 3i + 2 of 3-byte entries (and 3i + 2 again, masked off).
    const SPREAD: [u8; 64] = {
        let mut idx = [0u8; 64];
        let mut i = 0;
        while i < 16 {
            let b = 3 * i as u8;
            idx[4 * i] = b;
            idx[4 * i + 1] = b + 1;
            idx[4 * i + 2] = b + 2;
            idx[4 * i + 3] = b + 2;
            i += 1;
        }
        idx
    };

    /// Lanes in use for the `left` entries still to add.
    #[inline(always)]
    fn lanes(left: usize) -> __mmask16 {
        if left >= 16 {
            0xffff
        } else {
            (1u16 << left) - 1
        }
    }

    /// A hash table of query terms in registers: keys and weights of slots 0-31 and 32-63.
    #[derive(Clone, Copy)]
    struct Table {
        mult: __m512i,
        keys: [__m512i; 4],
        weights: [__m512i; 4],
    }

    impl Table {
        #[inline(always)]
        fn load(h: &Hashed) -> Self {
            // SAFETY: loads of the table's 64-value arrays, 16 values at a time.
            unsafe {
                let k = |i: usize| _mm512_loadu_si512(h.keys[16 * i..].as_ptr().cast());
                let w = |i: usize| _mm512_loadu_si512(h.weights[16 * i..].as_ptr().cast());
                Self {
                    mult: _mm512_set1_epi32(h.mult as i32),
                    keys: [k(0), k(1), k(2), k(3)],
                    weights: [w(0), w(1), w(2), w(3)],
                }
            }
        }

        /// The weight of each lane's ordinal `t` (0 where it is not in this table).
        #[inline(always)]
        fn lookup(&self, t: __m512i) -> __m512i {
            // SAFETY: register arithmetic.
            unsafe {
                let slot = _mm512_srli_epi32::<26>(_mm512_mullo_epi32(t, self.mult));
                // Slots 32-63 come from the second pair of registers.
                let upper = _mm512_test_epi32_mask(slot, _mm512_set1_epi32(32));
                let [k0, k1, k2, k3] = self.keys;
                let [w0, w1, w2, w3] = self.weights;
                let key = _mm512_mask_blend_epi32(
                    upper,
                    _mm512_permutex2var_epi32(k0, slot, k1),
                    _mm512_permutex2var_epi32(k2, slot, k3),
                );
                let weight = _mm512_mask_blend_epi32(
                    upper,
                    _mm512_permutex2var_epi32(w0, slot, w1),
                    _mm512_permutex2var_epi32(w2, slot, w3),
                );
                _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(key, t), weight)
            }
        }
    }

    /// What scoring a document needs of its segment, in registers.
    struct Kernel<const EB: usize> {
        base: *const u8,
        ords: __m512i,
        shift: __m128i,
        spread: __m512i,
    }

    impl<const EB: usize> Kernel<EB> {
        /// Σ weight(entry) · impact over entries `s..e`, `weight` giving a vector of entries'
        /// weights from their ordinals.
        ///
        /// # Safety
        /// Entries `s..e` are inside the entries, which the padding follows.
        #[inline(always)]
        unsafe fn document(&self, s: u32, e: u32, weight: impl Fn(__m512i) -> __m512i) -> u32 {
            // SAFETY: register arithmetic, and loads of 64 bytes from an entry (the caller's
            // contract).
            unsafe {
                let mut acc = _mm512_setzero_si512();
                let (mut i, n) = (s as usize, e as usize);
                while i < n {
                    let v = _mm512_loadu_si512(self.base.add(EB * i).cast());
                    let x = if EB == 3 {
                        _mm512_and_si512(
                            _mm512_permutexvar_epi8(self.spread, v),
                            _mm512_set1_epi32(0x00ff_ffff),
                        )
                    } else {
                        v
                    };
                    let w = weight(_mm512_and_si512(x, self.ords));
                    let product = _mm512_mullo_epi32(w, _mm512_srl_epi32(x, self.shift));
                    acc = _mm512_mask_add_epi32(acc, lanes(n - i), acc, product);
                    i += 16;
                }
                _mm512_reduce_add_epi32(acc) as u32
            }
        }
    }

    /// Scores every document whose entries start at `starts[d]` (and end at `starts[d + 1]`)
    /// into `out[d]`, the entries of `EB` bytes counted from `base`.
    ///
    /// # Safety
    /// AVX-512 F, BW and VBMI; `base` readable for `EB · starts[last] + 64` bytes (the
    /// entries' padding); where `q` has no hash tables, every ordinal the entries' low
    /// `term_bits` bits can hold indexes `q.table`; `out` at least as long as the documents.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub(super) unsafe fn score_docs<const EB: usize>(
        base: *const u8,
        starts: &[u32],
        term_bits: u32,
        q: &QueryWeights,
        out: &mut [u32],
    ) {
        let k = Kernel::<EB> {
            base,
            ords: _mm512_set1_epi32(((1u32 << term_bits) - 1) as i32),
            shift: _mm_cvtsi32_si128(term_bits as i32),
            // SAFETY: SPREAD is 64 bytes.
            spread: unsafe { _mm512_loadu_si512(SPREAD.as_ptr().cast()) },
        };
        let docs = starts.windows(2).zip(out.iter_mut());
        match &q.hashed[..] {
            [] => {
                let table = q.table.as_ptr();
                // SAFETY: every ordinal indexes the table (the caller's contract).
                let gather = |t| unsafe { _mm512_i32gather_epi32::<4>(t, table.cast()) };
                for (w, out) in docs {
                    // SAFETY: the entries of a document (the caller's contract).
                    *out = unsafe { k.document(w[0], w[1], gather) };
                }
            }
            [h] => {
                let t = Table::load(h);
                for (w, out) in docs {
                    // SAFETY: the entries of a document (the caller's contract).
                    *out = unsafe { k.document(w[0], w[1], |x| t.lookup(x)) };
                }
            }
            groups => {
                let mut tables = [Table::load(&groups[0]); super::HASH_GROUPS];
                for (t, h) in tables.iter_mut().zip(groups) {
                    *t = Table::load(h);
                }
                let tables = &tables[..groups.len().min(super::HASH_GROUPS)];
                let all = |x| {
                    tables.iter().fold(_mm512_setzero_si512(), |w, t| {
                        _mm512_add_epi32(w, t.lookup(x))
                    })
                };
                for (w, out) in docs {
                    // SAFETY: the entries of a document (the caller's contract).
                    *out = unsafe { k.document(w[0], w[1], all) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds vectors from documents given as (ordinal, impact) lists.
    fn build(docs: &[Vec<(u32, u32)>], num_terms: u32) -> DocVectors {
        let max = docs.iter().flatten().map(|p| p.1).max().unwrap_or(1);
        let layout = EntryLayout::new(num_terms, max).unwrap();
        let lengths: Vec<u32> = docs.iter().map(|d| d.len() as u32).collect();
        let mut b = DocVectorsBuilder::new(&lengths, layout).unwrap();
        for t in 0..num_terms {
            let postings: Vec<(u32, u32)> = docs
                .iter()
                .enumerate()
                .filter_map(|(d, v)| v.iter().find(|p| p.0 == t).map(|p| (d as u32, p.1)))
                .collect();
            b.add(t, &postings);
        }
        b.finish()
    }

    #[test]
    fn layouts_fit_ordinal_and_impact() {
        let l = |t, w| EntryLayout::new(t, w).map(|l| (l.term_bits, l.entry_bytes));
        assert_eq!(l(30_522, 511), Some((15, 3)));
        assert_eq!(l(30_522, 512), Some((15, 4)));
        assert_eq!(l(1, 1), Some((1, 3)));
        assert_eq!(l(1 << 18, (1 << 14) - 1), Some((18, 4)));
        assert_eq!(l(1 << 18, 1 << 14), None);
        assert_eq!(l((1 << 18) + 1, 1), None);
        assert_eq!(l(1 << 16, 1 << 16), None);
    }

    proptest! {
        /// Every document's score is the plain dot product, whatever the entry width and
        /// length (lengths around the 16 lanes of the vector kernel), and the vectors read
        /// back as they were added.
        #[test]
        fn scores_are_dot_products(
            docs in proptest::collection::vec(
                proptest::collection::btree_map(0u32..300, 1u32..60_000, 0..40),
                1..30,
            ),
            query in proptest::collection::btree_map(0u32..300, 1u32..300, 1..80),
            wide in any::<bool>(),
        ) {
            let docs: Vec<Vec<(u32, u32)>> = docs
                .into_iter()
                .map(|d| d.into_iter().map(|(t, w)| (t, if wide { w } else { w % 2_000 + 1 })).collect())
                .collect();
            let v = build(&docs, 300);
            // 9 bits of ordinal: impacts from 2^15 on need 4 bytes.
            let wider = docs.iter().flatten().any(|p| p.1 >= 1 << 15);
            prop_assert_eq!(v.layout().entry_bytes, if wider { 4 } else { 3 });
            let mut weights = vec![0u32; v.table_len()];
            for (&t, &q) in &query {
                weights[t as usize] = q;
            }
            let terms: Vec<(u32, u32)> = query.iter().map(|(&t, &q)| (t, q)).collect();
            let hashed = QueryWeights::new(v.table_len(), &terms);
            let groups = if terms.len() <= HASHED_TERMS { terms.len().div_ceil(GROUP_TERMS) } else { 0 };
            prop_assert_eq!(hashed.hashed.len(), groups);
            let table = QueryWeights { table: weights.clone(), hashed: Vec::new() };
            for (d, doc) in docs.iter().enumerate() {
                let want: u32 = doc.iter().map(|&(t, w)| query.get(&t).copied().unwrap_or(0) * w).sum();
                prop_assert_eq!(v.score(d as u32, &hashed), want);
                prop_assert_eq!(v.score(d as u32, &table), want);
                let s = v.starts[d] as usize * v.entry_bytes as usize;
                let (at, eb) = (&v.entries[s..], v.entry_bytes as usize);
                prop_assert_eq!(score_plain(at, doc.len(), eb, v.term_bits, &weights), want);
                if !hashed.hashed.is_empty() {
                    let plain = score_plain_hashed(at, doc.len(), eb, v.term_bits, &hashed.hashed);
                    prop_assert_eq!(plain, want);
                }
                prop_assert_eq!(v.vector(d as u32).collect::<Vec<_>>(), doc.clone());
            }
        }
    }

    /// Parts read back from a file are checked: starts from 0 and in order, entries of the
    /// right length with zero padding.
    #[test]
    fn parts_are_checked() {
        let v = build(&[vec![(0, 5), (2, 9)], vec![(1, 3)]], 3);
        let layout = v.layout();
        let starts: Slab<u32> = v.starts().to_vec().into();
        let entries: Slab<u8> = v.entries().to_vec().into();
        assert!(DocVectors::from_parts(starts, entries, layout).is_some());
        let bad_starts: Slab<u32> = vec![0u32, 3, 2].into();
        let entries: Slab<u8> = v.entries().to_vec().into();
        assert!(DocVectors::from_parts(bad_starts, entries, layout).is_none());
        let mut short = v.entries().to_vec();
        short.pop();
        let starts: Slab<u32> = v.starts().to_vec().into();
        assert!(DocVectors::from_parts(starts, short.into(), layout).is_none());
        let mut dirty = v.entries().to_vec();
        *dirty.last_mut().unwrap() = 1;
        let starts: Slab<u32> = v.starts().to_vec().into();
        assert!(DocVectors::from_parts(starts, dirty.into(), layout).is_none());
    }
}
