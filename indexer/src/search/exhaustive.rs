//! The unpruned baseline: term-at-a-time accumulation into a dense score array.
//!
//! Every posting of every query term is read block by block (tantivy's fastest traversal) and
//! added into `scores[doc]`; then one pass selects the top k. This is the best algorithm that does
//! not skip anything, and the oracle of the pruned one.

use tantivy::Term;
use tantivy::schema::IndexRecordOption;

use super::ScoredDoc;
use super::sparse::{Segment, SparseSearch};
use crate::error::Result;
use crate::forward_index::for_each_posting;

/// Scores every document of the segment that shares a term with the query.
pub(crate) fn search_segment(search: &mut SparseSearch, segment: &Segment) -> Result<()> {
    score_segment(search, segment, |_| true)
}

/// Term-at-a-time over the whole segment, pushing the scored documents `keep` accepts.
pub(crate) fn score_segment(
    search: &mut SparseSearch,
    segment: &Segment,
    keep: impl Fn(u32) -> bool,
) -> Result<()> {
    let mut scores = std::mem::take(&mut search.doc_scores);
    let result = accumulate(search, segment, &mut scores);
    if result.is_ok() {
        collect(search, segment, &scores, keep);
    }
    search.doc_scores = scores;
    result
}

/// `scores[doc] = score(query, doc)` for every doc of the segment (deleted ones included).
fn accumulate(search: &mut SparseSearch, segment: &Segment, scores: &mut Vec<u64>) -> Result<()> {
    let inverted = segment.reader.inverted_index(segment.impacts)?;
    scores.clear();
    scores.resize(segment.reader.max_doc() as usize, 0);
    for (term, q) in search.query.iter() {
        search.check()?;
        let Some(info) = inverted.get_term_info(&Term::from_field_text(segment.impacts, term))?
        else {
            continue;
        };
        let q = u64::from(q);
        let block =
            inverted.read_block_postings_from_terminfo(&info, IndexRecordOption::WithFreqs)?;
        search.stats.postings_scored += for_each_posting(block, |doc, freq| {
            scores[doc as usize] += q * u64::from(freq);
        });
    }
    Ok(())
}

/// Pushes every live, allowed document with a positive score that `keep` accepts.
fn collect(
    search: &mut SparseSearch,
    segment: &Segment,
    scores: &[u64],
    keep: impl Fn(u32) -> bool,
) {
    for (doc, &score) in scores.iter().enumerate() {
        let doc = doc as u32;
        if score == 0 || !segment.returns(doc) || !keep(doc) {
            continue;
        }
        search.top.push(ScoredDoc {
            segment_ord: segment.ord,
            doc,
            score,
        });
    }
}
