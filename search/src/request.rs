//! One search request, resolved once for every caller: what the request asks ([`Ask`]: an API
//! body's fields, `lexlip search`'s flags), the defaults of the server and of the model that
//! encoded the query ([`Defaults`]), and the collection become a [`SearchPlan`]; the answer is
//! then cut to the hits asked for and judged weak or not the same way ([`Resolved::answer`]).
//! The HTTP route and the command line only parse and format.
//!
//! ```
//! use lexlip_search::request::{Ask, Defaults, QueryKind};
//! use lexlip_search::{Mode, SearchPath};
//!
//! // A text query asking for nothing but 10 hits, re-ranked over 32 candidates; the model that
//! // encodes texts weighs its queries by IDF 1 and calls a best hit under 0.2 weak.
//! let ask = Ask { rerank_top: Some(32), ..Ask::new(QueryKind::Text, 10) };
//! let model = Defaults { model_idf: Some(1.0), weak_match: Some(0.2), ..Defaults::default() };
//! let resolved = ask.resolve(&model, false).unwrap();
//! assert_eq!((resolved.plan.k, resolved.plan.idf, resolved.plan.mode), (32, 1.0, Mode::Sparse));
//! let (hits, weak_match, weak) = resolved.answer(Vec::new(), SearchPath::Sparse);
//! assert_eq!((hits.len(), weak_match, weak), (0, Some(0.2), Some(true)));
//! ```

use lexlip_index::MAX_K;
use lexlip_proto::Modality;
use lexlip_proto::api::{Filter, Hit, Mode, SearchPath, weak_list};

use crate::error::SearchError;
use crate::plan::SearchPlan;
use crate::plan::precision_or_default;

/// What the query is: encoded by a model (text, image) or given as a vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryKind {
    Text,
    Image,
    Sparse,
    Dense,
}

impl QueryKind {
    /// Whether a model encoded the query, so that its settings (IDF, query norm, weak-match
    /// calibration) apply: a vector, which no model encoded, takes none of them.
    pub fn encoded(self) -> bool {
        matches!(self, QueryKind::Text | QueryKind::Image)
    }
}

/// What a request asks, before any default: `None` is "not said".
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub query: QueryKind,
    /// Hits wanted.
    pub k: usize,
    pub mode: Mode,
    pub exact: Option<bool>,
    pub approx: Option<f32>,
    pub term_cut: Option<f32>,
    pub idf: Option<f32>,
    /// Only documents of this modality (`target`); must agree with `filter.modality`.
    pub target: Option<Modality>,
    pub filter: Filter,
    pub explain: bool,
    /// Candidates a second stage re-scores: the first stage finds at least as many.
    pub rerank_top: Option<usize>,
}

impl Ask {
    /// `k` hits of a `query`, every option left to the defaults.
    pub fn new(query: QueryKind, k: usize) -> Self {
        Self {
            query,
            k,
            mode: Mode::Sparse,
            exact: None,
            approx: None,
            term_cut: None,
            idf: None,
            target: None,
            filter: Filter::default(),
            explain: false,
            rerank_top: None,
        }
    }
}

/// What applies where a request says nothing: the server's settings (`lexlip serve --idf`,
/// `--term-cut`) before those of the model that encoded the query (its `lexlip.json`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Defaults {
    pub server_idf: Option<f32>,
    /// The term cut of a request that sets none of `exact`, `approx`, `term_cut` (0: none).
    pub server_term_cut: f32,
    pub model_idf: Option<f32>,
    pub query_norm: Option<f32>,
    pub weak_match: Option<f64>,
}

/// A request made a plan, with what judging its answer needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub plan: SearchPlan,
    /// Hits the request asked for (the plan may ask the first stage for more).
    pub wanted: usize,
    /// The calibration of the model that encoded the query, if any.
    weak_match: Option<f64>,
}

impl Ask {
    /// The plan of this request on a collection (`dense`: whether it keeps dense vectors), with
    /// `defaults` where the request says nothing. Refuses what the collection cannot answer
    /// and options that contradict each other.
    pub fn resolve(&self, defaults: &Defaults, dense: bool) -> Result<Resolved, SearchError> {
        let mut filter = self.filter.clone();
        match (self.target, filter.modality) {
            (Some(t), Some(f)) if t != f => {
                return Err(SearchError::invalid(format!(
                    "target {} contradicts filter.modality {}",
                    t.as_str(),
                    f.as_str()
                )));
            }
            (Some(t), _) => filter.modality = Some(t),
            _ => {}
        }
        let (precision, term_cut) = precision_or_default(
            self.exact,
            self.approx,
            self.term_cut,
            defaults.server_term_cut,
        )?;
        // A dense vector can only be answered by the dense index.
        let mode = match (self.query, self.mode) {
            (QueryKind::Dense, Mode::Sparse) => Mode::Dense,
            (_, mode) => mode,
        };
        let model = |setting: Option<f32>| setting.filter(|_| self.query.encoded());
        let mut plan = SearchPlan {
            k: self.k,
            mode,
            precision,
            term_cut,
            filter,
            explain: self.explain,
            threads: 0,
            idf: self
                .idf
                .or(defaults.server_idf)
                .or(model(defaults.model_idf))
                .unwrap_or(0.0),
            query_norm: model(defaults.query_norm),
        };
        plan.check(dense)?;
        if let Some(top) = self.rerank_top {
            plan.k = plan.k.max(top).min(MAX_K);
        }
        Ok(Resolved {
            plan,
            wanted: self.k,
            weak_match: defaults.weak_match.filter(|_| self.query.encoded()),
        })
    }
}

impl Resolved {
    /// The answer as the caller shows it: the hits asked for, the calibration and the weak
    /// verdict ([`weak_list`]). The calibration is of the sparse strengths of the model's own
    /// queries: a dense or fused answer gets neither.
    pub fn answer(
        &self,
        mut hits: Vec<Hit>,
        path: SearchPath,
    ) -> (Vec<Hit>, Option<f64>, Option<bool>) {
        hits.truncate(self.wanted);
        let weak_match = self.weak_match.filter(|_| path == SearchPath::Sparse);
        let weak = weak_list(&hits, weak_match);
        (hits, weak_match, weak)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Defaults {
        Defaults {
            model_idf: Some(1.0),
            query_norm: Some(5.0),
            weak_match: Some(0.2),
            ..Defaults::default()
        }
    }

    /// The IDF exponent: the request's, else the server's, else the encoding model's; a vector
    /// query takes no model setting.
    #[test]
    fn defaults_apply_in_order_and_only_to_encoded_queries() {
        let text = Ask::new(QueryKind::Text, 5);
        assert_eq!(text.resolve(&model(), false).unwrap().plan.idf, 1.0);
        let server = Defaults {
            server_idf: Some(0.5),
            ..model()
        };
        assert_eq!(text.resolve(&server, false).unwrap().plan.idf, 0.5);
        let asked = Ask {
            idf: Some(2.0),
            ..text.clone()
        };
        assert_eq!(asked.resolve(&server, false).unwrap().plan.idf, 2.0);
        let vector = Ask::new(QueryKind::Sparse, 5)
            .resolve(&model(), false)
            .unwrap();
        assert_eq!(
            (vector.plan.idf, vector.plan.query_norm, vector.weak_match),
            (0.0, None, None)
        );
        let image = Ask::new(QueryKind::Image, 5)
            .resolve(&model(), false)
            .unwrap();
        assert_eq!(image.plan.query_norm, Some(5.0));
    }

    #[test]
    fn target_filter_mode_and_rerank_widening() {
        let mut ask = Ask::new(QueryKind::Text, 5);
        ask.target = Some(Modality::Image);
        ask.filter.modality = Some(Modality::Text);
        assert!(ask.resolve(&model(), false).is_err());
        ask.filter.modality = None;
        let plan = ask.resolve(&model(), false).unwrap().plan;
        assert_eq!(plan.filter.modality, Some(Modality::Image));
        // A dense vector goes to the dense index, which the collection must keep.
        let dense = Ask::new(QueryKind::Dense, 5);
        assert!(dense.resolve(&model(), false).is_err());
        assert_eq!(
            dense.resolve(&model(), true).unwrap().plan.mode,
            Mode::Dense
        );
        let rerank = Ask {
            rerank_top: Some(MAX_K + 5),
            ..Ask::new(QueryKind::Text, 5)
        };
        let resolved = rerank.resolve(&model(), false).unwrap();
        assert_eq!((resolved.plan.k, resolved.wanted), (MAX_K, 5));
        // A server's term cut applies when the request sets no precision knob.
        let cut = Defaults {
            server_term_cut: 0.05,
            ..model()
        };
        assert_eq!(ask.resolve(&cut, false).unwrap().plan.term_cut, 0.05);
    }

    #[test]
    fn the_answer_is_cut_and_judged_on_the_sparse_path_only() {
        let hit = |m: f64| -> Hit {
            let json = serde_json::json!({"id": "d", "score": 1.0, "modality": "image", "match_strength": m});
            serde_json::from_value(json).unwrap()
        };
        let resolved = Ask::new(QueryKind::Text, 2)
            .resolve(&model(), false)
            .unwrap();
        let hits = vec![hit(0.1), hit(0.05), hit(0.01)];
        let (kept, w, weak) = resolved.answer(hits.clone(), SearchPath::Sparse);
        assert_eq!((kept.len(), w, weak), (2, Some(0.2), Some(true)));
        let (_, w, weak) = resolved.answer(hits, SearchPath::DenseFallback);
        assert_eq!((w, weak), (None, None));
    }
}
