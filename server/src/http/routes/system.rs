//! Health, readiness, metrics and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::layers::key_check;
use crate::http::state::SharedState;

/// `GET /healthz`: the process is up.
pub async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({"status": "ok"}))
}

/// `GET /readyz`: models loaded and collections open (both happen before the server listens;
/// this reports what is loaded), and the dense indexes still being built in the background.
/// With `--protect-reads`, what is loaded (collection names, model paths) is shown only to a
/// request with an API key; the status to anyone.
pub async fn readyz(State(state): State<SharedState>, headers: HeaderMap) -> impl IntoResponse {
    if state.limits.protect_reads && key_check(&state, &headers).is_err() {
        return (StatusCode::OK, Json(serde_json::json!({"status": "ready"})));
    }
    let names = state.names();
    let collections: Vec<&String> = names.iter().map(|(n, _)| n).collect();
    // Dense indexes still being built in the background since startup: dense searches on
    // these wait for them.
    let dense_building: Vec<&String> = names
        .iter()
        .filter(|(_, o)| o.collection.snapshot().is_ok_and(|s| !s.dense_ready()))
        .map(|(n, _)| n)
        .collect();
    (
        StatusCode::OK,
        Json(serde_json::json!({
            "status": "ready",
            "models": state.encoders.describe(),
            "collections": collections,
            "broken_collections": state.broken(),
            "dense_building": dense_building,
        })),
    )
}

/// `GET /metrics`: Prometheus text format (per-collection document counts included, so it
/// needs an API key with `--protect-reads`).
pub async fn metrics(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    if state.limits.protect_reads
        && let Err(e) = key_check(&state, &headers)
    {
        return e.into_response();
    }
    for (queue, depth) in state.encoders.queue_depths() {
        state.metrics.set_queue_depth(queue, depth);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// `GET /v1/model/readme`: the card (`README.md`) of the model that encodes queries: how it was
/// made, what it knows and what it does not. Markdown; a browser (`Accept: text/html`, the
/// page's "how it was made" link) gets it rendered as a page.
pub async fn model_readme(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    let Some(text) = state.encoders.readme() else {
        return crate::http::error::ApiError::not_found(
            "this server's model has no README.md (or the server has no model)",
        )
        .into_response();
    };
    let wants_html = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"));
    let mut response = if wants_html {
        let html = crate::http::page::card::page("model card", text);
        let mut r = ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
        crate::http::page::protect(&mut r);
        r
    } else {
        (
            [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
            text.to_string(),
        )
            .into_response()
    };
    response
        .headers_mut()
        .insert(header::VARY, axum::http::HeaderValue::from_static("accept"));
    response
}
