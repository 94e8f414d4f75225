//! The search page served by `GET /`, in-process: every asset the page names is served with
//! its type, a Content-Security-Policy and a validator; nothing points off the server; the
//! script only looks up elements the page has. (server/tests/browser.rs drives it in Chromium.)

use std::collections::BTreeSet;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use lexlip_server::http::page;
use lexlip_server::http::state::Limits;

mod in_process;

/// The router over `data`, without encoders, API keys protecting reads too.
fn app(data: &std::path::Path) -> Router {
    let limits = Limits {
        api_keys: vec!["secret".into()],
        protect_reads: true,
        ..in_process::limits()
    };
    in_process::app(data, None, limits).0
}

/// GET `path` (with `If-None-Match: etag` when given): status, headers, body as text.
async fn get(app: &Router, path: &str, etag: Option<&str>) -> (StatusCode, HeaderMap, String) {
    let headers: Vec<(&str, &str)> = etag.map(|e| ("if-none-match", e)).into_iter().collect();
    let (status, headers, bytes) = in_process::send(app, "GET", path, None, &headers).await;
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// The `Content-Type` of an answer.
fn content_type(headers: &HeaderMap) -> &str {
    headers[header::CONTENT_TYPE].to_str().unwrap()
}

/// `id="…"` attributes of the page.
fn ids(html: &str) -> BTreeSet<String> {
    html.split("id=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_from_the_binary() {
    let data = tempfile::tempdir().unwrap();
    // API keys protecting reads must not hide the page itself (only the API calls need one).
    let app = app(data.path());
    let (status, headers, html) = get(&app, "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(content_type(&headers).starts_with("text/html"));
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
    assert!(html.contains("<title>lexlip search</title>"));

    let wanted = [
        ("/assets/app.js", "text/javascript"),
        ("/assets/app.css", "text/css"),
        ("/assets/icon.svg", "image/svg+xml"),
    ];
    let mut total = html.len();
    for (path, kind) in wanted {
        assert!(html.contains(path), "the page does not name {path}");
        let (status, headers, body) = get(&app, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(content_type(&headers).starts_with(kind), "{path}");
        assert!(headers.contains_key(header::CONTENT_SECURITY_POLICY));
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        total += body.len();
        // Revalidation: the same validator gives 304 without a body.
        let etag = headers[header::ETAG].to_str().unwrap().to_string();
        let (status, _, body) = get(&app, path, Some(&etag)).await;
        assert_eq!(status, StatusCode::NOT_MODIFIED, "{path}");
        assert!(body.is_empty());
        let (status, _, _) = get(&app, path, Some("\"stale\"")).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    assert_eq!(total, page::assets_bytes());
    assert!(
        total <= 150 * 1024,
        "the page weighs {total} bytes (budget 150 KB)"
    );
}

#[tokio::test]
async fn nothing_else_is_served_as_an_asset() {
    let data = tempfile::tempdir().unwrap();
    let app = app(data.path());
    for path in [
        "/assets/index.html",
        "/assets/..%2FCargo.toml",
        "/assets/mod.rs",
        "/assets/",
        "/index.html",
    ] {
        let (status, headers, body) = get(&app, path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(content_type(&headers).contains("json"), "{path}");
        assert!(body.contains("\"not_found\""), "{path}: {body}");
    }
}

#[tokio::test]
async fn the_page_names_no_other_origin_and_the_script_finds_its_elements() {
    let data = tempfile::tempdir().unwrap();
    let app = app(data.path());
    let (_, _, html) = get(&app, "/", None).await;
    let (_, _, js) = get(&app, "/assets/app.js", None).await;
    let (_, _, css) = get(&app, "/assets/app.css", None).await;
    for (name, text) in [("index.html", &html), ("app.js", &js), ("app.css", &css)] {
        for scheme in ["http://", "https://", "//fonts.", "@import"] {
            assert!(!text.contains(scheme), "{name} names {scheme}");
        }
    }
    // Inline scripts, styles and handlers would be refused by the policy: none may exist.
    assert!(!html.contains("<script>") && !html.contains("style="));
    for handler in [
        "onclick=",
        "onload=",
        "onerror=",
        "onsubmit=",
        "onchange=",
        "oninput=",
    ] {
        assert!(!html.contains(handler), "inline {handler}");
    }
    let present = ids(&html);
    let looked_up: BTreeSet<String> = js
        .split("$(\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_string)
        .collect();
    assert!(looked_up.len() > 20, "{looked_up:?}");
    let missing: Vec<_> = looked_up.difference(&present).collect();
    assert!(
        missing.is_empty(),
        "app.js looks up ids the page lacks: {missing:?}"
    );
}

/// With `--protect-reads`, `/readyz` tells anyone that the server is ready but shows what it
/// holds (collections, models) only with a key, and `/metrics` and `/openapi.json` need one;
/// `/healthz` is open.
#[tokio::test]
async fn protected_reads_cover_readyz_and_metrics() {
    let data = tempfile::tempdir().unwrap();
    let app = app(data.path());
    let key = [("x-api-key", "secret")];
    let (st, _, body) = in_process::send(&app, "PUT", "/v1/collections/private", None, &key).await;
    assert_eq!(
        st,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (st, _, body) = get(&app, "/readyz", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(
        body.contains("ready") && !body.contains("private"),
        "{body}"
    );
    let (st, _, body) = in_process::send(&app, "GET", "/readyz", None, &key).await;
    assert_eq!(st, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("private"));
    let (st, _, _) = get(&app, "/metrics", None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (st, _, body) = in_process::send(&app, "GET", "/metrics", None, &key).await;
    assert_eq!(st, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("private"));
    let (st, _, _) = get(&app, "/healthz", None).await;
    assert_eq!(st, StatusCode::OK);
    // The API's description is a read like the others; the key's scheme is case-insensitive.
    let (st, _, _) = get(&app, "/openapi.json", None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    for auth in ["Bearer secret", "bearer secret", "BEARER  secret"] {
        let (st, _, _) = in_process::send(
            &app,
            "GET",
            "/openapi.json",
            None,
            &[("authorization", auth)],
        )
        .await;
        assert_eq!(st, StatusCode::OK, "{auth}");
    }
    let (st, _, _) = in_process::send(
        &app,
        "GET",
        "/openapi.json",
        None,
        &[("authorization", "Basic x")],
    )
    .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}
