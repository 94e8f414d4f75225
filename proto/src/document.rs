//! Documents: what a collection stores about one image or text.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which kind of item a document (or a query) is.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Modality {
    Image,
    Text,
}

impl Modality {
    pub fn as_str(self) -> &'static str {
        match self {
            Modality::Image => "image",
            Modality::Text => "text",
        }
    }
}

impl fmt::Display for Modality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Modality {
    type Err = DocumentError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "image" => Ok(Modality::Image),
            "text" => Ok(Modality::Text),
            other => Err(DocumentError::BadModality(other.to_string())),
        }
    }
}

/// Why a document was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DocumentError {
    #[error("document id is empty")]
    EmptyId,
    #[error("document id is {len} bytes long; at most {max} are allowed", max = DocId::MAX_LEN)]
    IdTooLong { len: usize },
    #[error("unknown modality {0:?}; expected \"image\" or \"text\"")]
    BadModality(String),
}

/// A document's external id: a non-empty string of at most [`DocId::MAX_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DocId(String);

impl DocId {
    pub const MAX_LEN: usize = 512;

    pub fn new(id: impl Into<String>) -> Result<Self, DocumentError> {
        let id = id.into();
        if id.is_empty() {
            return Err(DocumentError::EmptyId);
        }
        if id.len() > Self::MAX_LEN {
            return Err(DocumentError::IdTooLong { len: id.len() });
        }
        Ok(Self(id))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for DocId {
    type Error = DocumentError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        DocId::new(s)
    }
}

impl From<DocId> for String {
    fn from(id: DocId) -> Self {
        id.0
    }
}

impl fmt::Display for DocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The stored fields of one item. Its vectors travel separately (they are produced by an encoder
/// or supplied by the user, and stored in the index, not here).
///
/// Users never send a `Document` (requests have their own, strict types), and API responses
/// extend it (`StoredDocument`, `Hit`), so its schema admits other fields.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    /// Unique id (1-512 bytes).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: DocId,
    pub modality: Modality,
    /// Where the original item lives (an image path or URL); free-form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// The caption or text of the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Arbitrary JSON object; equality filters can match its top-level keys.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl Document {
    pub fn new(id: DocId, modality: Modality) -> Self {
        Self {
            id,
            modality,
            uri: None,
            text: None,
            metadata: serde_json::Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated() {
        assert_eq!(DocId::new(""), Err(DocumentError::EmptyId));
        assert!(DocId::new("x".repeat(512)).is_ok());
        assert_eq!(
            DocId::new("x".repeat(513)),
            Err(DocumentError::IdTooLong { len: 513 })
        );
        assert!(serde_json::from_str::<DocId>("\"\"").is_err());
    }

    #[test]
    fn document_json() {
        let d: Document = serde_json::from_str(
            r#"{"id":"a","modality":"text","text":"a dog","metadata":{"lang":"en"}}"#,
        )
        .unwrap();
        assert_eq!(d.modality, Modality::Text);
        assert_eq!(d.metadata["lang"], "en");
        assert!(serde_json::from_str::<Document>(r#"{"id":"a","modality":"audio"}"#).is_err());
        assert!(serde_json::from_str::<Document>(r#"{"id":"","modality":"text"}"#).is_err());
    }
}
