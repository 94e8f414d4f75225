//! The HTTP API (axum): routes, middleware (API keys, admission control, timeouts, metrics,
//! CORS) and the server loop with graceful shutdown.

pub mod api;
pub mod batcher;
pub mod encoders;
pub mod error;
pub mod gate;
pub mod layers;
pub mod metrics;
pub mod openapi;
pub mod page;
pub mod routes;
pub mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, header};
use axum::middleware;
use axum::routing::{get, post, put};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use layers::{Origins, admit, authorize, not_found, receive_body, same_origin_writes};
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
        .route("/openapi.json", get(openapi::serve))
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
