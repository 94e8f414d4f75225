//! Collections: create, list with figures, show, delete (their snapshots: [`super::snapshots`]).

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use lexlip_index::{Collection, CollectionSettings};

use super::{blocking, optional_json};
use crate::http::api::{CollectionInfo, CollectionList, CreateCollection, Deleted};
use crate::http::error::{ApiError, ApiResult};
use crate::http::gate::CommitGate;
use crate::http::state::SharedState;

pub(super) fn info(name: &str, c: &Collection) -> ApiResult<CollectionInfo> {
    let settings = &c.manifest().settings;
    Ok(CollectionInfo {
        name: name.to_string(),
        stats: c.stats()?,
        scale: settings.scale,
        top_k_terms: settings.top_k_terms,
        dense_dim: settings.dense_dim,
        thumbnails: c.stores_thumbnails(),
        term_space: c.manifest().term_space.to_string(),
    })
}

/// `PUT /v1/collections/{name}`: 201 when created, 200 when it exists with the same settings,
/// 409 when it exists with others.
#[utoipa::path(put, path = "/v1/collections/{name}", tag = "collections",
    params(("name" = String, Path, description = "collection name: 1-64 of A-Z a-z 0-9 _ - .")),
    request_body = CreateCollection,
    responses((status = 400, body = lexlip_proto::api::ErrorResponse), (status = 415, body = lexlip_proto::api::ErrorResponse),
        (status = 201, body = CollectionInfo), (status = 200, body = CollectionInfo),
        (status = 409, body = lexlip_proto::api::ErrorResponse), (status = 422, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse), (status = 507, body = lexlip_proto::api::ErrorResponse)))]
pub async fn create(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    gate: CommitGate,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<CollectionInfo>)> {
    let req: CreateCollection = optional_json(&headers, body, state.limits.max_body_bytes).await?;
    let dense_dim = match (req.dense, req.dense_dim, state.encoders.dense_dim()) {
        (_, Some(d), _) => Some(d),
        (true, None, Some(d)) => Some(d),
        (true, None, None) => {
            return Err(ApiError::unprocessable(
                "\"dense\": true needs a dense encoder (--dense-model) or an explicit dense_dim",
            ));
        }
        (false, None, _) => None,
    };
    let settings = CollectionSettings {
        scale: req
            .scale
            .or(state.encoders.scale())
            .unwrap_or(lexlip_proto::DEFAULT_SCALE),
        top_k_terms: req.top_k_terms,
        dense_dim,
        thumbnails: req.thumbnails.unwrap_or(true),
        ..CollectionSettings::default()
    };
    settings.validate()?;
    let st = state.clone();
    let name2 = name.clone();
    let created = blocking(move || {
        if !gate.begin_commit() {
            return Err(abandoned());
        }
        st.create(&name2, settings)
    })
    .await?;
    let open = state.get(&name)?;
    let c = open.collection.clone();
    let n = name.clone();
    let info = blocking(move || info(&n, &c)).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)))
}

/// `GET /v1/collections`
#[utoipa::path(get, path = "/v1/collections", tag = "collections",
    responses((status = 200, body = CollectionList), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse)))]
pub async fn list(State(state): State<SharedState>) -> ApiResult<Json<CollectionList>> {
    let all = state.names();
    let collections = blocking(move || {
        all.iter()
            .map(|(name, open)| info(name, &open.collection))
            .collect()
    })
    .await?;
    Ok(Json(CollectionList { collections }))
}

/// `GET /v1/collections/{name}`
#[utoipa::path(get, path = "/v1/collections/{name}", tag = "collections",
    params(("name" = String, Path, description = "collection")),
    responses((status = 200, body = CollectionInfo), (status = 404, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse)))]
pub async fn show(
    State(state): State<SharedState>,
    Path(name): Path<String>,
) -> ApiResult<Json<CollectionInfo>> {
    let open = state.get(&name)?;
    let c = open.collection.clone();
    Ok(Json(blocking(move || info(&name, &c)).await?))
}

/// `DELETE /v1/collections/{name}`
#[utoipa::path(delete, path = "/v1/collections/{name}", tag = "collections",
    params(("name" = String, Path, description = "collection")),
    responses((status = 200, body = Deleted), (status = 404, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse), (status = 507, body = lexlip_proto::api::ErrorResponse)))]
pub async fn delete(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    gate: CommitGate,
) -> ApiResult<Json<Deleted>> {
    // `delete` waits for a running write to finish before the files go.
    let st = state.clone();
    blocking(move || {
        if !gate.begin_commit() {
            return Err(abandoned());
        }
        st.delete(&name)
    })
    .await?;
    Ok(Json(Deleted { deleted: true }))
}

/// The error of a request abandoned before its change began (the client already has its 503).
pub(super) fn abandoned() -> ApiError {
    ApiError::unavailable("the request was abandoned before it changed anything", 1)
}
