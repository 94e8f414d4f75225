//! The router `lexlip serve` builds, run in-process (`tower::ServiceExt::oneshot`, no socket),
//! and requests to it: shared by the suites that test the HTTP layer without a process.
#![allow(dead_code)] // each suite uses part of it

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use lexlip_server::http::batcher::BatchConfig;
use lexlip_server::http::encoders::{EncoderService, ModelPaths};
use lexlip_server::http::metrics::Metrics;
use lexlip_server::http::state::{AppState, Limits};
use lexlip_server::http::{ServerConfig, router, shared};
use serde_json::Value;
use tower::ServiceExt;

/// Small limits for tests: 8 MiB bodies, 60 s per request, 8 requests at once, 100 documents
/// per add, no API keys. Suites change what they test with struct update syntax.
pub fn limits() -> Limits {
    Limits {
        max_body_bytes: 8 << 20,
        request_timeout: Duration::from_secs(60),
        body_timeout: Duration::from_secs(60),
        max_in_flight: 8,
        max_batch_docs: 100,
        api_keys: Vec::new(),
        protect_reads: false,
        query_threads: 2,
        idf: None,
        term_cut: 0.0,
    }
}

/// The router over `data`, with the encoders of `model` (a LexLIP checkpoint or directory) or
/// none, and its metrics.
pub fn app(data: &Path, model: Option<PathBuf>, limits: Limits) -> (Router, Metrics) {
    let metrics = Metrics::new();
    let batch = BatchConfig {
        max_batch: 8,
        max_wait: Duration::from_millis(1),
        queue: 16,
    };
    let paths = ModelPaths {
        model,
        ..ModelPaths::default()
    };
    let encoders = EncoderService::load(&paths, batch, &metrics).unwrap();
    let state = shared(AppState::open(data, encoders, metrics.clone(), limits).unwrap());
    let config = ServerConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        cors_origins: Vec::new(),
        allowed_hosts: vec!["search.example".into()],
    };
    (router(state, &config), metrics)
}

/// Sends a request (a JSON body when given); returns the status, the headers and the body bytes.
pub async fn send(
    app: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let response = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 16 << 20).await.unwrap();
    (parts.status, parts.headers, bytes.to_vec())
}

/// Sends a request; returns the status and the JSON body (`Null` when it is not JSON).
pub async fn call(
    app: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, bytes) = send(app, method, path, body, &[]).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Creates the collection `name` (with the `settings` body, when given), which must answer 201;
/// returns the answer.
pub async fn create(app: &Router, name: &str, settings: Option<Value>) -> Value {
    let (status, info) = call(app, "PUT", &format!("/v1/collections/{name}"), settings).await;
    assert_eq!(status, StatusCode::CREATED, "creating {name}: {info}");
    info
}

/// Adds `docs` to `collection` in one request; they must all be accepted. Returns the answer.
pub async fn add(app: &Router, collection: &str, docs: &[Value]) -> Value {
    let path = format!("/v1/collections/{collection}/documents");
    let body = serde_json::json!({ "documents": docs });
    let (status, added) = call(app, "POST", &path, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "adding to {collection}: {added}");
    added
}

/// Searches `collection` with `body`; the answer must be a 200.
pub async fn search(app: &Router, collection: &str, body: Value) -> Value {
    let path = format!("/v1/collections/{collection}/search");
    let (status, found) = call(app, "POST", &path, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    found
}
