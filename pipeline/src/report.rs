//! The summary a batch job prints at the end (`lexlip index`, human or `--json`): its counts,
//! its speed and what the settled index costs on disk.

use std::collections::BTreeMap;

use lexlip_index::Collection;
use serde::Serialize;

use crate::error::Result;
use crate::job::{StageSeconds, Summary};

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub read: u64,
    pub indexed: u64,
    pub skipped: BTreeMap<String, u64>,
    /// Seconds from the start to the last commit.
    pub seconds: f64,
    /// Items this run processed per second.
    pub items_per_s: f64,
    pub index_bytes: u64,
    /// Index bytes per live document.
    pub bytes_per_item: f64,
    pub bytes_per_nnz: f64,
    /// Corpus runs: busy seconds per stage (decode, encode, write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_seconds: Option<StageSeconds>,
    /// The input position this run resumed after (the counts cover the whole job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<u64>,
    /// An earlier run had indexed this input completely: nothing was done.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub already_complete: bool,
    /// Stopped by Ctrl-C/SIGTERM after committing what was read; the same command resumes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// `--merge-segments`: seconds spent merging every segment into one (after `seconds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_seconds: Option<f64>,
}

impl Report {
    /// The report of a finished job. Sizes are those of the settled index: background merges
    /// finish first (their inputs still count until then).
    pub fn new(
        collection: &Collection,
        summary: &Summary,
        seconds: f64,
        stages: bool,
    ) -> Result<Self> {
        collection.wait_merges()?;
        let stats = collection.stats()?;
        Ok(Self {
            read: summary.read,
            indexed: summary.indexed,
            skipped: summary.skipped.clone(),
            seconds,
            items_per_s: summary.processed as f64 / seconds.max(1e-9),
            index_bytes: stats.bytes,
            bytes_per_item: stats.bytes as f64 / stats.documents.max(1) as f64,
            bytes_per_nnz: stats.bytes_per_nnz,
            stage_seconds: stages.then_some(summary.stage_seconds),
            resumed_from: (summary.resumed_from > 0).then_some(summary.resumed_from),
            already_complete: summary.already_complete,
            interrupted: summary.interrupted,
            merge_seconds: None,
        })
    }

    /// One line for people.
    pub fn human(&self) -> String {
        let merged = self
            .merge_seconds
            .map(|s| format!("; segments merged into one in {s:.1} s"))
            .unwrap_or_default();
        format!(
            "read {}, indexed {}, skipped {} {:?}, {:.1} s, {:.0} items/s, index {} bytes ({:.0} bytes per item, {:.2} bytes per non-zero){merged}",
            self.read,
            self.indexed,
            self.skipped.values().sum::<u64>(),
            self.skipped,
            self.seconds,
            self.items_per_s,
            self.index_bytes,
            self.bytes_per_item,
            self.bytes_per_nnz
        )
    }

    /// Why the job did not succeed, if it did not: it was interrupted, or indexed nothing.
    pub fn failure(&self) -> Option<String> {
        if self.interrupted {
            return Some(format!(
                "interrupted after committing {} items; run the same command again to resume",
                self.read
            ));
        }
        if self.indexed == 0 {
            return Some(if self.read == 0 {
                "nothing was indexed: the input holds no items (for this shard)".into()
            } else {
                "nothing was indexed (every item was skipped; see the reasons above)".into()
            });
        }
        None
    }
}
