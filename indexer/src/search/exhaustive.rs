//! The unpruned baseline: term-at-a-time accumulation into a dense score array.
//!
//! Every posting of every query term is read block by block (tantivy's fastest traversal) and
//! added into `scores[doc]`; then one pass selects the top k. This is the best algorithm that does
//! not skip anything, and the oracle of the pruned one.

use rayon::prelude::*;
use tantivy::Term;
use tantivy::schema::IndexRecordOption;

use super::ScoredDoc;
use super::sparse::{Segment, SparseSearch};
use crate::error::Result;
use crate::forward_index::for_each_posting;

/// Scores every document of the segment that shares a term with the query (none of a segment
/// the filter allows nothing of: a search filtered to the other modality).
pub(crate) fn search_segment(search: &mut SparseSearch, segment: &Segment) -> Result<()> {
    if segment.allowed.is_some_and(|a| a.is_empty()) {
        return Ok(());
    }
    score_segment(search, segment, &[])
}

/// Term-at-a-time over the whole segment, pushing the scored documents except those of the
/// blocks in `done` (block ids at the segment's block size, scored already by a pruned search
/// that gave up pruning).
pub(crate) fn score_segment(
    search: &mut SparseSearch,
    segment: &Segment,
    done: &[u32],
) -> Result<()> {
    let mut scores = std::mem::take(&mut search.doc_scores);
    let result = accumulate(search, segment, &mut scores);
    if result.is_ok() {
        let shift = segment.maxima.shift;
        for &r in done {
            let start = ((r as usize) << shift).min(scores.len());
            let end = ((r as usize + 1) << shift).min(scores.len());
            scores[start..end].fill(0);
        }
        collect(search, segment, &scores);
    }
    search.doc_scores = scores;
    result
}

/// [`score_segment`] for each `(segment, done)`, on up to `search.threads` threads: each thread
/// scores its segments into a top k of its own ([`SparseSearch::fork`]), merged at the end
/// (the order of equal scores is the documents', so the result is the same).
pub(crate) fn score_segments(
    search: &mut SparseSearch,
    work: &[(&Segment, Vec<u32>)],
) -> Result<()> {
    if search.threads <= 1 || work.len() <= 1 {
        return work
            .iter()
            .try_for_each(|(segment, done)| score_segment(search, segment, done));
    }
    let per_thread = work.len().div_ceil(search.threads);
    let forks: Vec<Result<SparseSearch>> = {
        let search = &*search;
        work.par_chunks(per_thread)
            .map(|chunk| {
                let mut fork = search.fork();
                for (segment, done) in chunk {
                    score_segment(&mut fork, segment, done)?;
                }
                Ok(fork)
            })
            .collect()
    };
    for fork in forks {
        let fork = fork?;
        search.stats.add(&fork.stats);
        for d in fork.top.into_sorted() {
            search.top.push(d);
        }
    }
    Ok(())
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

/// Pushes every live, allowed document with a positive score that can enter the top k.
fn collect(search: &mut SparseSearch, segment: &Segment, scores: &[u64]) {
    for (doc, &score) in scores.iter().enumerate() {
        let doc = doc as u32;
        if score == 0 || search.top.falls_short(score) {
            continue;
        }
        if !segment.returns(doc) {
            continue;
        }
        search.top.push(ScoredDoc {
            segment_ord: segment.ord,
            doc,
            score,
        });
    }
}
