//! Reading every live document back out of a collection — stored fields, impacts and dense
//! vector — for merging collections and for comparing two of them.
//!
//! Impacts live in the postings, so they are gathered per segment in one pass over its term
//! dictionary (memory: the segment's non-zeros), not with one dictionary walk per document.

use lexlip_proto::{DenseVector, QuantizedVector};
use tantivy::postings::Postings;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocAddress, DocSet, TERMINATED, TantivyDocument};

use crate::collection::{Snapshot, StoredDocument};
use crate::error::{IndexError, Result};

impl Snapshot {
    /// Calls `f` with every live document of the snapshot, segment by segment in doc order.
    pub fn for_each_document(&self, mut f: impl FnMut(StoredDocument) -> Result<()>) -> Result<()> {
        let fields = *self.fields();
        for (ord, reader) in self.searcher().segment_readers().iter().enumerate() {
            let max_doc = reader.max_doc() as usize;
            let mut terms: Vec<String> = Vec::new();
            let mut per_doc: Vec<Vec<(u32, u32)>> = vec![Vec::new(); max_doc];
            let inverted = reader.inverted_index(fields.impacts)?;
            let mut stream = inverted.terms().stream()?;
            while stream.advance() {
                let term = terms.len() as u32;
                terms.push(String::from_utf8_lossy(stream.key()).into_owned());
                let mut postings = inverted
                    .read_postings_from_terminfo(stream.value(), IndexRecordOption::WithFreqs)?;
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    per_doc[doc as usize].push((term, postings.term_freq()));
                    doc = postings.advance();
                }
            }
            let alive = reader.alive_bitset();
            for (doc, pairs) in per_doc.into_iter().enumerate() {
                let doc = doc as u32;
                if alive.is_some_and(|a| !a.is_alive(doc)) {
                    continue;
                }
                let address = DocAddress::new(ord as u32, doc);
                let stored = self.document_at(address)?;
                let impacts = QuantizedVector::new(
                    pairs
                        .into_iter()
                        .map(|(t, i)| (terms[t as usize].as_str(), u64::from(i))),
                )
                .map_err(|e| IndexError::CorruptDocument(e.to_string()))?;
                let raw: TantivyDocument = self.searcher().doc(address)?;
                let dense = crate::dense::from_doc(&raw, &fields);
                f(StoredDocument {
                    doc: stored,
                    impacts: Some(impacts),
                    dense,
                })?;
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
