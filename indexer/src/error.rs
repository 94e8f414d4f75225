//! Engine errors: each says what went wrong and, where it can, what to do about it.

use std::path::PathBuf;

use lexlip_proto::TermSpace;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("no collection at {path}: {reason}")]
    NotACollection { path: PathBuf, reason: String },
    #[error("a collection already exists at {0}")]
    AlreadyExists(PathBuf),
    #[error(
        "term space mismatch: the collection at {path} was built for {collection}, but the vectors come from {given}; \
         use the same encoder/vocabulary or create a new collection"
    )]
    TermSpaceMismatch {
        path: PathBuf,
        collection: Box<TermSpace>,
        given: Box<TermSpace>,
    },
    #[error(
        "collection manifest {path} has format version {found}; this lexlip reads version {supported}"
    )]
    UnsupportedFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("invalid setting: {0}")]
    InvalidSetting(String),
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    #[error("term {term:?} is not in the collection's vocabulary ({term_space})")]
    UnknownTerm { term: String, term_space: String },
    /// The I/O error is the source (printed after the path in error chains).
    #[error("I/O error on {path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the collection is opened read-only")]
    ReadOnly,
    #[error("the search was cancelled")]
    Cancelled,
    #[error(
        "invalid collection name {0:?}: use 1-64 letters, digits, '_', '-' or '.', not starting with '.' or '-'"
    )]
    InvalidName(String),
    #[error("no collection named {0:?}")]
    NoSuchCollection(String),
    #[error("index error: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error(
        "collection {collection:?} has no snapshot {file:?}; GET /v1/collections/{collection}/snapshots lists them"
    )]
    NoSuchSnapshot { collection: String, file: String },
    #[error("{path} is not a snapshot this lexlip can restore: {reason}; nothing was changed")]
    BadArchive { path: PathBuf, reason: String },
    #[error("corrupt stored document: {0}")]
    CorruptDocument(String),
}

impl IndexError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        IndexError::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether the cause is a full disk or an exhausted quota (ENOSPC, EDQUOT), wherever in
    /// the chain of sources the I/O error sits (tantivy wraps it in its own errors).
    pub fn is_storage_full(&self) -> bool {
        const ENOSPC: i32 = 28;
        const EDQUOT: i32 = 122;
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && matches!(io.raw_os_error(), Some(ENOSPC | EDQUOT))
            {
                return true;
            }
            if e.to_string().contains("No space left on device") {
                return true;
            }
            cause = e.source();
        }
        false
    }
}

impl From<std::io::Error> for IndexError {
    fn from(e: std::io::Error) -> Self {
        IndexError::Io {
            path: PathBuf::new(),
            source: e,
        }
    }
}

pub type Result<T, E = IndexError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_recognised_through_tantivy_errors() {
        let full = || std::io::Error::from_raw_os_error(28);
        assert!(IndexError::io("/x", full()).is_storage_full());
        let wrapped =
            IndexError::Tantivy(tantivy::TantivyError::IoError(std::sync::Arc::new(full())));
        assert!(wrapped.is_storage_full());
        let other = IndexError::io("/x", std::io::Error::from_raw_os_error(13));
        assert!(!other.is_storage_full());
        assert!(!IndexError::ReadOnly.is_storage_full());
    }
}
