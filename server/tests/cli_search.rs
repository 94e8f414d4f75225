//! `lexlip search` and the HTTP search run the same search policy (`lexlip_search`): on the same
//! collection, with the same model, a text query and an image query give the same hits with the
//! same scores and match strengths both ways.

use lexlip_tests::{EMOJI, Server, b64, emoji_model, emoji_png, index_emoji, lexlip_json};
use serde_json::{Value, json};

/// (id, score, match strength) of each hit of a search response.
fn hits(answer: &Value) -> Vec<(String, f64, f64)> {
    answer["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits in {answer}"))
        .iter()
        .map(|h| {
            (
                h["id"].as_str().unwrap().to_string(),
                h["score"].as_f64().unwrap(),
                h["match_strength"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn cli_search_equals_http_search() {
    let data = tempfile::tempdir().unwrap();
    let model = emoji_model().display().to_string();
    let server = Server::start(data.path(), &["--model".into(), model.clone()]);
    index_emoji(&server, "emoji");
    let collection = data.path().join("collections/emoji").display().to_string();
    let cli = |query: &[&str], target: &str| {
        let mut args = vec![
            "search",
            "--collection",
            &collection,
            "--model",
            &model,
            "-k",
            "8",
            "--modality",
            target,
            "--json",
        ];
        args.extend_from_slice(query);
        lexlip_json(&args)
    };

    for (_, label) in EMOJI.iter().take(4) {
        let (status, http) = server.call(
            "POST",
            "/v1/collections/emoji/search",
            Some(&json!({"query": {"text": label}, "target": "image", "k": 8})),
        );
        assert_eq!(status, 200, "{http}");
        let cli = cli(&["--text", label], "image");
        assert_eq!(cli["path"], http["path"], "{label}");
        assert_eq!(hits(&cli), hits(&http), "text query {label:?}");
    }
    let (file, _) = EMOJI[2];
    let png = emoji_png(file);
    let (status, http) = server.call(
        "POST",
        "/v1/collections/emoji/search",
        Some(&json!({"query": {"image": b64(&png)}, "target": "text", "k": 8})),
    );
    assert_eq!(status, 200, "{http}");
    let cli = cli(&["--image", png.to_str().unwrap()], "text");
    assert_eq!(hits(&cli), hits(&http), "image query {file}");
    assert!(!hits(&cli).is_empty());
    server.stop();
}
