//! A collection: a directory holding a tantivy index of impacts and its manifest.
//!
//! The jobs are split by file: this one opens and creates collections and holds their settings;
//! [`writer`] adds, deletes and commits; [`snapshot`] is a committed view that searches;
//! [`documents`] reads stored documents back (hits, explain, get); [`stats`] measures.
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

mod documents;
pub(crate) mod frequencies;
mod modalities;
mod pending;
pub(crate) mod snapshot;
mod stats;
pub(crate) mod writer;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use lexlip_proto::{DenseVector, TermSpace};
use tantivy::directory::MmapDirectory;
use tantivy::index::SegmentId;
use tantivy::{Index, IndexReader, ReloadPolicy};

/// Decompressed document-store blocks cached per segment (tantivy's default is 100).
const DOC_STORE_CACHE_BLOCKS: usize = 8;

use crate::dense::{DenseCache, DenseParams};
use crate::error::{IndexError, Result};
use crate::forward_file::{self, ForwardPlugin};
use crate::forward_index::{ForwardIndex, ForwardPlan, Layout};
use crate::manifest::{CollectionSettings, Manifest};
use crate::quantizer::Quantizer;
use crate::schema::{self, Fields};
use crate::segment_builder::DocOrder;
use modalities::SegmentModalities;
use pending::WriterState;

/// The vocabulary copy kept inside a collection created with one.
pub const VOCAB_FILE: &str = "vocab.txt";
/// tantivy files live in this sub-directory.
pub(crate) const INDEX_DIR: &str = "index";
/// Pending documents are written as a segment once this many accumulate.
pub const DEFAULT_FLUSH_DOCS: usize = 100_000;

/// An open collection. Searches and writes can run concurrently from several threads; searches
/// see the last commit.
pub struct Collection {
    dir: PathBuf,
    manifest: Manifest,
    quantizer: Quantizer,
    index: Index,
    /// The index's directory, whose cache of mapped files is pruned at each reload: tantivy
    /// keeps an entry for every file it ever mapped until asked for its cache's figures, so
    /// under adds and deletes it grew by every segment file ever written (about 100 MB an
    /// hour in `scripts/soak.py`).
    mmap: MmapDirectory,
    fields: Fields,
    reader: IndexReader,
    writer: Mutex<Option<WriterState>>,
    maxima: Mutex<HashMap<SegmentId, Arc<ForwardIndex>>>,
    dense: Arc<DenseCache>,
    dense_params: DenseParams,
    flush_docs: usize,
    doc_order: DocOrder,
    /// How forward indexes are planned (block size and layout, [`ForwardPlan::pack`]ed);
    /// shared with the forward index plugin, which writes files by it.
    forward_plan: Arc<AtomicU32>,
    /// Whether new and merged segments get a forward index file (collections created before
    /// the files existed do not: tantivy fixes an index's plugins at creation).
    forward_files: bool,
    /// What each segment holds (images or texts), for the merge policy ([`modalities`]).
    modalities: SegmentModalities,
    /// Whether a commit loads the new segments' dense vectors and builds their graphs
    /// ([`Collection::set_warm_dense`]).
    warm_dense: bool,
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
        // Without a manifest this is not a collection: an index left by a create that failed
        // before writing one is replaced.
        if index_dir.exists() {
            std::fs::remove_dir_all(&index_dir).map_err(|e| IndexError::io(&index_dir, e))?;
        }
        std::fs::create_dir_all(&index_dir).map_err(|e| IndexError::io(&index_dir, e))?;
        let (schema, fields) = schema::build();
        let mmap = MmapDirectory::open(&index_dir).map_err(|e| IndexError::NotACollection {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut builder = Index::builder().schema(schema);
        if settings.forward_files {
            let plan = Arc::new(AtomicU32::new(ForwardPlan::default().pack()));
            builder = builder.register_plugin(Arc::new(ForwardPlugin::new(fields.impacts, plan)));
        }
        builder.open_or_create(mmap)?;
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
            Some(Arc::new(text.lines().map(str::to_string).collect()))
        } else {
            None
        };
        let settings = &manifest.settings;
        let quantizer = Quantizer::new(settings.scale, settings.top_k_terms, vocab)?
            .named(manifest.term_space.to_string());
        let not_a_collection = |reason: String| IndexError::NotACollection {
            path: dir.to_path_buf(),
            reason,
        };
        let cannot_open = |e: &dyn std::fmt::Display| {
            not_a_collection(format!("cannot open its tantivy index: {e}"))
        };
        let mmap = MmapDirectory::open(dir.join(INDEX_DIR)).map_err(|e| cannot_open(&e))?;
        let mut index = Index::open(mmap.clone()).map_err(|e| cannot_open(&e))?;
        let fields = schema::fields_of(&index.schema())
            .map_err(|e| not_a_collection(format!("unexpected schema: {e}")))?;
        let forward_plan = Arc::new(AtomicU32::new(ForwardPlan::default().pack()));
        let extensions = index.load_metas()?.persisted_custom_extensions;
        let forward_files = extensions.iter().any(|e| e == forward_file::EXTENSION);
        if let Some(other) = extensions.iter().find(|e| *e != forward_file::EXTENSION) {
            return Err(not_a_collection(format!(
                "its index needs a segment component this lexlip does not know ({other:?}); \
                 it was written by a newer lexlip"
            )));
        }
        if forward_files {
            let plugin = ForwardPlugin::new(fields.impacts, forward_plan.clone());
            index.register_plugin(Arc::new(plugin));
        }
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            // Decompressed store blocks kept per segment: a block holds one whole document
            // when documents are large (megabytes of text), and tantivy's default of 100 of
            // them let a few searches over such documents hold gigabytes.
            .doc_store_cache_num_blocks(DOC_STORE_CACHE_BLOCKS)
            .try_into()?;
        let modalities = SegmentModalities::default();
        modalities.learn(reader.searcher().segment_readers(), &fields)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
            quantizer,
            index,
            mmap,
            fields,
            reader,
            writer: Mutex::new(None),
            maxima: Mutex::new(HashMap::new()),
            dense: Arc::new(DenseCache::default()),
            dense_params: DenseParams::default(),
            flush_docs: DEFAULT_FLUSH_DOCS,
            doc_order: DocOrder::default(),
            forward_plan,
            forward_files,
            modalities,
            warm_dense: true,
        })
    }

    /// Opens the collection in `dir`, or creates it with `settings` when `dir` holds none. An
    /// existing collection must have been built for `term_space`, unless `term_space` is free
    /// (no vocabulary: the caller does not know its term space). `vocab` lists the term space's
    /// tokens for a new collection.
    pub fn open_or_create(
        dir: &Path,
        term_space: TermSpace,
        vocab: Option<&[String]>,
        settings: CollectionSettings,
    ) -> Result<Self> {
        if Manifest::path(dir).exists() {
            let c = Self::open(dir)?;
            if !term_space.is_free() {
                c.check_term_space(&term_space)?;
            }
            return Ok(c);
        }
        Self::create(dir, term_space, settings, vocab)
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

    /// How this collection turns weights into impacts (documents and queries).
    pub fn quantizer(&self) -> &Quantizer {
        &self.quantizer
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
            Some(_) if v.norm() == 0.0 => Err(IndexError::InvalidSetting(
                "the dense vector is all zeros: it has no direction to compare (cosine)".into(),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Whether documents added now keep their thumbnails: the collection's `thumbnails` setting
    /// is on and its schema has the field (collections made before thumbnails existed do not).
    pub fn stores_thumbnails(&self) -> bool {
        self.manifest.settings.thumbnails && self.fields.thumbnail.is_some()
    }

    /// Whether the schema has the thumbnail field at all (false: made before thumbnails
    /// existed; its documents can never have one).
    pub fn has_thumbnail_field(&self) -> bool {
        self.fields.thumbnail.is_some()
    }

    /// Whether each commit loads the new segments' dense vectors and builds their HNSW graphs
    /// (default: yes, so that a server's first dense query after a commit builds nothing). A
    /// batch job that only writes turns it off: over a million items it rebuilt the graph of
    /// every merged segment at each commit, and nothing searched them. Searches load what they
    /// need either way.
    pub fn set_warm_dense(&mut self, warm: bool) {
        self.warm_dense = warm;
    }

    /// Documents written into a segment once this many are pending (default 100,000).
    pub fn set_flush_docs(&mut self, n: usize) {
        self.flush_docs = n.max(1);
    }

    /// How the documents of each new segment are ordered (default: [`DocOrder::Clusters`]).
    /// Results never depend on it; search speed does.
    pub fn set_doc_order(&mut self, order: DocOrder) {
        self.doc_order = order;
    }

    /// Documents per pruning block: a power of two from 8 to 64, or `None` (the default) for
    /// each segment's layout's own (8 in the documents layout, 32 in the terms layout; see
    /// [`crate::forward_index::Layout`]). Smaller blocks bound tighter and cost more memory. Segments
    /// written from now on get forward index files for this size; those written for another
    /// size are rebuilt from their postings when searched.
    pub fn set_block_size(&mut self, docs: Option<u32>) -> Result<()> {
        let shift = match docs {
            None => None,
            Some(docs) => {
                let shift = docs.trailing_zeros();
                if !docs.is_power_of_two() || !crate::forward_index::BLOCK_SHIFTS.contains(&shift) {
                    return Err(IndexError::InvalidSetting(format!(
                        "the block size must be 8, 16, 32 or 64 documents, got {docs}"
                    )));
                }
                Some(shift)
            }
        };
        self.set_forward_plan(ForwardPlan {
            shift,
            ..self.forward_plan()
        });
        Ok(())
    }

    /// The forward index layout of segments written from now on, or `None` (the default) to
    /// choose it per segment from its mean document length. Segments in another layout are
    /// rebuilt from their postings when searched (for measurements and tests: results are the
    /// same in both).
    pub fn set_forward_layout(&mut self, layout: Option<Layout>) {
        self.set_forward_plan(ForwardPlan {
            layout,
            ..self.forward_plan()
        });
    }

    fn set_forward_plan(&mut self, plan: ForwardPlan) {
        if plan != self.forward_plan() {
            self.forward_plan.store(plan.pack(), Ordering::Relaxed);
            self.maxima
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
        }
    }

    /// How segments' forward indexes are planned.
    fn forward_plan(&self) -> ForwardPlan {
        ForwardPlan::unpack(self.forward_plan.load(Ordering::Relaxed))
    }

    /// Whether new and merged segments get a forward index file (collections created by this
    /// version of lexlip; older ones build it from the postings when a segment is searched).
    pub fn has_forward_files(&self) -> bool {
        self.forward_files
    }

    /// Ids of the segments of the last commit.
    fn live_segments(&self) -> HashSet<SegmentId> {
        self.reader
            .searcher()
            .segment_readers()
            .iter()
            .map(|r| r.segment_id())
            .collect()
    }
}
