//! What every batch job shares, whatever prepares its documents: its options, its summary, and
//! the observer that hears about skipped items and progress (errors file, progress bar).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::error::Result;
use crate::shard::Shard;
use lexlip_corpus::item::BadItem;

#[derive(Debug, Clone)]
pub struct Options {
    /// Items per encoder batch (and per chunk between stages).
    pub batch_size: usize,
    /// Commit (and save the resume position) after at least this many documents.
    pub commit_every: usize,
    pub shard: Option<Shard>,
    /// Stop at the first bad item instead of skipping it.
    pub strict: bool,
    /// Anything else that must match for a re-run to resume (e.g. the model path).
    pub context: String,
    /// Ignore the saved progress of an earlier run and start from the beginning.
    pub restart: bool,
    /// Set (e.g. on Ctrl-C) to stop after the chunk being written: it is committed, the chunks
    /// still queued are dropped, and a re-run resumes with them.
    pub stop: Option<Arc<AtomicBool>>,
    /// Store a thumbnail with each image document (made from the decode the encoder needs
    /// anyway), where the collection keeps thumbnails. Default on.
    pub thumbnails: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            batch_size: 32,
            commit_every: 10_000,
            shard: None,
            strict: false,
            context: String::new(),
            restart: false,
            stop: None,
            thumbnails: true,
        }
    }
}

/// What the job did. The counts cover the whole job (within the shard): a resumed run adds to
/// those saved with the commit it resumed from, so its summary equals a clean run's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Items read.
    pub read: u64,
    pub indexed: u64,
    /// Skipped items by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Items this invocation processed (`read` less the resumed prefix).
    pub processed: u64,
    /// Input position this run started from (0 for a fresh run).
    pub resumed_from: u64,
    /// The input had already been indexed completely by an earlier run (nothing was done).
    pub already_complete: bool,
    /// Stopped by [`Options::stop`] before the end of the input (what was read is committed).
    pub interrupted: bool,
    /// Busy time of each stage (they overlap: the slowest one sets the pace).
    pub stage_seconds: StageSeconds,
}

/// Seconds each stage spent working.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct StageSeconds {
    /// Reading files and decoding/resizing images (wall time of the parallel decode).
    pub decode: f64,
    /// Running the encoders and quantizing their output.
    pub encode: f64,
    /// Adding to the collection and committing.
    pub write: f64,
}

/// Receives skipped items and progress (errors file, progress bar).
pub trait Observer {
    fn skipped(&mut self, position: u64, bad: &BadItem) -> Result<()>;
    fn progress(&mut self, read: u64, indexed: u64);
    /// Bytes of the input read so far, where the reader counts them (vectors files).
    fn input_bytes(&mut self, _bytes: u64) {}
    /// Something the user should know before the work starts (e.g. why a run starts over).
    fn notice(&mut self, _text: &str) {}
    /// Called right before each commit: make what was reported durable and return a mark saved
    /// with the commit (e.g. the errors file's length, see [`crate::errors_file::ErrorsFile`]).
    fn checkpoint(&mut self) -> Result<u64> {
        Ok(0)
    }
    /// Called once before anything is reported, with the mark saved by the commit the run
    /// resumes from (0 for a fresh run): forget what was reported after it.
    fn rewind(&mut self, _mark: u64) -> Result<()> {
        Ok(())
    }
}
