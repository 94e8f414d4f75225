//! Errors that stop training. A bad corpus item never does: it is skipped and counted.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The I/O error is the source (printed after the path in error chains).
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: cannot be trained: {message}")]
    Untrainable { path: PathBuf, message: String },
    #[error("the corpus: {0}")]
    Corpus(String),
    #[error("{path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("training diverged at step {step}: {what} is not finite (the last checkpoint is kept)")]
    Diverged { step: u64, what: String },
    #[error(transparent)]
    Model(#[from] lexlip_model::ModelError),
    #[error(transparent)]
    Input(#[from] lexlip_corpus::CorpusError),
    #[error("tensor computation failed: {0}")]
    Candle(#[from] candle_core::Error),
}

impl TrainError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TrainError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        TrainError::Invalid(message.into())
    }
}

pub type Result<T, E = TrainError> = std::result::Result<T, E>;
