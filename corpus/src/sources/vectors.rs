//! Anserini `JsonVectorCollection` JSONL: `{"id", "contents", "vector": {"token": weight}}`.
//!
//! Integer weights are impacts; other numbers are float weights, quantized with the collection's
//! scale. Optional lexlip extensions per line: `"modality"` (`image`/`text`), `"uri"`,
//! `"metadata"` (object). Files ending in `.gz` (or starting with the gzip magic) are inflated.
//! A malformed line is reported with its line number and skipped; nothing else is lost.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use lexlip_proto::{DocId, Document, Modality, VectorInput};
use serde::Deserialize;

use crate::error::{CorpusError, Result};
use crate::line_limit::{LineLimit, MAX_LINE_BYTES};

#[derive(Deserialize)]
struct RawLine {
    id: String,
    #[serde(default)]
    contents: Option<String>,
    #[serde(default)]
    modality: Option<Modality>,
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    metadata: serde_json::Map<String, serde_json::Value>,
    vector: serde_json::Map<String, serde_json::Value>,
}

/// One parsed line.
#[derive(Debug, Clone)]
pub struct VectorRecord {
    pub doc: Document,
    pub vector: VectorInput,
}

/// Why a line was skipped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LineError {
    pub line: u64,
    /// Short machine-readable class: `json`, `id`, `vector`.
    pub kind: &'static str,
    pub reason: String,
}

/// Parses one line (`default_modality` when the line names none).
pub fn parse_line(
    text: &str,
    line: u64,
    default_modality: Modality,
) -> std::result::Result<VectorRecord, LineError> {
    let err = |kind, reason: String| LineError { line, kind, reason };
    let raw: RawLine = serde_json::from_str(text).map_err(|e| err("json", e.to_string()))?;
    let id = DocId::new(raw.id).map_err(|e| err("id", e.to_string()))?;
    let vector = VectorInput::from_json(raw.vector).map_err(|e| err("vector", e.to_string()))?;
    let doc = Document {
        id,
        modality: raw.modality.unwrap_or(default_modality),
        uri: raw.uri,
        text: raw.contents,
        metadata: raw.metadata,
    };
    Ok(VectorRecord { doc, vector })
}

/// Lines of a plain or gzipped file.
pub fn open_lines(path: &Path) -> Result<Box<dyn BufRead + Send>> {
    let mut file = File::open(path).map_err(|e| CorpusError::io(path, e))?;
    let mut magic = [0u8; 2];
    let n = file
        .read(&mut magic)
        .map_err(|e| CorpusError::io(path, e))?;
    let file = File::open(path).map_err(|e| CorpusError::io(path, e))?;
    if n == 2 && magic == [0x1f, 0x8b] {
        Ok(Box::new(LineLimit::new(
            BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(file)),
            MAX_LINE_BYTES,
        )))
    } else {
        Ok(Box::new(LineLimit::new(
            BufReader::with_capacity(1 << 20, file),
            MAX_LINE_BYTES,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_impacts_floats_are_weights() {
        let r = parse_line(
            r#"{"id":"a","contents":"x","vector":{"dog":120,"cat":3}}"#,
            1,
            Modality::Text,
        )
        .unwrap();
        assert!(matches!(r.vector, VectorInput::Impacts(ref q) if q.get("dog") == Some(120)));
        assert_eq!(r.doc.text.as_deref(), Some("x"));
        let r = parse_line(
            r#"{"id":"a","vector":{"dog":1.25},"modality":"image"}"#,
            1,
            Modality::Text,
        )
        .unwrap();
        assert!(matches!(r.vector, VectorInput::Weights(ref w) if w.get("dog") == Some(1.25)));
        assert_eq!(r.doc.modality, Modality::Image);
    }

    #[test]
    fn malformed_lines_name_their_line() {
        for (text, kind) in [
            ("{not json", "json"),
            (r#"{"id":"","vector":{}}"#, "id"),
            (r#"{"id":"a","vector":{"dog":-1.5}}"#, "vector"),
            (r#"{"id":"a","vector":{"dog":"x"}}"#, "vector"),
            (r#"{"id":"a","vector":{"dog":70000}}"#, "vector"),
            (r#"{"id":"a"}"#, "json"),
        ] {
            let e = parse_line(text, 7, Modality::Text).unwrap_err();
            assert_eq!((e.line, e.kind), (7, kind), "{text}: {e}");
        }
    }
}
