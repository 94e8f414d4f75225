//! `lexlip export`: a collection's documents and impacts in the bulk formats of engines that a
//! deployment grows into when one node is not enough (lexlip then stays the encoder service,
//! `/v1/encode`, and the scale-out store is a distributed engine):
//!
//! - `jsonl`: Anserini's `JsonVectorCollection` (`{"id", "contents", "vector": {term: impact}}`)
//!   — also what `lexlip index --vectors` reads, so an export re-indexes to the same collection;
//! - `opensearch` / `elasticsearch`: `_bulk` NDJSON, an action line then a source line whose
//!   `terms` object holds the impacts, for a `rank_features` (OpenSearch neural sparse) or
//!   `sparse_vector` (Elasticsearch) field. Those engines read a `.` in a key as an object path,
//!   so a term's `%` and `.` are written `%25` and `%2E` (queries must escape the same way);
//! - `qdrant`: one point per line, `{"id": UUID, "vector": {NAME: {"indices", "values"}},
//!   "payload"}`, indices being term ids, ready for `PUT /collections/{c}/points` in batches.
//!   The ids are those of the collection's vocabulary (`vocab.txt`); a collection built from
//!   vectors without one numbers its terms in byte order of its term dictionary, and the export
//!   writes that list (one term per line, line i = id i) to [`ExportOptions::vocab_out`], so
//!   queries can be numbered the same way.
//!
//! Impacts are written as they are stored (integers, `floor(scale · weight)`), so every engine
//! ranks by the same dot product lexlip computes.

use std::collections::HashMap;
use std::io::Write;

use lexlip_index::Collection;
use lexlip_proto::api::StoredDocument;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::error::{PipelineError, Result};

/// The formats `lexlip export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    OpenSearch,
    Elasticsearch,
    Qdrant,
}

/// What one export writes besides the documents.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub format: Format,
    /// OpenSearch/Elasticsearch index name, or Qdrant's sparse vector name.
    pub name: String,
    /// Qdrant, a collection without a vocabulary: where the term list its ids number goes.
    pub vocab_out: Option<std::path::PathBuf>,
}

/// Writes every live document of `collection` to `out`, one document per line (two for the
/// `_bulk` formats); returns how many documents were written.
pub fn export(
    collection: &Collection,
    options: &ExportOptions,
    out: &mut dyn Write,
) -> Result<u64> {
    let term_ids = match options.format {
        Format::Qdrant => Some(term_ids(collection, options.vocab_out.as_deref())?),
        _ => None,
    };
    let snapshot = collection.snapshot()?;
    let mut written = 0u64;
    let mut io_error = None;
    snapshot
        .for_each_document(|doc| {
            let lines = match lines(&doc, options, term_ids.as_ref()) {
                Ok(lines) => lines,
                Err(e) => {
                    io_error = Some(e);
                    return Err(lexlip_index::IndexError::Cancelled);
                }
            };
            for line in lines {
                if let Err(e) = writeln!(out, "{line}") {
                    io_error = Some(PipelineError::Input(format!("writing the export: {e}")));
                    return Err(lexlip_index::IndexError::Cancelled);
                }
            }
            written += 1;
            Ok(())
        })
        .map_err(|e| io_error.take().unwrap_or_else(|| e.into()))?;
    out.flush()
        .map_err(|e| PipelineError::Input(format!("writing the export: {e}")))?;
    Ok(written)
}

/// The line(s) of one document in `options.format`.
pub fn lines(
    doc: &StoredDocument,
    options: &ExportOptions,
    term_ids: Option<&HashMap<String, u32>>,
) -> Result<Vec<String>> {
    let d = &doc.doc;
    let id = d.id.as_str();
    let impacts: Vec<(&str, u32)> = doc
        .impacts
        .as_ref()
        .map(|q| q.iter().collect())
        .unwrap_or_default();
    let mut fields = Map::new();
    fields.insert("modality".into(), json!(d.modality.as_str()));
    if let Some(uri) = &d.uri {
        fields.insert("uri".into(), json!(uri));
    }
    if !d.metadata.is_empty() {
        fields.insert("metadata".into(), Value::Object(d.metadata.clone()));
    }
    let line = |v: Value| v.to_string();
    Ok(match options.format {
        Format::Jsonl => {
            let mut o = Map::new();
            o.insert("id".into(), json!(id));
            if let Some(text) = &d.text {
                o.insert("contents".into(), json!(text));
            }
            o.extend(fields);
            let vector: Map<String, Value> = impacts
                .iter()
                .map(|(t, i)| (t.to_string(), json!(i)))
                .collect();
            o.insert("vector".into(), Value::Object(vector));
            vec![line(Value::Object(o))]
        }
        Format::OpenSearch | Format::Elasticsearch => {
            let action = json!({"index": {"_index": options.name, "_id": id}});
            let mut o = Map::new();
            o.insert("id".into(), json!(id));
            if let Some(text) = &d.text {
                o.insert("text".into(), json!(text));
            }
            o.extend(fields);
            let terms: Map<String, Value> = impacts
                .iter()
                .map(|(t, i)| (escape_feature(t), json!(i)))
                .collect();
            o.insert("terms".into(), Value::Object(terms));
            vec![line(action), line(Value::Object(o))]
        }
        Format::Qdrant => {
            let ids = term_ids.ok_or_else(|| PipelineError::Input("no vocabulary".into()))?;
            let mut pairs: Vec<(u32, u32)> = impacts
                .iter()
                .map(|(t, i)| {
                    ids.get(*t).map(|&tid| (tid, *i)).ok_or_else(|| {
                        PipelineError::Input(format!(
                            "document {id:?}: term {t:?} is not in the collection's vocabulary"
                        ))
                    })
                })
                .collect::<Result<_>>()?;
            pairs.sort_unstable();
            let mut payload = Map::new();
            payload.insert("id".into(), json!(id));
            if let Some(text) = &d.text {
                payload.insert("text".into(), json!(text));
            }
            payload.extend(fields);
            let point = json!({
                "id": point_id(id),
                "vector": {options.name.clone(): {
                    "indices": pairs.iter().map(|p| p.0).collect::<Vec<_>>(),
                    "values": pairs.iter().map(|p| p.1 as f32).collect::<Vec<_>>(),
                }},
                "payload": payload,
            });
            vec![line(point)]
        }
    })
}

/// A term as an OpenSearch/Elasticsearch feature name: `%` → `%25`, `.` → `%2E` (a dot in a
/// key is an object path there).
pub fn escape_feature(term: &str) -> String {
    term.replace('%', "%25").replace('.', "%2E")
}

/// Qdrant point ids are integers or UUIDs: a document id maps to the UUID made of the first 16
/// bytes of its SHA-256 (version 8, "custom"), the same on every export; the id itself is in
/// the payload.
pub fn point_id(id: &str) -> String {
    let h = Sha256::digest(id.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Term → id: the collection's vocabulary (its `vocab.txt`, one token per line in id order), or,
/// without one, the rank of the term in its term dictionary, whose list is written to
/// `vocab_out` (required then) in the same one-per-line form.
fn term_ids(
    collection: &Collection,
    vocab_out: Option<&std::path::Path>,
) -> Result<HashMap<String, u32>> {
    let path = collection.dir().join(lexlip_index::collection::VOCAB_FILE);
    let terms: Vec<String> = match std::fs::read_to_string(&path) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let Some(out) = vocab_out else {
                return Err(PipelineError::Input(format!(
                    "the qdrant format needs term ids, but {} was built from vectors without \
                     --vocab: its terms are numbered in the order of its term dictionary, and \
                     that list must be written somewhere for your queries: give --out FILE \
                     (the list goes to FILE.vocab.txt) or --vocab-out FILE",
                    collection.dir().display()
                )));
            };
            let terms = collection.snapshot()?.terms()?;
            let mut text = terms.join("\n");
            text.push('\n');
            std::fs::write(out, text).map_err(|e| PipelineError::io(out, e))?;
            terms
        }
        Err(e) => return Err(PipelineError::io(&path, e)),
    };
    Ok(terms
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, i as u32))
        .collect())
}
