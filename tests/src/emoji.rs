//! The twelve Noto emoji in `tests/fixtures/emoji` (training concepts of the model shipped in
//! `models/emoji-tiny`) and a collection of them, as a user would index them over HTTP.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{Value, json};

use crate::Server;

/// `tests/fixtures/emoji/<file>.png` and its CLDR label.
pub const EMOJI: [(&str, &str); 12] = [
    ("1f436", "dog face"),
    ("1f431", "cat face"),
    ("2764-fe0f", "red heart"),
    ("1f525", "fire"),
    ("2744-fe0f", "snowflake"),
    ("1f34c", "banana"),
    ("26bd", "soccer ball"),
    ("2600-fe0f", "sun"),
    ("1f438", "frog"),
    ("1f345", "tomato"),
    ("1f697", "automobile"),
    ("1f384", "Christmas tree"),
];

/// The model trained on these concepts (`lexlip serve --model models/emoji-tiny`).
pub fn emoji_model() -> PathBuf {
    crate::workspace().join("models/emoji-tiny")
}

/// The PNG of one emoji: `tests/fixtures/emoji/<file>.png`.
pub fn emoji_png(file: &str) -> PathBuf {
    crate::workspace()
        .join("tests/fixtures/emoji")
        .join(format!("{file}.png"))
}

/// A file's bytes in base64, as the JSON API takes images.
pub fn b64(path: &Path) -> String {
    b64_bytes(&std::fs::read(path).unwrap())
}

/// Bytes in base64 (an image made in memory, as the JSON API takes it).
pub fn b64_bytes(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Creates `collection` on the server and adds the twelve emoji: image documents with the
/// file's name as id, and their labels as text documents `text:<file>`.
pub fn index_emoji(server: &Server, collection: &str) {
    let path = format!("/v1/collections/{collection}");
    let (st, body) = server.call("PUT", &path, Some(&json!({})));
    assert_eq!(st, 201, "{body}");
    let mut docs: Vec<Value> = EMOJI
        .iter()
        .map(|(file, _)| json!({"id": file, "image": b64(&emoji_png(file))}))
        .collect();
    docs.extend(
        EMOJI
            .iter()
            .map(|(file, label)| json!({"id": format!("text:{file}"), "text": label})),
    );
    let (st, body) = server.call(
        "POST",
        &format!("{path}/documents"),
        Some(&json!({"documents": docs})),
    );
    assert_eq!(st, 200, "{body}");
}
