//! The dense fallback: one L2-normalised embedding per document, searched by cosine similarity.
//!
//! Vectors are stored with the document (a stored bytes field of the tantivy index, little-endian
//! f32), so adds, replaces, deletes and commits stay atomic with the sparse impacts. At search
//! time each segment's vectors are loaded once (cached by segment id, like the pruning maxima):
//! small segments are scanned exactly; segments of at least [`DenseParams::hnsw_min_docs`]
//! documents get an HNSW graph (`hnsw_rs`), searched with an `ef` of several times k and the
//! filter (deleted documents, metadata, modality) applied inside the graph walk.
//!
//! Like Lucene's per-segment HNSW, graphs are rebuilt when segments merge and are kept in
//! memory only (rebuilt when a collection is opened).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use hnsw_rs::hnsw::Hnsw;
use hnsw_rs::prelude::Distance;
use lexlip_proto::DenseVector;
use tantivy::index::SegmentId;
use tantivy::schema::Value;
use tantivy::{SegmentReader, TantivyDocument};

use crate::error::{IndexError, Result};
use crate::schema::Fields;
use crate::search::filter::AllowedDocs;

/// Tuning of the dense index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenseParams {
    /// Segments with fewer documents are scanned exactly (a flat scan of 20k × 512 floats is
    /// about as fast as a graph walk and has recall 1).
    pub hnsw_min_docs: usize,
    /// HNSW out-degree per layer.
    pub max_connections: usize,
    pub ef_construction: usize,
    /// Search beam: `max(ef_search, 4·k)`.
    pub ef_search: usize,
}

impl Default for DenseParams {
    fn default() -> Self {
        Self {
            hnsw_min_docs: 20_000,
            max_connections: 16,
            ef_construction: 200,
            ef_search: 64,
        }
    }
}

/// Encodes a vector for the stored field.
pub fn to_bytes(v: &DenseVector) -> Vec<u8> {
    v.as_slice().iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(bytes: &[u8], dim: usize) -> Result<&[u8]> {
    if bytes.len() != dim * 4 {
        return Err(IndexError::CorruptDocument(format!(
            "dense vector of {} bytes, expected {} (dimension {dim})",
            bytes.len(),
            dim * 4
        )));
    }
    Ok(bytes)
}

/// Adds a document's dense vector to its tantivy document (when the schema has the field).
pub(crate) fn add_to_doc(t: &mut TantivyDocument, fields: &Fields, v: Option<&DenseVector>) {
    if let (Some(field), Some(v)) = (fields.dense, v) {
        t.add_bytes(field, &to_bytes(v));
    }
}

/// Reads the dense vector of a stored document, if it has one.
pub(crate) fn from_doc(t: &TantivyDocument, fields: &Fields) -> Option<Vec<f32>> {
    let field = fields.dense?;
    let bytes = t.get_first(field)?.as_bytes()?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Cosine distance for unit vectors, `1 - a·b`, clamped at 0 (rounding can push `a·b` just over
/// 1; hnsw_rs's own `DistDot` asserts on that).
#[derive(Debug, Default, Clone, Copy)]
struct CosineDistance;

impl Distance<f32> for CosineDistance {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - dot(a, b)).max(0.0)
    }
}

/// Lanes of [`dot`]'s partial sums: independent accumulators the compiler can keep in one SIMD
/// register (a single running sum is a chain it may not reorder, so it stays scalar).
const LANES: usize = 8;

#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The threads HNSW graphs are built on, a rayon pool of their own (`dense-graph-N`). On
/// rayon's global pool, a graph of a million vectors keeps every worker busy for minutes, and
/// whatever else uses that pool waits behind it: a server building its graphs in the background
/// timed its text searches out, their tokenizer queued on the same workers. `None` when no
/// thread can be started (the graph is then built on the global pool, as before).
fn graph_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            // As many as the global pool (not `RAYON_NUM_THREADS`, which the binary sets to
            // candle's count of physical cores).
            .num_threads(rayon::current_num_threads())
            .thread_name(|i| format!("dense-graph-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// The dense vectors of one segment, row `doc` at `doc·dim`.
pub struct SegmentDense {
    dim: usize,
    vectors: Vec<f32>,
    present: Vec<bool>,
    /// Every document of the segment has a vector (then an unfiltered graph walk checks none).
    all_present: bool,
    graph: Option<Hnsw<'static, f32, CosineDistance>>,
}

impl std::fmt::Debug for SegmentDense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentDense")
            .field("dim", &self.dim)
            .field("docs", &self.present.len())
            .field("graph", &self.graph.is_some())
            .finish()
    }
}

impl SegmentDense {
    /// Loads every stored vector of a segment (deleted documents included: they are filtered at
    /// search time) and builds its graph when the segment is large enough.
    pub fn load(
        reader: &SegmentReader,
        fields: &Fields,
        dim: usize,
        params: &DenseParams,
    ) -> Result<Self> {
        let max_doc = reader.max_doc() as usize;
        let mut vectors = vec![0f32; max_doc * dim];
        let mut present = vec![false; max_doc];
        if let Some(field) = fields.dense {
            let store = reader.get_store_reader(0)?;
            for doc in 0..max_doc as u32 {
                let t: TantivyDocument = store.get(doc)?;
                if let Some(bytes) = t.get_first(field).and_then(|v| v.as_bytes()) {
                    let bytes = from_bytes(bytes, dim)?;
                    let row = &mut vectors[doc as usize * dim..(doc as usize + 1) * dim];
                    for (x, c) in row.iter_mut().zip(bytes.chunks_exact(4)) {
                        *x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                    present[doc as usize] = true;
                }
            }
        }
        let count = present.iter().filter(|p| **p).count();
        let graph = (count >= params.hnsw_min_docs).then(|| {
            let layers = 16.min(((count as f32).ln().ceil() as usize).max(1));
            let graph = Hnsw::new(
                params.max_connections,
                count,
                layers,
                params.ef_construction,
                CosineDistance,
            );
            let rows: Vec<(&[f32], usize)> = (0..max_doc)
                .filter(|&d| present[d])
                .map(|d| (&vectors[d * dim..(d + 1) * dim], d))
                .collect();
            match graph_pool() {
                Some(pool) => pool.install(|| graph.parallel_insert_slice(&rows)),
                None => graph.parallel_insert_slice(&rows),
            }
            graph
        });
        Ok(Self {
            dim,
            vectors,
            all_present: count == present.len(),
            present,
            graph,
        })
    }

    pub fn has_graph(&self) -> bool {
        self.graph.is_some()
    }

    /// Heap bytes of the vectors (the graph adds roughly `2·max_connections` ids per vector).
    pub fn heap_bytes(&self) -> usize {
        self.vectors.len() * 4 + self.present.len()
    }

    fn row(&self, doc: usize) -> &[f32] {
        &self.vectors[doc * self.dim..(doc + 1) * self.dim]
    }

    /// The best `k` documents of this segment for a unit `query`, as (doc, cosine).
    /// `accept(doc)` says whether a document is live and passes the filter; `None`: every
    /// document with a vector is (the graph walk then checks nothing per node).
    fn search(
        &self,
        query: &[f32],
        k: usize,
        exact: bool,
        params: &DenseParams,
        accept: Option<&dyn Fn(u32) -> bool>,
    ) -> Vec<(u32, f32)> {
        let ok = |d: usize| self.present[d] && accept.is_none_or(|a| a(d as u32));
        match (&self.graph, exact) {
            (Some(graph), false) => {
                let filter = |id: &usize| ok(*id);
                let every = accept.is_none() && self.all_present;
                let filter: Option<&dyn hnsw_rs::filter::FilterT> =
                    if every { None } else { Some(&filter) };
                let ef = params.ef_search.max(4 * k);
                graph
                    .search_filter(query, k, ef, filter)
                    .into_iter()
                    // Recompute from the stored row: the graph's distance is clamped.
                    .map(|n| (n.d_id as u32, dot(query, self.row(n.d_id))))
                    .collect()
            }
            _ => {
                let mut best: Vec<(u32, f32)> = (0..self.present.len())
                    .filter(|&d| ok(d))
                    .map(|d| (d as u32, dot(query, self.row(d))))
                    .collect();
                let order =
                    |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
                if best.len() > k && k > 0 {
                    best.select_nth_unstable_by(k - 1, order);
                }
                best.truncate(k);
                best.sort_by(order);
                best
            }
        }
    }
}

/// A dense hit: segment ordinal, doc id in the segment, cosine similarity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenseHit {
    pub segment_ord: u32,
    pub doc: u32,
    pub score: f32,
}

/// One segment's place in the cache: filled by the first caller, which holds it locked while
/// loading, so a search and the background warm-up never build the same graph twice.
type Slot = Arc<Mutex<Option<Arc<SegmentDense>>>>;

/// Per-segment dense data of a collection, loaded on first use (or by a warm-up) and kept while
/// the segment lives.
#[derive(Debug, Default)]
pub(crate) struct DenseCache {
    segments: Mutex<HashMap<SegmentId, Slot>>,
}

impl DenseCache {
    pub(crate) fn get_or_load(
        &self,
        reader: &SegmentReader,
        fields: &Fields,
        dim: usize,
        params: &DenseParams,
    ) -> Result<Arc<SegmentDense>> {
        let slot = self
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reader.segment_id())
            .or_default()
            .clone();
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let loaded = Arc::new(SegmentDense::load(reader, fields, dim, params)?);
        *slot = Some(loaded.clone());
        Ok(loaded)
    }

    /// Whether every segment of `live` is loaded (none is missing or being built).
    pub(crate) fn holds(&self, live: &[SegmentId]) -> bool {
        let segments = self.segments.lock().unwrap_or_else(|p| p.into_inner());
        live.iter().all(|id| {
            segments
                .get(id)
                .is_some_and(|slot| slot.try_lock().is_ok_and(|s| s.is_some()))
        })
    }

    /// Drops segments that no longer exist (merged away).
    pub(crate) fn retain(&self, live: &[SegmentId]) {
        self.segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| live.contains(id));
    }
}

/// Top-k over segments by cosine similarity; ties by document order. `allowed[ord]`: the
/// documents of segment `ord` the filter allows (None: all).
pub(crate) fn search(
    segments: &[(&SegmentReader, Arc<SegmentDense>)],
    query: &DenseVector,
    k: usize,
    exact: bool,
    params: &DenseParams,
    allowed: &[Option<AllowedDocs>],
) -> Vec<DenseHit> {
    let q = query.normalized();
    let mut all = Vec::new();
    for (ord, (reader, dense)) in segments.iter().enumerate() {
        let alive = reader.alive_bitset();
        // A segment the filter allows nothing of is skipped whole: the filtered graph walk
        // would visit every node of it looking for k that pass (a segment of the other
        // modality, since segments hold one).
        let allowed = allowed[ord].as_ref();
        if allowed.is_some_and(AllowedDocs::is_empty) {
            continue;
        }
        let accept =
            |d: u32| alive.is_none_or(|a| a.is_alive(d)) && allowed.is_none_or(|a| a.contains(d));
        let accept: Option<&dyn Fn(u32) -> bool> =
            (alive.is_some() || allowed.is_some()).then_some(&accept);
        for (doc, score) in dense.search(q.as_slice(), k, exact, params, accept) {
            all.push(DenseHit {
                segment_ord: ord as u32,
                doc,
                score,
            });
        }
    }
    all.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.segment_ord.cmp(&b.segment_ord))
            .then(a.doc.cmp(&b.doc))
    });
    all.truncate(k);
    all
}

#[cfg(test)]
mod tests {
    use super::dot;
    use proptest::prelude::*;

    proptest! {
        /// The lane-split dot product equals the plain one, for every length (tails included).
        #[test]
        fn dot_equals_the_plain_sum(pairs in proptest::collection::vec((-1f32..1.0, -1f32..1.0), 0..70)) {
            let (a, b): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let plain: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            prop_assert!((f64::from(dot(&a, &b)) - plain).abs() < 1e-4);
        }
    }
}
