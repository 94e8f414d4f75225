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
    /// No document of a segment.
    const NONE: AllowedDocs = AllowedDocs {
        bits: Vec::new(),
        none: true,
    };

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
    /// The filter's one term, when it has one clause (a modality alone, the usual filter).
    single: Option<Term>,
}

impl CompiledFilter {
    pub fn new(filter: &Filter, fields: &Fields) -> Result<Self> {
        // Every term must match.
        let mut terms = Vec::new();
        if let Some(m) = filter.modality {
            terms.push(Term::from_field_text(fields.modality, m.as_str()));
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
            terms.push(term);
        }
        let term_query = |t: &Term| -> Box<dyn Query> {
            Box::new(TermQuery::new(t.clone(), IndexRecordOption::Basic))
        };
        let query: Option<Box<dyn Query>> = match terms.as_slice() {
            [] => None,
            [one] => Some(term_query(one)),
            all => Some(Box::new(BooleanQuery::new(
                all.iter().map(|t| (Occur::Must, term_query(t))).collect(),
            ))),
        };
        let single = (terms.len() == 1).then(|| terms.remove(0));
        Ok(Self { query, single })
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
            .map(|reader| match self.whole_segment(reader)? {
                Some(none) => Ok(none.then_some(AllowedDocs::NONE)),
                None => segment_bits(weight.as_ref(), reader),
            })
            .collect()
    }

    /// For a one-term filter, whether it allows none (`Some(true)`) or every one
    /// (`Some(false)`) of the segment's documents, from the term's document frequency alone;
    /// `None` when it allows some, or the filter has several terms. Images and captions are
    /// written to segments of their own, so a modality filter allows a whole segment or nothing
    /// of it; walking its 250,000 postings to find that out took a sixth of a text → image
    /// search over a million pictures.
    fn whole_segment(&self, reader: &SegmentReader) -> Result<Option<bool>> {
        let Some(term) = &self.single else {
            return Ok(None);
        };
        let postings = reader.inverted_index(term.field())?.doc_freq(term)?;
        Ok(if postings == 0 {
            Some(true)
        } else if postings >= reader.max_doc() {
            Some(false)
        } else {
            None
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collection::Collection;
    use crate::manifest::CollectionSettings;
    use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};

    /// The document-frequency shortcut gives the documents that walking the filter's postings
    /// gives: segments of one modality (all or none allowed), a metadata key some documents
    /// carry, one every document carries, one none does, and a filter of two terms (no
    /// shortcut), with a deleted document in the collection.
    #[test]
    fn the_shortcut_allows_what_the_postings_allow() {
        let dir = tempfile::tempdir().unwrap();
        let c = Collection::create(
            dir.path(),
            TermSpace::from_tokens("test", []),
            CollectionSettings::default(),
            None,
        )
        .unwrap();
        for i in 0..300u32 {
            let modality = if i % 3 == 0 {
                Modality::Text
            } else {
                Modality::Image
            };
            let mut d = Document::new(DocId::new(format!("d{i}")).unwrap(), modality);
            d.metadata.insert("all".into(), "y".into());
            if i % 7 == 0 {
                d.metadata.insert("some".into(), "y".into());
            }
            c.add(
                d,
                QuantizedVector::new([("x", 1u64 + u64::from(i))]).unwrap(),
            )
            .unwrap();
        }
        c.commit().unwrap();
        c.delete(&DocId::new("d1").unwrap()).unwrap();
        c.commit().unwrap();
        let snap = c.snapshot().unwrap();
        let meta = |key: &str| {
            let mut m = serde_json::Map::new();
            m.insert(key.into(), "y".into());
            m
        };
        let filters = [
            Filter {
                modality: Some(Modality::Image),
                ..Filter::default()
            },
            Filter {
                modality: Some(Modality::Text),
                ..Filter::default()
            },
            Filter {
                metadata: meta("some"),
                ..Filter::default()
            },
            Filter {
                metadata: meta("all"),
                ..Filter::default()
            },
            Filter {
                metadata: meta("none"),
                ..Filter::default()
            },
            Filter {
                modality: Some(Modality::Image),
                metadata: meta("some"),
            },
        ];
        let mut shortcuts = 0;
        for filter in &filters {
            let compiled = CompiledFilter::new(filter, snap.fields()).unwrap();
            let got = compiled.allowed(snap.searcher()).unwrap();
            let query = compiled.query.as_ref().unwrap();
            let weight = query
                .weight(EnableScoring::disabled_from_searcher(snap.searcher()))
                .unwrap();
            for (reader, got) in snap.searcher().segment_readers().iter().zip(got) {
                shortcuts += usize::from(compiled.whole_segment(reader).unwrap().is_some());
                let want = segment_bits(weight.as_ref(), reader).unwrap();
                let docs = |a: &Option<AllowedDocs>| {
                    (0..reader.max_doc())
                        .map(|d| a.as_ref().is_none_or(|a| a.contains(d)))
                        .collect::<Vec<bool>>()
                };
                assert_eq!(docs(&got), docs(&want), "{filter:?}");
                assert_eq!(
                    got.as_ref().map(AllowedDocs::is_empty),
                    want.as_ref().map(AllowedDocs::is_empty),
                    "{filter:?}"
                );
            }
        }
        // Both modalities' segments, and the keys every and no document carries.
        assert!(shortcuts >= 4, "{shortcuts}");
    }
}
