//! Batch indexing, the one home of every way a collection is filled in bulk:
//!
//! - corpora (caption TSV, JSONL manifest, WebDataset shards, a directory of images) encoded
//!   with the LexLIP encoders ([`corpus`]);
//! - precomputed vectors, Anserini `JsonVectorCollection` JSONL ([`vectors`]);
//!
//! both through one writer ([`writer`]) with bounded memory, resume after interruption
//! ([`progress`]), deterministic shards ([`shard`]) and an end-of-job [`Report`]; and merging
//! of shard collections ([`merge`]). Retrieval evaluation lives above it, in `lexlip-eval`.

pub mod corpus;
pub mod error;
pub mod errors_file;
pub mod export;
pub mod job;
pub mod merge;
pub mod progress;
pub mod report;
pub mod shard;
pub mod vectors;
mod writer;

pub use corpus::{index_corpus, run_fingerprint};
pub use error::{PipelineError, Result};
pub use errors_file::ErrorsFile;
pub use job::{Observer, Options, StageSeconds, Summary};
pub use lexlip_corpus::{BadItem, ImageRef, Input, Item, item, line_limit, sources};
pub use merge::{MergeReport, merge};
pub use progress::{Counts, Progress};
pub use report::Report;
pub use shard::Shard;
pub use vectors::{VectorsFile, index_vectors, load_vocab};
