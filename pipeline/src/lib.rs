//! Batch indexing, the one home of every way a collection is filled in bulk:
//!
//! - corpora (caption TSV, JSONL manifest, WebDataset shards, a directory of images) encoded
//!   with the LexLIP encoders ([`corpus`]);
//! - precomputed vectors, Anserini `JsonVectorCollection` JSONL ([`vectors`]);
//!
//! both through one writer ([`writer`]) with bounded memory, resume after interruption
//! ([`progress`]), deterministic shards ([`shard`]) and an end-of-job [`Report`]; and merging
//! of shard collections ([`merge`]); and retrieval evaluation of a model on a test corpus
//! through real collections ([`eval`]).

pub mod corpus;
pub mod error;
pub mod errors_file;
pub mod eval;
pub mod export;
pub mod item;
pub mod job;
pub mod line_limit;
pub mod merge;
pub mod progress;
pub mod report;
pub mod shard;
pub mod sources;
pub mod vectors;
mod writer;

pub use corpus::{index_corpus, run_fingerprint};
pub use error::{PipelineError, Result};
pub use errors_file::ErrorsFile;
pub use item::{BadItem, ImageRef, Item};
pub use job::{Observer, Options, StageSeconds, Summary};
pub use merge::{MergeReport, merge};
pub use progress::{Counts, Progress};
pub use report::Report;
pub use shard::Shard;
pub use sources::Input;
pub use vectors::{VectorsFile, index_vectors, load_vocab};
