//! The HTTP API (axum): routes, middleware (API keys, admission control, timeouts, metrics,
//! CORS) and the server loop with graceful shutdown.

pub mod api;
pub mod batcher;
pub mod encoders;
pub mod error;
pub mod gate;
pub mod metrics;
pub mod openapi;
pub mod page;
pub mod routes;
pub mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use error::ApiError;
use state::SharedState;

/// Everything `lexlip serve` configures.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub addr: SocketAddr,
    pub cors_origins: Vec<String>,
    /// Host names a browser may reach the server by for writes, besides IP addresses and
    /// `localhost` (`--allowed-host`; `*` allows any).
    pub allowed_hosts: Vec<String>,
}

/// The full router.
pub fn router(state: SharedState, config: &ServerConfig) -> Router {
    let v1 = Router::new()
        .route("/v1/collections", get(routes::collections::list))
        .route(
            "/v1/collections/{name}",
            put(routes::collections::create)
                .get(routes::collections::show)
                .delete(routes::collections::delete),
        )
        .route(
            "/v1/collections/{name}/documents",
            post(routes::documents::add),
        )
        .route(
            "/v1/collections/{name}/documents/{id}",
            get(routes::documents::get).delete(routes::documents::delete),
        )
        .route(
            "/v1/collections/{name}/documents/{id}/thumbnail",
            get(routes::documents::thumbnail),
        )
        .merge(routes::snapshots::router())
        .route(
            "/v1/collections/{name}/search",
            post(routes::search::search),
        )
        .route(
            "/v1/search/text-to-image",
            post(routes::search::text_to_image),
        )
        .route(
            "/v1/search/image-to-text",
            post(routes::search::image_to_text),
        )
        .route("/v1/encode", post(routes::encode::encode))
        .route("/v1/model/readme", get(routes::system::model_readme))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), admit))
        .layer(middleware::from_fn_with_state(state.clone(), receive_body))
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(
            Arc::new(Origins {
                cors: config.cors_origins.clone(),
                hosts: config.allowed_hosts.clone(),
            }),
            same_origin_writes,
        ))
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes));
    let mut app = Router::new()
        .route("/", get(page::index))
        .route("/assets/{file}", get(page::asset))
        .route("/healthz", get(routes::system::healthz))
        .route("/readyz", get(routes::system::readyz))
        .route("/metrics", get(routes::system::metrics))
        .route("/openapi.json", get(routes::system::openapi))
        .merge(v1)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::track,
        ))
        .with_state(state);
    if !config.cors_origins.is_empty() {
        let origin = if config.cors_origins.iter().any(|o| o == "*") {
            AllowOrigin::from(Any)
        } else {
            AllowOrigin::list(
                config
                    .cors_origins
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o).ok()),
            )
        };
        app = app.layer(
            CorsLayer::new()
                .allow_origin(origin)
                .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
                .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]),
        );
    }
    app
}

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

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see GET /openapi.json")
}

/// Receives a request's whole body before the request is admitted: a client that sends its
/// body slowly holds one of `4 × max_in_flight` upload slots for at most `body_timeout` (408),
/// never one of the `max_in_flight` slots that requests run in.
async fn receive_body(State(state): State<SharedState>, req: Request, next: Next) -> Response {
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
    let bytes = match tokio::time::timeout(timeout, routes::read_body(body, limit)).await {
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
async fn admit(State(state): State<SharedState>, mut req: Request, next: Next) -> Response {
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
struct Origins {
    cors: Vec<String>,
    hosts: Vec<String>,
}

/// Writes from web pages (requests with an `Origin`) must come from this server's own page or
/// an allowed CORS origin, and — against DNS rebinding, where an attacker's name comes to
/// resolve to this server, so that `Origin` and `Host` agree on the attacker's name — reach it
/// by an IP address, `localhost` or an `--allowed-host` name. Clients that are not browsers
/// send no `Origin` and are not concerned.
async fn same_origin_writes(
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
async fn authorize(State(state): State<SharedState>, req: Request, next: Next) -> Response {
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

/// How connections are accepted: what a slow or idle client may hold.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A client must send a request's headers within this time, or its connection is closed
    /// (also between requests of a kept-alive connection).
    pub header_timeout: Duration,
    /// Connections open at once; the next one waits in the listen queue until one closes.
    pub max_connections: usize,
}

/// Fails, with what to do, when `addr` cannot be listened on (the port is taken, or the address
/// is not this machine's): for commands that would otherwise work for minutes first.
pub fn check_port(addr: SocketAddr) -> anyhow::Result<()> {
    std::net::TcpListener::bind(addr)
        .map(drop)
        .map_err(|e| cannot_listen(addr, &e))
}

fn cannot_listen(addr: SocketAddr, e: &std::io::Error) -> anyhow::Error {
    let hint = match e.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "another program (or another lexlip) listens on port {}: stop it, or choose another \
             port with --addr {}:{} (port 0 lets the system pick one)",
            addr.port(),
            addr.ip(),
            addr.port().wrapping_add(1).max(1024)
        ),
        std::io::ErrorKind::AddrNotAvailable => {
            "that address is not one of this machine's: use --addr 127.0.0.1:PORT (this \
             machine only) or --addr 0.0.0.0:PORT (every interface)"
                .to_string()
        }
        _ => "choose another address with --addr".to_string(),
    };
    anyhow::anyhow!("cannot listen on {addr}: {e}; {hint}")
}

/// Serves until Ctrl-C or SIGTERM, then stops accepting and finishes in-flight requests.
///
/// Each connection is served by hyper's HTTP/1 with a header-read timeout (axum's own `serve`
/// runs without a timer, so a client that sends headers slowly held its connection forever),
/// and at most `max_connections` are open at once.
pub async fn serve(
    state: SharedState,
    config: ServerConfig,
    limits: ConnectionLimits,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| cannot_listen(config.addr, &e))?;
    let local = listener.local_addr()?;
    // Tests and scripts read this line to find the port (with --addr 127.0.0.1:0).
    println!("lexlip listening on http://{local}");
    tracing::info!(%local, "listening");
    let app = router(state.clone(), &config);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot?,
        };
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                hyper_util::service::TowerToHyperService::new(app.clone()),
            );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    if crate::signal::interrupted().await.is_err() {
        // Signals cannot be watched: serve until the process is killed.
        std::future::pending::<()>().await;
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

/// Shared-state constructor used by `lexlip serve`.
pub fn shared(state: state::AppState) -> SharedState {
    Arc::new(state)
}
