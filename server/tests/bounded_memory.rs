//! The server's memory stays bounded under the requests of the second reliability probe
//! (issue 39), measured as the real binary's peak RSS:
//! - concurrent searches with 40-megapixel images, and one add request of many of them (each
//!   under the per-image limit), decode them a few at a time within the decode budget;
//! - searches over documents of 15 MiB of stored text carry 16 KiB of each, so four at once
//!   hold a few documents' worth, not forty.

use lexlip_tests::Server;
use serde_json::{Value, json};

const LIMIT: u64 = 1_500_000_000;

/// One test of this file at a time: each measures one server's memory, and on a small machine
/// servers decoding at once would slow one another past their time limits.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn big_png_b64() -> String {
    let big = image::GrayImage::from_pixel(6000, 6600, image::Luma([90u8]));
    let mut png = Vec::new();
    big.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &png)
}

/// A server with the emoji model and time for large pictures (a debug build takes seconds for
/// each of 6000 × 6600).
fn model_server(data: &std::path::Path) -> Server {
    Server::start(
        data,
        &[
            "--model".into(),
            lexlip_tests::emoji_model().display().to_string(),
            "--request-timeout-s".into(),
            "120".into(),
        ],
    )
}

#[test]
fn an_add_of_many_large_images_stays_within_the_decode_budget() {
    let _alone = HEAVY.lock().unwrap_or_else(|p| p.into_inner());
    let data = tempfile::tempdir().unwrap();
    let s = model_server(data.path());
    let (st, body) = s.call("PUT", "/v1/collections/big", Some(&json!({})));
    assert_eq!(st, 201, "{body}");
    let image = big_png_b64();
    let docs: Vec<Value> = (0..8)
        .map(|i| json!({"id": format!("img{i}"), "modality": "image", "image": image}))
        .collect();
    // The server gives up after its --request-timeout-s (120 s); the client waits that long.
    let (st, body) = s.call_within(
        "POST",
        "/v1/collections/big/documents",
        Some(&json!({ "documents": docs })),
        std::time::Duration::from_secs(130),
    );
    // Decoded within the budget, the add succeeds; or, past 20 s of waiting, it is refused
    // whole with a 503 to retry. Never a 500.
    assert!(st == 200 || st == 503, "{st} {body}");
    let peak = s.peak_rss();
    eprintln!(
        "8 images of 39.6 megapixels in one add: {st}, peak RSS {} MB",
        peak >> 20
    );
    assert!(peak < LIMIT, "peak RSS {} MB", peak >> 20);
    let (st, _) = s.call("GET", "/v1/collections/big", None);
    assert_eq!(st, 200, "the server still answers");
    s.stop();
}

#[test]
fn searches_over_huge_stored_texts_stay_small() {
    let _alone = HEAVY.lock().unwrap_or_else(|p| p.into_inner());
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(data.path(), &[]);
    let (st, body) = s.call("PUT", "/v1/collections/t", Some(&json!({})));
    assert_eq!(st, 201, "{body}");
    let text = "y".repeat(15 << 20);
    for i in 0..40 {
        let doc = json!({"documents": [
            {"id": format!("d{i}"), "text": text, "vector": {"x": 100 - i}},
        ]});
        let (st, body) = s.call("POST", "/v1/collections/t/documents", Some(&doc));
        assert_eq!(st, 200, "{body}");
    }
    eprintln!("after the adds: peak RSS {} MB", s.peak_rss() >> 20);
    let query = json!({"query": {"sparse": {"x": 1}}, "k": 40});
    let sizes: Vec<usize> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let (st, found) = s.call("POST", "/v1/collections/t/search", Some(&query));
                    assert_eq!(st, 200, "{found}");
                    found.to_string().len()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        sizes.iter().all(|&n| n < 2 << 20),
        "response sizes {sizes:?}"
    );
    let peak = s.peak_rss();
    eprintln!(
        "4 searches over 40 documents of 15 MiB: responses {sizes:?} B, peak RSS {} MB",
        peak >> 20
    );
    assert!(peak < LIMIT, "peak RSS {} MB", peak >> 20);
    s.stop();
}

/// Eight concurrent image→text searches, each with a 6000 × 6600 picture (39.6 megapixels,
/// just under the per-image limit): decoded a few at a time within the server's budget, every
/// one is answered (200, or 503 to retry, never 500) and the server's peak memory stays under
/// 1.5 GB (decoded all at once they need several GB).
#[test]
fn concurrent_large_images_stay_within_the_decode_budget() {
    let _alone = HEAVY.lock().unwrap_or_else(|p| p.into_inner());
    let data = tempfile::tempdir().unwrap();
    let s = model_server(data.path());
    lexlip_tests::index_emoji(&s, "emoji");
    let body = json!({"collection": "emoji", "image": big_png_b64(), "k": 3});
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| s.call("POST", "/v1/search/image-to-text", Some(&body)).0))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        statuses.iter().all(|&st| st == 200 || st == 503),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200), "{statuses:?}");
    let peak = s.peak_rss();
    assert!(peak < LIMIT, "peak RSS {} MB", peak >> 20);
    eprintln!(
        "8 concurrent 39.6-megapixel searches: {statuses:?}, peak RSS {} MB",
        peak >> 20
    );
    let (status, _) = s.call("GET", "/readyz", None);
    assert_eq!(status, 200, "the server still answers");
    s.stop();
}
