//! `--max-image-pixels`: an image larger than the limit is refused from its header with an
//! error that names the option, and nothing of the request is stored; images under it work.
//! The decode budget: many large images at once, across concurrent requests, decode a few at a
//! time, so the server's memory stays bounded.

use lexlip_tests::{Server, b64, emoji_png};
use serde_json::json;

#[test]
fn images_over_the_pixel_limit_are_refused_and_nothing_is_stored() {
    let data = tempfile::tempdir().unwrap();
    // The fixtures are 64 × 64 = 4,096 pixels.
    let s = Server::start(data.path(), &["--max-image-pixels".into(), "4000".into()]);
    let (status, body) = s.call("PUT", "/v1/collections/c", Some(&json!({})));
    assert_eq!(status, 201, "{body}");
    let image = b64(&emoji_png("1f436"));
    let (status, body) = s.call(
        "POST",
        "/v1/collections/c/documents",
        Some(&json!({"documents": [
            {"id": "t", "text": "a dog", "vector": {"dog": 1.0}},
            {"id": "i", "modality": "image", "image": image, "vector": {"dog": 1.0}},
        ]})),
    );
    assert!((400..500).contains(&status), "{status} {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("64 × 64 = 4096 pixels") && message.contains("--max-image-pixels"),
        "{body}"
    );
    let (_, info) = s.call("GET", "/v1/collections/c", None);
    assert_eq!(info["documents"], 0, "{info}");
    s.stop();

    let s = Server::start(data.path(), &["--max-image-pixels".into(), "4096".into()]);
    let (status, body) = s.call(
        "POST",
        "/v1/collections/c/documents",
        Some(&json!({"documents": [
            {"id": "i", "modality": "image", "image": image, "vector": {"dog": 1.0}},
        ]})),
    );
    assert_eq!(status, 200, "{body}");
    s.stop();
}

/// Eight concurrent image→text searches, each with a 6000 × 6600 picture (39.6 megapixels,
/// just under the per-image limit): decoded a few at a time within the server's budget, every
/// one is answered (200, or 503 to retry, never 500) and the server's peak memory stays under
/// 1.5 GB (decoded all at once they need several GB).
#[test]
fn concurrent_large_images_stay_within_the_decode_budget() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(
        data.path(),
        &[
            "--model".into(),
            lexlip_tests::emoji_model().display().to_string(),
        ],
    );
    lexlip_tests::index_emoji(&s, "emoji");
    let big = image::GrayImage::from_pixel(6000, 6600, image::Luma([128u8]));
    let mut png = Vec::new();
    big.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let body = json!({
        "collection": "emoji",
        "image": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &png),
        "k": 3,
    });
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
    assert!(peak < 1_500_000_000, "peak RSS {} MB", peak >> 20);
    eprintln!(
        "8 concurrent 39.6-megapixel searches: {statuses:?}, peak RSS {} MB",
        peak >> 20
    );
    let (status, _) = s.call("GET", "/readyz", None);
    assert_eq!(status, 200, "the server still answers");
    s.stop();
}
