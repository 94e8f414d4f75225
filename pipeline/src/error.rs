//! Errors that stop a run (a bad item never does: it is skipped and reported).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A file that cannot be read or written (the path, with the I/O error as the source).
    #[error(transparent)]
    Corpus(#[from] lexlip_corpus::CorpusError),
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
        PipelineError::Corpus(lexlip_corpus::CorpusError::io(path, source))
    }
}

pub type Result<T, E = PipelineError> = std::result::Result<T, E>;
