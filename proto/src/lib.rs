//! The shared vocabulary of lexlip.
//!
//! Everything that crosses a crate or process boundary lives here: sparse and dense vectors,
//! documents and their modality, and the request/response types of the HTTP API. The crate does
//! no I/O; it only validates, so that every other crate can trust what it receives.

pub mod api;
pub mod dense;
pub mod document;
pub mod idf;
pub mod sparse;
pub mod term_space;

pub use dense::DenseVector;
pub use document::{DocId, Document, DocumentError, Modality};
pub use sparse::{
    DEFAULT_SCALE, MAX_IMPACT, QuantizedVector, Sparse, SparseVector, VectorError, VectorInput,
};
pub use term_space::{TermSpace, VocabError};
