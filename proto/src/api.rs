//! Request and response types shared by the engine, the CLI and the HTTP API.

use serde::{Deserialize, Serialize, Serializer};

use crate::document::Document;
use crate::document::Modality;
use crate::sparse::QuantizedVector;

/// How a search trades recall for speed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Precision {
    /// Exactly the top-k a brute-force dot product over every live document returns.
    #[default]
    Exact,
    /// Approximate: a document must be able to beat `1/factor` of the current k-th score to be
    /// scored at all (`factor` ≥ 1; 1 is exact, larger is faster with lower recall).
    Approx(f32),
}

/// Metadata equality filter: every key must equal the given JSON value.
pub type MetadataFilter = serde_json::Map<String, serde_json::Value>;

/// A filter on the documents a search may return.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Only documents of this modality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modality: Option<Modality>,
    /// Only documents whose metadata has these top-level key/value pairs.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: MetadataFilter,
}

/// Why a hit scored what it did: one matched term.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TermContribution {
    pub term: String,
    pub query_impact: u32,
    pub doc_impact: u32,
    /// `query_impact · doc_impact`.
    pub contribution: u64,
}

/// One search result.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub id: String,
    /// The integer dot product of impacts (sparse) or the similarity (dense/hybrid).
    pub score: f64,
    pub modality: Modality,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Matched terms, highest contribution first (only when asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Vec<TermContribution>>,
    /// With `rerank`: which stage produced `score` (`rerank`: the re-ranker's match
    /// probability; `first`: the first stage's score, for candidates it did not re-score).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    /// With `rerank`: the first stage's score of a re-scored hit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_stage_score: Option<f64>,
    /// How well the hit matches, from 0 (nothing shared) to 1, comparable across queries:
    /// a sparse hit's score over the query's self-score (the score a document equal to the
    /// query would get; capped at 1), a dense hit's cosine similarity (negative counts as 0).
    /// Absent for fused (hybrid) scores; a re-ranked hit keeps its first stage's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_strength: Option<f64>,
    /// The stored text is longer than a hit carries ([`MAX_HIT_TEXT_BYTES`], or the response's
    /// budget of [`MAX_RESPONSE_TEXT_BYTES`] was spent): `text` is its beginning, or absent.
    /// `GET …/documents/{id}` returns it whole.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub text_truncated: bool,
}

/// Whether a query matched its hits only weakly, by the calibration `weak_match` of the model
/// that encoded it (none without one). The calibration was measured on best hits — real
/// captions' best hits pass it, nonsense queries' do not — so it judges the list by the hit
/// shown first: all of them are weak, or none is. Greying hits one by one would grey right
/// hits that rank below a stronger one, which the calibration never measured.
///
/// ```
/// # use lexlip_proto::api::{Hit, weak_list};
/// let hit = |m: f64| -> Hit {
///     let json = serde_json::json!({"id": "d", "score": 1.0, "modality": "image", "match_strength": m});
///     serde_json::from_value(json).unwrap()
/// };
/// assert_eq!(weak_list(&[hit(0.35), hit(0.12)], Some(0.2)), Some(false));
/// assert_eq!(weak_list(&[hit(0.15), hit(0.12)], Some(0.2)), Some(true));
/// assert_eq!(weak_list(&[hit(0.15)], None), None);
/// ```
pub fn weak_list(hits: &[Hit], weak_match: Option<f64>) -> Option<bool> {
    let below = weak_match?;
    Some(
        hits.first()
            .and_then(|h| h.match_strength)
            .is_none_or(|m| m < below),
    )
}

/// Most bytes of stored text one hit carries.
pub const MAX_HIT_TEXT_BYTES: usize = 16 << 10;
/// Most bytes of stored text one response's hits carry together.
pub const MAX_RESPONSE_TEXT_BYTES: usize = 2 << 20;

impl Hit {
    /// Cuts `text` to at most `max` bytes (at a character boundary), flagging the cut.
    pub fn cap_text(&mut self, max: usize) {
        if let Some(text) = &mut self.text
            && text.len() > max
        {
            let mut end = max;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            // Truncating keeps the allocation: give the rest of a long text back now.
            text.shrink_to_fit();
            self.text_truncated = true;
            if text.is_empty() {
                self.text = None;
            }
        }
    }
}

/// The search stage a hit's score comes from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The index (sparse, dense or fused).
    First,
    /// The re-ranker.
    Rerank,
}

/// Which index a search asks for.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The lexicon index (falls back to dense when it matches fewer than k documents and a
    /// dense query is available).
    #[default]
    Sparse,
    Dense,
    /// Reciprocal-rank fusion of the sparse and dense lists.
    Hybrid,
}

/// Which index answered.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchPath {
    Sparse,
    Dense,
    Hybrid,
    /// Sparse matched fewer than k documents; the dense index answered.
    DenseFallback,
}

/// The re-ranking stage of a response.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankReport {
    /// Candidates the re-ranker scored.
    pub scored: usize,
    /// Candidates it could not score (same modality as the query, or an image without a stored
    /// thumbnail); they follow the re-scored ones in first-stage order.
    pub unscored: usize,
    /// Time spent re-ranking (included in `took_ms`).
    pub took_ms: f64,
}

/// Error codes every API error carries (`{"error": {"code", "message"}}`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadRequest,
    NotFound,
    Conflict,
    PayloadTooLarge,
    UnsupportedMediaType,
    Unprocessable,
    TooManyRequests,
    Unavailable,
    /// The disk is full (507): nothing of the write was stored; reads keep working.
    InsufficientStorage,
    Unauthorized,
    /// A write from a web page of another origin (403).
    Forbidden,
    Internal,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

/// Size and content figures of a collection (`nnz`: stored non-zero impacts, including those of
/// deleted documents not yet merged away; `bytes`: everything on disk).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectionStats {
    pub documents: u64,
    pub images: u64,
    pub texts: u64,
    /// Distinct terms.
    pub terms: u64,
    /// Stored non-zero impacts.
    pub nnz: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Bytes on disk per live document.
    pub bytes_per_item: f64,
    pub bytes_per_nnz: f64,
    pub segments: usize,
    /// Heap held for pruning: every segment's table of its terms, and its block bounds and
    /// forward index where they are on the heap (a segment's forward index file is mapped
    /// from disk, not counted here).
    pub pruning_memory_bytes: u64,
    /// Of `bytes`, the segments' forward index files (0 for collections without them).
    #[serde(default)]
    pub forward_file_bytes: u64,
    /// Of `bytes`, the sparse index that search reads: every segment's postings, term
    /// dictionary, fast fields, field norms and forward index file. Stored fields, dense
    /// vectors and thumbnails are not in it.
    #[serde(default)]
    pub index_bytes: u64,
    /// `index_bytes` per stored non-zero.
    #[serde(default)]
    pub index_bytes_per_nnz: f64,
    /// Of `index_bytes`, the sparse vectors' own structures: the impacts field's postings and
    /// term dictionary, and the forward index files. The rest of `index_bytes` is the
    /// documents' keys (the id, modality, metadata and batch terms that lookups, filters,
    /// deletes and upserts read).
    #[serde(default)]
    pub vector_index_bytes: u64,
    /// `vector_index_bytes` per stored non-zero.
    #[serde(default)]
    pub vector_index_bytes_per_nnz: f64,
    /// Of `bytes`, the segments' stored fields (the documents as read back, without their
    /// impacts).
    #[serde(default)]
    pub stored_bytes: u64,
}

/// A stored document read back from a collection (`GET …/documents/{id}`): its fields, its
/// impacts when asked for (`terms`, largest first), and whether it has a dense vector and a
/// thumbnail.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredDocument {
    #[serde(flatten)]
    pub doc: Document,
    /// Its impacts, read back from the postings (when asked for).
    #[serde(
        rename = "terms",
        skip_serializing_if = "Option::is_none",
        serialize_with = "largest_first"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<(String, u32)>>))]
    pub impacts: Option<QuantizedVector>,
    /// Its dense vector (unit length), when it has one; the API says only whether it has one.
    #[serde(serialize_with = "is_some")]
    #[cfg_attr(feature = "openapi", schema(value_type = bool))]
    pub dense: Option<Vec<f32>>,
    /// Its image thumbnail (JPEG bytes), when it has one; the API says only whether it has one
    /// (`GET …/documents/{id}/thumbnail` serves it).
    #[serde(serialize_with = "is_some")]
    #[cfg_attr(feature = "openapi", schema(value_type = bool))]
    pub thumbnail: Option<Vec<u8>>,
}

/// Impacts as `[term, impact]` pairs, largest first (ties by term).
fn largest_first<S: Serializer>(v: &Option<QuantizedVector>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(q) => s.collect_seq(q.by_weight()),
        None => s.serialize_none(),
    }
}

fn is_some<T, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bool(v.is_some())
}
