//! Search: `POST /v1/collections/{name}/search` and the two convenience routes.
//!
//! One snapshot answers a request, so sparse, dense and fused lists all see the same commit. A
//! request that is abandoned (its timeout fired, its client went away) drops this handler's
//! future, which cancels its sparse searches: they stop within milliseconds and the blocking
//! thread is free again.

mod execute;

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, Request};
use lexlip_proto::Modality;

use super::{decode_base64, is_multipart, parse_json, read_body};
use crate::http::api::{
    ImageToText, SearchParams, SearchRequest, SearchResponse, TextToImage, default_k,
};
use crate::http::error::{ApiError, ApiResult};
use crate::http::state::SharedState;

pub use execute::{MAX_RERANK, QueryInput, execute};

/// `POST /v1/collections/{name}/search`
#[utoipa::path(post, path = "/v1/collections/{name}/search", tag = "search",
    params(("name" = String, Path, description = "collection")),
    request_body = SearchRequest,
    responses((status = 400, body = lexlip_proto::api::ErrorResponse), (status = 415, body = lexlip_proto::api::ErrorResponse),
        (status = 200, body = SearchResponse), (status = 404, body = lexlip_proto::api::ErrorResponse),
        (status = 422, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse)))]
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
        (status = 422, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse)))]
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
        (status = 422, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse)))]
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
            let file_name = field.file_name().map(str::to_string);
            let data = field
                .bytes()
                .await
                .map_err(super::documents::multipart_error)?;
            match name.as_str() {
                "collection" => collection = Some(String::from_utf8_lossy(&data).into_owned()),
                "image" | "file" => {
                    image = Some(super::multipart_image(file_name.as_deref(), &data)?)
                }
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
