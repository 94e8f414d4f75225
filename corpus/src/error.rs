//! Why an input cannot be read at all (a bad record never stops a reader: it becomes a
//! [`crate::item::BadItem`]).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// Displays the path; the I/O error is the source (printed after it in error chains).
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The input is not what its format needs; the message says what to fix.
    #[error("{0}")]
    Input(String),
}

impl CorpusError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CorpusError::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = CorpusError> = std::result::Result<T, E>;
