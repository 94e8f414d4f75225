//! The unpruned baseline: term-at-a-time accumulation into a dense score array.
//!
//! Every posting of every query term is read block by block (tantivy's fastest traversal) and
//! added into `acc[doc]`; then one pass selects the top k. This is the best algorithm that does
//! not skip anything, and the oracle the pruned search is tested against.

use lexlip_proto::QuantizedVector;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{SegmentReader, Term};

use super::filter::AllowedDocs;
use super::{ScoredDoc, SearchStats, TopK};
use crate::error::Result;
use crate::maxima::for_each_posting;

/// Scores every document of one segment that shares a term with `query`, into `top`.
#[allow(clippy::too_many_arguments)]
pub fn search_segment(
    segment_ord: u32,
    reader: &SegmentReader,
    impacts: Field,
    query: &QuantizedVector,
    allowed: Option<&AllowedDocs>,
    acc: &mut Vec<u64>,
    top: &mut TopK,
    stats: &mut SearchStats,
) -> Result<()> {
    accumulate(reader, impacts, query, acc, stats)?;
    collect(segment_ord, reader, allowed, acc, |_| true, top);
    Ok(())
}

/// `acc[doc] = score(query, doc)` for every doc of the segment (deleted ones included).
pub(crate) fn accumulate(
    reader: &SegmentReader,
    impacts: Field,
    query: &QuantizedVector,
    acc: &mut Vec<u64>,
    stats: &mut SearchStats,
) -> Result<()> {
    let inverted = reader.inverted_index(impacts)?;
    acc.clear();
    acc.resize(reader.max_doc() as usize, 0);
    for (term, q) in query.iter() {
        let Some(info) = inverted.get_term_info(&Term::from_field_text(impacts, term))? else {
            continue;
        };
        let q = u64::from(q);
        let block =
            inverted.read_block_postings_from_terminfo(&info, IndexRecordOption::WithFreqs)?;
        stats.postings_scored += for_each_posting(block, |doc, freq| {
            acc[doc as usize] += q * u64::from(freq);
        });
    }
    Ok(())
}

/// Pushes every live, allowed document with a positive score for which `keep(doc)` holds.
pub(crate) fn collect(
    segment_ord: u32,
    reader: &SegmentReader,
    allowed: Option<&AllowedDocs>,
    acc: &[u64],
    keep: impl Fn(u32) -> bool,
    top: &mut TopK,
) {
    let alive = reader.alive_bitset();
    for (doc, &score) in acc.iter().enumerate() {
        if score == 0 {
            continue;
        }
        let doc = doc as u32;
        if alive.is_some_and(|a| a.is_deleted(doc))
            || allowed.is_some_and(|f| !f.contains(doc))
            || !keep(doc)
        {
            continue;
        }
        top.push(ScoredDoc {
            segment_ord,
            doc,
            score,
        });
    }
}
