//! What every request passes through before its route (its body received, admission and the
//! timeout, same-origin writes, API keys), and what routes share of it (reading a body, the API
//! key and `If-None-Match` checks). Below both the router (`super`) and the routes.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, ApiResult};
use super::gate;
use super::state::{self, SharedState};

/// Whether `If-None-Match` names `etag` (or is `*`). Comparison is weak, as RFC 9110 asks for
/// this header: a `W/` prefix is ignored.
pub(crate) fn matches_etag(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

pub(super) async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see GET /openapi.json")
}

/// Receives a request's whole body before the request is admitted: a client that sends its
/// body slowly holds one of `4 × max_in_flight` upload slots for at most `body_timeout` (408),
/// never one of the `max_in_flight` slots that requests run in.
pub(super) async fn receive_body(
    State(state): State<SharedState>,
    req: Request,
    next: Next,
) -> Response {
    if matches!(
        *req.method(),
        Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS
    ) {
        return next.run(req).await;
    }
    let Ok(slot) = state.uploads.clone().try_acquire_owned() else {
        state.metrics.rejected();
        return ApiError::unavailable(
            "too many request bodies are being received at once; retry shortly",
            1,
        )
        .into_response();
    };
    let limit = state.limits.max_body_bytes;
    let timeout = state.limits.body_timeout;
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(timeout, read_body(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(too_large)) => return too_large.into_response(),
        Err(_) => {
            return ApiError::new(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                lexlip_proto::api::ErrorCode::BadRequest,
                format!(
                    "the request body did not arrive within {} s (--body-timeout-s)",
                    timeout.as_secs_f64()
                ),
            )
            .into_response();
        }
    };
    drop(slot);
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

tokio::task_local! {
    /// The admission permit of the request this task serves.
    pub(crate) static ADMISSION: Arc<tokio::sync::OwnedSemaphorePermit>;
}

/// Admission control and the per-request timeout: at most `max_in_flight` requests run at
/// once (more get 503 + Retry-After at once, so memory stays flat under overload), and each
/// must finish within `request_timeout` — except a write that has begun to commit, which is
/// waited for and answered (see [`gate`]): a 503 always means nothing was written.
pub(super) async fn admit(
    State(state): State<SharedState>,
    mut req: Request,
    next: Next,
) -> Response {
    let Ok(permit) = state.admission.clone().try_acquire_owned() else {
        state.metrics.rejected();
        return ApiError::unavailable(
            "the server is at capacity (--max-in-flight); retry shortly",
            1,
        )
        .into_response();
    };
    let gate = gate::CommitGate::default();
    req.extensions_mut().insert(gate.clone());
    // A client that goes away abandons its request too.
    let _abandon_on_drop = gate.abandon_on_drop();
    let timeout = state.limits.request_timeout;
    // The blocking work the request starts holds the permit too (see `routes::blocking`).
    let permit = Arc::new(permit);
    let run = ADMISSION.scope(permit.clone(), next.run(req));
    tokio::pin!(run);
    let response = tokio::select! {
        response = &mut run => response,
        () = tokio::time::sleep(timeout) => {
            if gate.abandon() {
                ApiError::unavailable(
                    format!(
                        "the request took longer than {} s (--request-timeout-s); nothing was written",
                        timeout.as_secs_f64()
                    ),
                    1,
                )
                .into_response()
            } else {
                run.await
            }
        }
    };
    drop(permit);
    response
}

/// Who may write from a web page: CORS origins and the host names the server is reached by.
pub(super) struct Origins {
    pub cors: Vec<String>,
    pub hosts: Vec<String>,
}

/// Writes from web pages (requests with an `Origin`) must come from this server's own page or
/// an allowed CORS origin, and — against DNS rebinding, where an attacker's name comes to
/// resolve to this server, so that `Origin` and `Host` agree on the attacker's name — reach it
/// by an IP address, `localhost` or an `--allowed-host` name. Clients that are not browsers
/// send no `Origin` and are not concerned.
pub(super) async fn same_origin_writes(
    State(allowed): State<Arc<Origins>>,
    req: Request,
    next: Next,
) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let Some(origin) = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
    else {
        return next.run(req).await;
    };
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let cors = allowed.cors.iter().any(|o| o == "*" || o == origin);
    let same = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| !host.is_empty() && rest == host);
    if !(same || cors) {
        return ApiError::forbidden(format!(
            "a write from a web page of another origin ({origin}) is refused; allow it with \
             --cors-origin {origin}"
        ))
        .into_response();
    }
    if !cors && !host_allowed(host, &allowed.hosts) {
        let name = host_name(host);
        return ApiError::forbidden(format!(
            "a write from a web page that reached this server as {name:?} is refused (a name \
             other than an IP address or localhost could be DNS rebinding); if {name} is this \
             server's name, start it with --allowed-host {name}"
        ))
        .into_response();
    }
    next.run(req).await
}

/// The name part of a `Host` header (`[::1]:8080` → `[::1]`, `a.example:80` → `a.example`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// Whether a browser may write through `host`: an IP literal, `localhost`, or an allowed name.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host_name(host);
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed
            .iter()
            .any(|a| a == "*" || a.eq_ignore_ascii_case(name))
}

/// API keys: required on write routes when any is configured, and on reads with
/// `--protect-reads`. Sent as `Authorization: Bearer KEY` or `X-Api-Key: KEY`.
pub(super) async fn authorize(
    State(state): State<SharedState>,
    req: Request,
    next: Next,
) -> Response {
    let keys = &state.limits.api_keys;
    if keys.is_empty() {
        return next.run(req).await;
    }
    let path = req.uri().path();
    // Searching and encoding are POSTs but read nothing but what they are sent.
    let is_read = req.method() == Method::GET
        || (req.method() == Method::POST
            && (path.ends_with("/search")
                || path.starts_with("/v1/search/")
                || path == "/v1/encode"));
    if is_read && !state.limits.protect_reads {
        return next.run(req).await;
    }
    match key_check(&state, req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Whether `headers` carry one of the server's API keys (`Authorization: Bearer KEY` or
/// `X-Api-Key: KEY`); always true on a server without keys.
pub(crate) fn key_check(state: &state::AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let keys = &state.limits.api_keys;
    if keys.is_empty() {
        return Ok(());
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            // The scheme is case-insensitive (RFC 7235).
            let (scheme, key) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
        })
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()));
    match given {
        Some(k)
            if keys
                .iter()
                .any(|key| constant_time_eq(key.as_bytes(), k.as_bytes())) =>
        {
            Ok(())
        }
        Some(_) => Err(ApiError::unauthorized("invalid API key")),
        None => Err(ApiError::unauthorized(
            "this route needs an API key: send Authorization: Bearer KEY or X-Api-Key: KEY",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads a whole body, refusing more than `limit` bytes with a 413.
pub async fn read_body(body: Body, limit: usize) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::too_large(format!(
            "request body larger than {limit} bytes (the server's --max-body-mb)"
        ))
    })
}
