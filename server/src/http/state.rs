//! Shared state of the server: open collections (one directory each under `DATA/collections/`),
//! encoders, metrics and limits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use lexlip_index::{Collection, CollectionSettings};
use lexlip_proto::TermSpace;
use tokio::sync::Semaphore;

use super::encoders::EncoderService;
use super::error::{ApiError, ApiResult};
use super::metrics::Metrics;

/// A collection open in the server, with a lock that makes each write request (validate, add,
/// commit) atomic with respect to other writers.
pub struct Open {
    pub collection: Arc<Collection>,
    pub write: tokio::sync::Mutex<()>,
}

/// Limits and switches of one server.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    /// Requests admitted at once (encoding + searching + writing); more get 503.
    pub max_in_flight: usize,
    /// Documents per add request.
    pub max_batch_docs: usize,
    pub api_keys: Vec<String>,
    /// Require a key on read routes too (always on write routes when keys are set).
    pub protect_reads: bool,
}

pub struct AppState {
    pub data_dir: PathBuf,
    collections: RwLock<BTreeMap<String, Arc<Open>>>,
    pub encoders: Arc<EncoderService>,
    pub metrics: Metrics,
    pub limits: Limits,
    pub admission: Arc<Semaphore>,
}

pub type SharedState = Arc<AppState>;

/// Collection names: 1-64 of `A-Z a-z 0-9 _ - .`, not starting with `.` or `-`.
pub fn validate_name(name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.starts_with(['.', '-']);
    if ok {
        Ok(())
    } else {
        Err(ApiError::unprocessable(format!(
            "invalid collection name {name:?}: use 1-64 letters, digits, '_', '-' or '.', not starting with '.' or '-'"
        )))
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
        let root = data_dir.join("collections");
        std::fs::create_dir_all(&root)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", root.display()))?;
        let mut collections = BTreeMap::new();
        let mut entries: Vec<_> = std::fs::read_dir(&root)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", root.display()))?
            .collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !path.join(lexlip_index::manifest::MANIFEST_FILE).is_file() {
                continue;
            }
            let c = Collection::open(&path).map_err(|e| {
                anyhow::anyhow!("cannot open collection {name} at {}: {e}", path.display())
            })?;
            if let (Some(ts), false) = (encoders.term_space(), is_free(&c.manifest().term_space))
                && !c.manifest().term_space.same_vocabulary(ts)
            {
                tracing::warn!(
                    collection = %name,
                    "built for {}, the server's encoders use {ts}: requests that encode will be refused",
                    c.manifest().term_space
                );
            }
            metrics.set_documents(&name, c.snapshot()?.num_docs());
            collections.insert(
                name,
                Arc::new(Open {
                    collection: Arc::new(c),
                    write: tokio::sync::Mutex::new(()),
                }),
            );
        }
        let admission = Arc::new(Semaphore::new(limits.max_in_flight.max(1)));
        Ok(Self {
            data_dir: data_dir.to_path_buf(),
            collections: RwLock::new(collections),
            encoders: Arc::new(encoders),
            metrics,
            limits,
            admission,
        })
    }

    fn dir_of(&self, name: &str) -> PathBuf {
        self.data_dir.join("collections").join(name)
    }

    pub fn get(&self, name: &str) -> ApiResult<Arc<Open>> {
        self.collections
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "no collection named {name:?}; create it with PUT /v1/collections/{name}"
                ))
            })
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
        validate_name(name)?;
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
            (None, _) => (TermSpace::from_tokens("any", []), None),
        };
        let dir = self.dir_of(name);
        if dir.exists() {
            // Left over from a failed create or delete: nothing in it is a collection.
            std::fs::remove_dir_all(&dir)
                .map_err(|e| ApiError::internal(format!("cannot clear {}: {e}", dir.display())))?;
        }
        let c = Collection::create(&dir, space, settings, vocab)?;
        self.metrics.set_documents(name, 0);
        map.insert(
            name.to_string(),
            Arc::new(Open {
                collection: Arc::new(c),
                write: tokio::sync::Mutex::new(()),
            }),
        );
        Ok(true)
    }

    /// Removes a collection and its files. Searches already running finish on their snapshot.
    pub fn delete(&self, name: &str) -> ApiResult<()> {
        let removed = self
            .collections
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if removed.is_none() {
            return Err(ApiError::not_found(format!("no collection named {name:?}")));
        }
        self.metrics.forget_collection(name);
        let dir = self.dir_of(name);
        // Make it not-a-collection first (atomic), then remove the rest.
        let manifest = dir.join(lexlip_index::manifest::MANIFEST_FILE);
        std::fs::remove_file(&manifest).map_err(|e| {
            ApiError::internal(format!("cannot remove {}: {e}", manifest.display()))
        })?;
        std::fs::remove_dir_all(&dir)
            .map_err(|e| ApiError::internal(format!("cannot remove {}: {e}", dir.display())))?;
        Ok(())
    }

    /// Fails when the collection was built for another vocabulary than the server's encoders.
    pub fn check_encodable(&self, name: &str, c: &Collection) -> ApiResult<()> {
        let space = &c.manifest().term_space;
        match self.encoders.term_space() {
            Some(ts) if !is_free(space) && !space.same_vocabulary(ts) => {
                Err(ApiError::conflict(format!(
                    "collection {name:?} was built for {space}, but this server's encoders use {ts}; \
                     send precomputed vectors or serve it with the matching model"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// A collection that accepts any terms (created without a vocabulary).
pub fn is_free(space: &TermSpace) -> bool {
    space.size == 0
}
