//! Corpus readers, below everything that reads a corpus: batch indexing (`lexlip-pipeline`),
//! evaluation and training (`lexlip-train`) open their input here, so none of them depends on
//! another to read a file.
//!
//! - [`Input`]: the input of a run (caption TSV, JSONL manifest, WebDataset shards, a
//!   directory of images), opened as one deterministic stream of [`Item`]s and [`BadItem`]s
//!   ([`sources`]);
//! - [`sources::vectors`]: Anserini `JsonVectorCollection` lines of precomputed vectors;
//! - [`line_limit`]: line reading with a bound on a line's length.

pub mod error;
pub mod hash;
pub mod item;
pub mod line_limit;
pub mod sources;

pub use error::{CorpusError, Result};
pub use item::{BadItem, ImageRef, Item, SourceItem};
pub use sources::Input;
