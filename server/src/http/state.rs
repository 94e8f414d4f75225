//! Shared state of the server: the open collections of its data directory (files are the
//! engine's [`Catalog`]'s business), encoders, metrics and limits.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use lexlip_index::{Catalog, Collection, CollectionSettings};
use lexlip_proto::TermSpace;
use tokio::sync::Semaphore;

use super::encoders::EncoderService;
use super::error::{ApiError, ApiResult};
use super::metrics::Metrics;

/// A collection open in the server, with a lock that makes each write request (validate, add,
/// commit) atomic with respect to other writers.
pub struct Open {
    pub collection: Arc<Collection>,
    write: tokio::sync::Mutex<()>,
    /// Set, under `write`, when the collection is deleted: a request that looked it up before
    /// and waited for `write` must not write through it (its files are gone, and a collection
    /// of the same name may already live there).
    deleted: AtomicBool,
}

impl Open {
    fn new(collection: Collection) -> Arc<Self> {
        Arc::new(Self {
            collection: Arc::new(collection),
            write: tokio::sync::Mutex::new(()),
            deleted: AtomicBool::new(false),
        })
    }

    /// Waits for the other writers of this collection; 404 when it was deleted meanwhile.
    pub async fn lock_for_write(&self, name: &str) -> ApiResult<tokio::sync::MutexGuard<'_, ()>> {
        let guard = self.write.lock().await;
        if self.deleted.load(Ordering::Acquire) {
            return Err(ApiError::not_found(format!(
                "collection {name:?} was deleted while this request waited; nothing was written"
            )));
        }
        Ok(guard)
    }
}

/// Limits and switches of one server.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    /// A request body must arrive within this time (it is read before the request is admitted,
    /// so a client that sends slowly holds no `max_in_flight` slot).
    pub body_timeout: Duration,
    /// Requests admitted at once (encoding + searching + writing); more get 503.
    pub max_in_flight: usize,
    /// Documents per add request.
    pub max_batch_docs: usize,
    pub api_keys: Vec<String>,
    /// Require a key on read routes too (always on write routes when keys are set).
    pub protect_reads: bool,
    /// Threads a search may use when it is the only one running (1: never more than one).
    pub query_threads: usize,
    /// The IDF exponent of sparse searches that give none (`lexlip serve --idf`). Unset, a
    /// text or image query takes its model's (`idf` in its `lexlip.json`), others none.
    pub idf: Option<f32>,
    /// The term cut of sparse searches that set none of `exact`, `approx` and `term_cut`
    /// (`lexlip serve --term-cut`; 0: exact).
    pub term_cut: f32,
}

pub struct AppState {
    catalog: Catalog,
    collections: RwLock<BTreeMap<String, Arc<Open>>>,
    /// Collections on disk that did not open at startup, with the reason: reported by
    /// `/readyz`, refused by name, removable with DELETE.
    broken: RwLock<BTreeMap<String, String>>,
    /// Held by create and delete, so that the files of one name change one operation at a time.
    lifecycle: Mutex<()>,
    pub encoders: Arc<EncoderService>,
    /// The second search stage (`--rerank-model`), if any.
    pub reranker: Option<Arc<lexlip_model::Reranker>>,
    pub metrics: Metrics,
    pub limits: Limits,
    pub admission: Arc<Semaphore>,
    /// Bodies being received at once (4 × `max_in_flight`): more get 503.
    pub uploads: Arc<Semaphore>,
}

pub type SharedState = Arc<AppState>;

/// Loads a collection's dense vectors and builds its HNSW graphs on a thread of its own, so that
/// the server listens at once and the first dense search after a restart does not pay for them
/// (`/readyz` lists the collections still building in `dense_building`).
fn warm_dense_in_background(name: &str, collection: &Arc<Collection>) {
    if collection.manifest().settings.dense_dim.is_none() {
        return;
    }
    let (owned, collection) = (name.to_string(), collection.clone());
    let spawned = std::thread::Builder::new()
        .name(format!("dense-{name}"))
        .spawn(move || warm_dense(&owned, &collection));
    if let Err(e) = spawned {
        tracing::warn!(collection = %name, "no thread to build the dense index: {e}");
    }
}

/// Loads the dense vectors and graphs of `collection` now, and logs how long it took.
fn warm_dense(name: &str, collection: &Collection) {
    let started = std::time::Instant::now();
    match collection.snapshot().and_then(|s| s.warm_dense()) {
        Ok(()) => tracing::info!(
            collection = %name,
            seconds = started.elapsed().as_secs_f64(),
            "dense index ready"
        ),
        Err(e) => tracing::warn!(
            collection = %name,
            "building the dense index in the background failed ({e}); the first dense search \
             builds it"
        ),
    }
}

impl AppState {
    /// Opens every collection under `data_dir/collections`.
    pub fn open(
        data_dir: &Path,
        encoders: EncoderService,
        metrics: Metrics,
        limits: Limits,
    ) -> anyhow::Result<Self> {
        let catalog = Catalog::open(data_dir)?;
        let mut collections = BTreeMap::new();
        let mut broken = BTreeMap::new();
        for name in catalog.names()? {
            let c = match catalog.open_collection(&name) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(
                        collection = %name,
                        "cannot open collection {name:?} ({e}); serving the others. \
                         DELETE /v1/collections/{name} removes its directory"
                    );
                    broken.insert(name, e.to_string());
                    continue;
                }
            };
            if let Some(ts) = other_space(&encoders, &c.manifest().term_space) {
                tracing::warn!(
                    collection = %name,
                    "built for {}, the server's encoders use {ts}: requests that encode will be refused",
                    c.manifest().term_space
                );
            }
            let open = ready(&name, c, &metrics)?;
            collections.insert(name, open);
        }
        let admission = Arc::new(Semaphore::new(limits.max_in_flight.max(1)));
        let uploads = Arc::new(Semaphore::new(4 * limits.max_in_flight.max(1)));
        Ok(Self {
            catalog,
            collections: RwLock::new(collections),
            broken: RwLock::new(broken),
            lifecycle: Mutex::new(()),
            encoders: Arc::new(encoders),
            reranker: None,
            metrics,
            limits,
            admission,
            uploads,
        })
    }

    /// Serves `reranker` as the second stage of searches that ask for `rerank`.
    pub fn with_reranker(mut self, reranker: lexlip_model::Reranker) -> Self {
        self.reranker = Some(Arc::new(reranker));
        self
    }

    pub fn get(&self, name: &str) -> ApiResult<Arc<Open>> {
        if let Some(open) = self
            .collections
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return Ok(open.clone());
        }
        if let Some(reason) = self.broken_reason(name) {
            return Err(ApiError::internal(format!(
                "collection {name:?} is on disk but could not be opened ({reason}); \
                 DELETE /v1/collections/{name} removes it"
            )));
        }
        let mut existing: Vec<String> = self.names().into_iter().map(|(n, _)| n).collect();
        existing.sort();
        let known = match existing.len() {
            0 => "there are no collections yet".to_string(),
            n if n <= 20 => format!("the collections are: {}", existing.join(", ")),
            n => format!(
                "there are {n} collections (GET /v1/collections lists them), e.g. {}",
                existing[..10].join(", ")
            ),
        };
        Err(ApiError::not_found(format!(
            "no collection named {name:?} ({known}); create it with PUT /v1/collections/{name}"
        )))
    }

    fn broken_reason(&self, name: &str) -> Option<String> {
        self.broken
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Collections that did not open at startup, with the reason.
    pub fn broken(&self) -> BTreeMap<String, String> {
        self.broken
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn names(&self) -> Vec<(String, Arc<Open>)> {
        self.collections
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Creates a collection bound to the server's term space (any terms when the server has no
    /// sparse encoder). Returns whether it was created (false: it existed with these settings).
    pub fn create(&self, name: &str, settings: CollectionSettings) -> ApiResult<bool> {
        Catalog::validate_name(name)?;
        let _lifecycle = self.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(reason) = self.broken_reason(name) {
            return Err(ApiError::conflict(format!(
                "collection {name:?} exists on disk but could not be opened ({reason}); \
                 DELETE /v1/collections/{name} removes it first"
            )));
        }
        let mut map = self.collections.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = map.get(name) {
            let have = &existing.collection.manifest().settings;
            return if *have == settings {
                Ok(false)
            } else {
                Err(ApiError::conflict(format!(
                    "collection {name:?} exists with other settings ({}); delete it first to change them",
                    serde_json::to_string(have).unwrap_or_default()
                )))
            };
        }
        let (space, vocab) = match (self.encoders.term_space(), self.encoders.vocab()) {
            (Some(ts), vocab) => (ts.clone(), vocab),
            (None, _) => (TermSpace::free("any"), None),
        };
        let c = self.catalog.create(name, space, settings, vocab)?;
        self.metrics.set_documents(name, 0);
        map.insert(name.to_string(), Open::new(c));
        Ok(true)
    }

    /// Removes a collection and its files (a collection that did not open at startup too).
    /// Searches already running finish on their snapshot; a write running now finishes first,
    /// and one waiting for it gets 404 (blocking: call it off the async runtime).
    pub fn delete(&self, name: &str) -> ApiResult<()> {
        let _lifecycle = self.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        if !self.retire(name)? {
            return Err(ApiError::not_found(format!("no collection named {name:?}")));
        }
        Ok(self.catalog.delete(name)?)
    }

    /// Stops serving `name` (open, or on disk but broken): a write running now finishes
    /// first, one waiting for it gets 404, and nothing writes into its directory afterwards.
    /// Whether there was such a collection. Call with `lifecycle` held.
    fn retire(&self, name: &str) -> ApiResult<bool> {
        let removed = self
            .collections
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        let was_broken = self
            .broken
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name)
            .is_some();
        if let Some(open) = &removed {
            let _writer = open.write.blocking_lock();
            open.deleted.store(true, Ordering::Release);
            // Releases its tantivy writer (and lock file) and lets background merges end
            // before the files go: nothing writes into the directory afterwards.
            open.collection.close()?;
        }
        self.metrics.forget_collection(name);
        Ok(removed.is_some() || was_broken)
    }

    /// The data directory's catalog (collections and snapshots on disk).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Restores the snapshot `file` of the collection `from` as the collection `into`: the
    /// archive is unpacked and checked first (a bad one changes nothing), a collection of that
    /// name is replaced only with `replace`, and one built for another vocabulary than the
    /// server's encoders is refused. Blocking: call it off the async runtime.
    pub fn restore(&self, from: &str, file: &str, into: &str, replace: bool) -> ApiResult<()> {
        Catalog::validate_name(into)?;
        let exists = |st: &Self| {
            st.collections
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(into)
                || st.broken_reason(into).is_some()
        };
        let conflict = || {
            ApiError::conflict(format!(
                "collection {into:?} exists; restore with \"replace\": true to replace it, or \
                 under another name with \"into\""
            ))
        };
        if !replace && exists(self) {
            return Err(conflict());
        }
        let staged = self.catalog.stage_restore(from, file, into)?;
        let space = staged.collection_manifest()?.term_space;
        if let Some(ts) = other_space(&self.encoders, &space) {
            return Err(ApiError::conflict(format!(
                "the snapshot holds a collection built for {space}, but this server's encoders \
                 use {ts}; restore it on a server with the matching model (or with \
                 `lexlip restore` into a directory)"
            )));
        }
        let _lifecycle = self.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        if !replace && exists(self) {
            return Err(conflict());
        }
        self.retire(into)?;
        let installed = self.catalog.install(staged, into, replace);
        // On failure the old collection, if any, is back in place: serve it again.
        let collection = match installed {
            Ok(c) => c,
            Err(e) => {
                if let Ok(old) = self.catalog.open_collection(into) {
                    self.serve(into, old)?;
                }
                return Err(e.into());
            }
        };
        self.serve(into, collection)
    }

    /// Starts serving an opened collection as `name`.
    fn serve(&self, name: &str, collection: Collection) -> ApiResult<()> {
        let open = ready(name, collection, &self.metrics)?;
        self.collections
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), open);
        Ok(())
    }

    /// Fails when the collection was built for another vocabulary than the server's encoders.
    pub fn check_encodable(&self, name: &str, c: &Collection) -> ApiResult<()> {
        let space = &c.manifest().term_space;
        match other_space(&self.encoders, space) {
            Some(ts) => Err(ApiError::conflict(format!(
                "collection {name:?} was built for {space}, but this server's encoders use {ts}; \
                 send precomputed vectors or serve it with the matching model"
            ))),
            None => Ok(()),
        }
    }
}

/// The encoders' term space when it is not `space` (a collection of a free term space takes
/// any vectors).
fn other_space<'e>(encoders: &'e EncoderService, space: &TermSpace) -> Option<&'e TermSpace> {
    encoders
        .term_space()
        .filter(|ts| !space.is_free() && !space.same_vocabulary(ts))
}

/// A collection ready to serve as `name`: its document count in the metrics, its dense index
/// building in the background.
fn ready(name: &str, collection: Collection, metrics: &Metrics) -> lexlip_index::Result<Arc<Open>> {
    metrics.set_documents(name, collection.snapshot()?.num_docs());
    let open = Open::new(collection);
    warm_dense_in_background(name, &open.collection);
    Ok(open)
}
