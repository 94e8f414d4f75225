//! Top-k search by the exact lexicon-matching score (LexLIP eq. 24).
//!
//! `score(q, d) = Σ_{t ∈ q ∩ d} q_t · d_t` over integer impacts, accumulated in `u64`.
//! Only documents that share at least one term with the query (score > 0) are returned.
//!
//! Three algorithms compute it:
//! - [`exhaustive`]: term-at-a-time accumulation of every posting of every query term into a
//!   dense score array, then top-k selection. The baseline, and the oracle of the pruned ones.
//! - [`blocks`] (the default): block-max pruning over doc-id blocks, blocks visited best bound
//!   first and scored through the forward index; exact by default, approximate with an
//!   explicit knob. Segments whose bounds cannot skip enough are scored exhaustively instead.
//! - [`pruned`]: the same bounds, blocks visited in doc order and scored through tantivy's
//!   postings cursors; the previous default, kept as a fallback and a second oracle.
//!
//! Both score one segment at a time for a [`SparseSearch`], the per-query object that holds the
//! top k, the counters, the buffers and the [`Cancel`] flag across segments.

pub mod blocks;
pub(crate) mod dispatch;
pub mod exhaustive;
pub mod filter;
pub mod pruned;
pub mod sparse;
pub mod topk;

use lexlip_proto::api::{Filter, Precision};

pub use crate::cancel::{Cancel, CancelOnDrop};
pub use topk::{ScoredDoc, TopK};

/// Largest `k` a search may ask for.
pub const MAX_K: usize = 10_000;

/// Which algorithm answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// Block-max pruning over the forward index ([`blocks`]).
    #[default]
    BlockMax,
    /// Block pruning over tantivy's postings ([`pruned`]).
    Postings,
    /// No pruning ([`exhaustive`]).
    Exhaustive,
}

/// How to search.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SearchOptions {
    pub k: usize,
    pub precision: Precision,
    pub filter: Filter,
    pub algorithm: Algorithm,
    /// Set from outside to stop the search (it then fails with `Cancelled`).
    pub cancel: Cancel,
    /// Threads one query may use (block-max search of a large segment; 0 or 1: the calling
    /// thread only). Extra threads come from rayon's global pool.
    pub threads: usize,
    /// Documents left to score from which `threads` share a search (`None`: 32,768; below, one
    /// thread finishes it: waking others costs more than they save).
    pub share_from_docs: Option<u64>,
    /// Approximate (block-max search only; 0, the default, leaves it off): the query's
    /// lightest terms, whose largest contributions (weight × the term's largest impact) add up
    /// to at most this share of the query's largest possible score, are left out of the block
    /// bounds, so that blocks only they could lift are skipped; they still count in every score
    /// returned. Learned-sparse queries have a long tail of light terms (Seismic's `query_cut`
    /// cuts it by count). Needs approximate precision; must be in `[0, 1)`.
    pub term_cut: f32,
}

impl SearchOptions {
    pub fn top(k: usize) -> Self {
        Self {
            k,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.k == 0 || self.k > MAX_K {
            return Err(format!("k must be between 1 and {MAX_K}, got {}", self.k));
        }
        if self.threads > 64 {
            return Err(format!("threads must be at most 64, got {}", self.threads));
        }
        if let Precision::Approx(f) = self.precision
            && !(f.is_finite() && f >= 1.0)
        {
            return Err(format!(
                "the approximation factor must be a finite number >= 1 (1 = exact), got {f}"
            ));
        }
        check_term_cut(self.term_cut)?;
        if self.term_cut > 0.0 && self.precision == Precision::Exact {
            return Err(
                "term_cut makes a search approximate: give it with approximate precision \
                 (approx 1 to cut terms only)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Blocks whose bound is below `threshold · factor` are skipped (1 = exact).
    pub(crate) fn prune_factor(&self) -> f64 {
        match self.precision {
            Precision::Exact => 1.0,
            Precision::Approx(f) => f64::from(f),
        }
    }
}

/// Whether `c` is a valid [`SearchOptions::term_cut`] (the check every front end shares).
pub fn check_term_cut(c: f32) -> Result<(), String> {
    if c.is_finite() && (0.0..1.0).contains(&c) {
        Ok(())
    } else {
        Err(format!(
            "term_cut must be a number in [0, 1) (0 = off), got {c}"
        ))
    }
}

/// Counters that say how much work a search did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStats {
    pub segments: u32,
    /// Doc-id blocks that held at least one query term.
    pub blocks_candidate: u64,
    /// Blocks scored (the rest were pruned).
    pub blocks_scored: u64,
    /// Postings read while scoring (in the documents layout: the non-zeros of the documents
    /// scored).
    pub postings_scored: u64,
    /// Segments a pruned search scored term-at-a-time, like the exhaustive one, because its
    /// block bounds could skip too little of them.
    pub segments_unpruned: u32,
}

impl SearchStats {
    /// Adds another part's counters (segments excepted).
    pub(crate) fn add(&mut self, other: &SearchStats) {
        self.blocks_candidate += other.blocks_candidate;
        self.blocks_scored += other.blocks_scored;
        self.postings_scored += other.postings_scored;
        self.segments_unpruned += other.segments_unpruned;
    }
}
