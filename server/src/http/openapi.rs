//! The OpenAPI document, generated from the handler annotations and the API types.
//! `docs/openapi.json` is a copy kept in sync by a test (`lexlip openapi > docs/openapi.json`).

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;

use super::api;
use super::layers::key_check;
use super::routes::{collections, documents, encode, search, snapshots};
use super::state::SharedState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lexlip",
        description = "Image-text retrieval in the lexicon space: sparse LexLIP vectors in a tantivy impact index, dense fallback.",
        license(name = "Apache-2.0")
    ),
    paths(
        collections::create,
        collections::list,
        collections::show,
        collections::delete,
        snapshots::create,
        snapshots::list,
        snapshots::download,
        snapshots::delete,
        snapshots::restore,
        documents::add,
        documents::get,
        documents::thumbnail,
        documents::delete,
        search::search,
        search::text_to_image,
        search::image_to_text,
        encode::encode,
    ),
    components(schemas(
        api::CreateCollection,
        api::CollectionInfo,
        api::CollectionList,
        api::NewDocument,
        api::AddDocuments,
        api::AddedDocuments,
        lexlip_proto::api::StoredDocument,
        lexlip_proto::api::CollectionStats,
        lexlip_proto::Document,
        api::Deleted,
        api::SnapshotInfo,
        api::SnapshotList,
        api::RestoreSnapshot,
        api::Query,
        api::Mode,
        api::SearchRequest,
        api::SearchPath,
        api::SearchResponse,
        api::Rerank,
        api::RerankReport,
        api::TextToImage,
        api::ImageToText,
        api::EncodeRequest,
        api::EncodeResponse,
        lexlip_proto::api::Hit,
        lexlip_proto::api::TermContribution,
        lexlip_proto::api::Stage,
        lexlip_proto::api::Filter,
        lexlip_proto::api::ErrorResponse,
        lexlip_proto::api::ErrorBody,
        lexlip_proto::api::ErrorCode,
        lexlip_proto::Modality,
    ))
)]
struct ApiDoc;

/// The OpenAPI document as JSON.
pub fn document() -> serde_json::Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap_or_default()
}

/// `GET /openapi.json`
pub async fn serve(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    // With `--protect-reads`, the API's shape is a read like any other.
    if state.limits.protect_reads
        && let Err(e) = key_check(&state, &headers)
    {
        return e.into_response();
    }
    Json(document()).into_response()
}
