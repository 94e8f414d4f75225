//! Reading every live document back out of a collection — stored fields, impacts, dense vector
//! and thumbnail — for merging collections and for comparing two of them.
//!
//! Impacts live in the postings, so they are gathered per window of doc ids: one pass over the
//! segment's terms per window (each term's postings skip to the window), so memory is bounded by
//! the window's non-zeros whatever the segment's size, and no dictionary walk is done per
//! document.

use lexlip_proto::api::StoredDocument;
use lexlip_proto::{DenseVector, QuantizedVector};
use tantivy::postings::Postings;
use tantivy::postings::TermInfo;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocAddress, DocSet, TERMINATED};

use crate::collection::snapshot::Snapshot;
use crate::error::{IndexError, Result};

/// Documents whose impacts are gathered together (≈ 50 non-zeros × 8 bytes each: ~26 MB).
pub const DEFAULT_WINDOW: u32 = 65_536;

impl Snapshot {
    /// Calls `f` with every live document of the snapshot, segment by segment in doc order.
    pub fn for_each_document(&self, f: impl FnMut(StoredDocument) -> Result<()>) -> Result<()> {
        self.for_each_document_windowed(DEFAULT_WINDOW, f)
    }

    /// [`Self::for_each_document`] gathering impacts for `window` documents at a time.
    pub fn for_each_document_windowed(
        &self,
        window: u32,
        mut f: impl FnMut(StoredDocument) -> Result<()>,
    ) -> Result<()> {
        let fields = *self.fields();
        let window = window.max(1);
        for (ord, reader) in self.searcher().segment_readers().iter().enumerate() {
            let max_doc = reader.max_doc();
            let inverted = reader.inverted_index(fields.impacts)?;
            let mut terms: Vec<(String, TermInfo)> = Vec::new();
            let mut stream = inverted.terms().stream()?;
            while stream.advance() {
                terms.push((
                    String::from_utf8_lossy(stream.key()).into_owned(),
                    stream.value().clone(),
                ));
            }
            let alive = reader.alive_bitset();
            let mut lo = 0u32;
            while lo < max_doc {
                let hi = max_doc.min(lo.saturating_add(window));
                let mut per_doc: Vec<Vec<(u32, u32)>> = vec![Vec::new(); (hi - lo) as usize];
                for (t, (_, info)) in terms.iter().enumerate() {
                    let mut postings =
                        inverted.read_postings_from_terminfo(info, IndexRecordOption::WithFreqs)?;
                    let mut doc = if postings.doc() < lo {
                        postings.seek(lo)
                    } else {
                        postings.doc()
                    };
                    while doc != TERMINATED && doc < hi {
                        per_doc[(doc - lo) as usize].push((t as u32, postings.term_freq()));
                        doc = postings.advance();
                    }
                }
                for (i, pairs) in per_doc.into_iter().enumerate() {
                    let doc = lo + i as u32;
                    if alive.is_some_and(|a| !a.is_alive(doc)) {
                        continue;
                    }
                    let address = DocAddress::new(ord as u32, doc);
                    let mut stored = self.stored_at(address)?;
                    stored.impacts = Some(
                        QuantizedVector::new(
                            pairs
                                .into_iter()
                                .map(|(t, i)| (terms[t as usize].0.as_str(), u64::from(i))),
                        )
                        .map_err(|e| IndexError::CorruptDocument(e.to_string()))?,
                    );
                    f(stored)?;
                }
                lo = hi;
            }
        }
        Ok(())
    }
}

/// A stored document's dense vector as a validated vector.
pub fn dense_of(d: &StoredDocument) -> Result<Option<DenseVector>> {
    d.dense
        .clone()
        .map(DenseVector::new)
        .transpose()
        .map_err(|e| IndexError::CorruptDocument(e.to_string()))
}
