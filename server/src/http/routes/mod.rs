//! Route handlers, one module per resource.

pub mod collections;
pub mod documents;
pub mod encode;
pub mod search;
pub mod snapshots;
pub mod system;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use base64::Engine;
use serde::de::DeserializeOwned;
use std::sync::Arc;

use super::error::{ApiError, ApiResult};

pub use super::layers::read_body;

/// Whether the request is `multipart/form-data`.
pub fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"))
}

/// Parses a JSON body: 415 unless the content type is JSON, 400 for malformed JSON, 422 for JSON
/// of the wrong shape (unknown field, wrong type, missing field), each naming the spot.
pub fn parse_json<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> ApiResult<T> {
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let v = v.to_ascii_lowercase();
            v.starts_with("application/json") || v.contains("+json")
        });
    if !json_type {
        return Err(ApiError::unsupported_media(
            "send the body as JSON with Content-Type: application/json",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => ApiError::unprocessable(format!("invalid request: {e}")),
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::bad_request(format!("malformed JSON: {e}"))
            }
        }
    })
}

/// Reads a JSON body that may be left out: empty (or blank), it is `T::default()`.
pub async fn optional_json<T: DeserializeOwned + Default>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> ApiResult<T> {
    let bytes = read_body(body, limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        parse_json(headers, &bytes)
    }
}

/// Decodes base64 image bytes (standard alphabet, padding optional; a `data:` URL prefix is
/// accepted).
pub fn decode_base64(field: &str, text: &str) -> ApiResult<Vec<u8>> {
    let data = match text.split_once(";base64,") {
        Some((prefix, rest)) if prefix.starts_with("data:") => rest,
        _ => text,
    };
    let cleaned: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine.decode(cleaned.as_bytes()).map_err(|e| {
        if looks_like_a_path(text) {
            ApiError::unprocessable(format!(
                "{field}: {text:?} looks like a file path, but the server reads no files of \
                 yours: send the image's bytes base64-encoded (e.g. \"$(base64 -w0 {text})\"), or \
                 as a multipart file part (curl -F image=@{text} …)"
            ))
        } else {
            ApiError::unprocessable(format!("{field}: not valid base64: {e}"))
        }
    })
}

/// The bytes of a multipart `image` part. A part sent as text (curl's `-F image=dog.jpg`, which
/// sends the name, where `-F image=@dog.jpg` sends the file) is refused with the fix.
pub fn multipart_image(file_name: Option<&str>, data: &[u8]) -> ApiResult<Vec<u8>> {
    if file_name.is_none()
        && let Ok(text) = std::str::from_utf8(data)
        && text.len() <= 4096
        && !text.chars().any(|c| c.is_control() && !c.is_whitespace())
    {
        let text = text.trim();
        return Err(ApiError::unprocessable(format!(
            "multipart field image holds the text {text:?}, not a file: send the file itself \
             (curl -F image=@{text} …; the @ makes curl send the file's bytes)"
        )));
    }
    Ok(data.to_vec())
}

/// Whether text that is not base64 reads like a file path or URL (`photos/cat.jpg`, `~/a.png`,
/// `C:\\a.png`, `https://…`): a short single line with a separator or an image extension.
fn looks_like_a_path(text: &str) -> bool {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let image_ext = [".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"]
        .iter()
        .any(|e| lower.ends_with(e));
    t.len() < 4096
        && !t.contains('\n')
        && (image_ext
            || t.starts_with('/')
            || t.starts_with("./")
            || t.starts_with("~/")
            || t.contains("://")
            || t.contains('\\'))
}

/// Runs blocking work (index reads and writes, image decoding) off the async runtime. The
/// work holds its request's admission permit ([`crate::http::layers::ADMISSION`]) until it
/// ends: a request abandoned by its timeout frees its `--max-in-flight` slot only when the work
/// it started has stopped, so abandoned work cannot pile up behind new requests.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let permit = crate::http::layers::ADMISSION.try_with(Arc::clone).ok();
    tokio::task::spawn_blocking(move || {
        let out = f();
        drop(permit);
        out
    })
    .await
    .map_err(|e| ApiError::internal(format!("worker failed: {e}")))?
}
