//! Which scorer answers a sparse search: block-max over all segments at once, or the postings
//! (term-at-a-time, pruned) and exhaustive scorers one segment after another.

use super::sparse::{Segment, SparseSearch};
use super::{Algorithm, blocks, exhaustive, pruned};
use crate::error::Result;

/// Scores the segments of a snapshot into the running top k of `search`: block-max search
/// takes them all at once, the others one after the other.
pub(crate) fn search_segments(search: &mut SparseSearch, segments: &[Segment]) -> Result<()> {
    if search.algorithm == Algorithm::BlockMax {
        return blocks::search(search, segments);
    }
    for segment in segments {
        search.check()?;
        search.stats.segments += 1;
        match search.algorithm {
            Algorithm::Postings => pruned::search_segment(search, segment)?,
            _ => exhaustive::search_segment(search, segment)?,
        }
    }
    Ok(())
}
