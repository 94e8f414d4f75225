//! Health, readiness, metrics and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use crate::http::state::SharedState;

/// `GET /healthz`: the process is up.
pub async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({"status": "ok"}))
}

/// `GET /readyz`: models loaded and collections open (both happen before the server listens;
/// this reports what is loaded).
pub async fn readyz(State(state): State<SharedState>) -> impl IntoResponse {
    let collections: Vec<String> = state.names().into_iter().map(|(n, _)| n).collect();
    (
        StatusCode::OK,
        Json(serde_json::json!({
            "status": "ready",
            "models": state.encoders.describe(),
            "collections": collections,
            "broken_collections": state.broken(),
        })),
    )
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(state): State<SharedState>) -> impl IntoResponse {
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
}

/// `GET /openapi.json`
pub async fn openapi() -> impl IntoResponse {
    Json(crate::http::openapi::document())
}
