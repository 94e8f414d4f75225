//! Snapshots: take one of a collection while it serves and takes writes, list, download and
//! remove them, and restore one under a name.

use std::io::Read;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lexlip_index::catalog::snapshots::StoredSnapshot;

use super::collections::{abandoned, info};
use super::{blocking, optional_json};
use crate::http::api::{CollectionInfo, Deleted, RestoreSnapshot, SnapshotInfo, SnapshotList};
use crate::http::error::{ApiError, ApiResult};
use crate::http::gate::CommitGate;
use crate::http::state::SharedState;

/// The snapshot routes, under `/v1/collections/{name}/snapshots`.
pub fn router() -> Router<SharedState> {
    let one = "/v1/collections/{name}/snapshots/{snapshot}";
    Router::new()
        .route("/v1/collections/{name}/snapshots", post(create).get(list))
        .route(one, get(download).delete(delete))
        .route(&format!("{one}/restore"), post(restore))
}

fn snapshot_info(s: StoredSnapshot) -> SnapshotInfo {
    let m = s.manifest;
    SnapshotInfo {
        name: s.file,
        collection: m.collection,
        created_at: m.created_at,
        documents: m.documents,
        segments: m.segments,
        bytes: m.archive_bytes,
        term_space: m.term_space,
        lexlip_version: m.lexlip_version,
    }
}

/// `POST /v1/collections/{name}/snapshots`: archives the collection's last commit; writes go
/// on meanwhile and are not in it.
#[utoipa::path(post, path = "/v1/collections/{name}/snapshots", tag = "snapshots",
    params(("name" = String, Path, description = "collection")),
    responses((status = 201, body = SnapshotInfo), (status = 404, body = lexlip_proto::api::ErrorResponse),
        (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse), (status = 507, body = lexlip_proto::api::ErrorResponse)))]
pub async fn create(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    gate: CommitGate,
) -> ApiResult<(StatusCode, Json<SnapshotInfo>)> {
    state.get(&name)?;
    let st = state.clone();
    let made = blocking(move || {
        // Begun, it is waited for past the request timeout rather than answered 503.
        if !gate.begin_commit() {
            return Err(abandoned());
        }
        Ok(st.catalog().take_snapshot(&name)?)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(snapshot_info(made))))
}

/// `GET /v1/collections/{name}/snapshots`: the collection's snapshots, oldest first (also
/// those of a collection deleted since).
#[utoipa::path(get, path = "/v1/collections/{name}/snapshots", tag = "snapshots",
    params(("name" = String, Path, description = "collection")),
    responses((status = 200, body = SnapshotList), (status = 404, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse)))]
pub async fn list(
    State(state): State<SharedState>,
    Path(name): Path<String>,
) -> ApiResult<Json<SnapshotList>> {
    let st = state.clone();
    let n = name.clone();
    let found = blocking(move || Ok(st.catalog().snapshots(&n)?)).await?;
    let snapshots = match found {
        Some(list) => list,
        None => {
            // No snapshot folder: an empty list for a collection, 404 for nothing at all.
            state.get(&name)?;
            Vec::new()
        }
    };
    Ok(Json(SnapshotList {
        snapshots: snapshots.into_iter().map(snapshot_info).collect(),
    }))
}

/// `GET /v1/collections/{name}/snapshots/{snapshot}`: the archive itself (a tar file).
#[utoipa::path(get, path = "/v1/collections/{name}/snapshots/{snapshot}", tag = "snapshots",
    params(("name" = String, Path, description = "collection"), ("snapshot" = String, Path, description = "snapshot file name")),
    responses((status = 200, content_type = "application/x-tar", description = "the archive"), (status = 404, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse)))]
pub async fn download(
    State(state): State<SharedState>,
    Path((name, snapshot)): Path<(String, String)>,
) -> ApiResult<Response> {
    let path = state.catalog().snapshot_path(&name, &snapshot)?;
    let file = std::fs::File::open(&path)
        .map_err(|e| ApiError::internal(format!("opening {}: {e}", path.display())))?;
    let bytes = file.metadata().map(|m| m.len()).unwrap_or_default();
    let headers = [
        (header::CONTENT_TYPE, "application/x-tar".to_string()),
        (header::CONTENT_LENGTH, bytes.to_string()),
        (
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{snapshot}\""),
        ),
    ];
    Ok((headers, Body::from_stream(chunks(file))).into_response())
}

/// A file's bytes as a stream of chunks, each read off the async runtime.
fn chunks(
    file: std::fs::File,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; 1 << 16];
            let n = file.read(&mut buf)?;
            buf.truncate(n);
            Ok::<_, std::io::Error>((buf, file))
        })
        .await;
        match read {
            Ok(Ok((buf, _))) if buf.is_empty() => None,
            Ok(Ok((buf, file))) => Some((Ok(Bytes::from(buf)), Some(file))),
            Ok(Err(e)) => Some((Err(e), None)),
            Err(e) => Some((Err(std::io::Error::other(e)), None)),
        }
    })
}

/// `DELETE /v1/collections/{name}/snapshots/{snapshot}`
#[utoipa::path(delete, path = "/v1/collections/{name}/snapshots/{snapshot}", tag = "snapshots",
    params(("name" = String, Path, description = "collection"), ("snapshot" = String, Path, description = "snapshot file name")),
    responses((status = 200, body = Deleted), (status = 404, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse)))]
pub async fn delete(
    State(state): State<SharedState>,
    Path((name, snapshot)): Path<(String, String)>,
) -> ApiResult<Json<Deleted>> {
    let st = state.clone();
    blocking(move || Ok(st.catalog().delete_snapshot(&name, &snapshot)?)).await?;
    Ok(Json(Deleted { deleted: true }))
}

/// `POST /v1/collections/{name}/snapshots/{snapshot}/restore`: brings the snapshot back as the
/// collection `into` (default `name`). The archive is checked before anything changes: a
/// damaged one is refused (422) and a collection of that name is replaced only with
/// `"replace": true` (else 409).
#[utoipa::path(post, path = "/v1/collections/{name}/snapshots/{snapshot}/restore", tag = "snapshots",
    params(("name" = String, Path, description = "the collection the snapshot was taken of"), ("snapshot" = String, Path, description = "snapshot file name")),
    request_body = RestoreSnapshot,
    responses((status = 201, body = CollectionInfo), (status = 404, body = lexlip_proto::api::ErrorResponse),
        (status = 409, body = lexlip_proto::api::ErrorResponse), (status = 422, body = lexlip_proto::api::ErrorResponse),
        (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse), (status = 507, body = lexlip_proto::api::ErrorResponse)))]
pub async fn restore(
    State(state): State<SharedState>,
    Path((name, snapshot)): Path<(String, String)>,
    gate: CommitGate,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<CollectionInfo>)> {
    let req: RestoreSnapshot = optional_json(&headers, body, state.limits.max_body_bytes).await?;
    let into = req.into.unwrap_or_else(|| name.clone());
    let st = state.clone();
    let target = into.clone();
    blocking(move || {
        if !gate.begin_commit() {
            return Err(abandoned());
        }
        st.restore(&name, &snapshot, &target, req.replace)
    })
    .await?;
    let c = state.get(&into)?.collection.clone();
    let info = blocking(move || info(&into, &c)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}
