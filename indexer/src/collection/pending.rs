//! What a collection's writer holds between commits: tantivy's writer, the documents buffered
//! for the next segment and the ids the next commit must settle. A field of [`super::Collection`];
//! `writer.rs` does the adding, deleting and committing.

use std::collections::{HashMap, HashSet};

use tantivy::IndexWriter;

use crate::segment_builder::PendingDoc;

/// The writer and what it has buffered since the last commit.
pub(super) struct WriterState {
    pub(super) writer: IndexWriter,
    pub(super) pending: Vec<PendingDoc>,
    /// Position in `pending` of each pending id (a re-add replaces in place).
    pub(super) pending_ids: HashMap<String, usize>,
    /// Bytes of the pending documents' thumbnails.
    pub(super) pending_bytes: usize,
    /// The `batch` term the pending documents will be written with.
    pub(super) batch: String,
    /// Ids written into segments since the last commit (the reader, which `committed_contains`
    /// looks at, cannot see them).
    pub(super) flushed_ids: HashSet<String>,
    /// Ids whose older versions the next commit deletes, each with the batch that holds the
    /// version to keep (`None`: deleted, no version kept).
    pub(super) doomed: HashMap<String, Option<String>>,
    /// Ids whose committed version an intermediate commit already deleted (collections without
    /// the `batch` field only).
    pub(super) deleted_ids: HashSet<String>,
}
