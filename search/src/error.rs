//! Why a search could not run.

use lexlip_index::IndexError;

/// A search that could not run: the request asked for something impossible (`Invalid`, the
/// caller's fault), or the index or a model failed.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The plan or query cannot be answered as asked; the message says what to change.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The re-ranker failed on a candidate or the query.
    #[error("re-ranking: {0}")]
    Rerank(String),
}

impl SearchError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        SearchError::Invalid(message.into())
    }

    /// Whether the search stopped because its caller cancelled it.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, SearchError::Index(IndexError::Cancelled))
    }
}
