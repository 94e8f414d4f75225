//! The search page `GET /` serves: plain HTML, CSS and JS compiled into the binary, so the
//! page needs no build step, no CDN and no file on disk. Every asset is a fixed entry of
//! [`ASSETS`]; nothing else is served from here.
//!
//! The page talks only to this server's JSON API (`/v1/...`). A Content-Security-Policy that
//! allows nothing but this origin keeps it that way, and an `ETag` per asset lets browsers
//! revalidate instead of downloading again.

use std::hash::{Hash, Hasher};
use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

pub mod card;

/// Scripts, styles and connections from this origin only; images also from `blob:` (a
/// preview of the uploaded query image) and `data:`; no framing, no plugins, no forms
/// posting elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_str!("index.html"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("app.css"),
    },
    Asset {
        name: "icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("icon.svg"),
    },
];

/// A strong validator per asset: a hash of its bytes (fixed for a given binary).
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            a.body.hash(&mut h);
            format!("\"{:016x}\"", h.finish())
        })
        .collect()
});

/// Total bytes of the page's own assets (the page budget is checked in a test).
pub fn assets_bytes() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

/// `GET /`: the search page.
pub async fn index(headers: HeaderMap) -> Response {
    serve(0, &headers, "no-cache")
}

/// `GET /assets/{file}`: the page's script, style sheet and icon.
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS
        .iter()
        .position(|a| a.name == file && a.name != "index.html")
    {
        // Revalidated after five minutes: a new binary's assets show up soon without a
        // version in every URL.
        Some(i) => serve(i, &headers, "public, max-age=300"),
        None => ApiError::not_found(format!("no page asset {file:?}")).into_response(),
    }
}

/// The page's headers on a response: this origin only, no sniffing, no referrer.
pub fn protect(response: &mut Response) {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

fn serve(i: usize, headers: &HeaderMap, cache: &'static str) -> Response {
    let asset = &ASSETS[i];
    let etag = &ETAGS[i];
    let mut response = if crate::http::layers::matches_etag(headers, etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    protect(&mut response);
    response
}
