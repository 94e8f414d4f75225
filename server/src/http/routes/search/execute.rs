//! One search request from parsed input to response: the request's options become a
//! [`SearchPlan`], the query is encoded on the server's batched encoders, and [`Searcher`] (the
//! same policy `lexlip search` and `lexlip eval` run) answers on one snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use lexlip_index::Cancel;
use lexlip_proto::{DenseVector, QuantizedVector, VectorInput};
use lexlip_search::request::{Ask, Defaults, QueryKind};
use lexlip_search::{DenseNeed, RerankQuery, Searcher};

use crate::http::api::{Mode, SearchParams, SearchResponse};
use crate::http::encoders::{ByQueryModel, EncoderService};
use crate::http::error::{ApiError, ApiResult};
use crate::http::routes::{blocking, decode_base64};
use crate::http::state::SharedState;

/// Most candidates one request may re-rank.
pub const MAX_RERANK: usize = 256;

/// What a query is made of.
pub enum QueryInput {
    Text(String),
    Image(Arc<Vec<u8>>),
    Sparse(serde_json::Map<String, serde_json::Value>),
    Dense(Vec<f32>),
}

impl QueryInput {
    fn kind(&self) -> QueryKind {
        match self {
            QueryInput::Text(_) => QueryKind::Text,
            QueryInput::Image(_) => QueryKind::Image,
            QueryInput::Sparse(_) => QueryKind::Sparse,
            QueryInput::Dense(_) => QueryKind::Dense,
        }
    }

    pub(super) fn from_request(q: crate::http::api::Query) -> ApiResult<Self> {
        let given = [
            q.text.is_some(),
            q.image.is_some(),
            q.sparse.is_some(),
            q.dense.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if given != 1 {
            return Err(ApiError::unprocessable(
                "give exactly one of query.text, query.image, query.sparse, query.dense",
            ));
        }
        Ok(if let Some(t) = q.text {
            QueryInput::Text(t)
        } else if let Some(i) = q.image {
            QueryInput::Image(Arc::new(decode_base64("query.image", &i)?))
        } else if let Some(s) = q.sparse {
            QueryInput::Sparse(s)
        } else {
            QueryInput::Dense(q.dense.unwrap_or_default())
        })
    }
}

/// Runs one search: parses the request into a [`SearchPlan`], encodes the query with the
/// server's batched encoders and lets [`Searcher`] (the same policy `lexlip search` and `lexlip
/// eval` use) answer it on one snapshot.
pub async fn execute(
    state: &SharedState,
    name: &str,
    input: QueryInput,
    params: SearchParams,
) -> ApiResult<SearchResponse> {
    let start = Instant::now();
    let open = state.get(name)?;
    let c = open.collection.clone();
    let reranker = match params.rerank {
        None => None,
        Some(r) => Some((rerank_setup(state, &input, r)?, r.top)),
    };
    let ask = Ask {
        query: input.kind(),
        k: params.k,
        mode: params.mode,
        exact: params.exact,
        approx: params.approx,
        term_cut: params.term_cut,
        idf: params.idf,
        target: params.target,
        filter: params.filter,
        explain: params.explain,
        rerank_top: reranker.as_ref().map(|(_, top)| *top),
    };
    let defaults = Defaults {
        server_idf: state.limits.idf,
        server_term_cut: state.limits.term_cut,
        model_idf: of_query_model(state.encoders.idf(), &input),
        query_norm: of_query_model(state.encoders.query_norm(), &input),
        weak_match: of_query_model(state.encoders.weak_match(), &input),
    };
    let resolved = ask
        .resolve(&defaults, c.manifest().settings.dense_dim.is_some())
        .map_err(|e| ApiError::unprocessable(format!("collection {name:?}: {e}")))?;
    let mut plan = resolved.plan.clone();
    let mode = plan.mode;
    let encoders = state.encoders.clone();

    // The sparse query.
    let sparse = if mode == Mode::Dense {
        None
    } else {
        let quantizer = c.quantizer().clone();
        let q: QuantizedVector = match &input {
            QueryInput::Text(t) => {
                state.check_encodable(name, &c)?;
                quantizer.query(VectorInput::Weights(encoders.text(t.clone()).await?))?
            }
            QueryInput::Image(bytes) => {
                state.check_encodable(name, &c)?;
                let weights = encoders.image(bytes.clone(), "query.image".into()).await?;
                quantizer.query(VectorInput::Weights(weights))?
            }
            QueryInput::Sparse(map) => {
                if map.is_empty() {
                    return Err(ApiError::unprocessable("query.sparse is empty"));
                }
                let v = VectorInput::from_json(map.clone())
                    .map_err(|e| ApiError::unprocessable(format!("query.sparse: {e}")))?;
                quantizer.query(v)?
            }
            QueryInput::Dense(_) => {
                return Err(ApiError::internal("a dense query reached the sparse index"));
            }
        };
        Some(q)
    };
    let query_terms = match (&sparse, params.explain) {
        (Some(q), true) => Some(
            q.iter()
                .map(|(t, i)| (t.to_string(), i))
                .collect::<BTreeMap<_, _>>(),
        ),
        _ => None,
    };

    let snapshot = {
        let c = c.clone();
        Arc::new(blocking(move || Ok(c.snapshot()?)).await?)
    };
    // Dropped with this future: an abandoned request stops its searches.
    let cancel = Cancel::new();
    let _cancel_on_drop = cancel.on_drop();
    let dense_source = DenseSource::of(&input);
    let found = {
        let snapshot = snapshot.clone();
        let metrics = state.metrics.clone();
        let query_threads = state.limits.query_threads;
        let runtime = tokio::runtime::Handle::current();
        blocking(move || {
            let _running = metrics.search_running();
            // Alone on the machine: this search may use the idle cores too.
            if metrics.searches_running() == 1 {
                plan.threads = query_threads;
            }
            // The dense query is encoded (on the batcher) only when the plan needs it.
            let dense = |need| match runtime.block_on(dense_source.encode(&encoders)) {
                // No dense encoder: the sparse result stands.
                Err(e)
                    if need == DenseNeed::Fallback
                        && e.status == StatusCode::UNPROCESSABLE_ENTITY =>
                {
                    Ok(None)
                }
                other => other,
            };
            let found = Searcher::new(&snapshot).with_cancel(cancel.clone()).search(
                &plan,
                sparse.as_ref(),
                dense,
            );
            if found.is_err() && cancel.is_cancelled() {
                metrics.search_cancelled();
            }
            found
        })
        .await?
    };
    let path = found.path;
    let (hits, rerank) = match reranker {
        None => (found.hits, None),
        Some((model, top)) => {
            let query = match &input {
                QueryInput::Text(t) => RerankInput::Text(t.clone()),
                QueryInput::Image(b) => RerankInput::Image(b.clone()),
                _ => return Err(ApiError::internal("rerank without a text or image query")),
            };
            let (hits, report) = blocking(move || {
                let query = match &query {
                    RerankInput::Text(t) => RerankQuery::Text(t),
                    RerankInput::Image(b) => RerankQuery::Image(b),
                };
                Ok(lexlip_search::rerank(
                    &model, &snapshot, query, found.hits, top,
                )?)
            })
            .await?;
            (hits, Some(report))
        }
    };
    let (hits, weak_match, weak) = resolved.answer(hits, path);
    Ok(SearchResponse {
        weak,
        hits,
        path,
        sparse_matches: found.sparse_matches,
        query_terms,
        rerank,
        weak_match,
        took_ms: start.elapsed().as_secs_f64() * 1000.0,
    })
}

/// The setting of the model that encoded `input`, when it has one: vector queries, which no
/// model encoded, have none.
fn of_query_model<T>(setting: ByQueryModel<T>, input: &QueryInput) -> Option<T> {
    match input {
        QueryInput::Text(_) => setting.text,
        QueryInput::Image(_) => setting.image,
        QueryInput::Sparse(_) | QueryInput::Dense(_) => None,
    }
}

/// The re-ranker of a request that asks for one, after checking the request can use it.
fn rerank_setup(
    state: &SharedState,
    input: &QueryInput,
    r: crate::http::api::Rerank,
) -> ApiResult<Arc<lexlip_model::Reranker>> {
    let Some(model) = state.reranker.clone() else {
        return Err(ApiError::unprocessable(
            "this server has no re-ranker: start lexlip serve with --rerank-model DIR (a \
             directory from `lexlip train --objective rerank`), or leave rerank out",
        ));
    };
    if r.top == 0 || r.top > MAX_RERANK {
        return Err(ApiError::unprocessable(format!(
            "rerank.top must be between 1 and {MAX_RERANK}, got {}",
            r.top
        )));
    }
    if !matches!(input, QueryInput::Text(_) | QueryInput::Image(_)) {
        return Err(ApiError::unprocessable(
            "rerank needs a text or image query (the re-ranker reads the query itself, not its \
             vector)",
        ));
    }
    Ok(model)
}

/// The query the re-ranker reads, owned for the blocking thread.
enum RerankInput {
    Text(String),
    Image(Arc<Vec<u8>>),
}

/// What the dense query is encoded from.
enum DenseSource {
    Text(String),
    Image(Arc<Vec<u8>>),
    Given(Vec<f32>),
    None,
}

impl DenseSource {
    fn of(input: &QueryInput) -> Self {
        match input {
            QueryInput::Text(t) => DenseSource::Text(t.clone()),
            QueryInput::Image(b) => DenseSource::Image(b.clone()),
            QueryInput::Dense(v) => DenseSource::Given(v.clone()),
            QueryInput::Sparse(_) => DenseSource::None,
        }
    }

    async fn encode(&self, encoders: &EncoderService) -> ApiResult<Option<DenseVector>> {
        match self {
            DenseSource::Text(t) => encoders.dense_text(t.clone()).await.map(Some),
            DenseSource::Image(b) => encoders
                .dense_image(b.clone(), "query.image".into())
                .await
                .map(Some),
            DenseSource::Given(v) => Ok(Some(DenseVector::new(v.clone())?)),
            DenseSource::None => Ok(None),
        }
    }
}
