//! Exact (or explicitly approximate) top-k by block-max pruning over the forward index:
//! blocks are visited best bound first and the search stops at the first block that cannot
//! enter the top k (the idea of Block-Max Pruning, Mallia, Suel & Tonellotto, SIGIR 2024).
//!
//! All segments of a snapshot are searched together:
//!
//! 1. bound every block of every segment: `ub[r] = Σ_t q_t · max_t(r)` from the block maxima
//!    of [`crate::forward_index`] (a vectorized pass over common terms' bound codes, one over the
//!    postings of the others); a block that holds no document the filter allows gets 0;
//! 2. score the [`FIRST_BLOCKS`] best-bounded blocks of all segments, which raises the k-th
//!    best score θ;
//! 3. put the other blocks whose bound reaches θ in one heap by bound and pop them, best
//!    first, until a bound falls below θ: every later block is bounded lower still, so none of
//!    their documents can enter the top k.
//!
//! Bounds do not always prune. A segment that the query touches several times per document
//! (a picture's 1,349 terms against short captions) is not bounded at all, and one where more
//! than a share of the blocks still reach θ after step 2 is not scored block by block: both
//! are scored term-at-a-time ([`super::exhaustive`]), which reads each posting once, on the
//! search's threads. On the 1M-picture collection this made the default exact search 3.0×
//! (text → image) and 2.5× (image → text) faster, where it had been slower than exhaustive.
//!
//! Searching the segments one after the other instead would score the first segments' blocks
//! with the low θ of a search just started (on 243k real vectors in three segments, a third
//! more time). Scoring a block reads that block's documents ([`crate::doc_vectors`]) or its
//! postings of the query terms ([`crate::forward`]), by the segment's layout. A block whose
//! bound *equals* θ is scored (a document scoring θ may win its tie on document order), so the
//! result equals the exhaustive search's, ties included. Approximate mode stops when a bound
//! falls below `f · θ` (`f ≥ 1`), and may leave the query's lightest terms out of the bounds
//! ([`cut_terms`]).
//!
//! Several threads can share step 3: they pop blocks from the same heap, each into its own
//! top k, and share the best k-th score (a valid θ for all: the final one can only be higher);
//! the tops are merged at the end.
//!
//! ```text
//! query {dog: 120, grass: 80}; after step 2, θ = 30_000
//! blocks sorted by bound: s0 r17 (31_200) → scored, θ rises to 31_000
//!                         s1 r4  (30_900) → below θ: stop; it and every block after skipped
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use lexlip_proto::QuantizedVector;

use super::sparse::{Segment, SparseSearch};
use super::{Cancel, ScoredDoc, SearchStats, TopK};
use crate::doc_vectors::{DocVectors, QueryWeights};
use crate::error::Result;
use crate::forward_index::ForwardTerm;
use crate::search::filter::AllowedDocs;

/// Blocks scored before the others go into the heap: enough to make θ meaningful, so that most
/// blocks are dropped before the heap is built.
const FIRST_BLOCKS: usize = 16;

/// Blocks scored together: their postings are located and prefetched first, so the memory
/// loads of a batch overlap. A batch may score a few blocks a finished search would have
/// skipped; the result is the same.
const BATCH: usize = 8;

/// Threads that share one search at most.
const MAX_SHARING: usize = 4;

/// Share of a segment's candidate blocks above which, once the first blocks have raised θ,
/// the segment is scored term-at-a-time rather than block by block: terms layout, documents
/// layout ([`SegmentBounds::prunes_too_little`]).
const UNPRUNED_TERMS: f64 = 0.25;
const UNPRUNED_DOCUMENTS: f64 = 0.5;

/// Query postings per document of a segment from which it is scored term-at-a-time without
/// bounding its blocks ([`touches_every_doc`]). Captions of ~32 terms against a million composed
/// pictures of ~60 reach 4-8 per picture, and bounds still prune them (5 % of the blocks
/// scored, where 4 sent 0.84 segments per query term-at-a-time); 1,349-term pictures against
/// captions reach 11.
const POSTINGS_PER_DOC_UNPRUNED: u64 = 8;

/// Below this many blocks in all, one thread bounds every segment.
const PARALLEL_BOUNDING: u64 = 1 << 16;

/// A block in the heap: its bound, then (ties) lower segment and block first.
type Entry = (u32, Reverse<u32>, Reverse<u32>);

/// Searches `segments` together, pushing into the search's top k.
pub(crate) fn search(search: &mut SparseSearch, segments: &[Segment]) -> Result<()> {
    // Segments are bounded on several threads where the search may use them and there is
    // enough to share (waking a thread costs tens of microseconds).
    let bound =
        |segment| SegmentBounds::bound(search.query, segment, search.term_cut, &search.cancel);
    let blocks: u64 = segments
        .iter()
        .map(|s| u64::from(s.maxima.num_blocks))
        .sum();
    let bounded: Vec<Result<Bounded>> =
        if search.threads > 1 && segments.len() > 1 && blocks >= PARALLEL_BOUNDING {
            segments.par_iter().map(bound).collect()
        } else {
            segments.iter().map(bound).collect()
        };
    let mut parts = Vec::with_capacity(segments.len());
    let mut unpruned = Vec::new();
    for (segment, b) in segments.iter().zip(bounded) {
        search.stats.segments += 1;
        match b? {
            Bounded::Blocks(part) => {
                search.stats.blocks_candidate += part.candidates;
                parts.push(*part);
            }
            Bounded::Wide => super::pruned::search_segment(search, segment)?,
            Bounded::Unpruned => {
                let blocks = u64::from(segment.maxima.num_blocks);
                search.stats.blocks_candidate += blocks;
                search.stats.blocks_scored += blocks;
                search.stats.segments_unpruned += 1;
                unpruned.push((segment, Vec::new()));
            }
            Bounded::Empty => {}
        }
    }
    super::exhaustive::score_segments(search, &unpruned)?;
    if parts.is_empty() {
        return Ok(());
    }
    // The FIRST_BLOCKS best blocks of all segments, from each segment's best; their bounds
    // are cleared so that the heap leaves them out.
    let mut head: Vec<Entry> = parts
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            p.head
                .iter()
                .map(move |&r| (p.ub[r as usize], Reverse(i as u32), Reverse(r)))
        })
        .collect();
    head.sort_unstable_by(|a, b| b.cmp(a));
    head.truncate(FIRST_BLOCKS);
    for &(_, Reverse(i), Reverse(r)) in &head {
        parts[i as usize].ub[r as usize] = 0;
    }
    let shared = AtomicU64::new(0);
    let acc_len = parts.iter().map(|p| p.acc_len()).max().unwrap_or(0);
    let cancel = search.cancel.clone();
    let mut main = Worker {
        parts: &parts,
        factor: search.factor,
        cancel: &cancel,
        top: std::mem::replace(&mut search.top, TopK::new(0)),
        stats: SearchStats::default(),
        acc: vec![0; acc_len],
        spans: Vec::new(),
        shared: None,
    };
    let result = (|| {
        main.score_entries(&mut head)?;
        // The others that can still reach θ, popped best bound first until one cannot; a
        // segment where too many can is scored term-at-a-time instead.
        let lowest = main.lowest_kept().max(1);
        let mut rest = Vec::new();
        let mut unpruned = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let before = rest.len();
            p.reaching(i as u32, lowest, &mut rest);
            if p.prunes_too_little(rest.len() - before) {
                rest.truncate(before);
                // Its first blocks are scored already.
                let done: Vec<u32> = head
                    .iter()
                    .filter(|e| e.1.0 == i as u32)
                    .map(|e| e.2.0)
                    .collect();
                main.stats.blocks_scored += p.candidates.saturating_sub(done.len() as u64);
                main.stats.segments_unpruned += 1;
                unpruned.push((p.segment, done));
            }
        }
        if !unpruned.is_empty() {
            // Term-at-a-time takes the search's own top k.
            std::mem::swap(&mut search.top, &mut main.top);
            let scored = super::exhaustive::score_segments(search, &unpruned);
            std::mem::swap(&mut search.top, &mut main.top);
            scored?;
        }
        let docs_left: u64 = rest
            .iter()
            .map(|e| 1u64 << parts[e.1.0 as usize].segment.maxima.shift)
            .sum();
        let rest = Mutex::new(BinaryHeap::from(rest));
        if search.threads <= 1 || docs_left < search.share_from_docs {
            return main.drain(&rest);
        }
        // Several threads pop from the same heap, each into its own top k; the best k-th
        // score any of them holds is shared (a valid threshold for all: the final k-th score
        // can only be higher), and the tops are merged at the end.
        shared.store(main.top.threshold().unwrap_or(0), Ordering::Relaxed);
        main.shared = Some(&shared);
        let k = main.top.k();
        let mut workers: Vec<Worker> = (1..search.threads.min(MAX_SHARING))
            .map(|_| Worker {
                top: TopK::new(k),
                acc: vec![0; acc_len],
                ..main.fork()
            })
            .collect();
        let results: Vec<Result<()>> = std::iter::once(&mut main)
            .chain(workers.iter_mut())
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|w| w.drain(&rest))
            .collect();
        for w in workers {
            main.stats.add(&w.stats);
            for d in w.top.into_sorted() {
                main.top.push(d);
            }
        }
        results.into_iter().collect()
    })();
    search.stats.add(&main.stats);
    search.top = main.top;
    result
}

/// One segment's share of a search: its query terms, the bound of every block, and what
/// scoring its blocks needs.
struct SegmentBounds<'a> {
    segment: &'a Segment<'a>,
    /// Query terms present in the segment, with their weights.
    terms: Vec<QueryTerm<'a>>,
    /// Where rare terms' postings lie (terms layout).
    table: SpanTable,
    /// The documents' vectors and the query's weights for them (documents layout).
    docs: Option<(&'a DocVectors, QueryWeights)>,
    ub: Vec<u32>,
    /// Best bound per [`CHUNK`] blocks.
    chunk_max: Vec<u32>,
    /// The segment's best blocks, to score first.
    head: Vec<u32>,
    /// Blocks with a bound above 0.
    candidates: u64,
}

/// A segment bounded for a query.
enum Bounded<'a> {
    /// Its bounds.
    Blocks(Box<SegmentBounds<'a>>),
    /// No query term is in it.
    Empty,
    /// Its bounds could overflow 32 bits (impacts in the tens of thousands on both sides): it
    /// takes the 64-bit path ([`super::pruned`]).
    Wide,
    /// The query touches every document several times ([`touches_every_doc`]): it is scored
    /// term-at-a-time.
    Unpruned,
}

impl<'a> SegmentBounds<'a> {
    /// Bounds every block of `segment` for `query`, leaving out the terms [`cut_terms`]
    /// picks for `term_cut`.
    fn bound(
        query: &QuantizedVector,
        segment: &'a Segment<'a>,
        term_cut: f64,
        cancel: &Cancel,
    ) -> Result<Bounded<'a>> {
        cancel.check()?;
        if segment.allowed.is_some_and(AllowedDocs::is_empty) {
            // A segment of the other modality, for a search filtered to one.
            return Ok(Bounded::Empty);
        }
        let maxima = segment.maxima;
        let found: Vec<(u32, &ForwardTerm)> = query
            .iter()
            .filter_map(|(t, q)| maxima.term(t.as_bytes()).map(|m| (q, m)))
            .collect();
        if found.is_empty() {
            return Ok(Bounded::Empty);
        }
        let largest: u64 = found
            .iter()
            .map(|(q, m)| u64::from(*q) * u64::from(m.largest_bound()))
            .sum();
        if largest > u64::from(u32::MAX) {
            return Ok(Bounded::Wide);
        }
        // Under a filter that allows part of the segment, bounding pays whatever the query:
        // blocks with no allowed document are skipped unread.
        if segment.allowed.is_none() && touches_every_doc(&found, segment.reader.max_doc()) {
            return Ok(Bounded::Unpruned);
        }
        let cut = cut_terms(&found, term_cut, maxima.docs.is_some());
        let mut ub = vec![0u32; maxima.num_blocks as usize];
        let mut table = SpanTable::default();
        table.reset(ub.len());
        let docs = maxima.docs.as_ref();
        let inverted = segment.reader.inverted_index(segment.impacts)?;
        // Terms layout: terms without bound codes are bounded from their postings here, and
        // where each block's postings lie is recorded on the way (see `SpanTable`). Documents
        // layout: from their tantivy postings, and nothing to record (scoring reads the
        // documents).
        let coded: Vec<(u32, &ForwardTerm)> = found
            .iter()
            .zip(&cut)
            .filter(|((_, m), cut)| m.has_bound_bytes() && !**cut)
            .map(|(f, _)| *f)
            .collect();
        crate::forward_index::add_code_bounds_u32(&coded, &mut ub, cancel)?;
        let mut terms = Vec::with_capacity(found.len());
        for ((q, m), cut) in found.into_iter().zip(cut) {
            // A query of thousands of terms takes a while to bound: stop early when asked.
            cancel.check()?;
            let slot = if m.has_bound_bytes() || cut {
                None
            } else if docs.is_some() {
                m.add_bounds_u32(q, &mut ub, &inverted)?;
                None
            } else {
                Some(table.add(m, q, &mut ub))
            };
            terms.push(QueryTerm { q, m, slot });
        }
        if let Some(allowed) = segment.allowed {
            allowed.clear_blocks_without_any(&mut ub, maxima.shift);
        }
        let (chunk_max, candidates) = chunk_maxima(&ub);
        let head = best_of_best_chunks(&ub, &chunk_max);
        let docs = docs.map(|d| {
            let ords: Vec<(u32, u32)> = terms.iter().map(|t| (t.m.ord, t.q)).collect();
            (d, QueryWeights::new(d.table_len(), &ords))
        });
        let part = Self {
            segment,
            terms,
            table,
            docs,
            ub,
            chunk_max,
            head,
            candidates,
        };
        Ok(Bounded::Blocks(Box::new(part)))
    }

    /// Scores per block of the terms layout's accumulator.
    fn acc_len(&self) -> usize {
        if self.docs.is_some() {
            0
        } else {
            1 << self.segment.maxima.shift
        }
    }

    /// Whether scoring `reaching` of this segment's blocks one by one would cost more than
    /// scoring the whole segment term-at-a-time ([`super::exhaustive`]): a block's scoring
    /// locates each query term's postings in it (terms layout) or reads every non-zero of its
    /// documents (documents layout), where term-at-a-time reads each term's postings straight
    /// through.
    fn prunes_too_little(&self, reaching: usize) -> bool {
        let fraction = if self.docs.is_some() {
            UNPRUNED_DOCUMENTS
        } else {
            UNPRUNED_TERMS
        };
        reaching as f64 > fraction * self.candidates as f64
    }

    /// Appends the blocks whose bound is at least `lowest` (≥ 1), looking only inside the
    /// chunks whose best bound is.
    fn reaching(&self, part: u32, lowest: u64, out: &mut Vec<Entry>) {
        let Ok(lowest) = u32::try_from(lowest) else {
            return;
        };
        let (chunks, rest) = self.ub.as_chunks::<CHUNK>();
        for (c, chunk) in chunks.iter().enumerate() {
            if self.chunk_max[c] < lowest {
                continue;
            }
            // A bit per block that reaches (compare and mask: the compiler vectorizes it).
            let mut bits = 0u64;
            for (i, &u) in chunk.iter().enumerate() {
                bits |= u64::from(u >= lowest) << i;
            }
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let r = c * CHUNK + i;
                out.push((chunk[i], Reverse(part), Reverse(r as u32)));
            }
        }
        let s = chunks.len() * CHUNK;
        for (i, &u) in rest.iter().enumerate() {
            if u >= lowest {
                out.push((u, Reverse(part), Reverse((s + i) as u32)));
            }
        }
    }
}

/// Which of a segment's query terms (`(q, maxima)`) the bounds leave out for `term_cut` > 0
/// ([`crate::search::SearchOptions::term_cut`]): the lightest by largest contribution `q · largest
/// impact`, as long as theirs add up to at most `term_cut ·` the query's largest possible score.
/// A document whose block is skipped then scores less than the threshold plus what the cut
/// terms can add. In the terms layout only terms with bound codes may be cut (the others'
/// postings are located while they are bounded, and scoring needs them).
fn cut_terms(found: &[(u32, &ForwardTerm)], term_cut: f64, documents: bool) -> Vec<bool> {
    let mut cut = vec![false; found.len()];
    if term_cut <= 0.0 {
        return cut;
    }
    let largest = |i: usize| u64::from(found[i].0) * u64::from(found[i].1.largest_bound());
    let total: u64 = (0..found.len()).map(largest).sum();
    let budget = (term_cut * total as f64) as u64;
    let mut lightest: Vec<usize> = (0..found.len())
        .filter(|&i| documents || found[i].1.has_bound_bytes())
        .collect();
    lightest.sort_unstable_by_key(|&i| (largest(i), i));
    let mut spent = 0u64;
    for i in lightest {
        spent += largest(i);
        if spent > budget {
            break;
        }
        cut[i] = true;
    }
    cut
}

/// Whether the query's postings in a segment of `max_doc` documents are so many that it
/// touches every document several times over: block bounds then add up hundreds of terms'
/// block maxima and sit far above any document's score, so nearly every block would be scored
/// after bounding them all, where term-at-a-time reads each posting once. (A 1,349-term picture
/// against 250,000 captions: 11 postings per caption; 72-100 % of the blocks scored.)
fn touches_every_doc(found: &[(u32, &ForwardTerm)], max_doc: u32) -> bool {
    let postings: u64 = found
        .iter()
        .map(|(_, m)| u64::from(m.term_info.doc_freq))
        .sum();
    postings >= POSTINGS_PER_DOC_UNPRUNED * u64::from(max_doc)
}

/// Blocks per chunk of [`chunk_maxima`].
const CHUNK: usize = 64;

/// The largest bound of every [`CHUNK`] blocks, and how many bounds are not 0 (one pass the
/// compiler vectorizes): picking the best blocks, and those that can still reach θ, then looks
/// only inside the chunks that can hold them.
fn chunk_maxima(ub: &[u32]) -> (Vec<u32>, u64) {
    let (chunks, rest) = ub.as_chunks::<CHUNK>();
    let mut maxima = Vec::with_capacity(chunks.len() + 1);
    let mut nonzero = 0u64;
    // Fixed-size chunks: the compiler unrolls and vectorizes both loops.
    for c in chunks {
        let (mut max, mut count) = (0u32, 0u32);
        for &u in c {
            max = max.max(u);
            count += u32::from(u != 0);
        }
        maxima.push(max);
        nonzero += u64::from(count);
    }
    if !rest.is_empty() {
        maxima.push(rest.iter().fold(0, |m, &u| m.max(u)));
        nonzero += rest.iter().filter(|&&u| u != 0).count() as u64;
    }
    (maxima, nonzero)
}

/// The first blocks to score, to raise θ: the best block of each of the [`FIRST_BLOCKS`] chunks
/// with the best bounds (these hold the best blocks of all), best first. Which blocks come
/// first changes how fast θ rises, never the result.
fn best_of_best_chunks(ub: &[u32], chunk_max: &[u32]) -> Vec<u32> {
    let mut chunks: Vec<u32> = (0..chunk_max.len() as u32)
        .filter(|&c| chunk_max[c as usize] > 0)
        .collect();
    let by_bound = |&c: &u32| (Reverse(chunk_max[c as usize]), c);
    if chunks.len() > FIRST_BLOCKS {
        chunks.select_nth_unstable_by_key(FIRST_BLOCKS, by_bound);
        chunks.truncate(FIRST_BLOCKS);
    }
    chunks.sort_unstable_by_key(by_bound);
    chunks
        .iter()
        .map(|&c| {
            let s = c as usize * CHUNK;
            let m = chunk_max[c as usize];
            let at = ub[s..].iter().position(|&u| u == m).unwrap_or(0);
            (s + at) as u32
        })
        .collect()
}

/// A query term present in the segment.
struct QueryTerm<'a> {
    q: u32,
    m: &'a ForwardTerm,
    /// Its slot in the [`SpanTable`], for a term without bound bytes.
    slot: Option<usize>,
}

/// Where each rare query term's postings lie in every block it occurs in, recorded while its
/// bounds are computed (which walks its postings anyway). Scoring a block then finds them by
/// testing a bit of a table this search just wrote (in cache) instead of searching the term's
/// postings (a cache miss or more per term and block, most of them to learn that the term is
/// absent).
///
/// Per term (slot): a bit per block, a running count of set bits per 64 blocks, and the spans
/// of the blocks whose bit is set, in block order: block `r`'s span is number
/// `count[r / 64] + (set bits of its word below r)`. Work and memory follow the term's blocks
/// and the number of blocks / 64, never the number of blocks itself.
#[derive(Default)]
pub(crate) struct SpanTable {
    words: usize,
    /// Per slot, a bit per block: the term occurs there.
    bits: Vec<u64>,
    /// Per slot and word of `bits`: the set bits of the slot's earlier words.
    before: Vec<u32>,
    /// Per slot, where its spans start in `spans`.
    first: Vec<usize>,
    spans: Vec<(u32, u32)>,
}

impl SpanTable {
    fn reset(&mut self, num_blocks: usize) {
        self.words = num_blocks.div_ceil(64);
        self.bits.clear();
        self.before.clear();
        self.first.clear();
        self.spans.clear();
    }

    /// Adds `q ·` the bounds of a term without bound bytes to `ub`, recording its spans on
    /// the way; returns the term's slot.
    fn add(&mut self, m: &ForwardTerm, q: u32, ub: &mut [u32]) -> usize {
        let slot = self.first.len();
        self.first.push(self.spans.len());
        let base = self.bits.len();
        self.bits.resize(base + self.words, 0);
        let (bits, spans) = (&mut self.bits[base..], &mut self.spans);
        m.add_bounds_u32_marking(q, ub, |block, span| {
            let r = block as usize;
            bits[r / 64] |= 1 << (r % 64);
            spans.push(span);
        });
        let mut count = 0u32;
        for &w in bits.iter() {
            self.before.push(count);
            count += w.count_ones();
        }
        slot
    }

    #[inline]
    fn span(&self, slot: usize, block: u32) -> (u32, u32) {
        let (r, w) = (block as usize % 64, slot * self.words + block as usize / 64);
        let word = self.bits[w];
        if word & (1 << r) == 0 {
            return (0, 0);
        }
        let below = (word & ((1u64 << r) - 1)).count_ones();
        self.spans[self.first[slot] + (self.before[w] + below) as usize]
    }
}

/// One thread's share of a search: its own top k, counters and buffers.
struct Worker<'a> {
    parts: &'a [SegmentBounds<'a>],
    factor: f64,
    cancel: &'a Cancel,
    top: TopK,
    stats: SearchStats,
    /// One score per document of a block (terms layout).
    acc: Vec<u64>,
    /// Postings spans of the batch being scored, block-major (terms layout).
    spans: Vec<(u32, u32)>,
    /// The best k-th score of all workers, when several run.
    shared: Option<&'a AtomicU64>,
}

impl<'a> Worker<'a> {
    /// A worker for the same search, with empty buffers.
    fn fork(&self) -> Self {
        Worker {
            parts: self.parts,
            factor: self.factor,
            cancel: self.cancel,
            top: TopK::new(0),
            stats: SearchStats::default(),
            acc: Vec::new(),
            spans: Vec::new(),
            shared: self.shared,
        }
    }

    /// Whether a block bounded by `bound` cannot enter the top k (exact when `factor` is 1).
    fn skips(&self, bound: u64) -> bool {
        bound < self.lowest_kept()
    }

    /// The lowest bound that can still enter the top k: `⌈θ · factor⌉` for the best k-th score
    /// θ known (0 while there is none), so that skipping is one integer test per block.
    fn lowest_kept(&self) -> u64 {
        let shared = self.shared.map_or(0, |s| s.load(Ordering::Relaxed));
        let theta = self.top.threshold().map_or(shared, |t| t.max(shared));
        if theta == 0 {
            0
        } else {
            (theta as f64 * self.factor).ceil() as u64
        }
    }

    /// Scores blocks popped from `heap`, best bound first, until the best left cannot enter
    /// the top k.
    fn drain(&mut self, heap: &Mutex<BinaryHeap<Entry>>) -> Result<()> {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            batch.clear();
            {
                let mut heap = heap.lock().unwrap_or_else(|p| p.into_inner());
                while batch.len() < BATCH
                    && let Some(&e) = heap.peek()
                    && !self.skips(u64::from(e.0))
                {
                    heap.pop();
                    batch.push(e);
                }
            }
            if batch.is_empty() {
                return Ok(());
            }
            self.score_entries(&mut batch)?;
        }
    }

    /// Scores heap entries, segment by segment (`entries` is reordered).
    fn score_entries(&mut self, entries: &mut [Entry]) -> Result<()> {
        entries.sort_unstable_by_key(|e| (e.1.0, e.2.0));
        // Entries come FIRST_BLOCKS (the first ones) or BATCH (the heap's) at a time.
        const _: () = assert!(FIRST_BLOCKS >= BATCH);
        let mut blocks = [0u32; FIRST_BLOCKS];
        for group in entries.chunk_by(|a, b| a.1 == b.1) {
            for (r, e) in blocks.iter_mut().zip(group) {
                *r = e.2.0;
            }
            for batch in blocks[..group.len()].chunks(BATCH) {
                self.score(&self.parts[group[0].1.0 as usize], batch)?;
            }
        }
        Ok(())
    }

    /// Scores a batch of blocks of one segment.
    fn score(&mut self, part: &SegmentBounds, blocks: &[u32]) -> Result<()> {
        self.cancel.check()?;
        match &part.docs {
            Some((docs, weights)) => self.score_documents(part, docs, weights, blocks),
            None => self.score_postings(part, blocks),
        }
        self.share_threshold();
        Ok(())
    }

    /// [`Self::score`] in the terms layout: locates and prefetches every (block, term) span
    /// first, then accumulates and collects block by block.
    fn score_postings(&mut self, part: &SegmentBounds, blocks: &[u32]) {
        let terms = &part.terms;
        // Spans are located in two passes (see `ForwardTerm::locate`), then prefetched.
        self.spans.clear();
        for &r in blocks {
            for t in terms {
                self.spans.push(match t.slot {
                    Some(slot) => part.table.span(slot, r),
                    None => t.m.locate(r),
                });
            }
        }
        for (&r, spans) in blocks.iter().zip(self.spans.chunks_mut(terms.len())) {
            for (t, span) in terms.iter().zip(spans) {
                if t.slot.is_none() {
                    *span = t.m.span_within(r, *span);
                }
                t.m.postings.prefetch(*span);
            }
        }
        let segment = part.segment;
        let shift = segment.maxima.shift;
        let max_doc = segment.reader.max_doc();
        let acc = &mut self.acc[..1 << shift];
        for (i, &block) in blocks.iter().enumerate() {
            let spans = &self.spans[i * terms.len()..(i + 1) * terms.len()];
            for (t, &span) in terms.iter().zip(spans) {
                self.stats.postings_scored += t.m.accumulate(span, u64::from(t.q), acc);
            }
            self.stats.blocks_scored += 1;
            let start = block << shift;
            for (i, slot) in acc.iter_mut().enumerate() {
                let score = std::mem::take(slot);
                if score == 0 || self.top.falls_short(score) {
                    continue;
                }
                let doc = start + i as u32;
                if doc >= max_doc || !segment.returns(doc) {
                    continue;
                }
                self.top.push(ScoredDoc {
                    segment_ord: segment.ord,
                    doc,
                    score,
                });
            }
        }
    }

    /// [`Self::score`] in the documents layout: each document of the blocks scored from its
    /// vector.
    fn score_documents(
        &mut self,
        part: &SegmentBounds,
        docs: &DocVectors,
        weights: &QueryWeights,
        blocks: &[u32],
    ) {
        let segment = part.segment;
        let shift = segment.maxima.shift;
        let max_doc = segment.reader.max_doc();
        for &r in blocks {
            docs.prefetch(r << shift, ((r + 1) << shift).min(max_doc));
        }
        let mut scores = [0u32; 1 << crate::forward_index::MAX_BLOCK_SHIFT];
        for &block in blocks {
            let (start, end) = (block << shift, ((block + 1) << shift).min(max_doc));
            self.stats.postings_scored += docs.non_zeros(start, end);
            docs.score_docs(start, end, weights, &mut scores);
            for (doc, &score) in (start..end).zip(&scores) {
                let score = u64::from(score);
                if score == 0 || self.top.falls_short(score) {
                    continue;
                }
                if segment.returns(doc) {
                    self.top.push(ScoredDoc {
                        segment_ord: segment.ord,
                        doc,
                        score,
                    });
                }
            }
            self.stats.blocks_scored += 1;
        }
    }

    /// Makes this worker's k-th score known to the others, when several run.
    fn share_threshold(&self) {
        if let (Some(shared), Some(t)) = (self.shared, self.top.threshold()) {
            shared.fetch_max(t, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
