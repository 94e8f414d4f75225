//! Reading documents back from a snapshot: search hits with their stored fields, the matched
//! terms of a hit (explain), and a document by id with its impacts.

use lexlip_proto::api::{Hit, StoredDocument, TermContribution};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector};
use tantivy::schema::{IndexRecordOption, OwnedValue, Value};
use tantivy::{DocAddress, DocSet, TERMINATED, TantivyDocument, Term};

use super::snapshot::Snapshot;
use crate::error::{IndexError, Result};
use crate::search::ScoredDoc;

impl Snapshot {
    /// A document at a segment ordinal and doc id as an API hit with the given score (for
    /// dense and fused results, whose scores are not dot products of impacts).
    pub fn hit_at(&self, segment_ord: u32, doc: u32, score: f64) -> Result<Hit> {
        let d = self.document_at(DocAddress::new(segment_ord, doc))?;
        Ok(as_hit(d, score, None))
    }

    /// Stored fields of a scored document as an API hit; with `explain`, the matched terms.
    pub fn hit(&self, scored: &ScoredDoc, explain: Option<&QuantizedVector>) -> Result<Hit> {
        let doc = self.document_at(DocAddress::new(scored.segment_ord, scored.doc))?;
        let explain = match explain {
            Some(q) => Some(self.explain(scored, q)?),
            None => None,
        };
        Ok(as_hit(doc, scored.score as f64, explain))
    }

    /// The matched terms of one hit, largest contribution first.
    pub fn explain(
        &self,
        scored: &ScoredDoc,
        query: &QuantizedVector,
    ) -> Result<Vec<TermContribution>> {
        let reader = self.searcher.segment_reader(scored.segment_ord);
        let inverted = reader.inverted_index(self.fields.impacts)?;
        let mut out = Vec::new();
        for (term, q) in query.iter() {
            let Some(info) =
                inverted.get_term_info(&Term::from_field_text(self.fields.impacts, term))?
            else {
                continue;
            };
            let mut postings =
                inverted.read_postings_from_terminfo(&info, IndexRecordOption::WithFreqs)?;
            if seek_exact(&mut postings, scored.doc) {
                let d = tantivy::postings::Postings::term_freq(&postings);
                out.push(TermContribution {
                    term: term.to_string(),
                    query_impact: q,
                    doc_impact: d,
                    contribution: u64::from(q) * u64::from(d),
                });
            }
        }
        out.sort_by(|a, b| {
            b.contribution
                .cmp(&a.contribution)
                .then_with(|| a.term.cmp(&b.term))
        });
        Ok(out)
    }

    pub(crate) fn document_at(&self, address: DocAddress) -> Result<Document> {
        let stored: TantivyDocument = self.searcher.doc(address)?;
        self.document_of(&stored)
    }

    /// Everything stored of the document at `address` (fields, dense vector, thumbnail) from one
    /// read of the store; impacts are left for the caller (they live in the postings).
    pub(crate) fn stored_at(&self, address: DocAddress) -> Result<StoredDocument> {
        let stored: TantivyDocument = self.searcher.doc(address)?;
        Ok(StoredDocument {
            doc: self.document_of(&stored)?,
            impacts: None,
            dense: crate::dense::from_doc(&stored, &self.fields),
            thumbnail: self.fields.thumbnail.and_then(|field| {
                stored
                    .get_first(field)
                    .and_then(|v| v.as_bytes())
                    .map(<[u8]>::to_vec)
            }),
        })
    }

    fn document_of(&self, stored: &TantivyDocument) -> Result<Document> {
        let text_of = |field| {
            stored
                .get_first(field)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let id =
            text_of(self.fields.id).ok_or_else(|| IndexError::CorruptDocument("no id".into()))?;
        let id = DocId::new(id).map_err(|e| IndexError::CorruptDocument(e.to_string()))?;
        let modality: Modality = text_of(self.fields.modality)
            .ok_or_else(|| IndexError::CorruptDocument(format!("{id}: no modality")))?
            .parse()
            .map_err(|e: lexlip_proto::DocumentError| IndexError::CorruptDocument(e.to_string()))?;
        let metadata = match stored.get_first(self.fields.metadata) {
            Some(v) => match serde_json::to_value(OwnedValue::from(v)) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            },
            None => serde_json::Map::new(),
        };
        Ok(Document {
            id,
            modality,
            uri: text_of(self.fields.uri),
            text: text_of(self.fields.text),
            metadata,
        })
    }

    fn address_of(&self, id: &str) -> Result<Option<DocAddress>> {
        let term = Term::from_field_text(self.fields.id, id);
        for (ord, reader) in self.searcher.segment_readers().iter().enumerate() {
            let inverted = reader.inverted_index(self.fields.id)?;
            let Some(info) = inverted.get_term_info(&term)? else {
                continue;
            };
            let mut postings =
                inverted.read_postings_from_terminfo(&info, IndexRecordOption::Basic)?;
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if reader.alive_bitset().is_none_or(|a| a.is_alive(doc)) {
                    return Ok(Some(DocAddress::new(ord as u32, doc)));
                }
                doc = postings.advance();
            }
        }
        Ok(None)
    }

    /// The stored document with this id; with `with_impacts`, its terms read back from the
    /// postings (one dictionary walk: use for single documents, not in loops).
    pub fn get(&self, id: &str, with_impacts: bool) -> Result<Option<StoredDocument>> {
        let Some(address) = self.address_of(id)? else {
            return Ok(None);
        };
        let mut found = self.stored_at(address)?;
        if with_impacts {
            found.impacts = Some(self.impacts_at(address)?);
        }
        Ok(Some(found))
    }

    /// Whether this collection's schema has the thumbnail field (false: made before thumbnails
    /// existed, so none of its documents has one).
    pub fn has_thumbnail_field(&self) -> bool {
        self.fields.thumbnail.is_some()
    }

    fn impacts_at(&self, address: DocAddress) -> Result<QuantizedVector> {
        let reader = self.searcher.segment_reader(address.segment_ord);
        let inverted = reader.inverted_index(self.fields.impacts)?;
        let mut stream = inverted.terms().stream()?;
        let mut pairs = Vec::new();
        while stream.advance() {
            let mut postings = inverted
                .read_postings_from_terminfo(stream.value(), IndexRecordOption::WithFreqs)?;
            if seek_exact(&mut postings, address.doc_id) {
                let term = String::from_utf8_lossy(stream.key()).into_owned();
                pairs.push((
                    term,
                    u64::from(tantivy::postings::Postings::term_freq(&postings)),
                ));
            }
        }
        QuantizedVector::new(pairs).map_err(|e| IndexError::CorruptDocument(e.to_string()))
    }
}

/// A stored document as a hit; its text cut to [`lexlip_proto::api::MAX_HIT_TEXT_BYTES`] (a
/// response of k hits must not carry k whole documents).
fn as_hit(d: Document, score: f64, explain: Option<Vec<TermContribution>>) -> Hit {
    let mut hit = Hit {
        id: d.id.to_string(),
        score,
        modality: d.modality,
        uri: d.uri,
        text: d.text,
        metadata: d.metadata,
        explain,
        stage: None,
        first_stage_score: None,
        match_strength: None,
        text_truncated: false,
    };
    hit.cap_text(lexlip_proto::api::MAX_HIT_TEXT_BYTES);
    hit
}

/// Moves a fresh postings cursor to `doc`; true when the term occurs in it. (tantivy's `seek`
/// requires a target at or after the current document.)
fn seek_exact(postings: &mut tantivy::postings::SegmentPostings, doc: u32) -> bool {
    let current = postings.doc();
    if current > doc {
        return false;
    }
    current == doc || postings.seek(doc) == doc
}
