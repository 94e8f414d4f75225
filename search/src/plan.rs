//! What one search asks for, checked before anything runs.

use lexlip_index::MAX_K;
use lexlip_proto::api::{Filter, Mode, Precision};

use crate::error::SearchError;

/// What `exact: false` alone means for the sparse search: the query's lightest terms, up to a
/// tenth of its largest possible score, left out of the block bounds at factor 1 (recall@10
/// 0.975 on real SPLADE vectors and 0.982 on the 1M synthetic bench, faster than the factor
/// that keeps as much; `docs/benchmarks.md`).
pub const DEFAULT_TERM_CUT: f32 = 0.1;

/// One search: how many hits, from which index, how exact, among which documents.
///
/// ```
/// use lexlip_search::{Mode, SearchPlan};
/// let plan = SearchPlan { mode: Mode::Hybrid, ..SearchPlan::top(10) };
/// assert!(plan.check(true).is_ok());
/// assert!(plan.check(false).is_err()); // hybrid needs the collection's dense vectors
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPlan {
    /// Hits wanted (1..=[`MAX_K`]).
    pub k: usize,
    pub mode: Mode,
    /// Of the sparse search; the dense search is exact for `Exact` and uses the graph otherwise.
    pub precision: Precision,
    /// Share of the query's largest possible score left out of the sparse block bounds.
    pub term_cut: f32,
    pub filter: Filter,
    /// Sparse hits carry their matched terms.
    pub explain: bool,
    /// Threads one sparse search may use.
    pub threads: usize,
    /// Exponent α of the sparse query's IDF weighting ([`crate::idf`]); 0, the default, is off.
    pub idf: f32,
    /// The L2 norm of the weights of a typical real query of the model that encoded the query
    /// (its `lexlip.json`'s `query_norm`). A query of less weight, one the model hardly
    /// understood, has its hits' match strengths scaled by its squared share of it (see
    /// [`crate::searcher::Searcher::hits`]); none, the default, leaves strengths as they are.
    pub query_norm: Option<f32>,
}

impl SearchPlan {
    /// The top `k` of the sparse index, exactly, with the dense fallback.
    pub fn top(k: usize) -> Self {
        Self {
            k,
            mode: Mode::Sparse,
            precision: Precision::Exact,
            term_cut: 0.0,
            filter: Filter::default(),
            explain: false,
            threads: 1,
            idf: 0.0,
            query_norm: None,
        }
    }

    /// Refuses a plan this collection cannot answer (`dense`: whether it keeps dense vectors).
    pub fn check(&self, dense: bool) -> Result<(), SearchError> {
        if self.k == 0 || self.k > MAX_K {
            return Err(SearchError::invalid(format!(
                "k must be between 1 and {MAX_K}, got {}",
                self.k
            )));
        }
        if let Precision::Approx(x) = self.precision
            && !(x.is_finite() && x >= 1.0)
        {
            return Err(SearchError::invalid(format!(
                "approx must be a number >= 1 (1 is exact), got {x}"
            )));
        }
        lexlip_index::check_term_cut(self.term_cut).map_err(SearchError::Invalid)?;
        check_idf(self.idf)?;
        if let Some(n) = self.query_norm {
            lexlip_proto::sparse::check_query_norm(n).map_err(SearchError::Invalid)?;
        }
        if self.mode != Mode::Sparse && !dense {
            let mode = if self.mode == Mode::Dense {
                "dense"
            } else {
                "hybrid"
            };
            return Err(SearchError::invalid(format!(
                "the collection has dense search off; create it with dense vectors for mode {mode}"
            )));
        }
        Ok(())
    }
}

/// Refuses an IDF exponent outside 0..=[`crate::idf::MAX_IDF`].
pub fn check_idf(idf: f32) -> Result<(), SearchError> {
    lexlip_proto::idf::check_idf(idf)
        .map(|_| ())
        .map_err(|e| SearchError::invalid(e.to_string()))
}

/// The sparse search's precision and term cut from the three knobs users set (`exact`,
/// `approx`, `term_cut`; the API's fields and the CLI's flags): unset is exact, `exact: false`
/// alone is the default term cut, either knob alone makes the search approximate.
pub fn precision(
    exact: Option<bool>,
    approx: Option<f32>,
    term_cut: Option<f32>,
) -> Result<(Precision, f32), SearchError> {
    if let Some(x) = approx
        && !(x.is_finite() && x >= 1.0)
    {
        return Err(SearchError::invalid(format!(
            "approx must be a number >= 1 (1 is exact), got {x}"
        )));
    }
    if let Some(c) = term_cut {
        lexlip_index::check_term_cut(c).map_err(SearchError::Invalid)?;
    }
    match (exact, approx, term_cut) {
        (Some(true), Some(_), _) => Err(SearchError::invalid(
            "\"exact\": true and \"approx\" exclude each other",
        )),
        (Some(true), _, Some(c)) if c > 0.0 => Err(SearchError::invalid(
            "\"exact\": true and \"term_cut\" exclude each other",
        )),
        (Some(false), None, None) => Ok((Precision::Approx(1.0), DEFAULT_TERM_CUT)),
        (_, None, None) | (Some(true), _, _) => Ok((Precision::Exact, 0.0)),
        // Either knob makes the search approximate; a cut alone runs at factor 1.
        (_, x, c) => Ok((Precision::Approx(x.unwrap_or(1.0)), c.unwrap_or(0.0))),
    }
}

/// [`precision`], with `default_cut` (a server's `--term-cut`; 0: none) as the term cut of a
/// request that sets none of the three knobs: an operator makes searches approximate by
/// default, and a request still asks for `exact`, a factor or its own cut.
pub fn precision_or_default(
    exact: Option<bool>,
    approx: Option<f32>,
    term_cut: Option<f32>,
    default_cut: f32,
) -> Result<(Precision, f32), SearchError> {
    let unset = exact.is_none() && approx.is_none() && term_cut.is_none();
    let term_cut = if unset && default_cut > 0.0 {
        Some(default_cut)
    } else {
        term_cut
    };
    precision(exact, approx, term_cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's default cut applies to requests that set no knob, and to no other.
    #[test]
    fn a_default_cut_applies_only_when_no_knob_is_set() {
        let ok = |e, a, c| precision_or_default(e, a, c, 0.05).unwrap();
        assert_eq!(ok(None, None, None), (Precision::Approx(1.0), 0.05));
        assert_eq!(ok(Some(true), None, None), (Precision::Exact, 0.0));
        assert_eq!(
            ok(Some(false), None, None),
            (Precision::Approx(1.0), DEFAULT_TERM_CUT)
        );
        assert_eq!(ok(None, Some(1.5), None), (Precision::Approx(1.5), 0.0));
        // A request's own cut 0 replaces the default: factor 1 and no cut, the exact results.
        assert_eq!(ok(None, None, Some(0.0)), (Precision::Approx(1.0), 0.0));
        assert_eq!(ok(None, None, Some(0.2)), (Precision::Approx(1.0), 0.2));
        assert_eq!(
            precision_or_default(None, None, None, 0.0).unwrap(),
            (Precision::Exact, 0.0)
        );
        assert!(precision_or_default(Some(true), None, Some(0.1), 0.05).is_err());
    }

    /// Every combination of the three knobs: the precision and cut it means, or a refusal.
    #[test]
    fn precision_from_exact_approx_and_term_cut() {
        let ok = |e, a, c| precision(e, a, c).unwrap();
        assert_eq!(ok(None, None, None), (Precision::Exact, 0.0));
        assert_eq!(ok(Some(true), None, None), (Precision::Exact, 0.0));
        assert_eq!(ok(Some(true), None, Some(0.0)), (Precision::Exact, 0.0));
        assert_eq!(
            ok(Some(false), None, None),
            (Precision::Approx(1.0), DEFAULT_TERM_CUT)
        );
        assert_eq!(ok(None, Some(1.5), None), (Precision::Approx(1.5), 0.0));
        assert_eq!(
            ok(Some(false), Some(1.5), None),
            (Precision::Approx(1.5), 0.0)
        );
        assert_eq!(ok(None, None, Some(0.2)), (Precision::Approx(1.0), 0.2));
        assert_eq!(
            ok(None, Some(1.1), Some(0.2)),
            (Precision::Approx(1.1), 0.2)
        );
        for (e, a, c) in [
            (Some(true), Some(1.5), None),
            (Some(true), None, Some(0.1)),
            (None, Some(0.5), None),
            (None, Some(f32::NAN), None),
            (None, None, Some(1.0)),
            (None, None, Some(-0.1)),
        ] {
            assert!(precision(e, a, c).is_err(), "{e:?} {a:?} {c:?}");
        }
    }

    #[test]
    fn plans_a_collection_cannot_answer_are_refused() {
        let plan = |f: fn(&mut SearchPlan)| {
            let mut p = SearchPlan::top(10);
            f(&mut p);
            p
        };
        assert!(plan(|_| {}).check(false).is_ok());
        for bad in [
            plan(|p| p.k = 0),
            plan(|p| p.k = MAX_K + 1),
            plan(|p| p.precision = Precision::Approx(0.5)),
            plan(|p| p.term_cut = 1.0),
            plan(|p| p.idf = -0.5),
            plan(|p| p.idf = f32::NAN),
            plan(|p| p.idf = crate::idf::MAX_IDF + 0.5),
        ] {
            assert!(bad.check(true).is_err(), "{bad:?}");
        }
        for mode in [Mode::Dense, Mode::Hybrid] {
            let p = plan(|p| p.k = 5);
            let p = SearchPlan { mode, ..p };
            assert!(p.check(true).is_ok());
            let e = p.check(false).unwrap_err().to_string();
            assert!(e.contains("dense search off"), "{e}");
        }
    }
}
