//! Search: `POST /v1/collections/{name}/search` and the two convenience routes.
//!
//! One snapshot answers a request, so sparse, dense and fused lists all see the same commit. A
//! request that is abandoned (its timeout fired, its client went away) drops this handler's
//! future, which cancels its sparse searches: they stop within milliseconds and the blocking
//! thread is free again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::{Multipart, Path, State};
use axum::http::HeaderMap;
use axum::http::Request;
use lexlip_index::{Cancel, IndexError, MAX_K, SearchOptions};
use lexlip_proto::api::{Hit, Precision, Stage};
use lexlip_proto::{DenseVector, Modality, QuantizedVector, VectorInput};

use super::{blocking, decode_base64, is_multipart, parse_json, read_body};
use crate::http::api::{
    ImageToText, Mode, SearchParams, SearchPath, SearchRequest, SearchResponse, TextToImage,
    default_k,
};
use crate::http::error::{ApiError, ApiResult};
use crate::http::state::SharedState;

/// Reciprocal-rank fusion constant (Cormack et al. 2009).
const RRF_K: f64 = 60.0;
/// Most candidates one request may re-rank.
pub const MAX_RERANK: usize = 256;
/// What `"exact": false` alone means for the sparse search: the query's lightest terms, up to
/// a tenth of its largest possible score, left out of the block bounds at factor 1 (recall@10
/// 0.976 on real SPLADE vectors and 0.982 on the 1M synthetic bench, faster than the factor
/// that keeps as much; `docs/benchmarks.md`).
const DEFAULT_TERM_CUT: f32 = 0.1;

/// What a query is made of.
pub enum QueryInput {
    Text(String),
    Image(Arc<Vec<u8>>),
    Sparse(serde_json::Map<String, serde_json::Value>),
    Dense(Vec<f32>),
}

impl QueryInput {
    fn from_request(q: crate::http::api::Query) -> ApiResult<Self> {
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

/// The sparse search's precision and term cut from a request's `exact`, `approx` and
/// `term_cut`.
fn precision(
    exact: Option<bool>,
    approx: Option<f32>,
    term_cut: Option<f32>,
) -> ApiResult<(Precision, f32)> {
    if let Some(x) = approx
        && !(x.is_finite() && x >= 1.0)
    {
        return Err(ApiError::unprocessable(format!(
            "approx must be a number >= 1 (1 is exact), got {x}"
        )));
    }
    if let Some(c) = term_cut {
        lexlip_index::check_term_cut(c).map_err(ApiError::unprocessable)?;
    }
    match (exact, approx, term_cut) {
        (Some(true), Some(_), _) => Err(ApiError::unprocessable(
            "\"exact\": true and \"approx\" exclude each other",
        )),
        (Some(true), _, Some(c)) if c > 0.0 => Err(ApiError::unprocessable(
            "\"exact\": true and \"term_cut\" exclude each other",
        )),
        (Some(false), None, None) => Ok((Precision::Approx(1.0), DEFAULT_TERM_CUT)),
        (_, None, None) | (Some(true), _, _) => Ok((Precision::Exact, 0.0)),
        // Either knob makes the search approximate; a cut alone runs at factor 1.
        (_, x, c) => Ok((Precision::Approx(x.unwrap_or(1.0)), c.unwrap_or(0.0))),
    }
}

/// Runs one search.
pub async fn execute(
    state: &SharedState,
    name: &str,
    input: QueryInput,
    params: SearchParams,
) -> ApiResult<SearchResponse> {
    let start = Instant::now();
    let open = state.get(name)?;
    let c = open.collection.clone();
    if params.k == 0 || params.k > MAX_K {
        return Err(ApiError::unprocessable(format!(
            "k must be between 1 and {MAX_K}, got {}",
            params.k
        )));
    }
    let reranker = match params.rerank {
        None => None,
        Some(r) => Some((rerank_setup(state, &input, r)?, r.top)),
    };
    // The first stage finds at least the candidates the re-ranker reads.
    let wanted = params.k;
    let mut params = params;
    if let Some((_, top)) = &reranker {
        params.k = params.k.max(*top).min(MAX_K);
    }
    let mut filter = params.filter;
    match (params.target, filter.modality) {
        (Some(t), Some(f)) if t != f => {
            return Err(ApiError::unprocessable(format!(
                "target {} contradicts filter.modality {}",
                t.as_str(),
                f.as_str()
            )));
        }
        (Some(t), _) => filter.modality = Some(t),
        _ => {}
    }
    let (precision, term_cut) = precision(params.exact, params.approx, params.term_cut)?;
    let dense_on = c.manifest().settings.dense_dim.is_some();
    let mut mode = params.mode;
    if matches!(input, QueryInput::Dense(_)) && mode == Mode::Sparse {
        // A dense vector can only be answered by the dense index.
        mode = Mode::Dense;
    }
    if mode != Mode::Sparse && !dense_on {
        return Err(ApiError::unprocessable(format!(
            "collection {name:?} has dense search off; create it with \"dense\": true for mode {}",
            if mode == Mode::Dense {
                "dense"
            } else {
                "hybrid"
            }
        )));
    }
    let quantizer = c.quantizer().clone();
    let encoders = state.encoders.clone();

    // The sparse query.
    let sparse = if mode == Mode::Dense {
        None
    } else {
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

    // The dense query, computed when it will be used (for `sparse`, only on fallback).
    let dense_query = |input: &QueryInput| {
        let encoders = encoders.clone();
        let v = match input {
            QueryInput::Text(t) => DenseSource::Text(t.clone()),
            QueryInput::Image(b) => DenseSource::Image(b.clone()),
            QueryInput::Dense(v) => DenseSource::Given(v.clone()),
            QueryInput::Sparse(_) => DenseSource::None,
        };
        async move {
            match v {
                DenseSource::Text(t) => encoders.dense_text(t).await.map(Some),
                DenseSource::Image(b) => encoders
                    .dense_image(b, "query.image".into())
                    .await
                    .map(Some),
                DenseSource::Given(v) => Ok(Some(DenseVector::new(v)?)),
                DenseSource::None => Ok(None),
            }
        }
    };

    let snapshot = {
        let c = c.clone();
        Arc::new(blocking(move || Ok(c.snapshot()?)).await?)
    };
    let k = params.k;
    let explain = params.explain;
    let query_terms = match (&sparse, explain) {
        (Some(q), true) => Some(
            q.iter()
                .map(|(t, i)| (t.to_string(), i))
                .collect::<BTreeMap<_, _>>(),
        ),
        _ => None,
    };

    // Dropped with this future: an abandoned request stops its searches.
    let cancel = Cancel::new();
    let _cancel_on_drop = cancel.on_drop();
    let run_sparse = |n: usize| {
        let snapshot = snapshot.clone();
        let q = sparse.clone();
        let mut options = SearchOptions {
            k: n,
            precision,
            term_cut,
            filter: filter.clone(),
            cancel: cancel.clone(),
            ..SearchOptions::top(n)
        };
        let metrics = state.metrics.clone();
        let query_threads = state.limits.query_threads;
        blocking(move || {
            let Some(q) = q else { return Ok(Vec::new()) };
            if q.is_empty() {
                return Ok(Vec::new());
            }
            let _running = metrics.search_running();
            // Alone on the machine: this search may use the idle cores too.
            if metrics.searches_running() == 1 {
                options.threads = query_threads;
            }
            match snapshot.search(&q, &options) {
                Ok(out) => Ok(out.hits),
                Err(IndexError::Cancelled) => {
                    metrics.search_cancelled();
                    Err(IndexError::Cancelled.into())
                }
                Err(e) => Err(e.into()),
            }
        })
    };
    let run_dense = |v: DenseVector, n: usize| {
        let snapshot = snapshot.clone();
        let filter = filter.clone();
        let exact = precision == Precision::Exact;
        blocking(move || Ok(snapshot.search_dense(&v, n, exact, &filter)?))
    };

    let (hits, path, sparse_matches): (Vec<Hit>, SearchPath, Option<usize>) = match mode {
        Mode::Sparse => {
            let found = run_sparse(k).await?;
            let matched = found.len();
            let fallback = if matched < k && dense_on {
                match dense_query(&input).await {
                    Ok(Some(v)) => Some(v),
                    Ok(None) => None,
                    // No dense encoder: the sparse result stands.
                    Err(e) if e.status == axum::http::StatusCode::UNPROCESSABLE_ENTITY => None,
                    Err(e) => return Err(e),
                }
            } else {
                None
            };
            match fallback {
                Some(v) => {
                    let dense = run_dense(v, k).await?;
                    let hits = dense_hits(snapshot.clone(), dense).await?;
                    (hits, SearchPath::DenseFallback, Some(matched))
                }
                None => {
                    let snap = snapshot.clone();
                    let q = sparse.clone();
                    let hits = blocking(move || {
                        found
                            .iter()
                            .map(|s| {
                                let mut hit = snap.hit(s, q.as_ref().filter(|_| explain))?;
                                hit.match_strength =
                                    q.as_ref().map(|q| q.match_strength(hit.score));
                                Ok(hit)
                            })
                            .collect()
                    })
                    .await?;
                    (hits, SearchPath::Sparse, Some(matched))
                }
            }
        }
        Mode::Dense => {
            let v = dense_query(&input).await?.ok_or_else(|| {
                ApiError::unprocessable("a sparse query cannot be searched in the dense index")
            })?;
            let dense = run_dense(v, k).await?;
            let hits = dense_hits(snapshot.clone(), dense).await?;
            (hits, SearchPath::Dense, None)
        }
        Mode::Hybrid => {
            let depth = k.clamp(50, MAX_K);
            let found = run_sparse(depth).await?;
            let matched = found.len().min(k);
            let dense = match dense_query(&input).await? {
                Some(v) => run_dense(v, depth).await?,
                None => Vec::new(),
            };
            let mut fused: HashMap<(u32, u32), f64> = HashMap::new();
            for (rank, s) in found.iter().enumerate() {
                *fused.entry((s.segment_ord, s.doc)).or_default() +=
                    1.0 / (RRF_K + rank as f64 + 1.0);
            }
            for (rank, d) in dense.iter().enumerate() {
                *fused.entry((d.segment_ord, d.doc)).or_default() +=
                    1.0 / (RRF_K + rank as f64 + 1.0);
            }
            let mut order: Vec<((u32, u32), f64)> = fused.into_iter().collect();
            order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            order.truncate(k);
            let snap = snapshot.clone();
            let hits = blocking(move || {
                order
                    .iter()
                    .map(|((seg, doc), score)| Ok(snap.hit_at(*seg, *doc, *score)?))
                    .collect()
            })
            .await?;
            (hits, SearchPath::Hybrid, Some(matched))
        }
    };
    let (hits, rerank) = match reranker {
        None => (hits, None),
        Some((model, top)) => {
            let (hits, report) = rerank(model, snapshot.clone(), &input, hits, top).await?;
            (hits, Some(report))
        }
    };
    let mut hits = hits;
    hits.truncate(wanted);
    let calibration = state.encoders.weak_match();
    // The calibration is of the sparse strengths of the model's own queries.
    let weak_match = match (&input, &path) {
        (QueryInput::Text(_), SearchPath::Sparse) => calibration.text,
        (QueryInput::Image(_), SearchPath::Sparse) => calibration.image,
        _ => None,
    };
    Ok(SearchResponse {
        hits,
        path,
        sparse_matches,
        query_terms,
        rerank,
        weak_match,
        took_ms: start.elapsed().as_secs_f64() * 1000.0,
    })
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

/// Re-scores the first `top` hits that the re-ranker can read (image hits with a stored
/// thumbnail for a text query, text hits for an image query) and puts them first, best match
/// first; the other hits follow in first-stage order. Only first-stage candidates are returned.
async fn rerank(
    model: Arc<lexlip_model::Reranker>,
    snapshot: Arc<lexlip_index::Snapshot>,
    input: &QueryInput,
    hits: Vec<Hit>,
    top: usize,
) -> ApiResult<(Vec<Hit>, crate::http::api::RerankReport)> {
    let started = Instant::now();
    let query = match input {
        QueryInput::Text(t) => RerankQuery::Text(t.clone()),
        QueryInput::Image(b) => RerankQuery::Image(b.clone()),
        _ => return Err(ApiError::internal("rerank without a text or image query")),
    };
    blocking(move || {
        let n = top.min(hits.len());
        let mut scorable = Vec::new();
        let mut images = Vec::new();
        let mut texts = Vec::new();
        for (i, hit) in hits.iter().take(n).enumerate() {
            match (&query, hit.modality) {
                (RerankQuery::Text(_), Modality::Image) => {
                    let thumbnail = snapshot.get(&hit.id, false)?.and_then(|d| d.thumbnail);
                    if let Some(bytes) = thumbnail {
                        let image = model
                            .towers()
                            .image_encoder()
                            .preprocess_named(&bytes, &hit.id)
                            .map_err(|e| {
                                ApiError::internal(format!("thumbnail of {}: {e}", hit.id))
                            })?;
                        images.push(image);
                        scorable.push(i);
                    }
                }
                (RerankQuery::Image(_), Modality::Text) => {
                    if let Some(text) = &hit.text {
                        texts.push(text.clone());
                        scorable.push(i);
                    }
                }
                _ => {}
            }
        }
        let scores = match &query {
            RerankQuery::Text(t) if !images.is_empty() => model.score_text_images(t, &images),
            RerankQuery::Image(b) if !texts.is_empty() => {
                let image = model
                    .towers()
                    .image_encoder()
                    .preprocess_named(b, "query.image")
                    .map_err(|e| ApiError::unprocessable(format!("query.image: {e}")))?;
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                model.score_image_texts(&image, &refs)
            }
            _ => Ok(Vec::new()),
        }
        .map_err(|e| ApiError::internal(format!("re-ranking: {e}")))?;
        let mut out = Vec::with_capacity(hits.len());
        let mut hits: Vec<Option<Hit>> = hits.into_iter().map(Some).collect();
        for k in lexlip_model::rerank::order_by_score(&scores) {
            if let Some(mut hit) = hits[scorable[k]].take() {
                hit.first_stage_score = Some(hit.score);
                hit.score = f64::from(scores[k]);
                hit.stage = Some(Stage::Rerank);
                out.push(hit);
            }
        }
        for hit in hits.into_iter().flatten() {
            let mut hit = hit;
            hit.stage = Some(Stage::First);
            out.push(hit);
        }
        let report = crate::http::api::RerankReport {
            scored: scores.len(),
            unscored: n - scores.len(),
            took_ms: started.elapsed().as_secs_f64() * 1000.0,
        };
        Ok((out, report))
    })
    .await
}

enum RerankQuery {
    Text(String),
    Image(Arc<Vec<u8>>),
}

/// Dense results as API hits (cosine similarity as the score).
async fn dense_hits(
    snapshot: Arc<lexlip_index::Snapshot>,
    dense: Vec<lexlip_index::dense::DenseHit>,
) -> ApiResult<Vec<Hit>> {
    blocking(move || {
        dense
            .iter()
            .map(|d| {
                let mut hit = snapshot.hit_at(d.segment_ord, d.doc, f64::from(d.score))?;
                hit.match_strength = Some(f64::from(d.score).clamp(0.0, 1.0));
                Ok(hit)
            })
            .collect()
    })
    .await
}

enum DenseSource {
    Text(String),
    Image(Arc<Vec<u8>>),
    Given(Vec<f32>),
    None,
}

/// `POST /v1/collections/{name}/search`
#[utoipa::path(post, path = "/v1/collections/{name}/search", tag = "search",
    params(("name" = String, Path, description = "collection")),
    request_body = SearchRequest,
    responses((status = 400, body = lexlip_proto::api::ErrorResponse), (status = 415, body = lexlip_proto::api::ErrorResponse),
        (status = 200, body = SearchResponse), (status = 404, body = lexlip_proto::api::ErrorResponse),
        (status = 422, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse)))]
pub async fn search(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<SearchResponse>> {
    let bytes = read_body(body, state.limits.max_body_bytes).await?;
    let req: SearchRequest = parse_json(&headers, &bytes)?;
    let params = req.params(req.target);
    let input = QueryInput::from_request(req.query)?;
    Ok(Json(execute(&state, &name, input, params).await?))
}

/// `POST /v1/search/text-to-image`
#[utoipa::path(post, path = "/v1/search/text-to-image", tag = "search",
    request_body = TextToImage,
    responses((status = 400, body = lexlip_proto::api::ErrorResponse), (status = 415, body = lexlip_proto::api::ErrorResponse),
        (status = 200, body = SearchResponse), (status = 404, body = lexlip_proto::api::ErrorResponse),
        (status = 422, body = lexlip_proto::api::ErrorResponse)))]
pub async fn text_to_image(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<SearchResponse>> {
    let bytes = read_body(body, state.limits.max_body_bytes).await?;
    let req: TextToImage = parse_json(&headers, &bytes)?;
    let params = req.params(Some(Modality::Image));
    Ok(Json(
        execute(&state, &req.collection, QueryInput::Text(req.text), params).await?,
    ))
}

/// `POST /v1/search/image-to-text` (JSON with base64, or multipart with an `image` file part).
#[utoipa::path(post, path = "/v1/search/image-to-text", tag = "search",
    request_body = ImageToText,
    responses((status = 400, body = lexlip_proto::api::ErrorResponse), (status = 415, body = lexlip_proto::api::ErrorResponse),
        (status = 200, body = SearchResponse), (status = 404, body = lexlip_proto::api::ErrorResponse),
        (status = 422, body = lexlip_proto::api::ErrorResponse)))]
pub async fn image_to_text(
    State(state): State<SharedState>,
    request: Request<Body>,
) -> ApiResult<Json<SearchResponse>> {
    let (collection, image, params) = if is_multipart(request.headers()) {
        let mut form = <Multipart as axum::extract::FromRequest<_>>::from_request(request, &state)
            .await
            .map_err(|e| ApiError::bad_request(format!("multipart: {e}")))?;
        let (mut collection, mut image, mut k) = (None, None, default_k());
        while let Some(field) = form
            .next_field()
            .await
            .map_err(super::documents::multipart_error)?
        {
            let name = field.name().unwrap_or_default().to_string();
            let data = field
                .bytes()
                .await
                .map_err(super::documents::multipart_error)?;
            match name.as_str() {
                "collection" => collection = Some(String::from_utf8_lossy(&data).into_owned()),
                "image" | "file" => image = Some(data.to_vec()),
                "k" => {
                    k = String::from_utf8_lossy(&data).trim().parse().map_err(|_| {
                        ApiError::unprocessable("multipart field k must be an integer")
                    })?
                }
                other => {
                    return Err(ApiError::unprocessable(format!(
                        "unknown multipart field {other:?} (expected collection, image, k)"
                    )));
                }
            }
        }
        let collection = collection
            .ok_or_else(|| ApiError::unprocessable("multipart field collection is missing"))?;
        let image =
            image.ok_or_else(|| ApiError::unprocessable("multipart field image is missing"))?;
        (
            collection,
            image,
            SearchParams::top(k, Some(Modality::Text)),
        )
    } else {
        let (parts, body) = request.into_parts();
        let bytes = read_body(body, state.limits.max_body_bytes).await?;
        let req: ImageToText = parse_json(&parts.headers, &bytes)?;
        let image = decode_base64("image", &req.image)?;
        let params = req.params(Some(Modality::Text));
        (req.collection, image, params)
    };
    Ok(Json(
        execute(
            &state,
            &collection,
            QueryInput::Image(Arc::new(image)),
            params,
        )
        .await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every combination of the three fields: the precision and cut it means, or a refusal.
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
}
