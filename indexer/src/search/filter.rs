//! Filters as per-segment bitsets of allowed documents.

use lexlip_proto::api::Filter;
use tantivy::query::{BooleanQuery, EnableScoring, Occur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocSet, Searcher, SegmentReader, TERMINATED, Term};

use crate::error::{IndexError, Result};
use crate::schema::Fields;

/// Allowed documents of one segment, where a filter allows some but not all of them.
#[derive(Debug, Clone)]
pub struct AllowedDocs {
    bits: Vec<u64>,
    /// No document of the segment is allowed (a search skips it whole).
    none: bool,
}

impl AllowedDocs {
    /// Whether the filter allows no document of this segment.
    pub fn is_empty(&self) -> bool {
        self.none
    }

    #[inline]
    pub fn contains(&self, doc: u32) -> bool {
        self.bits
            .get((doc >> 6) as usize)
            .is_some_and(|w| w & (1u64 << (doc & 63)) != 0)
    }

    /// Sets to 0 the bound `ub[r]` of every block of `2^shift` doc ids that holds no allowed
    /// document: none of its documents can be returned, so it is never scored. In a collection
    /// of images and texts searched for one modality, the other's blocks would otherwise be
    /// scored first whenever their bounds are higher (an image query's 1,000 terms bound the
    /// images' long lexicons far above the captions it looks for).
    pub(crate) fn clear_blocks_without_any(&self, ub: &mut [u32], shift: u32) {
        let docs_per_block = 1usize << shift;
        for (r, u) in ub.iter_mut().enumerate() {
            if *u != 0 && !self.any_in(r * docs_per_block, docs_per_block) {
                *u = 0;
            }
        }
    }

    /// Whether any of the `len` doc ids from `start` is allowed.
    fn any_in(&self, start: usize, len: usize) -> bool {
        let (mut doc, end) = (start, start + len);
        while doc < end {
            let (word, bit) = (doc >> 6, doc & 63);
            let take = (64 - bit).min(end - doc);
            let mask = if take == 64 {
                u64::MAX
            } else {
                ((1u64 << take) - 1) << bit
            };
            if self.bits.get(word).is_some_and(|w| w & mask != 0) {
                return true;
            }
            doc += take;
        }
        false
    }
}

/// A filter compiled into a tantivy query (None when the filter allows everything).
pub struct CompiledFilter {
    query: Option<Box<dyn Query>>,
}

impl CompiledFilter {
    pub fn new(filter: &Filter, fields: &Fields) -> Result<Self> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        let term_query =
            |t: Term| -> Box<dyn Query> { Box::new(TermQuery::new(t, IndexRecordOption::Basic)) };
        if let Some(m) = filter.modality {
            clauses.push((
                Occur::Must,
                term_query(Term::from_field_text(fields.modality, m.as_str())),
            ));
        }
        for (key, value) in &filter.metadata {
            // tantivy splits a JSON path at '.': a key's own dots (and backslashes) are escaped,
            // as the key was stored whole.
            let path = key.replace('\\', "\\\\").replace('.', "\\.");
            let mut term = Term::from_field_json_path(fields.metadata, &path, false);
            match value {
                serde_json::Value::String(s) => term.append_type_and_str(s),
                serde_json::Value::Bool(b) => term.append_type_and_fast_value(*b),
                serde_json::Value::Number(n) => {
                    if let Some(i) = n.as_i64() {
                        term.append_type_and_fast_value(i)
                    } else if let Some(u) = n.as_u64() {
                        term.append_type_and_fast_value(u)
                    } else if let Some(f) = n.as_f64() {
                        term.append_type_and_fast_value(f)
                    }
                }
                other => {
                    return Err(IndexError::InvalidQuery(format!(
                        "metadata filter on {key:?}: only strings, numbers and booleans can be matched, got {other}"
                    )));
                }
            }
            clauses.push((Occur::Must, term_query(term)));
        }
        let query: Option<Box<dyn Query>> = match clauses.len() {
            0 => None,
            1 => clauses.pop().map(|(_, q)| q),
            _ => Some(Box::new(BooleanQuery::new(clauses))),
        };
        Ok(Self { query })
    }

    pub fn is_none(&self) -> bool {
        self.query.is_none()
    }

    /// Per segment of `searcher`, the documents the filter allows; `None` where it allows every
    /// one (no filter, or a segment of the modality searched for), so that a search checks no
    /// document there.
    pub fn allowed(&self, searcher: &Searcher) -> Result<Vec<Option<AllowedDocs>>> {
        let readers = searcher.segment_readers();
        let Some(query) = &self.query else {
            return Ok(vec![None; readers.len()]);
        };
        let weight = query.weight(EnableScoring::disabled_from_searcher(searcher))?;
        readers
            .iter()
            .map(|reader| segment_bits(weight.as_ref(), reader))
            .collect()
    }
}

fn segment_bits(
    weight: &dyn tantivy::query::Weight,
    reader: &SegmentReader,
) -> Result<Option<AllowedDocs>> {
    let mut bits = vec![0u64; (reader.max_doc() as usize).div_ceil(64)];
    let mut scorer = weight.scorer(reader, 1.0)?;
    let mut doc = scorer.doc();
    while doc != TERMINATED {
        bits[(doc >> 6) as usize] |= 1u64 << (doc & 63);
        doc = scorer.advance();
    }
    let allowed: u64 = bits.iter().map(|w| u64::from(w.count_ones())).sum();
    Ok(
        (allowed < u64::from(reader.max_doc())).then_some(AllowedDocs {
            bits,
            none: allowed == 0,
        }),
    )
}
