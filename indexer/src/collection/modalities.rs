//! One modality per segment: images and texts are written to segments of their own and merged
//! only with segments of the same modality.
//!
//! The two are different workloads for the engine: an image lexicon holds hundreds to
//! thousands of terms, a caption's a few dozen, and each segment picks the forward index layout
//! for its own documents (`crate::forward_index`: documents for short ones, terms for long
//! ones). A search for one modality (text→image, image→text) then skips the other's segments
//! whole instead of bounding their blocks: on 20,000 composed pictures and their captions in
//! one collection, image→text went from 59 ms to about 1 ms per query
//! (docs/journal/benchmarks-2026-11-to-12.md, "Images and captions in segments of their own").
//!
//! What each segment holds is read from its `modality` postings when the collection is opened
//! or reloaded, and recorded when a segment is written; a segment not yet known (a merge's
//! output before the next reload) is merged only with other unknown ones.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use lexlip_proto::Modality;
use tantivy::index::{SegmentId, SegmentMeta};
use tantivy::merge_policy::{LogMergePolicy, MergeCandidate, MergePolicy};
use tantivy::{SegmentReader, Term};

use crate::error::Result;
use crate::schema::Fields;

/// What a segment holds: one modality, or both (`None`: written before segments were split,
/// or merged from both).
pub(crate) type Holds = Option<Modality>;

/// The modality of every live segment, and of those written since the last reload, shared by
/// the writer and its merge policy.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentModalities(Arc<Mutex<Known>>);

#[derive(Debug, Default)]
struct Known {
    holds: HashMap<SegmentId, Holds>,
    /// Recorded since the last [`SegmentModalities::learn`]: kept by it though not live yet
    /// (written, not committed).
    recent: HashSet<SegmentId>,
}

impl SegmentModalities {
    pub(crate) fn record(&self, id: SegmentId, holds: Holds) {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        known.holds.insert(id, holds);
        known.recent.insert(id);
    }

    fn get(&self, id: &SegmentId) -> Option<Holds> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .holds
            .get(id)
            .copied()
    }

    /// Records the segments of `readers` (the live ones) not known yet, from their `modality`
    /// postings, and forgets segments neither live nor recorded since the last call (merged
    /// away or rolled back), so that a server taking writes for days keeps a bounded map.
    pub(crate) fn learn(&self, readers: &[SegmentReader], fields: &Fields) -> Result<()> {
        let mut learned = Vec::new();
        for reader in readers {
            if self.get(&reader.segment_id()).is_none() {
                learned.push((reader.segment_id(), holds(reader, fields)?));
            }
        }
        let live: HashSet<SegmentId> = readers.iter().map(SegmentReader::segment_id).collect();
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        known.holds.extend(learned);
        let Known { holds, recent } = &mut *known;
        holds.retain(|id, _| live.contains(id) || recent.contains(id));
        recent.clear();
        Ok(())
    }

    /// Groups `ids` by what their segments hold (unknown ones together), in a stable order.
    pub(crate) fn group<T: Clone>(&self, items: &[T], id: impl Fn(&T) -> SegmentId) -> Vec<Vec<T>> {
        let mut groups: Vec<(Option<Holds>, Vec<T>)> = Vec::new();
        for item in items {
            let key = self.get(&id(item));
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, g)) => g.push(item.clone()),
                None => groups.push((key, vec![item.clone()])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }
}

/// What one segment holds, from the document frequencies of its `modality` terms.
fn holds(reader: &SegmentReader, fields: &Fields) -> Result<Holds> {
    let inverted = reader.inverted_index(fields.modality)?;
    let mut found = None;
    for m in [Modality::Image, Modality::Text] {
        let term = Term::from_field_text(fields.modality, m.as_str());
        if inverted.doc_freq(&term)? > 0 {
            if found.is_some() {
                return Ok(None);
            }
            found = Some(m);
        }
    }
    Ok(found)
}

/// A segment is merged (alone or with others) once this share of its documents is deleted.
const DELETED_SHARE_BEFORE_MERGE: f32 = 0.25;

/// Tantivy's log merge policy inside each group of segments that hold the same modality.
#[derive(Debug)]
pub(crate) struct ModalityMergePolicy {
    inner: LogMergePolicy,
    modalities: SegmentModalities,
}

impl ModalityMergePolicy {
    pub(crate) fn new(modalities: SegmentModalities) -> Self {
        let mut inner = LogMergePolicy::default();
        // tantivy's default (1.0) never merges a segment for its deletes: under a server's
        // adds and deletes at a constant data size the large segments kept their deleted
        // documents, so disk and the heap grew (a one-hour soak at 100,000 documents: 23,500
        // deleted of 73,500 in one collection after 20 minutes). Lucene merges at 20-33 %.
        inner.set_del_docs_ratio_before_merge(DELETED_SHARE_BEFORE_MERGE);
        Self { inner, modalities }
    }
}

impl MergePolicy for ModalityMergePolicy {
    fn compute_merge_candidates(&self, segments: &[SegmentMeta]) -> Vec<MergeCandidate> {
        self.modalities
            .group(segments, SegmentMeta::id)
            .iter()
            .flat_map(|group| self.inner.compute_merge_candidates(group))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};

    use crate::collection::Collection;
    use crate::manifest::CollectionSettings;

    /// Adds the text document `d{id}` with one term weighing `1 + n`.
    fn add(c: &Collection, id: u64, n: u64) {
        let v = QuantizedVector::new([("dog", 1 + n)]).unwrap();
        let doc = Document::new(DocId::new(format!("d{id}")).unwrap(), Modality::Text);
        c.add(doc, v).unwrap();
    }

    fn new_collection(dir: &std::path::Path) -> Collection {
        let space = TermSpace::free("any");
        Collection::create(dir, space, CollectionSettings::default(), None).unwrap()
    }

    /// A server that commits every write for days: the map follows the live segments instead
    /// of keeping every segment ever written (one per commit).
    #[test]
    fn segments_merged_away_are_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let c = new_collection(tmp.path());
        for i in 0..60 {
            add(&c, i % 20, i);
            c.commit().unwrap();
        }
        c.wait_merges().unwrap();
        let known = c.modalities.0.lock().unwrap().holds.len();
        let live = c.live_segments().len();
        assert!(
            known <= live + 1,
            "{known} segments known, {live} live (60 written)"
        );
        assert_eq!(c.snapshot().unwrap().num_docs(), 20);
    }

    /// Deleted documents do not pile up in a segment no merge of similar sizes reaches: once a
    /// quarter of it is deleted it is merged, and the deleted documents are gone.
    #[test]
    fn a_segment_with_many_deletes_is_merged() {
        let tmp = tempfile::tempdir().unwrap();
        let c = new_collection(tmp.path());
        for i in 0..400 {
            add(&c, i, i);
        }
        c.commit().unwrap();
        for i in 0..160 {
            c.delete(&DocId::new(format!("d{i}")).unwrap()).unwrap();
        }
        c.commit().unwrap();
        c.wait_merges().unwrap();
        let searcher = c.reader.searcher();
        let physical: u32 = searcher.segment_readers().iter().map(|r| r.max_doc()).sum();
        assert_eq!((physical, c.snapshot().unwrap().num_docs()), (240, 240));
    }
}
