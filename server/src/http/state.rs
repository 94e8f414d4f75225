//! Shared state of the server: the open collections of its data directory (files are the
//! engine's [`Catalog`]'s business), encoders, metrics and limits.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
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
    catalog: Catalog,
    collections: RwLock<BTreeMap<String, Arc<Open>>>,
    pub encoders: Arc<EncoderService>,
    pub metrics: Metrics,
    pub limits: Limits,
    pub admission: Arc<Semaphore>,
}

pub type SharedState = Arc<AppState>;

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
        for name in catalog.names()? {
            let c = catalog
                .open_collection(&name)
                .map_err(|e| anyhow::anyhow!("cannot open collection {name}: {e}"))?;
            if let (Some(ts), false) = (encoders.term_space(), c.manifest().term_space.is_free())
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
            catalog,
            collections: RwLock::new(collections),
            encoders: Arc::new(encoders),
            metrics,
            limits,
            admission,
        })
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
        Catalog::validate_name(name)?;
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
        Ok(self.catalog.delete(name)?)
    }

    /// Fails when the collection was built for another vocabulary than the server's encoders.
    pub fn check_encodable(&self, name: &str, c: &Collection) -> ApiResult<()> {
        let space = &c.manifest().term_space;
        match self.encoders.term_space() {
            Some(ts) if !space.is_free() && !space.same_vocabulary(ts) => {
                Err(ApiError::conflict(format!(
                    "collection {name:?} was built for {space}, but this server's encoders use {ts}; \
                     send precomputed vectors or serve it with the matching model"
                )))
            }
            _ => Ok(()),
        }
    }
}
