//! Request and response types shared by the engine, the CLI and the HTTP API.

use serde::{Deserialize, Serialize};

use crate::Modality;

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
    Unauthorized,
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
