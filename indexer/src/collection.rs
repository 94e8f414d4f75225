//! A collection: a directory holding a tantivy index of impacts and its manifest.
//!
//! ```no_run
//! use lexlip_index::{Collection, CollectionSettings, SearchOptions};
//! use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::path::Path::new("/tmp/demo");
//! let c = Collection::create(dir, TermSpace::from_tokens("free", []), CollectionSettings::default(), None)?;
//! let v = QuantizedVector::new([("dog", 120u64), ("grass", 80)])?;
//! c.add(Document::new(DocId::new("a")?, Modality::Image), v.clone())?;
//! c.commit()?;
//! let hits = c.snapshot()?.search(&v, &SearchOptions::top(10))?;
//! assert_eq!(hits.hits[0].score, 120 * 120 + 80 * 80);
//! # Ok(()) }
//! ```

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use lexlip_proto::api::Filter;
use lexlip_proto::api::{Hit, TermContribution};
use lexlip_proto::{
    DenseVector, DocId, Document, Modality, QuantizedVector, SparseVector, TermSpace,
};
use tantivy::collector::Count;
use tantivy::directory::MmapDirectory;
use tantivy::index::SegmentId;
use tantivy::merge_policy::LogMergePolicy;
use tantivy::query::TermQuery;
use tantivy::schema::{IndexRecordOption, OwnedValue, Value};
use tantivy::{
    DocAddress, DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TERMINATED,
    TantivyDocument, Term,
};

use crate::dense::{DenseCache, DenseHit, DenseParams};
use crate::error::{IndexError, Result};
use crate::manifest::{CollectionSettings, Manifest};
use crate::maxima::SegmentMaxima;
use crate::schema::{self, Fields};
use crate::search::filter::CompiledFilter;
use crate::search::{Algorithm, ScoredDoc, SearchOptions, SearchStats, TopK, exhaustive, pruned};
use crate::segment_builder::{PendingDoc, write_segment};

/// The vocabulary copy kept inside a collection created with one.
pub const VOCAB_FILE: &str = "vocab.txt";
/// tantivy files live in this sub-directory.
const INDEX_DIR: &str = "index";
/// Pending documents are written as a segment once this many accumulate.
pub const DEFAULT_FLUSH_DOCS: usize = 100_000;
const WRITER_HEAP: usize = 64 << 20;

/// A document's vector as supplied: float weights (quantized with the collection's scale) or
/// integer impacts.
#[derive(Debug, Clone)]
pub enum VectorInput {
    Weights(SparseVector),
    Impacts(QuantizedVector),
}

struct WriterState {
    writer: IndexWriter,
    pending: Vec<PendingDoc>,
    /// Position in `pending` of each pending id (a re-add replaces in place).
    pending_ids: HashMap<String, usize>,
    /// Ids written into segments since the reader last reloaded (so `committed_contains`,
    /// which looks at the reader's view, cannot see them).
    flushed_ids: HashSet<String>,
    /// Ids whose committed version was deleted since the reader last reloaded.
    deleted_ids: HashSet<String>,
    /// A delete was issued since the last commit. tantivy applies a queued delete to every
    /// segment added with `add_segment` after it (such segments carry no per-document
    /// opstamps), so a new segment is only added once queued deletes are committed.
    deletes_queued: bool,
}

/// An open collection. Searches and writes can run concurrently from several threads; searches
/// see the last commit.
pub struct Collection {
    dir: PathBuf,
    manifest: Manifest,
    vocab: Option<HashSet<String>>,
    index: Index,
    fields: Fields,
    reader: IndexReader,
    writer: Mutex<Option<WriterState>>,
    maxima: Mutex<HashMap<SegmentId, Arc<SegmentMaxima>>>,
    dense: Arc<DenseCache>,
    dense_params: DenseParams,
    flush_docs: usize,
}

impl std::fmt::Debug for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection")
            .field("dir", &self.dir)
            .field("manifest", &self.manifest)
            .finish()
    }
}

impl Collection {
    /// Creates a new collection in `dir` (which must not hold one). `vocab`, when given, is the
    /// list of tokens of the term space in id order: documents with other terms are refused.
    pub fn create(
        dir: &Path,
        term_space: TermSpace,
        settings: CollectionSettings,
        vocab: Option<&[String]>,
    ) -> Result<Self> {
        settings.validate()?;
        if Manifest::path(dir).exists() {
            return Err(IndexError::AlreadyExists(dir.to_path_buf()));
        }
        let index_dir = dir.join(INDEX_DIR);
        std::fs::create_dir_all(&index_dir).map_err(|e| IndexError::io(&index_dir, e))?;
        let (schema, _) = schema::build();
        let mmap = MmapDirectory::open(&index_dir).map_err(|e| IndexError::NotACollection {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        Index::create(mmap, schema, tantivy::IndexSettings::default())?;
        if let Some(tokens) = vocab {
            let path = dir.join(VOCAB_FILE);
            std::fs::write(&path, tokens.join("\n")).map_err(|e| IndexError::io(&path, e))?;
        }
        // The manifest is written last: a directory without one is not a collection.
        Manifest::new(term_space, settings).write(dir)?;
        Self::open(dir)
    }

    /// Opens an existing collection.
    pub fn open(dir: &Path) -> Result<Self> {
        let manifest = Manifest::read(dir)?;
        let vocab_path = dir.join(VOCAB_FILE);
        let vocab = if vocab_path.exists() {
            let text =
                std::fs::read_to_string(&vocab_path).map_err(|e| IndexError::io(&vocab_path, e))?;
            Some(text.lines().map(str::to_string).collect())
        } else {
            None
        };
        let index =
            Index::open_in_dir(dir.join(INDEX_DIR)).map_err(|e| IndexError::NotACollection {
                path: dir.to_path_buf(),
                reason: format!("cannot open its tantivy index: {e}"),
            })?;
        let fields =
            schema::fields_of(&index.schema()).map_err(|e| IndexError::NotACollection {
                path: dir.to_path_buf(),
                reason: format!("unexpected schema: {e}"),
            })?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
            vocab,
            index,
            fields,
            reader,
            writer: Mutex::new(None),
            maxima: Mutex::new(HashMap::new()),
            dense: Arc::new(DenseCache::default()),
            dense_params: DenseParams::default(),
            flush_docs: DEFAULT_FLUSH_DOCS,
        })
    }

    /// Opens a collection and checks that it was built for `term_space`.
    pub fn open_for(dir: &Path, term_space: &TermSpace) -> Result<Self> {
        let c = Self::open(dir)?;
        c.check_term_space(term_space)?;
        Ok(c)
    }

    /// Fails with an error naming both term spaces when they differ.
    pub fn check_term_space(&self, term_space: &TermSpace) -> Result<()> {
        if self.manifest.term_space.same_vocabulary(term_space) {
            Ok(())
        } else {
            Err(IndexError::TermSpaceMismatch {
                path: self.dir.clone(),
                collection: Box::new(self.manifest.term_space.clone()),
                given: Box::new(term_space.clone()),
            })
        }
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Tuning of the dense fallback index (takes effect for segments loaded afterwards).
    pub fn set_dense_params(&mut self, params: DenseParams) {
        self.dense_params = params;
    }

    /// Checks a dense vector against the collection's dense dimension.
    pub fn check_dense(&self, v: &DenseVector) -> Result<()> {
        match self.manifest.settings.dense_dim {
            None => Err(IndexError::InvalidSetting(
                "this collection has dense search off (created without a dense dimension); \
                 recreate it with dense on to store dense vectors"
                    .into(),
            )),
            Some(dim) if dim != v.dim() => Err(IndexError::InvalidSetting(format!(
                "dense vector has dimension {}, the collection expects {dim}",
                v.dim()
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Documents written into a segment once this many are pending (default 100,000).
    pub fn set_flush_docs(&mut self, n: usize) {
        self.flush_docs = n.max(1);
    }

    /// Turns an input vector into the impacts this collection stores: quantized with its scale,
    /// sparsified to its top-K, and checked against its vocabulary.
    pub fn prepare_vector(&self, input: VectorInput) -> Result<QuantizedVector> {
        let settings = &self.manifest.settings;
        let mut q = match input {
            VectorInput::Weights(w) => w
                .try_quantize(settings.scale)
                .map_err(|e| IndexError::InvalidSetting(e.to_string()))?,
            VectorInput::Impacts(q) => q,
        };
        if let Some(k) = settings.top_k_terms {
            q = q.top_k(k);
        }
        self.check_vocabulary(&q)?;
        Ok(q)
    }

    /// Fails on the first term outside the collection's vocabulary (if it has one).
    pub fn check_vocabulary(&self, q: &QuantizedVector) -> Result<()> {
        if let Some(vocab) = &self.vocab
            && let Some((term, _)) = q.iter().find(|(t, _)| !vocab.contains(*t))
        {
            return Err(IndexError::UnknownTerm {
                term: term.to_string(),
                term_space: self.manifest.term_space.to_string(),
            });
        }
        Ok(())
    }

    fn writer(&self) -> Result<MutexGuard<'_, Option<WriterState>>> {
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let writer: IndexWriter = self.index.writer_with_num_threads(1, WRITER_HEAP)?;
            writer.set_merge_policy(Box::new(LogMergePolicy::default()));
            *guard = Some(WriterState {
                writer,
                pending: Vec::new(),
                pending_ids: HashMap::new(),
                flushed_ids: HashSet::new(),
                deleted_ids: HashSet::new(),
                deletes_queued: false,
            });
        }
        Ok(guard)
    }

    /// Adds a document, replacing any document with the same id. Visible after [`Self::commit`].
    pub fn add(&self, doc: Document, impacts: QuantizedVector) -> Result<()> {
        self.add_with_dense(doc, impacts, None)
    }

    /// [`Self::add`] with the document's dense vector (L2-normalised before it is stored), for
    /// collections with dense search on.
    pub fn add_with_dense(
        &self,
        doc: Document,
        impacts: QuantizedVector,
        dense: Option<DenseVector>,
    ) -> Result<()> {
        self.check_vocabulary(&impacts)?;
        if let Some(v) = &dense {
            self.check_dense(v)?;
        }
        let dense = dense.map(|v| v.normalized());
        let mut guard = self.writer()?;
        let Some(state) = guard.as_mut() else {
            return Err(IndexError::ReadOnly);
        };
        let id = doc.id.as_str().to_string();
        if let Some(&i) = state.pending_ids.get(&id) {
            state.pending[i] = PendingDoc {
                doc,
                impacts,
                dense,
            };
            return Ok(());
        }
        if state.flushed_ids.contains(&id) || self.committed_contains(state, &id)? {
            Self::queue_delete(state, self.fields, &id);
        }
        state.pending_ids.insert(id, state.pending.len());
        state.pending.push(PendingDoc {
            doc,
            impacts,
            dense,
        });
        if state.pending.len() >= self.flush_docs {
            self.flush(state)?;
        }
        Ok(())
    }

    /// Deletes the document with this id (committed or pending). Returns whether one existed.
    pub fn delete(&self, id: &DocId) -> Result<bool> {
        let mut guard = self.writer()?;
        let Some(state) = guard.as_mut() else {
            return Err(IndexError::ReadOnly);
        };
        let mut existed = false;
        if let Some(i) = state.pending_ids.remove(id.as_str()) {
            state.pending.swap_remove(i);
            if let Some(moved) = state.pending.get(i) {
                state
                    .pending_ids
                    .insert(moved.doc.id.as_str().to_string(), i);
            }
            existed = true;
        }
        if state.flushed_ids.remove(id.as_str()) || self.committed_contains(state, id.as_str())? {
            Self::queue_delete(state, self.fields, id.as_str());
            existed = true;
        }
        Ok(existed)
    }

    /// Deletes every written version of `id` at the next commit.
    fn queue_delete(state: &mut WriterState, fields: Fields, id: &str) {
        state
            .writer
            .delete_term(Term::from_field_text(fields.id, id));
        state.deleted_ids.insert(id.to_string());
        state.deletes_queued = true;
    }

    fn flush(&self, state: &mut WriterState) -> Result<()> {
        if state.pending.is_empty() {
            return Ok(());
        }
        if state.deletes_queued {
            // Apply queued deletes before the new segment exists (see `deletes_queued`). Readers
            // reload manually, so none sees this intermediate commit.
            state.writer.commit()?;
            state.deletes_queued = false;
        }
        let pending = std::mem::take(&mut state.pending);
        state.pending_ids.clear();
        if let Some(meta) = write_segment(&self.index, &self.fields, &pending)? {
            state.writer.add_segment(meta)?;
            state
                .flushed_ids
                .extend(pending.iter().map(|p| p.doc.id.as_str().to_string()));
            // Freeing a large batch (~50 strings per document) takes a while: off this thread.
            if pending.len() >= 10_000 {
                std::thread::spawn(move || drop(pending));
            }
        }
        Ok(())
    }

    /// Makes every add and delete so far durable and visible to new snapshots.
    pub fn commit(&self) -> Result<()> {
        let mut guard = self.writer()?;
        let Some(state) = guard.as_mut() else {
            return Err(IndexError::ReadOnly);
        };
        self.flush(state)?;
        state.writer.commit()?;
        state.flushed_ids.clear();
        state.deleted_ids.clear();
        state.deletes_queued = false;
        drop(guard);
        self.reload()
    }

    /// Waits for background merges to finish (useful before measuring size).
    pub fn wait_merges(&self) -> Result<()> {
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = guard.take() {
            state.writer.wait_merging_threads()?;
        }
        drop(guard);
        self.reload()
    }

    /// Merges all segments into one (then waits); for benchmarks and batch builds.
    pub fn merge_all(&self) -> Result<()> {
        self.commit()?;
        // Let background merges finish first: they would hold some of the segments.
        self.wait_merges()?;
        let ids = self.index.searchable_segment_ids()?;
        if ids.len() > 1 {
            let mut guard = self.writer()?;
            if let Some(state) = guard.as_mut() {
                state
                    .writer
                    .set_merge_policy(Box::new(tantivy::merge_policy::NoMergePolicy));
                state.writer.merge(&ids).wait()?;
            }
        }
        self.wait_merges()
    }

    fn reload(&self) -> Result<()> {
        self.reader.reload()?;
        // Warm now so the first query does not pay for it, and drop maxima of merged segments.
        let snapshot = self.snapshot()?;
        let live: HashSet<SegmentId> = snapshot
            .searcher
            .segment_readers()
            .iter()
            .map(|r| r.segment_id())
            .collect();
        self.maxima
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| live.contains(id));
        let live: Vec<SegmentId> = live.into_iter().collect();
        self.dense.retain(&live);
        if self.manifest.settings.dense_dim.is_some() {
            snapshot.warm_dense()?;
        }
        Ok(())
    }

    /// Whether the last reloaded commit holds a live document `id` not deleted since.
    fn committed_contains(&self, state: &WriterState, id: &str) -> Result<bool> {
        if state.deleted_ids.contains(id) {
            return Ok(false);
        }
        let searcher = self.reader.searcher();
        let term = Term::from_field_text(self.fields.id, id);
        for reader in searcher.segment_readers() {
            let inverted = reader.inverted_index(self.fields.id)?;
            if let Some(info) = inverted.get_term_info(&term)? {
                let mut postings =
                    inverted.read_postings_from_terminfo(&info, IndexRecordOption::Basic)?;
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if reader.alive_bitset().is_none_or(|a| a.is_alive(doc)) {
                        return Ok(true);
                    }
                    doc = postings.advance();
                }
            }
        }
        Ok(false)
    }

    /// A consistent view of the last commit, with the pruning maxima of its segments.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let searcher = self.reader.searcher();
        let mut maxima = Vec::with_capacity(searcher.segment_readers().len());
        for reader in searcher.segment_readers() {
            let id = reader.segment_id();
            let cached = self
                .maxima
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .cloned();
            let m = match cached {
                Some(m) => m,
                None => {
                    let m = Arc::new(SegmentMaxima::compute(reader, self.fields.impacts)?);
                    self.maxima
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(id, m.clone());
                    m
                }
            };
            maxima.push(m);
        }
        Ok(Snapshot {
            searcher,
            maxima,
            fields: self.fields,
            scale: self.manifest.settings.scale,
            dense: self.dense.clone(),
            dense_dim: self.manifest.settings.dense_dim,
            dense_params: self.dense_params,
        })
    }

    /// Documents, terms and bytes of the last commit.
    pub fn stats(&self) -> Result<CollectionStats> {
        let snapshot = self.snapshot()?;
        let searcher = &snapshot.searcher;
        let mut by_modality = HashMap::new();
        for m in [Modality::Image, Modality::Text] {
            let q = TermQuery::new(
                Term::from_field_text(self.fields.modality, m.as_str()),
                IndexRecordOption::Basic,
            );
            by_modality.insert(m, searcher.search(&q, &Count)? as u64);
        }
        let mut terms: HashSet<Vec<u8>> = HashSet::new();
        let mut nnz = 0u64;
        for reader in searcher.segment_readers() {
            let inverted = reader.inverted_index(self.fields.impacts)?;
            let mut stream = inverted.terms().stream()?;
            while stream.advance() {
                nnz += u64::from(stream.value().doc_freq);
                if !terms.contains(stream.key()) {
                    terms.insert(stream.key().to_vec());
                }
            }
        }
        let bytes = dir_size(&self.dir)?;
        Ok(CollectionStats {
            documents: searcher.num_docs(),
            images: by_modality[&Modality::Image],
            texts: by_modality[&Modality::Text],
            terms: terms.len() as u64,
            nnz,
            bytes,
            bytes_per_nnz: if nnz == 0 {
                0.0
            } else {
                bytes as f64 / nnz as f64
            },
            segments: searcher.segment_readers().len(),
            pruning_memory_bytes: snapshot.maxima.iter().map(|m| m.heap_bytes() as u64).sum(),
        })
    }
}

/// Moves a fresh postings cursor to `doc`; true when the term occurs in it. (tantivy's `seek`
/// requires a target at or after the current document.)
fn seek_exact(postings: &mut tantivy::postings::SegmentPostings, doc: u32) -> bool {
    let current = postings.doc();
    if current > doc {
        return false;
    }
    current == doc || postings.seek(doc) == doc
}

/// Bytes under `dir`. A background merge may delete a segment's files between the listing and
/// the `stat`; such a file no longer counts (it is not an error).
fn dir_size(dir: &Path) -> Result<u64> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let mut total = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if gone(&e) => return Ok(0),
        Err(e) => return Err(IndexError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| IndexError::io(dir, e))?;
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(IndexError::io(entry.path(), e)),
        };
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// Size and content figures of a collection (`nnz`: stored non-zero impacts, including those of
/// deleted documents not yet merged away; `bytes`: everything on disk).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CollectionStats {
    pub documents: u64,
    pub images: u64,
    pub texts: u64,
    pub terms: u64,
    pub nnz: u64,
    pub bytes: u64,
    pub bytes_per_nnz: f64,
    pub segments: usize,
    pub pruning_memory_bytes: u64,
}

/// The result of a search against a snapshot.
#[derive(Debug, Clone)]
pub struct SearchOutcome {
    pub hits: Vec<ScoredDoc>,
    pub stats: SearchStats,
}

/// A stored document read back from the index.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDocument {
    pub doc: Document,
    /// Its impacts, when asked for (read back from the postings).
    pub impacts: Option<QuantizedVector>,
    /// Its dense vector (unit length), when it has one.
    pub dense: Option<Vec<f32>>,
}

/// A point-in-time view of a collection: what one commit contains.
pub struct Snapshot {
    searcher: Searcher,
    maxima: Vec<Arc<SegmentMaxima>>,
    fields: Fields,
    scale: f32,
    dense: Arc<DenseCache>,
    dense_dim: Option<usize>,
    dense_params: DenseParams,
}

impl Snapshot {
    pub fn num_docs(&self) -> u64 {
        self.searcher.num_docs()
    }

    pub fn searcher(&self) -> &Searcher {
        &self.searcher
    }

    pub(crate) fn fields(&self) -> &Fields {
        &self.fields
    }

    /// Top-k documents by the integer dot product with `query`.
    pub fn search(
        &self,
        query: &QuantizedVector,
        options: &SearchOptions,
    ) -> Result<SearchOutcome> {
        options.validate().map_err(IndexError::InvalidQuery)?;
        let filter = CompiledFilter::new(&options.filter, &self.fields)?;
        let allowed = filter.allowed(&self.searcher)?;
        let mut top = TopK::new(options.k);
        let mut stats = SearchStats::default();
        let mut acc = Vec::new();
        for (ord, reader) in self.searcher.segment_readers().iter().enumerate() {
            stats.segments += 1;
            let allowed = allowed.as_ref().map(|a| &a[ord]);
            match options.algorithm {
                Algorithm::Pruned => pruned::search_segment(
                    ord as u32,
                    reader,
                    self.fields.impacts,
                    &self.maxima[ord],
                    query,
                    options.prune_factor(),
                    allowed,
                    &mut top,
                    &mut stats,
                )?,
                Algorithm::Exhaustive => exhaustive::search_segment(
                    ord as u32,
                    reader,
                    self.fields.impacts,
                    query,
                    allowed,
                    &mut acc,
                    &mut top,
                    &mut stats,
                )?,
            }
        }
        Ok(SearchOutcome {
            hits: top.into_sorted(),
            stats,
        })
    }

    fn address(d: &ScoredDoc) -> DocAddress {
        DocAddress::new(d.segment_ord, d.doc)
    }

    /// Whether this collection keeps dense vectors.
    pub fn has_dense(&self) -> bool {
        self.dense_dim.is_some()
    }

    /// Loads the dense vectors (and graphs) of every segment now, rather than on first search.
    pub fn warm_dense(&self) -> Result<()> {
        if let Some(dim) = self.dense_dim {
            for reader in self.searcher.segment_readers() {
                self.dense
                    .get_or_load(reader, &self.fields, dim, &self.dense_params)?;
            }
        }
        Ok(())
    }

    /// Top-k live documents by cosine similarity with `query` (dense fallback). `exact` scans
    /// every vector; otherwise large segments are searched through their HNSW graph.
    pub fn search_dense(
        &self,
        query: &DenseVector,
        k: usize,
        exact: bool,
        filter: &Filter,
    ) -> Result<Vec<DenseHit>> {
        let Some(dim) = self.dense_dim else {
            return Err(IndexError::InvalidQuery(
                "this collection has dense search off".into(),
            ));
        };
        if query.dim() != dim {
            return Err(IndexError::InvalidQuery(format!(
                "dense query has dimension {}, the collection's vectors have {dim}",
                query.dim()
            )));
        }
        if k == 0 || k > crate::MAX_K {
            return Err(IndexError::InvalidQuery(format!(
                "k must be between 1 and {}, got {k}",
                crate::MAX_K
            )));
        }
        let allowed = CompiledFilter::new(filter, &self.fields)?.allowed(&self.searcher)?;
        let mut segments = Vec::new();
        for reader in self.searcher.segment_readers() {
            let d = self
                .dense
                .get_or_load(reader, &self.fields, dim, &self.dense_params)?;
            segments.push((reader, d));
        }
        Ok(crate::dense::search(
            &segments,
            query,
            k,
            exact,
            &self.dense_params,
            allowed.as_deref(),
        ))
    }

    /// A document at a segment ordinal and doc id as an API hit with the given score (for
    /// dense and fused results, whose scores are not dot products of impacts).
    pub fn hit_at(&self, segment_ord: u32, doc: u32, score: f64) -> Result<Hit> {
        let d = self.document_at(DocAddress::new(segment_ord, doc))?;
        Ok(Hit {
            id: d.id.to_string(),
            score,
            modality: d.modality,
            uri: d.uri,
            text: d.text,
            metadata: d.metadata,
            explain: None,
        })
    }

    /// Stored fields of a scored document as an API hit; with `explain`, the matched terms.
    pub fn hit(&self, scored: &ScoredDoc, explain: Option<&QuantizedVector>) -> Result<Hit> {
        let doc = self.document_at(Self::address(scored))?;
        let explain = match explain {
            Some(q) => Some(self.explain(scored, q)?),
            None => None,
        };
        Ok(Hit {
            id: doc.id.to_string(),
            score: scored.score as f64,
            modality: doc.modality,
            uri: doc.uri,
            text: doc.text,
            metadata: doc.metadata,
            explain,
        })
    }

    /// The matched terms of one hit, largest contribution first.
    pub fn explain(
        &self,
        scored: &ScoredDoc,
        query: &QuantizedVector,
    ) -> Result<Vec<TermContribution>> {
        let reader = self.searcher.segment_reader(scored.segment_ord);
        let inverted = reader.inverted_index(self.fields.impacts)?;
        let mut out = Vec::new();
        for (term, q) in query.iter() {
            let Some(info) =
                inverted.get_term_info(&Term::from_field_text(self.fields.impacts, term))?
            else {
                continue;
            };
            let mut postings =
                inverted.read_postings_from_terminfo(&info, IndexRecordOption::WithFreqs)?;
            if seek_exact(&mut postings, scored.doc) {
                let d = tantivy::postings::Postings::term_freq(&postings);
                out.push(TermContribution {
                    term: term.to_string(),
                    query_impact: q,
                    doc_impact: d,
                    contribution: u64::from(q) * u64::from(d),
                });
            }
        }
        out.sort_by(|a, b| {
            b.contribution
                .cmp(&a.contribution)
                .then_with(|| a.term.cmp(&b.term))
        });
        Ok(out)
    }

    pub(crate) fn document_at(&self, address: DocAddress) -> Result<Document> {
        let stored: TantivyDocument = self.searcher.doc(address)?;
        let text_of = |field| {
            stored
                .get_first(field)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let id =
            text_of(self.fields.id).ok_or_else(|| IndexError::CorruptDocument("no id".into()))?;
        let id = DocId::new(id).map_err(|e| IndexError::CorruptDocument(e.to_string()))?;
        let modality: Modality = text_of(self.fields.modality)
            .ok_or_else(|| IndexError::CorruptDocument(format!("{id}: no modality")))?
            .parse()
            .map_err(|e: lexlip_proto::DocumentError| IndexError::CorruptDocument(e.to_string()))?;
        let metadata = match stored.get_first(self.fields.metadata) {
            Some(v) => match serde_json::to_value(OwnedValue::from(v)) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            },
            None => serde_json::Map::new(),
        };
        Ok(Document {
            id,
            modality,
            uri: text_of(self.fields.uri),
            text: text_of(self.fields.text),
            metadata,
        })
    }

    fn address_of(&self, id: &str) -> Result<Option<DocAddress>> {
        let term = Term::from_field_text(self.fields.id, id);
        for (ord, reader) in self.searcher.segment_readers().iter().enumerate() {
            let inverted = reader.inverted_index(self.fields.id)?;
            let Some(info) = inverted.get_term_info(&term)? else {
                continue;
            };
            let mut postings =
                inverted.read_postings_from_terminfo(&info, IndexRecordOption::Basic)?;
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if reader.alive_bitset().is_none_or(|a| a.is_alive(doc)) {
                    return Ok(Some(DocAddress::new(ord as u32, doc)));
                }
                doc = postings.advance();
            }
        }
        Ok(None)
    }

    /// The stored document with this id; with `with_impacts`, its terms read back from the
    /// postings (one dictionary walk: use for single documents, not in loops).
    pub fn get(&self, id: &str, with_impacts: bool) -> Result<Option<StoredDocument>> {
        let Some(address) = self.address_of(id)? else {
            return Ok(None);
        };
        let doc = self.document_at(address)?;
        let impacts = if with_impacts {
            Some(self.impacts_at(address)?)
        } else {
            None
        };
        let stored: TantivyDocument = self.searcher.doc(address)?;
        let dense = crate::dense::from_doc(&stored, &self.fields);
        Ok(Some(StoredDocument {
            doc,
            impacts,
            dense,
        }))
    }

    fn impacts_at(&self, address: DocAddress) -> Result<QuantizedVector> {
        let reader = self.searcher.segment_reader(address.segment_ord);
        let inverted = reader.inverted_index(self.fields.impacts)?;
        let mut stream = inverted.terms().stream()?;
        let mut pairs = Vec::new();
        while stream.advance() {
            let mut postings = inverted
                .read_postings_from_terminfo(stream.value(), IndexRecordOption::WithFreqs)?;
            if seek_exact(&mut postings, address.doc_id) {
                let term = String::from_utf8_lossy(stream.key()).into_owned();
                pairs.push((
                    term,
                    u64::from(tantivy::postings::Postings::term_freq(&postings)),
                ));
            }
        }
        QuantizedVector::new(pairs).map_err(|e| IndexError::CorruptDocument(e.to_string()))
    }

    /// Impacts back to float weights with the collection's scale.
    pub fn to_weights(&self, q: &QuantizedVector) -> SparseVector {
        q.to_sparse(self.scale)
    }
}
