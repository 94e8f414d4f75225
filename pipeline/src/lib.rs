//! Batch indexing: read a corpus (caption TSV, JSONL manifest, WebDataset shards, a directory of
//! images), encode it with the LexLIP encoders and write it into a collection, with bounded
//! memory, resume after interruption, deterministic shards and merging of shard collections.
//!
//! Precomputed vectors (Anserini JsonVectorCollection) need no encoder and are read by
//! `lexlip_index::ingest`.

pub mod error;
pub mod errors_file;
pub mod item;
pub mod merge;
pub mod progress;
pub mod run;
pub mod shard;
pub mod sources;

pub use error::{PipelineError, Result};
pub use errors_file::ErrorsFile;
pub use item::{BadItem, ImageRef, Item};
pub use merge::{MergeReport, merge};
pub use progress::{Counts, Progress};
pub use run::{Observer, Options, StageSeconds, Summary, run};
pub use shard::Shard;
pub use sources::Input;
