//! Image thumbnails end to end: stored when image documents are added over HTTP (encoded by the
//! tiny LexLIP, or with a precomputed vector) and by `lexlip index`, served by
//! `GET /v1/collections/{name}/documents/{id}/thumbnail` with caching headers and 304s, 404 JSON
//! errors for everything without one, and collections made before thumbnails existed still
//! served. The router runs in-process (`oneshot`), the binary for `lexlip index` and `serve`.

use std::path::Path;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use lexlip_tests::{
    Server, b64_bytes as b64, lexlip_json, lexlip_tiny_checkpoint, lexlip_tiny_line,
};
use serde_json::json;
use tower::ServiceExt;

mod in_process;

use in_process::{add, call, create, send};

/// The router over `data`, with the tiny LexLIP encoders or none.
fn app(data: &Path, model: bool) -> Router {
    in_process::app(
        data,
        model.then(lexlip_tiny_checkpoint),
        in_process::limits(),
    )
    .0
}

fn encode_png(img: image::DynamicImage) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// A `w × h` PNG with an alpha channel: transparent (black underneath) but for an opaque red
/// square in the middle.
fn transparent_png(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbaImage::from_fn(w, h, |x, y| {
        let (dx, dy) = (x.abs_diff(w / 2), y.abs_diff(h / 2));
        if dx < w / 6 && dy < h / 6 {
            image::Rgba([220, 10, 10, 255])
        } else {
            image::Rgba([0, 0, 0, 0])
        }
    });
    encode_png(image::DynamicImage::ImageRgba8(img))
}

/// Decodes a served thumbnail, which must be a JPEG.
fn jpeg(bytes: &[u8]) -> image::RgbImage {
    assert_eq!(
        image::guess_format(bytes).unwrap(),
        image::ImageFormat::Jpeg
    );
    image::load_from_memory(bytes).unwrap().to_rgb8()
}

/// GET `path`: the status, the headers and the body bytes.
async fn get(app: &Router, path: &str) -> (StatusCode, HeaderMap, Vec<u8>) {
    send(app, "GET", path, None, &[]).await
}

/// The thumbnail route of the document `id` of `collection`.
fn thumbnail(collection: &str, id: &str) -> String {
    format!("/v1/collections/{collection}/documents/{id}/thumbnail")
}

/// The 404 of the thumbnail request of `id` in `collection`: a JSON error whose message
/// contains `says`.
async fn not_found(app: &Router, collection: &str, id: &str, says: &str) {
    let path = thumbnail(collection, id);
    let (status, err) = call(app, "GET", &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {err}");
    assert_eq!(err["error"]["code"], "not_found", "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{path}: {message}");
}

/// Precomputed vectors (no encoder): image bytes given with the vector still give a thumbnail.
#[tokio::test]
async fn thumbnails_of_precomputed_documents_with_cache_headers_and_404s() {
    let data = tempfile::tempdir().unwrap();
    let app = app(data.path(), false);
    let info = create(&app, "c", Some(json!({}))).await;
    assert_eq!(info["thumbnails"], true);
    let alpha = transparent_png(64, 64);
    let docs = [
        json!({"id": "emoji", "image": b64(&alpha), "vector": {"dog": 9}}),
        json!({"id": "wide", "image": b64(&transparent_png(600, 300)), "vector": {"dog": 5}}),
        json!({"id": "tall", "image": b64(&transparent_png(90, 700)), "vector": {"dog": 4}}),
        json!({"id": "no-image", "modality": "image", "vector": {"dog": 3}}),
        json!({"id": "caption", "text": "a dog", "vector": {"dog": 2}}),
    ];
    add(&app, "c", &docs).await;

    let path = &thumbnail("c", "emoji");
    let (status, headers, body) = get(&app, path).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "image/jpeg");
    assert_eq!(headers[header::CACHE_CONTROL], "public, max-age=3600");
    let etag = headers[header::ETAG].to_str().unwrap().to_string();
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 10,
        "{etag}"
    );
    assert!(body.len() < 4_000, "a 64 px emoji is {} bytes", body.len());
    let img = jpeg(&body);
    assert_eq!(img.dimensions(), (64, 64), "never enlarged");
    // Transparent pixels are white (not the black under them), the opaque centre red.
    assert!(
        img.get_pixel(1, 1).0.iter().all(|&c| c > 240),
        "{:?}",
        img.get_pixel(1, 1)
    );
    let centre = img.get_pixel(32, 32).0;
    assert!(
        centre[0] > 180 && centre[1] < 60 && centre[2] < 60,
        "{centre:?}"
    );

    // Revalidation: the current ETag gives a 304 with no body; another tag the image.
    for tag in [etag.as_str(), "\"other\", W/ETAG", "*"] {
        let tag = tag.replace("ETAG", &etag);
        let (status, h, body) = send(&app, "GET", path, None, &[("if-none-match", &tag)]).await;
        assert_eq!(status, StatusCode::NOT_MODIFIED, "{tag}");
        assert!(body.is_empty());
        assert_eq!(h[header::ETAG], etag.as_str());
    }
    let (status, _, again) = send(&app, "GET", path, None, &[("if-none-match", "\"stale\"")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again, body);

    // Longest side 256, aspect kept.
    let (_, _, wide) = get(&app, &thumbnail("c", "wide")).await;
    assert_eq!(jpeg(&wide).dimensions(), (256, 128));
    let (_, _, tall) = get(&app, &thumbnail("c", "tall")).await;
    assert_eq!(jpeg(&tall).dimensions(), (33, 256));
    // The stored document says whether it has one.
    let (_, got) = call(&app, "GET", "/v1/collections/c/documents/emoji", None).await;
    assert_eq!(got["thumbnail"], true);
    let (_, got) = call(&app, "GET", "/v1/collections/c/documents/caption", None).await;
    assert_eq!(got["thumbnail"], false);

    // Replacing the document replaces the thumbnail and its ETag.
    let docs =
        [json!({"id": "emoji", "image": b64(&transparent_png(40, 20)), "vector": {"dog": 9}})];
    add(&app, "c", &docs).await;
    let (status, h, body) = send(&app, "GET", path, None, &[("if-none-match", &etag)]).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(h[header::ETAG], etag.as_str());
    assert_eq!(jpeg(&body).dimensions(), (40, 20));

    // 404 JSON errors, each saying why.
    for (collection, id, says) in [
        ("nope", "emoji", "nope"),
        ("c", "absent", "no document \"absent\""),
        ("c", "caption", "text document"),
        ("c", "no-image", "no thumbnail"),
    ] {
        not_found(&app, collection, id, says).await;
    }

    // Image bytes that do not decode are refused as when they are encoded: 422, nothing added.
    let bad = json!({"documents": [
        {"id": "fine", "vector": {"dog": 1}},
        {"id": "broken", "image": b64(b"\x89PNG\r\n\x1a\nnot really"), "vector": {"dog": 1}},
    ]});
    let (status, err) = call(&app, "POST", "/v1/collections/c/documents", Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("broken"),
        "{err}"
    );
    assert_eq!(
        call(&app, "GET", "/v1/collections/c/documents/fine", None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );

    // A collection with thumbnails off stores none, and says so.
    let info = create(&app, "bare", Some(json!({"thumbnails": false}))).await;
    assert_eq!(info["thumbnails"], false);
    let docs = [json!({"id": "emoji", "image": b64(&alpha), "vector": {"dog": 9}})];
    add(&app, "bare", &docs).await;
    not_found(&app, "bare", "emoji", "no thumbnail").await;
}

/// A collection made before thumbnails existed opens, takes image documents and searches; its
/// thumbnail route says why there is none.
#[tokio::test]
async fn collections_made_before_thumbnails_are_still_served() {
    let data = tempfile::tempdir().unwrap();
    lexlip_tests::legacy_without_thumbnails(
        &data.path().join("collections/old"),
        lexlip_proto::TermSpace::free("old"),
        None,
    );
    let app = app(data.path(), false);
    let (status, info) = call(&app, "GET", "/v1/collections/old", None).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert_eq!(info["thumbnails"], false);
    let docs = [json!({"id": "a", "image": b64(&transparent_png(32, 32)), "vector": {"dog": 9}})];
    add(&app, "old", &docs).await;
    let query = json!({"query": {"sparse": {"dog": 1}}});
    let found = in_process::search(&app, "old", query).await;
    assert_eq!(found["hits"][0]["id"], "a");
    not_found(&app, "old", "a", "created before thumbnails").await;
}

/// Encoded over HTTP by the tiny LexLIP: JSON with base64 and a multipart upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_images_get_thumbnails() {
    let data = tempfile::tempdir().unwrap();
    let app = app(data.path(), true);
    create(&app, "c", Some(json!({}))).await;
    let docs = [
        json!({"id": "emoji", "image": b64(&transparent_png(72, 72))}),
        json!({"id": "wide", "image": b64(&transparent_png(600, 300))}),
        json!({"id": "t", "text": "a red square"}),
    ];
    add(&app, "c", &docs).await;
    let (status, _, body) = get(&app, &thumbnail("c", "emoji")).await;
    assert_eq!(status, StatusCode::OK);
    let img = jpeg(&body);
    assert_eq!(img.dimensions(), (72, 72));
    assert!(img.get_pixel(0, 0).0.iter().all(|&c| c > 240));
    let (_, _, wide) = get(&app, &thumbnail("c", "wide")).await;
    assert_eq!(jpeg(&wide).dimensions(), (256, 128));
    not_found(&app, "c", "t", "text document").await;

    // One multipart upload.
    let boundary = "thumbboundary";
    let mut form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"id\"\r\n\r\nupload\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"u.png\"\r\nContent-Type: image/png\r\n\r\n"
    )
    .into_bytes();
    form.extend_from_slice(&transparent_png(300, 600));
    form.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let request = Request::builder()
        .method("POST")
        .uri("/v1/collections/c/documents")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Body::from(form))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (_, _, up) = get(&app, &thumbnail("c", "upload")).await;
    assert_eq!(jpeg(&up).dimensions(), (128, 256));

    // A corrupt image is the 422 it always was.
    let bad = json!({"documents": [{"id": "x", "image": b64(b"GIF89a broken")}]});
    let (status, _) = call(&app, "POST", "/v1/collections/c/documents", Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

/// `lexlip index` of a TSV corpus stores thumbnails (read back through the library and served
/// by `lexlip serve`); `--no-thumbnails` stores none.
#[test]
fn index_stores_thumbnails_that_serve_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("images")).unwrap();
    std::fs::write(dir.join("images/emoji.png"), transparent_png(64, 64)).unwrap();
    std::fs::write(dir.join("images/wide.png"), transparent_png(600, 300)).unwrap();
    std::fs::write(dir.join("images/bad.png"), b"\x89PNG\r\n\x1a\nnope").unwrap();
    std::fs::write(
        dir.join("captions.tsv"),
        "title\tfilepath\timage_id\n\
         a red square\timages/emoji.png\temoji\n\
         a wide red square\timages/wide.png\twide\n\
         broken\timages/bad.png\tbad\n",
    )
    .unwrap();
    let data = dir.join("data");
    let index = |name: &str, extra: &str| {
        lexlip_json(&lexlip_tiny_line(
            &format!("index {extra} --json"),
            &[
                ("--collection", &data.join("collections").join(name)),
                ("--tsv", &dir.join("captions.tsv")),
            ],
        ))
    };
    let s = index("c", "");
    assert_eq!(s["indexed"], 5, "{s}");
    assert_eq!(s["skipped"]["corrupt_image"], 1, "{s}");
    let off = index("off", "--no-thumbnails");
    assert_eq!(off["indexed"], 5, "{off}");

    // Through the library.
    let c = lexlip_index::Collection::open(&data.join("collections/c")).unwrap();
    let snapshot = c.snapshot().unwrap();
    let thumb = |id: &str| snapshot.get(id, false).unwrap().unwrap().thumbnail;
    assert_eq!(jpeg(&thumb("emoji").unwrap()).dimensions(), (64, 64));
    let wide = thumb("wide").unwrap();
    assert_eq!(jpeg(&wide).dimensions(), (256, 128));
    assert_eq!(thumb("emoji#0"), None);
    let off_c = lexlip_index::Collection::open(&data.join("collections/off")).unwrap();
    assert!(!off_c.stores_thumbnails());
    assert_eq!(
        off_c
            .snapshot()
            .unwrap()
            .get("wide", false)
            .unwrap()
            .unwrap()
            .thumbnail,
        None
    );
    drop((snapshot, c, off_c));

    // Served by `lexlip serve`, bytes unchanged.
    let server = Server::start(&data, &[]);
    let response = ureq::get(&server.url(&thumbnail("c", "wide")))
        .call()
        .unwrap();
    assert_eq!(response.content_type(), "image/jpeg");
    let etag = response.header("etag").unwrap().to_string();
    let mut served = Vec::new();
    std::io::Read::read_to_end(&mut response.into_reader(), &mut served).unwrap();
    assert_eq!(served, wide);
    let again = ureq::get(&server.url(&thumbnail("c", "wide")))
        .set("If-None-Match", &etag)
        .call()
        .unwrap();
    assert_eq!(again.status(), 304);
    let (status, err) = server.call("GET", &thumbnail("off", "wide"), None);
    assert_eq!(status, 404, "{err}");
    server.stop();
}
