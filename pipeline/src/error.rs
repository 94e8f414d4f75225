//! Errors that stop a run (a bad item never does: it is skipped and reported).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Displays the path; the I/O error is the source (printed after it in error chains).
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Index(#[from] lexlip_index::IndexError),
    #[error(transparent)]
    Model(#[from] lexlip_model::ModelError),
    #[error("--strict: {at} skipped: {reason}: {message}")]
    Strict {
        /// The input position (and id) of the bad item.
        at: String,
        reason: &'static str,
        message: String,
    },
    #[error("cannot merge: {0}")]
    Incompatible(String),
    #[error("a pipeline stage failed: {0}")]
    Stage(String),
}

impl PipelineError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PipelineError::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<lexlip_corpus::CorpusError> for PipelineError {
    fn from(e: lexlip_corpus::CorpusError) -> Self {
        match e {
            lexlip_corpus::CorpusError::Io { path, source } => PipelineError::Io { path, source },
            lexlip_corpus::CorpusError::Input(m) => PipelineError::Input(m),
        }
    }
}

pub type Result<T, E = PipelineError> = std::result::Result<T, E>;
