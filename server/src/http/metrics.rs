//! Prometheus metrics: requests and latency per route, encoder batch sizes, queue depths,
//! documents per collection. Exposed at `GET /metrics` in the text exposition format.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CollectionLabels {
    collection: String,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms … ~16 s.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0005, 2.0, 16,
    ))
}

fn batch_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0])
}

/// All metrics of one server (cheap to clone).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    batch_sizes: Family<QueueLabels, Histogram, fn() -> Histogram>,
    queue_depth: Family<QueueLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    documents: Family<CollectionLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    rejected: Counter<u64, AtomicU64>,
    searches_running: Gauge<i64, std::sync::atomic::AtomicI64>,
    searches_cancelled: Counter<u64, AtomicU64>,
    heap_in_use: Gauge<i64, std::sync::atomic::AtomicI64>,
    heap_free: Gauge<i64, std::sync::atomic::AtomicI64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("lexlip");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let batch_sizes = Family::<QueueLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            batch_histogram,
        );
        let queue_depth = Family::default();
        let documents = Family::default();
        let rejected = Counter::default();
        let searches_running = Gauge::default();
        let searches_cancelled = Counter::default();
        let heap_in_use = Gauge::default();
        let heap_free = Gauge::default();
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            latency.clone(),
        );
        registry.register(
            "encode_batch_size",
            "Items per encoder batch",
            batch_sizes.clone(),
        );
        registry.register(
            "encode_queue_depth",
            "Items waiting for an encoder",
            queue_depth.clone(),
        );
        registry.register(
            "collection_documents",
            "Live documents per collection (last commit)",
            documents.clone(),
        );
        registry.register(
            "overload_rejections",
            "Requests refused with 503 because the server was at capacity",
            rejected.clone(),
        );
        registry.register(
            "searches_running",
            "Sparse searches scoring right now (on the blocking pool)",
            searches_running.clone(),
        );
        registry.register(
            "searches_cancelled",
            "Sparse searches stopped because their request timed out or its client went away",
            searches_cancelled.clone(),
        );
        registry.register(
            "heap_in_use_bytes",
            "Bytes the allocator has handed out (live allocations; glibc only)",
            heap_in_use.clone(),
        );
        registry.register(
            "heap_free_bytes",
            "Freed bytes the allocator keeps for reuse instead of returning them (glibc only)",
            heap_free.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                requests,
                latency,
                batch_sizes,
                queue_depth,
                documents,
                rejected,
                searches_running,
                searches_cancelled,
                heap_in_use,
                heap_free,
            }),
        }
    }

    pub fn observe_batch(&self, queue: &str, n: usize) {
        self.inner
            .batch_sizes
            .get_or_create(&QueueLabels {
                queue: queue.to_string(),
            })
            .observe(n as f64);
    }

    pub fn rejected(&self) {
        self.inner.rejected.inc();
    }

    /// Counts a search as running until the returned guard is dropped.
    pub fn search_running(&self) -> SearchRunning {
        self.inner.searches_running.inc();
        SearchRunning(self.clone())
    }

    /// Searches running now.
    pub fn searches_running(&self) -> i64 {
        self.inner.searches_running.get()
    }

    pub fn search_cancelled(&self) {
        self.inner.searches_cancelled.inc();
    }

    pub fn set_queue_depth(&self, queue: &str, depth: usize) {
        self.inner
            .queue_depth
            .get_or_create(&QueueLabels {
                queue: queue.to_string(),
            })
            .set(depth as i64);
    }

    pub fn set_documents(&self, collection: &str, n: u64) {
        self.inner
            .documents
            .get_or_create(&CollectionLabels {
                collection: collection.to_string(),
            })
            .set(n as i64);
    }

    pub fn forget_collection(&self, collection: &str) {
        self.inner.documents.remove(&CollectionLabels {
            collection: collection.to_string(),
        });
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        if let Some(heap) = crate::memory::heap() {
            self.inner.heap_in_use.set(heap.in_use as i64);
            self.inner.heap_free.set(heap.free as i64);
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.inner.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// A running search (see [`Metrics::search_running`]).
pub struct SearchRunning(Metrics);

impl Drop for SearchRunning {
    fn drop(&mut self) {
        self.0.inner.searches_running.dec();
    }
}

/// Middleware: counts every request and records its latency under its route template.
pub async fn track(State(metrics): State<Metrics>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let start = Instant::now();
    let response = next.run(req).await;
    let elapsed = start.elapsed().as_secs_f64();
    metrics
        .inner
        .requests
        .get_or_create(&RequestLabels {
            method,
            route: route.clone(),
            status: response.status().as_u16(),
        })
        .inc();
    metrics
        .inner
        .latency
        .get_or_create(&RouteLabels { route })
        .observe(elapsed);
    response
}
