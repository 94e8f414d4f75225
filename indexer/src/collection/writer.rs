//! Writing: adds, replaces and deletes go to a single tantivy writer; documents are buffered
//! and written as whole segments (see [`crate::segment_builder`]); a commit makes them durable
//! and visible to new snapshots.

use std::collections::{HashMap, HashSet};
use std::sync::MutexGuard;

use lexlip_proto::{DenseVector, DocId, Document, QuantizedVector};
use tantivy::merge_policy::LogMergePolicy;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocSet, IndexWriter, TERMINATED, Term};

use super::Collection;
use crate::error::{IndexError, Result};
use crate::schema::Fields;
use crate::segment_builder::{PendingDoc, write_segment};

const WRITER_HEAP: usize = 64 << 20;
/// Pending documents are also written as a segment once their thumbnails reach this many bytes,
/// so a batch of image documents holds bounded memory (100,000 thumbnails would be ~1 GB).
const FLUSH_THUMBNAIL_BYTES: usize = 128 << 20;

/// What a document may carry besides its stored fields and impacts ([`Collection::add_with`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocExtras {
    /// Dense fallback vector (collections with dense search on); L2-normalised before storing.
    pub dense: Option<DenseVector>,
    /// Image thumbnail bytes (`lexlip_model::thumbnail`: a small JPEG), stored as given.
    pub thumbnail: Option<Vec<u8>>,
}

/// The writer and what it has buffered since the last commit.
pub(super) struct WriterState {
    writer: IndexWriter,
    pending: Vec<PendingDoc>,
    /// Position in `pending` of each pending id (a re-add replaces in place).
    pending_ids: HashMap<String, usize>,
    /// Bytes of the pending documents' thumbnails.
    pending_thumbnail_bytes: usize,
    /// Ids written into segments since the reader last reloaded (so `committed_contains`,
    /// which looks at the reader's view, cannot see them).
    flushed_ids: HashSet<String>,
    /// Ids whose committed version was deleted since the reader last reloaded.
    deleted_ids: HashSet<String>,
    /// A delete was issued since the last commit. tantivy applies a queued delete to every
    /// segment added with `add_segment` after it (such segments carry no per-document
    /// opstamps), so a new segment is only added once queued deletes are committed.
    deletes_queued: bool,
}

impl Collection {
    fn writer(&self) -> Result<MutexGuard<'_, Option<WriterState>>> {
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let writer: IndexWriter = self.index.writer_with_num_threads(1, WRITER_HEAP)?;
            writer.set_merge_policy(Box::new(LogMergePolicy::default()));
            *guard = Some(WriterState {
                writer,
                pending: Vec::new(),
                pending_ids: HashMap::new(),
                pending_thumbnail_bytes: 0,
                flushed_ids: HashSet::new(),
                deleted_ids: HashSet::new(),
                deletes_queued: false,
            });
        }
        Ok(guard)
    }

    /// Adds a document, replacing any document with the same id. Visible after [`Self::commit`].
    pub fn add(&self, doc: Document, impacts: QuantizedVector) -> Result<()> {
        self.add_with(doc, impacts, DocExtras::default())
    }

    /// [`Self::add`] with the document's dense vector (L2-normalised before it is stored), for
    /// collections with dense search on.
    pub fn add_with_dense(
        &self,
        doc: Document,
        impacts: QuantizedVector,
        dense: Option<DenseVector>,
    ) -> Result<()> {
        self.add_with(
            doc,
            impacts,
            DocExtras {
                dense,
                thumbnail: None,
            },
        )
    }

    /// [`Self::add`] with what a document may carry besides its fields and impacts. A thumbnail
    /// is dropped, not refused, where the collection keeps none ([`Self::stores_thumbnails`]):
    /// a collection made before thumbnails existed takes the same documents as a new one.
    pub fn add_with(
        &self,
        doc: Document,
        impacts: QuantizedVector,
        extras: DocExtras,
    ) -> Result<()> {
        let DocExtras { dense, thumbnail } = extras;
        self.quantizer.check_vocabulary(&impacts)?;
        if let Some(v) = &dense {
            self.check_dense(v)?;
        }
        let dense = dense.map(|v| v.normalized());
        let thumbnail = thumbnail.filter(|_| self.stores_thumbnails());
        let mut guard = self.writer()?;
        let Some(state) = guard.as_mut() else {
            return Err(IndexError::ReadOnly);
        };
        let id = doc.id.as_str().to_string();
        let thumbnail_bytes = thumbnail.as_ref().map_or(0, Vec::len);
        if let Some(&i) = state.pending_ids.get(&id) {
            let replaced = std::mem::replace(
                &mut state.pending[i],
                PendingDoc {
                    doc,
                    impacts,
                    dense,
                    thumbnail,
                },
            );
            state.pending_thumbnail_bytes = (state.pending_thumbnail_bytes + thumbnail_bytes)
                .saturating_sub(replaced.thumbnail.as_ref().map_or(0, Vec::len));
            return Ok(());
        }
        if state.flushed_ids.contains(&id) || self.committed_contains(state, &id)? {
            Self::queue_delete(state, self.fields, &id);
        }
        state.pending_ids.insert(id, state.pending.len());
        state.pending.push(PendingDoc {
            doc,
            impacts,
            dense,
            thumbnail,
        });
        state.pending_thumbnail_bytes += thumbnail_bytes;
        if state.pending.len() >= self.flush_docs
            || state.pending_thumbnail_bytes >= FLUSH_THUMBNAIL_BYTES
        {
            self.flush(state)?;
        }
        Ok(())
    }

    /// Deletes the document with this id (committed or pending). Returns whether one existed.
    pub fn delete(&self, id: &DocId) -> Result<bool> {
        let mut guard = self.writer()?;
        let Some(state) = guard.as_mut() else {
            return Err(IndexError::ReadOnly);
        };
        let mut existed = false;
        if let Some(i) = state.pending_ids.remove(id.as_str()) {
            let removed = state.pending.swap_remove(i);
            state.pending_thumbnail_bytes = state
                .pending_thumbnail_bytes
                .saturating_sub(removed.thumbnail.as_ref().map_or(0, Vec::len));
            if let Some(moved) = state.pending.get(i) {
                state
                    .pending_ids
                    .insert(moved.doc.id.as_str().to_string(), i);
            }
            existed = true;
        }
        if state.flushed_ids.remove(id.as_str()) || self.committed_contains(state, id.as_str())? {
            Self::queue_delete(state, self.fields, id.as_str());
            existed = true;
        }
        Ok(existed)
    }

    /// Deletes every written version of `id` at the next commit.
    fn queue_delete(state: &mut WriterState, fields: Fields, id: &str) {
        state
            .writer
            .delete_term(Term::from_field_text(fields.id, id));
        state.deleted_ids.insert(id.to_string());
        state.deletes_queued = true;
    }

    fn flush(&self, state: &mut WriterState) -> Result<()> {
        if state.pending.is_empty() {
            return Ok(());
        }
        if state.deletes_queued {
            // Apply queued deletes before the new segment exists (see `deletes_queued`). Readers
            // reload manually, so none sees this intermediate commit.
            state.writer.commit()?;
            state.deletes_queued = false;
        }
        let pending = std::mem::take(&mut state.pending);
        state.pending_ids.clear();
        state.pending_thumbnail_bytes = 0;
        if let Some(meta) = write_segment(&self.index, &self.fields, &pending)? {
            state.writer.add_segment(meta)?;
            state
                .flushed_ids
                .extend(pending.iter().map(|p| p.doc.id.as_str().to_string()));
            // Freeing a large batch (~50 strings per document) takes a while: off this thread.
            if pending.len() >= 10_000 {
                std::thread::spawn(move || drop(pending));
            }
        }
        Ok(())
    }

    /// Makes every add and delete so far durable and visible to new snapshots.
    pub fn commit(&self) -> Result<()> {
        let mut guard = self.writer()?;
        let Some(state) = guard.as_mut() else {
            return Err(IndexError::ReadOnly);
        };
        self.flush(state)?;
        state.writer.commit()?;
        state.flushed_ids.clear();
        state.deleted_ids.clear();
        state.deletes_queued = false;
        drop(guard);
        self.reload()
    }

    /// Waits for background merges to finish (useful before measuring size).
    pub fn wait_merges(&self) -> Result<()> {
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = guard.take() {
            state.writer.wait_merging_threads()?;
        }
        drop(guard);
        self.reload()
    }

    /// Merges all segments into one (then waits); for benchmarks and batch builds.
    pub fn merge_all(&self) -> Result<()> {
        self.commit()?;
        // Let background merges finish first: they would hold some of the segments.
        self.wait_merges()?;
        let ids = self.index.searchable_segment_ids()?;
        if ids.len() > 1 {
            let mut guard = self.writer()?;
            if let Some(state) = guard.as_mut() {
                state
                    .writer
                    .set_merge_policy(Box::new(tantivy::merge_policy::NoMergePolicy));
                state.writer.merge(&ids).wait()?;
            }
        }
        self.wait_merges()
    }

    /// Makes new snapshots see the last commit; drops the caches of merged-away segments and
    /// warms those of new ones, so the first query does not pay for them.
    fn reload(&self) -> Result<()> {
        self.reader.reload()?;
        let live = self.live_segments();
        self.maxima
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| live.contains(id));
        self.dense.retain(&live.into_iter().collect::<Vec<_>>());
        let snapshot = self.snapshot()?;
        if self.manifest.settings.dense_dim.is_some() {
            snapshot.warm_dense()?;
        }
        Ok(())
    }

    /// Whether the last reloaded commit holds a live document `id` not deleted since.
    fn committed_contains(&self, state: &WriterState, id: &str) -> Result<bool> {
        if state.deleted_ids.contains(id) {
            return Ok(false);
        }
        let searcher = self.reader.searcher();
        let term = Term::from_field_text(self.fields.id, id);
        for reader in searcher.segment_readers() {
            let inverted = reader.inverted_index(self.fields.id)?;
            if let Some(info) = inverted.get_term_info(&term)? {
                let mut postings =
                    inverted.read_postings_from_terminfo(&info, IndexRecordOption::Basic)?;
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if reader.alive_bitset().is_none_or(|a| a.is_alive(doc)) {
                        return Ok(true);
                    }
                    doc = postings.advance();
                }
            }
        }
        Ok(false)
    }
}
