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

/// The writer and what it has buffered since the last commit.
pub(super) struct WriterState {
    writer: IndexWriter,
    pending: Vec<PendingDoc>,
    /// Position in `pending` of each pending id (a re-add replaces in place).
    pending_ids: HashMap<String, usize>,
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
                flushed_ids: HashSet::new(),
                deleted_ids: HashSet::new(),
                deletes_queued: false,
            });
        }
        Ok(guard)
    }

    /// Adds a document, replacing any document with the same id. Visible after [`Self::commit`].
    pub fn add(&self, doc: Document, impacts: QuantizedVector) -> Result<()> {
        self.add_with_dense(doc, impacts, None)
    }

    /// [`Self::add`] with the document's dense vector (L2-normalised before it is stored), for
    /// collections with dense search on.
    pub fn add_with_dense(
        &self,
        doc: Document,
        impacts: QuantizedVector,
        dense: Option<DenseVector>,
    ) -> Result<()> {
        self.quantizer.check_vocabulary(&impacts)?;
        if let Some(v) = &dense {
            self.check_dense(v)?;
        }
        let dense = dense.map(|v| v.normalized());
        let mut guard = self.writer()?;
        let Some(state) = guard.as_mut() else {
            return Err(IndexError::ReadOnly);
        };
        let id = doc.id.as_str().to_string();
        if let Some(&i) = state.pending_ids.get(&id) {
            state.pending[i] = PendingDoc {
                doc,
                impacts,
                dense,
            };
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
        });
        if state.pending.len() >= self.flush_docs {
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
            state.pending.swap_remove(i);
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
