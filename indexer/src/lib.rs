//! lexlip-index: collections of sparse lexicon vectors on disk, and exact, pruned search.
//!
//! A collection is a directory with a tantivy index whose `impacts` field holds each document's
//! quantized term weights as term frequencies, and a manifest naming its term space and
//! quantization scale. Search computes the LexLIP score (eq. 24) — the integer dot product of
//! query and document impacts — exactly, skipping what cannot reach the top k.
//!
//! This crate knows nothing about neural networks: vectors come from whoever made them.

pub mod archive;
pub mod bench;
mod block_size;
pub mod cancel;
pub mod catalog;
pub mod collection;
pub mod dense;
pub mod doc_vectors;
pub mod error;
pub mod export;
pub mod forward;
pub mod forward_file;
pub mod forward_index;
pub mod manifest;
pub mod quantizer;
pub mod schema;
pub mod search;
pub mod segment_builder;
pub mod slab;
pub mod synth;

pub use catalog::Catalog;
pub use collection::Collection;
pub use collection::frequencies::TermFrequencies;
pub use collection::snapshot::{ForwardSummary, SearchOutcome, Snapshot};
pub use collection::writer::DocExtras;
pub use error::{IndexError, Result};
pub use manifest::{CollectionSettings, Manifest};
pub use quantizer::Quantizer;
pub use search::{Algorithm, Cancel, MAX_K, ScoredDoc, SearchOptions, SearchStats, check_term_cut};
pub use segment_builder::DocOrder;
