//! The router in-process (`tower::ServiceExt::oneshot`, no socket): the API's contract on
//! precomputed vectors, and abandoned searches — a request timeout or a client that goes away
//! cancels the search, which stops within milliseconds and frees its thread.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector};
use lexlip_server::http::metrics::Metrics;
use lexlip_server::http::state::Limits;
use serde_json::{Value, json};
use tower::ServiceExt;

mod in_process;

use in_process::{add, call, create, search as search_ok};

/// The router of a server without encoders over `data`, requests timing out after `timeout`
/// (bodies up to 1 MiB).
fn app(data: &Path, timeout: Duration) -> (Router, Metrics) {
    let limits = Limits {
        max_body_bytes: 1 << 20,
        request_timeout: timeout,
        ..in_process::limits()
    };
    in_process::app(data, None, limits)
}

#[tokio::test]
async fn precomputed_vectors_in_process() {
    let data = tempfile::tempdir().unwrap();
    let (app, _) = app(data.path(), Duration::from_secs(30));
    let info = create(&app, "demo", Some(json!({"top_k_terms": 2}))).await;
    assert_eq!(info["documents"], 0);
    let docs = [
        json!({"id": "a", "modality": "image", "vector": {"dog": 120, "grass": 80, "sky": 5}}),
        json!({"id": "b", "modality": "text", "text": "a cat", "vector": {"cat": 1.5, "dog": 0.25}}),
    ];
    let added = add(&app, "demo", &docs).await;
    assert_eq!(added["documents"], 2);
    // Documents are cut to the collection's top-K after quantizing.
    let (status, a) = call(
        &app,
        "GET",
        "/v1/collections/demo/documents/a?explain=true",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(a["terms"], json!([["dog", 120], ["grass", 80]]));
    assert_eq!(a["dense"], false);
    let query = json!({"query": {"sparse": {"dog": 2, "cat": 1}}, "explain": true});
    let found = search_ok(&app, "demo", query).await;
    let hits = found["hits"].as_array().unwrap();
    assert_eq!(hits[0]["id"], "a");
    assert_eq!(hits[0]["score"], 240.0);
    assert_eq!(hits[1]["score"], (2 * 25 + 150) as f64);
    assert_eq!(hits[0]["explain"][0]["contribution"], 240);
    // The shared search options are refused with unknown fields, on every search route.
    let bad = json!({"query": {"sparse": {"dog": 2}}, "kk": 3});
    let (status, _) = call(&app, "POST", "/v1/collections/demo/search", Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let bad = json!({"collection": "demo", "text": "dog", "exactly": true});
    let (status, _) = call(&app, "POST", "/v1/search/text-to-image", Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // No encoder: a text query says which flag would give one.
    let text = json!({"collection": "demo", "text": "dog"});
    let (status, err) = call(&app, "POST", "/v1/search/text-to-image", Some(text)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    // Names the catalog refuses, and collections it does not have.
    let (status, _) = call(&app, "PUT", "/v1/collections/.hidden", None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = call(&app, "DELETE", "/v1/collections/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, list) = call(&app, "GET", "/v1/collections", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["collections"][0]["name"], "demo");
    assert_eq!(list["collections"][0]["top_k_terms"], 2);
    let (status, _) = call(&app, "DELETE", "/v1/collections/demo", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!data.path().join("collections/demo").exists());
}

/// A collection whose every document shares many terms with the query below, so that one
/// exact search scores millions of postings. An optimised build searches several times
/// faster, so it gets more documents: the search must take long enough (tens of milliseconds
/// at least) that a timeout of a twentieth of it is not lost in thread start-up and polling.
fn heavy_collection(data: &Path) -> QuantizedVector {
    const VOCAB: u64 = 4_000;
    const TERMS: u64 = 60;
    const DOCS: u64 = if cfg!(debug_assertions) {
        120_000
    } else {
        600_000
    };
    let c = lexlip_tests::free_collection(&data.join("collections/heavy"), "test");
    let mut x = 88_172_645_463_325_252u64;
    for i in 0..DOCS {
        let terms = (0..TERMS).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (format!("t{}", x % VOCAB), 1 + x % 200)
        });
        let mut pairs: Vec<(String, u64)> = terms.collect();
        pairs.sort();
        pairs.dedup_by(|a, b| a.0 == b.0);
        let doc = Document::new(DocId::new(format!("d{i}")).unwrap(), Modality::Image);
        c.add(doc, QuantizedVector::new(pairs).unwrap()).unwrap();
    }
    c.commit().unwrap();
    QuantizedVector::new((0..VOCAB).map(|t| (format!("t{t}"), 1 + t % 50))).unwrap()
}

fn search_body(query: &QuantizedVector) -> Value {
    json!({"query": {"sparse": serde_json::to_value(query).unwrap()}, "k": 10})
}

/// Searches the heavy collection for the top 10 of `query`; the status and answer.
async fn search_heavy(app: &Router, query: &QuantizedVector) -> (StatusCode, Value) {
    let body = Some(search_body(query));
    call(app, "POST", "/v1/collections/heavy/search", body).await
}

/// `lexlip_searches_running` and `lexlip_searches_cancelled_total` from the metrics.
fn searches(metrics: &Metrics) -> (i64, u64) {
    let text = metrics.render();
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    (
        value("lexlip_searches_running ") as i64,
        value("lexlip_searches_cancelled_total ") as u64,
    )
}

/// Waits until no search runs; returns how long that took.
async fn until_idle(metrics: &Metrics) -> Duration {
    until_settled(metrics, Duration::ZERO).await
}

/// Waits until one search was cancelled and none runs, or, when none was, until none runs and
/// `grace` has passed (a search whose thread started late has begun by then); returns how long
/// the wait took.
async fn until_settled(metrics: &Metrics, grace: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let (running, cancelled) = searches(metrics);
        if running == 0 && (cancelled == 1 || start.elapsed() >= grace) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "a search never ended"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_searches_stop_and_free_the_cpu() {
    let data = tempfile::tempdir().unwrap();
    let query = heavy_collection(data.path());

    // How long the search takes when nobody stops it.
    let (patient, metrics) = app(data.path(), Duration::from_secs(120));
    let start = Instant::now();
    let (status, full) = search_heavy(&patient, &query).await;
    let full_time = start.elapsed();
    assert_eq!(status, StatusCode::OK, "{full}");
    assert_eq!(full["hits"].as_array().unwrap().len(), 10);
    assert_eq!(searches(&metrics), (0, 0));

    // A request timeout far below that: 503 at once, and the search stops soon after. On a
    // busy machine the timeout can fire before the search has begun (then nothing runs and
    // nothing is cancelled): that try is repeated with a twice longer timeout, up to a fifth.
    // A search that ran to its end, uncancelled, also leaves (0, 0), so it fails every try.
    let mut timeout = full_time / 20;
    loop {
        let (hasty, metrics) = app(data.path(), timeout);
        let start = Instant::now();
        let (status, err) = search_heavy(&hasty, &query).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{err}");
        let left_running = until_settled(&metrics, full_time).await;
        let cancelled_after = start.elapsed();
        if searches(&metrics) == (0, 0) && timeout < full_time / 5 {
            eprintln!("timeout {timeout:?}: no search was cancelled; trying a longer timeout");
            timeout *= 2;
            continue;
        }
        assert_eq!(
            searches(&metrics),
            (0, 1),
            "the search was cancelled, not finished"
        );
        eprintln!(
            "full search {full_time:?}; timeout {timeout:?}: answered and stopped after {cancelled_after:?} ({left_running:?} after the answer)"
        );
        // Measured from the answer: before it, the debug build's JSON of 4,000 query terms
        // alone can take as long as the timeout.
        assert!(
            left_running < full_time / 4,
            "a search of {full_time:?} timed out after {timeout:?} but ran on for {left_running:?}"
        );
        break;
    }

    // A client that goes away (the request's future is dropped) cancels it the same way.
    let (gone, metrics) = app(data.path(), Duration::from_secs(120));
    let request = Request::builder()
        .method("POST")
        .uri("/v1/collections/heavy/search")
        .header("content-type", "application/json")
        .body(Body::from(search_body(&query).to_string()))
        .unwrap();
    let pending = tokio::spawn(gone.clone().oneshot(request));
    // Until the search is scoring, then the client hangs up.
    let start = Instant::now();
    while searches(&metrics).0 == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the search never started"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    pending.abort();
    let hung_up = Instant::now();
    let left_running = until_idle(&metrics).await;
    assert_eq!(searches(&metrics), (0, 1));
    eprintln!("client gone: the search stopped {left_running:?} later");
    assert!(
        hung_up.elapsed() < full_time / 4,
        "a search of {full_time:?} ran on for {left_running:?} after its client went away"
    );
}

/// A web page of another origin cannot write (a cross-origin multipart POST needs no CORS
/// preflight); the server's own page and clients that send no `Origin` can.
#[tokio::test]
async fn cross_origin_writes_are_refused() {
    let data = tempfile::tempdir().unwrap();
    // The in-process server allows the host name search.example (`--allowed-host`).
    let (app, _) = in_process::app(data.path(), None, in_process::limits());
    create(&app, "c", None).await;
    let doc = |id: &str| json!({"documents": [{"id": id, "text": "x", "vector": {"x": 1.0}}]});
    let post = |id: &str, host: &'static str, origin: Option<&'static str>| {
        let mut headers = vec![("host", host)];
        if let Some(o) = origin {
            headers.push(("origin", o));
        }
        let app = app.clone();
        let body = doc(id);
        async move {
            let (st, _, body) = in_process::send(
                &app,
                "POST",
                "/v1/collections/c/documents",
                Some(body),
                &headers,
            )
            .await;
            (st, String::from_utf8_lossy(&body).to_string())
        }
    };
    let (st, body) = post("evil", "127.0.0.1:8080", Some("http://evil.example")).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("--cors-origin http://evil.example"), "{body}");
    // DNS rebinding: the attacker's name resolves to this server, so Origin and Host agree.
    let (st, body) = post(
        "rebound",
        "evil.example:8080",
        Some("http://evil.example:8080"),
    )
    .await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("--allowed-host evil.example"), "{body}");
    // This server's own page, reached by an IP address, localhost or an allowed name.
    for (id, host, origin) in [
        ("ip", "127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("ipv6", "[::1]:8080", "http://[::1]:8080"),
        ("local", "localhost:8080", "http://localhost:8080"),
        ("named", "search.example", "https://search.example"),
    ] {
        let (st, body) = post(id, host, Some(origin)).await;
        assert_eq!(st, StatusCode::OK, "{host}: {body}");
    }
    // Clients that are not browsers send no Origin.
    let (st, body) = post("curl", "lexlip.local:8080", None).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let (_, info) = call(&app, "GET", "/v1/collections/c", None).await;
    assert_eq!(info["documents"], 5, "{info}");
}

/// Counts are whole numbers in the published schema (`integer`, which admits `2.0`): the
/// server takes what the schema admits and refuses fractions.
#[tokio::test]
async fn counts_written_as_whole_floats_are_accepted() {
    let data = tempfile::tempdir().unwrap();
    let (app, _) = in_process::app(data.path(), None, in_process::limits());
    let body = create(&app, "c", Some(json!({"top_k_terms": 8.0}))).await;
    assert_eq!(body["top_k_terms"], 8);
    let docs = [
        json!({"id": "a", "text": "x", "vector": {"x": 1.0}}),
        json!({"id": "b", "text": "x", "vector": {"x": 2.0}}),
        json!({"id": "c", "text": "x", "vector": {"x": 3.0}}),
    ];
    add(&app, "c", &docs).await;
    let search = |k: Value| json!({"query": {"sparse": {"x": 1.0}}, "k": k});
    let body = search_ok(&app, "c", search(json!(2.0))).await;
    assert_eq!(body["hits"].as_array().unwrap().len(), 2);
    for bad in [json!(2.5), json!(-1), json!("2")] {
        let (st, body) = call(
            &app,
            "POST",
            "/v1/collections/c/search",
            Some(search(bad.clone())),
        )
        .await;
        assert!(st.is_client_error(), "k = {bad}: {st} {body}");
    }
}

/// Every sparse hit says how well it matches: its score over the query's self-score (the score
/// of a document equal to the query), capped at 1. By hand:
///
/// ```text
/// a {dog 120, grass 80}   b {cat 150, dog 25}   c {sky 90}
/// {zebra 50}             shares no term: no hits
/// {dog 120, grass 80}    = a: self 120² + 80² = 20,800; a 20,800 → 1; b 120·25 = 3,000 → 0.144
/// {dog 100, cat 60}      self 13,600; a 12,000 → 0.882; b 2,500 + 9,000 = 11,500 → 0.846
/// ```
#[tokio::test]
async fn match_strength_is_the_share_of_the_self_score() {
    let data = tempfile::tempdir().unwrap();
    let (app, _) = app(data.path(), Duration::from_secs(30));
    create(&app, "m", Some(json!({}))).await;
    let docs = [
        json!({"id": "a", "modality": "image", "vector": {"dog": 120, "grass": 80}}),
        json!({"id": "b", "modality": "image", "vector": {"cat": 150, "dog": 25}}),
        json!({"id": "c", "modality": "image", "vector": {"sky": 90}}),
    ];
    add(&app, "m", &docs).await;
    let app = &app;
    let search = |q: Value| async move {
        let found = search_ok(app, "m", json!({"query": {"sparse": q}, "k": 10})).await;
        let ids = lexlip_tests::hit_ids(&found);
        let strengths = lexlip_tests::hit_numbers(&found, "match_strength");
        ids.into_iter().zip(strengths).collect::<Vec<_>>()
    };
    assert!(search(json!({"zebra": 50})).await.is_empty());
    let equal = search(json!({"dog": 120, "grass": 80})).await;
    assert_eq!(equal[0], ("a".to_string(), 1.0));
    assert_eq!(equal[1].0, "b");
    assert!((equal[1].1 - 3_000.0 / 20_800.0).abs() < 1e-12);
    let ordinary = search(json!({"dog": 100, "cat": 60})).await;
    let want = [("a", 12_000.0 / 13_600.0), ("b", 11_500.0 / 13_600.0)];
    assert_eq!(ordinary.len(), 2);
    for ((id, got), (want_id, want)) in ordinary.iter().zip(want) {
        assert_eq!(id, want_id);
        assert!((got - want).abs() < 1e-12, "{id}: {got} against {want}");
    }
}

/// Errors that say what exists and what to do: a mistyped collection is answered with the
/// names of the existing ones, and an image given as a file path instead of its bytes with how
/// to send the file.
#[tokio::test]
async fn errors_name_what_exists_and_what_to_do() {
    let data = tempfile::tempdir().unwrap();
    let (app, _) = app(data.path(), Duration::from_secs(30));
    // The status of a POST refused with a message that says each of `says`.
    let refused = |path: &'static str, body: Value, says: &'static [&'static str]| {
        let app = app.clone();
        async move {
            let (status, e) = call(&app, "POST", path, Some(body)).await;
            let message = e["error"]["message"].as_str().unwrap_or_default();
            assert!(says.iter().all(|s| message.contains(s)), "{message}");
            status
        }
    };
    let search = json!({"query": {"sparse": {"dog": 1}}});
    let fotos = "/v1/collections/fotos/search";
    let none_yet = refused(fotos, search.clone(), &["there are no collections yet"]).await;
    assert_eq!(none_yet, StatusCode::NOT_FOUND);
    for name in ["photos", "emoji"] {
        create(&app, name, None).await;
    }
    let named = refused(
        fotos,
        search,
        &["the collections are: emoji, photos", "PUT"],
    )
    .await;
    assert_eq!(named, StatusCode::NOT_FOUND);

    let image = json!({"collection": "photos", "image": "holiday/cat.jpg"});
    let says = &["looks like a file path", "-F image=@holiday/cat.jpg"];
    let status = refused("/v1/search/image-to-text", image, says).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // Text that is neither base64 nor a path keeps the base64 message.
    let image = json!({"collection": "photos", "image": "not an image!"});
    refused("/v1/search/image-to-text", image, &["not valid base64"]).await;
}

/// Searches `collection` with `body`; the answer must be a 422 whose message says `message`.
async fn search_refused(app: &Router, collection: &str, body: Value, message: &str) {
    let path = format!("/v1/collections/{collection}/search");
    let (st, err) = call(app, "POST", &path, Some(body)).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    let said = err["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains(message), "{err}");
}

/// Deleting a collection while background merges run (eight quick adds make tantivy merge)
/// answers truthfully and leaves nothing of it on disk, ten times in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_during_background_merges_is_clean() {
    let data = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_batch_docs: 1000,
        max_body_bytes: 8 << 20,
        ..in_process::limits()
    };
    let (app, _) = in_process::app(data.path(), None, limits);
    for round in 0..10 {
        create(&app, "busy", None).await;
        for batch in 0..8 {
            let docs: Vec<Value> = (0..1000)
                .map(|i| {
                    json!({"id": format!("d{batch}-{i}"), "modality": "text",
                           "vector": {format!("t{}", i % 50): 3, format!("u{}", i % 7): 1}})
                })
                .collect();
            add(&app, "busy", &docs).await;
        }
        let (st, body) = call(&app, "DELETE", "/v1/collections/busy", None).await;
        assert_eq!(st, StatusCode::OK, "round {round}: {body}");
        assert!(
            !data.path().join("collections/busy").exists(),
            "round {round}: files left after the delete"
        );
        let (st, _) = call(&app, "GET", "/v1/collections/busy", None).await;
        assert_eq!(st, StatusCode::NOT_FOUND);
    }
}

/// Hits carry at most 16 KiB of a document's stored text each (flagged when cut) and 2 MiB
/// together, so a response stays small whatever was stored; the document route has it whole.
#[tokio::test]
async fn hits_carry_bounded_text() {
    let data = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_body_bytes: 64 << 20,
        ..in_process::limits()
    };
    let (app, _) = in_process::app(data.path(), None, limits);
    create(&app, "long", None).await;
    let long = "é".repeat(300 << 10); // 600 KiB of two-byte characters
    let mut docs: Vec<Value> = (0..8)
        .map(|i| json!({"id": format!("long{i}"), "text": long, "vector": {"x": 10 - i}}))
        .collect();
    docs.push(json!({"id": "short", "text": "a short one", "vector": {"x": 1}}));
    add(&app, "long", &docs).await;
    // The hits of {x 1} among the first `k` of `collection`.
    let top = |collection: &'static str, k: usize| {
        let app = app.clone();
        async move {
            let body = json!({"query": {"sparse": {"x": 1}}, "k": k});
            lexlip_tests::hits(&search_ok(&app, collection, body).await).to_vec()
        }
    };
    let hits = top("long", 10).await;
    assert_eq!(hits.len(), 9);
    for h in &hits[..8] {
        let text = h["text"].as_str().unwrap();
        assert!(
            text.len() <= 16 << 10 && text.len() > (16 << 10) - 2,
            "{}",
            text.len()
        );
        assert!(long.starts_with(text));
        assert_eq!(h["text_truncated"], true);
    }
    assert_eq!(hits[8]["text"], "a short one");
    assert!(hits[8].get("text_truncated").is_none(), "{}", hits[8]);
    let (st, doc) = call(&app, "GET", "/v1/collections/long/documents/long0", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        doc["text"].as_str().map(str::len),
        Some(long.len()),
        "whole"
    );
    // Together: 150 hits of 16 KiB would be 2.4 MiB; past 2 MiB the hits carry no text.
    create(&app, "many", None).await;
    let text = "w".repeat(20 << 10);
    let docs: Vec<Value> = (0..150)
        .map(|i| json!({"id": format!("m{i:03}"), "text": text, "vector": {"x": 1000 - i}}))
        .collect();
    for chunk in docs.chunks(50) {
        add(&app, "many", chunk).await;
    }
    let hits = top("many", 150).await;
    assert_eq!(hits.len(), 150);
    let carried: usize = hits
        .iter()
        .filter_map(|h| h["text"].as_str())
        .map(str::len)
        .sum();
    assert!(carried <= 2 << 20, "{carried}");
    assert!(hits.iter().all(|h| h["text_truncated"] == true));
    assert!(hits.last().unwrap().get("text").is_none());
}

/// A server with `limits` over `data` and one collection, `four`, of the four documents the
/// search crate's IDF test works out by hand: a {cat 3}, b {cat 2, dog 1}, c {dog 5}, d {fish 1}.
async fn four_documents(data: &Path, limits: Limits) -> Router {
    let (app, _) = in_process::app(data, None, limits);
    create(&app, "four", None).await;
    let docs = [
        json!({"id": "a", "vector": {"cat": 3}}),
        json!({"id": "b", "vector": {"cat": 2, "dog": 1}}),
        json!({"id": "c", "vector": {"dog": 5}}),
        json!({"id": "d", "vector": {"fish": 1}}),
    ];
    add(&app, "four", &docs).await;
    app
}

/// The search body {cat 10, fish 10}, k 3, with the fields of `base` and then of `extra`.
fn cat_and_fish(base: Value, extra: Value) -> Value {
    let mut body = json!({"query": {"sparse": {"cat": 10, "fish": 10}}, "k": 3});
    let fields = body.as_object_mut().unwrap();
    for more in [base, extra] {
        fields.extend(more.as_object().unwrap().clone());
    }
    body
}

/// IDF weighting over HTTP, on the four documents worked out by hand in the search crate's
/// tests: `lexlip serve --idf 2` weighs {cat 10, fish 10} to {cat 12, fish 26}, lifting d (fish)
/// over b (cat 2); a request's own `"idf": 0` searches the query as given. Explanations carry
/// the weighted impacts and add up to the score; a bad exponent changes nothing and says why.
#[tokio::test]
async fn serve_idf_default_and_request_override() {
    let data = tempfile::tempdir().unwrap();
    let limits = Limits {
        idf: Some(2.0),
        ..in_process::limits()
    };
    let app = four_documents(data.path(), limits).await;
    let query = |extra: Value| cat_and_fish(json!({"explain": true}), extra);
    let weighted = search_ok(&app, "four", query(json!({}))).await;
    assert_eq!(
        lexlip_tests::hit_scores(&weighted),
        [("a".into(), 36.0), ("d".into(), 26.0), ("b".into(), 24.0)]
    );
    let d = &weighted["hits"][1]["explain"][0];
    assert_eq!(
        (d["term"].as_str(), d["query_impact"].as_u64()),
        (Some("fish"), Some(26))
    );
    let plain = search_ok(&app, "four", query(json!({"idf": 0}))).await;
    assert_eq!(
        lexlip_tests::hit_scores(&plain),
        [("a".into(), 30.0), ("b".into(), 20.0), ("d".into(), 10.0)]
    );
    search_refused(&app, "four", query(json!({"idf": 9})), "idf must be").await;
}

/// `lexlip serve --term-cut`: requests that set no precision knob search with the server's
/// cut (hits still scored exactly); `"exact": true` still searches exactly, a request's own
/// cut still conflicts with it, and a cut out of range is refused.
#[tokio::test]
async fn serve_term_cut_default_and_request_override() {
    let data = tempfile::tempdir().unwrap();
    let limits = Limits {
        term_cut: 0.5,
        ..in_process::limits()
    };
    let app = four_documents(data.path(), limits).await;
    let query = |extra: Value| cat_and_fish(json!({}), extra);
    let brute_force = [("a".into(), 30.0), ("b".into(), 20.0), ("d".into(), 10.0)];
    let exact = search_ok(&app, "four", query(json!({"exact": true}))).await;
    assert_eq!(lexlip_tests::hit_scores(&exact), brute_force);
    // Four documents in one block: the cut skips nothing, and what it returns is scored exactly.
    let default = search_ok(&app, "four", query(json!({}))).await;
    assert_eq!(lexlip_tests::hit_scores(&default), brute_force);
    let own = search_ok(&app, "four", query(json!({"term_cut": 0}))).await;
    assert_eq!(lexlip_tests::hit_scores(&own), brute_force);
    for (extra, message) in [
        (
            json!({"exact": true, "term_cut": 0.2}),
            "exclude each other",
        ),
        (json!({"term_cut": 1.5}), "term_cut must be"),
    ] {
        search_refused(&app, "four", query(extra), message).await;
    }
}
