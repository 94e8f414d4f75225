//! How many documents hold each term of a query, among the documents a filter allows: the
//! statistics an IDF weighting of the query reads (`lexlip_search`'s `idf`).
//!
//! Live documents only, counted exactly. A segment the filter allows whole and without
//! deletions answers from the term infos its forward index keeps (one hash lookup per term,
//! where the term dictionary would walk its FST); any other walks the term's postings against
//! the filter's documents and the segment's alive set.

use lexlip_proto::QuantizedVector;
use lexlip_proto::api::Filter;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocSet, TERMINATED, Term};

use super::snapshot::Snapshot;
use crate::error::Result;
use crate::search::filter::CompiledFilter;

/// Document frequencies of a query's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermFrequencies {
    /// Live documents the filter allows.
    pub docs: u64,
    /// Of those, the ones holding each term, in the query's term order.
    pub df: Vec<u64>,
}

impl Snapshot {
    /// The document frequency of each term of `query` among the live documents `filter`
    /// allows, and their number.
    pub fn term_frequencies(
        &self,
        query: &QuantizedVector,
        filter: &Filter,
    ) -> Result<TermFrequencies> {
        let compiled = CompiledFilter::new(filter, &self.fields)?;
        let allowed = compiled.allowed(&self.searcher)?;
        let mut out = TermFrequencies {
            docs: 0,
            df: vec![0; query.len()],
        };
        let segments = self.searcher.segment_readers().iter().zip(&self.maxima);
        for ((reader, maxima), allowed) in segments.zip(&allowed) {
            if allowed.as_ref().is_some_and(|a| a.is_empty()) {
                continue;
            }
            let alive = reader.alive_bitset();
            let keeps = |doc: u32| {
                allowed.as_ref().is_none_or(|a| a.contains(doc))
                    && alive.is_none_or(|a| a.is_alive(doc))
            };
            let whole = allowed.is_none() && alive.is_none();
            out.docs += if whole {
                u64::from(reader.num_docs())
            } else {
                (0..reader.max_doc()).filter(|&d| keeps(d)).count() as u64
            };
            if whole {
                for ((term, _), df) in query.iter().zip(out.df.iter_mut()) {
                    let held = maxima.term(term.as_bytes());
                    *df += held.map_or(0, |t| u64::from(t.term_info.doc_freq));
                }
                continue;
            }
            let inverted = reader.inverted_index(self.fields.impacts)?;
            for ((term, _), df) in query.iter().zip(out.df.iter_mut()) {
                let term = Term::from_field_text(self.fields.impacts, term);
                let Some(mut postings) = inverted.read_postings(&term, IndexRecordOption::Basic)?
                else {
                    continue;
                };
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if keeps(doc) {
                        *df += 1;
                    }
                    doc = postings.advance();
                }
            }
        }
        Ok(out)
    }
}
