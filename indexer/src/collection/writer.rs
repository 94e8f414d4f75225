//! Writing: adds, replaces and deletes go to a single tantivy writer; documents are buffered
//! and written as whole segments (see [`crate::segment_builder`]); a commit makes them durable
//! and visible to new snapshots — all of them or, if the process dies first, none.
//!
//! Deletes wait for the commit. A queued tantivy delete also hits segments added after it (they
//! carry no per-document opstamps), so a replace deletes "this id, but not in the batch that
//! holds its newest version" ([`crate::schema::Fields::batch`]): old versions and the new segment then change
//! in one commit. Collections made before the `batch` field commit the deletes first and the
//! new segment second, as they always did.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::MutexGuard;

use lexlip_proto::{DenseVector, DocId, Document, Modality, QuantizedVector};
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocSet, IndexWriter, TERMINATED, Term};

use super::Collection;
use super::modalities::ModalityMergePolicy;
use super::pending::WriterState;
use crate::error::{IndexError, Result};
use crate::segment_builder::{PendingDoc, write_segment};

const WRITER_HEAP: usize = 64 << 20;
/// Pending documents are also written as a segment once their thumbnails reach this many bytes,
/// so a batch of image documents holds bounded memory (100,000 thumbnails would be ~1 GB).
const FLUSH_STORED_BYTES: usize = 128 << 20;

/// What a document may carry besides its stored fields and impacts ([`Collection::add_with`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocExtras {
    /// Dense fallback vector (collections with dense search on); L2-normalised before storing.
    pub dense: Option<DenseVector>,
    /// Image thumbnail bytes (`lexlip_model::thumbnail`: a small JPEG), stored as given.
    pub thumbnail: Option<Vec<u8>>,
}

/// A `batch` term no other segment of the collection has: time, a per-process random key and
/// a counter.
fn new_batch() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{:016x}", h.finish())
}

impl Collection {
    fn writer(&self) -> Result<MutexGuard<'_, Option<WriterState>>> {
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let writer: IndexWriter = self.index.writer_with_num_threads(1, WRITER_HEAP)?;
            writer.set_merge_policy(Box::new(ModalityMergePolicy::new(self.modalities.clone())));
            // A commit killed (or failed, e.g. on a full disk) after writing a file that no
            // `meta.json` names leaves it behind; the same operation retried reaches the same
            // opstamp, and thus the same file name, and tantivy refuses to overwrite it. Such
            // files are removed before the first write of every new writer.
            if let Err(e) = writer.garbage_collect_files().wait() {
                tracing::warn!(error = %e, "removing files no commit names");
            }
            *guard = Some(WriterState {
                writer,
                pending: Vec::new(),
                pending_ids: HashMap::new(),
                pending_bytes: 0,
                batch: new_batch(),
                flushed_ids: HashSet::new(),
                doomed: HashMap::new(),
                deleted_ids: HashSet::new(),
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
        // What the pending document holds in memory until its segment is written: thumbnails
        // and stored text can be megabytes each, so segments are cut by bytes as well.
        let thumbnail_bytes =
            thumbnail.as_ref().map_or(0, Vec::len) + doc.text.as_ref().map_or(0, String::len);
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
            state.pending_bytes =
                (state.pending_bytes + thumbnail_bytes).saturating_sub(stored_bytes(&replaced));
            return Ok(());
        }
        if state.doomed.contains_key(&id)
            || state.flushed_ids.contains(&id)
            || self.committed_contains(state, &id)?
        {
            // Older versions go at the commit; this one, in the pending batch, stays.
            state.doomed.insert(id.clone(), Some(state.batch.clone()));
        }
        state.pending_ids.insert(id, state.pending.len());
        state.pending.push(PendingDoc {
            doc,
            impacts,
            dense,
            thumbnail,
        });
        state.pending_bytes += thumbnail_bytes;
        if state.pending.len() >= self.flush_docs || state.pending_bytes >= FLUSH_STORED_BYTES {
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
        let id = id.as_str();
        let mut existed = false;
        if let Some(i) = state.pending_ids.remove(id) {
            let removed = state.pending.swap_remove(i);
            state.pending_bytes = state.pending_bytes.saturating_sub(stored_bytes(&removed));
            if let Some(moved) = state.pending.get(i) {
                state
                    .pending_ids
                    .insert(moved.doc.id.as_str().to_string(), i);
            }
            existed = true;
        }
        // A version kept by an earlier replace (`Some`), flushed or committed: all go.
        let kept = matches!(state.doomed.get(id), Some(Some(_)));
        let flushed = state.flushed_ids.remove(id);
        let older = kept || flushed || self.committed_contains(state, id)?;
        if older {
            state.doomed.insert(id.to_string(), None);
        }
        Ok(existed || older)
    }

    /// Queues the deletes of `doomed` in the tantivy writer: each id everywhere but in the
    /// batch that keeps its newest version. Queued last, they reach every segment added before.
    fn queue_deletes(&self, state: &mut WriterState) -> Result<()> {
        for (id, keep) in state.doomed.drain() {
            let term = Term::from_field_text(self.fields.id, &id);
            match (keep, self.fields.batch) {
                (Some(batch), Some(field)) => {
                    let clauses: Vec<(Occur, Box<dyn Query>)> = vec![
                        (
                            Occur::Must,
                            Box::new(TermQuery::new(term, IndexRecordOption::Basic)),
                        ),
                        (
                            Occur::MustNot,
                            Box::new(TermQuery::new(
                                Term::from_field_text(field, &batch),
                                IndexRecordOption::Basic,
                            )),
                        ),
                    ];
                    state
                        .writer
                        .delete_query(Box::new(BooleanQuery::new(clauses)))?;
                }
                _ => {
                    state.writer.delete_term(term);
                }
            }
            state.deleted_ids.insert(id);
        }
        Ok(())
    }

    fn flush(&self, state: &mut WriterState) -> Result<()> {
        if state.pending.is_empty() {
            return Ok(());
        }
        if self.fields.batch.is_none() && !state.doomed.is_empty() {
            // No `batch` field: the deletes must be committed before the new segment exists
            // (a queued delete would hit it). Readers reload manually, so none sees this
            // intermediate commit; a crash right after it loses the replaced documents.
            self.queue_deletes(state)?;
            state.writer.commit()?;
        }
        let pending = std::mem::take(&mut state.pending);
        state.pending_ids.clear();
        state.pending_bytes = 0;
        let batch = std::mem::replace(&mut state.batch, new_batch());
        let forward_plan = self.forward_files.then(|| self.forward_plan());
        // A segment per modality (`super::modalities`), images first.
        let (images, texts): (Vec<PendingDoc>, Vec<PendingDoc>) = pending
            .into_iter()
            .partition(|p| p.doc.modality == Modality::Image);
        for (modality, docs) in [(Modality::Image, images), (Modality::Text, texts)] {
            if let Some(meta) = write_segment(
                &self.index,
                &self.fields,
                &docs,
                &batch,
                self.doc_order,
                forward_plan,
            )? {
                self.modalities.record(meta.id(), Some(modality));
                state.writer.add_segment(meta)?;
                state
                    .flushed_ids
                    .extend(docs.iter().map(|p| p.doc.id.as_str().to_string()));
                // Freeing a large batch (~50 strings per document) takes a while: off this
                // thread.
                if docs.len() >= 10_000 {
                    std::thread::spawn(move || drop(docs));
                }
            }
        }
        Ok(())
    }

    /// Runs `f` (adds and deletes), then commits: all of it becomes durable and visible, or —
    /// when `f` or the commit fails — none of it is ever written (the writer is rolled back, so
    /// a later commit cannot publish half of a failed write).
    pub fn transaction<T>(&self, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
        self.transaction_unless_abandoned(f, || true)
    }

    /// [`Self::transaction`] that asks `may_commit` right before committing: `false` (the
    /// request was abandoned: timed out, client gone) rolls everything back and returns
    /// [`IndexError::Cancelled`], so a write never commits after its caller gave up on it.
    pub fn transaction_unless_abandoned<T>(
        &self,
        f: impl FnOnce(&Self) -> Result<T>,
        may_commit: impl FnOnce() -> bool,
    ) -> Result<T> {
        let result = f(self).and_then(|value| {
            if may_commit() {
                self.commit().map(|()| value)
            } else {
                Err(IndexError::Cancelled)
            }
        });
        if result.is_err() {
            // The writer state is dropped even when tantivy's rollback itself fails, so nothing
            // of the failed write survives either way; the first error is the one to report.
            let _ = self.rollback();
        }
        result
    }

    /// Drops every add and delete since the last commit: nothing of them is ever written to
    /// the collection (call it when a write fails half-way, so that the next commit does not
    /// publish it).
    pub fn rollback(&self) -> Result<()> {
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut state) = guard.take() {
            state.writer.rollback()?;
            // A fresh state on the next write; the rolled-back writer is released here.
            drop(state);
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
        self.queue_deletes(state)?;
        state.writer.commit()?;
        state.flushed_ids.clear();
        state.deleted_ids.clear();
        drop(guard);
        self.reload()
    }

    /// Stops writing for good, before the collection's files are deleted: what was not
    /// committed is dropped and background merges are waited for, so that nothing writes into
    /// the directory afterwards.
    pub fn close(&self) -> Result<()> {
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = guard.take() {
            state.writer.wait_merging_threads()?;
        }
        Ok(())
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

    /// Merges all segments into one per modality (then waits); for benchmarks and batch
    /// builds.
    pub fn merge_all(&self) -> Result<()> {
        self.commit()?;
        // Let background merges finish first: they would hold some of the segments.
        self.wait_merges()?;
        let ids = self.index.searchable_segment_ids()?;
        let groups = self.modalities.group(&ids, |id| *id);
        if groups.iter().any(|g| g.len() > 1) {
            let mut guard = self.writer()?;
            if let Some(state) = guard.as_mut() {
                // Only for this writer: `wait_merges` below drops it, and the next write opens
                // one with the modality merge policy again.
                state
                    .writer
                    .set_merge_policy(Box::new(tantivy::merge_policy::NoMergePolicy));
                for group in groups.iter().filter(|g| g.len() > 1) {
                    state.writer.merge(group).wait()?;
                }
            }
        }
        self.wait_merges()
    }

    /// Makes new snapshots see the last commit; drops the caches of merged-away segments and
    /// warms those of new ones, so the first query does not pay for them.
    fn reload(&self) -> Result<()> {
        self.reader.reload()?;
        self.modalities
            .learn(self.reader.searcher().segment_readers(), &self.fields)?;
        let live = self.live_segments();
        self.maxima
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| live.contains(id));
        self.dense.retain(&live.into_iter().collect::<Vec<_>>());
        // Asking for the figures is what prunes entries of files no longer mapped.
        let _ = self.mmap.get_cache_info();
        let snapshot = self.snapshot()?;
        if self.warm_dense && self.manifest.settings.dense_dim.is_some() {
            snapshot.warm_dense()?;
        }
        Ok(())
    }

    /// Whether the last reloaded commit holds a live document `id` not deleted since.
    fn committed_contains(&self, state: &WriterState, id: &str) -> Result<bool> {
        if state.deleted_ids.contains(id) || state.doomed.contains_key(id) {
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

/// Bytes a pending document holds besides its vector: its thumbnail and stored text.
fn stored_bytes(doc: &PendingDoc) -> usize {
    doc.thumbnail.as_ref().map_or(0, Vec::len) + doc.doc.text.as_ref().map_or(0, String::len)
}
