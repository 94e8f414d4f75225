//! Errors of the encoders. Every variant names the file, tensor or input at fault so that a user
//! with a wrong checkpoint or a broken image knows what to fix.

use std::path::PathBuf;

/// Why a model could not be loaded or an input could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The I/O error is the source (printed after the path in error chains).
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: invalid configuration: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{file}: tensor `{name}` is missing")]
    MissingTensor { file: PathBuf, name: String },
    /// Every tensor a published architecture needs that its checkpoint lacks, checked before
    /// anything is built, so one error names them all (the first few, and how many).
    #[error("{file}: not a {model} checkpoint: {} tensor(s) it needs are missing: {}", names.len(), list_names(names))]
    MissingTensors {
        file: PathBuf,
        model: &'static str,
        names: Vec<String>,
    },
    #[error("{file}: tensor `{name}` has shape {got:?} but the configuration implies {expected:?}")]
    ShapeMismatch {
        file: PathBuf,
        name: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    #[error("{file}: cannot read weights: {message}")]
    Weights { file: PathBuf, message: String },
    #[error("{path}: cannot load the tokenizer: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("cannot tokenize text {text:?}: {message}")]
    Tokenize { text: String, message: String },
    #[error("image {input}: {message}")]
    Image { input: String, message: String },
    #[error("{path}: {message}")]
    UnknownModel { path: PathBuf, message: String },
    #[error("the model at {path} has no {what} encoder")]
    NoEncoder { path: PathBuf, what: &'static str },
    #[error("{0}")]
    Invalid(String),
    /// Too many pixels are being decoded at once in this process ([`crate::image::set_decode_budget`]);
    /// the same request succeeds later.
    #[error("{0}")]
    Busy(String),
    #[error("inference failed: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("the encoder produced an invalid vector: {0}")]
    Vector(#[from] lexlip_proto::VectorError),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// The first names of a list and how many more there are.
fn list_names(names: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut out = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    out
}

impl ModelError {
    /// Classifies a Candle error raised while building a model from the weights of `file`, so that
    /// a missing tensor or a shape that disagrees with the configuration is reported by name.
    pub(crate) fn from_load(file: impl Into<PathBuf>, err: candle_core::Error) -> Self {
        let file = file.into();
        match innermost(&err) {
            candle_core::Error::CannotFindTensor { path } => ModelError::MissingTensor {
                file,
                name: path.clone(),
            },
            candle_core::Error::UnexpectedShape { msg, expected, got } => {
                let name = msg
                    .strip_prefix("shape mismatch for ")
                    .unwrap_or(msg)
                    .to_string();
                ModelError::ShapeMismatch {
                    file,
                    name,
                    expected: expected.dims().to_vec(),
                    got: got.dims().to_vec(),
                }
            }
            other => ModelError::Weights {
                file,
                message: other.to_string(),
            },
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ModelError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn config(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        ModelError::Config {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Strips Candle's wrappers (backtrace, context, path) to get at the error that says what failed.
fn innermost(err: &candle_core::Error) -> &candle_core::Error {
    match err {
        candle_core::Error::WithBacktrace { inner, .. }
        | candle_core::Error::Context { inner, .. }
        | candle_core::Error::WithPath { inner, .. } => innermost(inner),
        other => other,
    }
}
