//! `--max-image-pixels`: an image larger than the limit is refused from its header with an
//! error that names the option, and nothing of the request is stored; images under it work.

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
