//! `POST /v1/encode`: text or image → sparse terms (and the dense embedding on request).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;

use super::{decode_base64, parse_json, read_body};
use crate::http::api::{EncodeRequest, EncodeResponse};
use crate::http::error::{ApiError, ApiResult};
use crate::http::state::SharedState;

#[utoipa::path(post, path = "/v1/encode", tag = "encode",
    request_body = EncodeRequest,
    responses((status = 200, body = EncodeResponse), (status = 422, body = lexlip_proto::api::ErrorResponse)))]
pub async fn encode(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<EncodeResponse>> {
    let bytes = read_body(body, state.limits.max_body_bytes).await?;
    let req: EncodeRequest = parse_json(&headers, &bytes)?;
    let enc = &state.encoders;
    let (sparse, dense) = match (req.text, req.image) {
        (Some(text), None) => {
            let dense = if req.dense {
                Some(enc.dense_text(text.clone()).await?)
            } else {
                None
            };
            (enc.text(text).await?, dense)
        }
        (None, Some(b64)) => {
            let image = Arc::new(decode_base64("image", &b64)?);
            let dense = if req.dense {
                Some(enc.dense_image(image.clone(), "image".into()).await?)
            } else {
                None
            };
            (enc.image(image, "image".into()).await?, dense)
        }
        _ => return Err(ApiError::unprocessable("give exactly one of text, image")),
    };
    let sparse = match req.top_k_terms {
        Some(0) => return Err(ApiError::unprocessable("top_k_terms must be at least 1")),
        Some(k) => sparse.top_k(k),
        None => sparse,
    };
    let impacts: BTreeMap<String, u32> = sparse
        .quantize(lexlip_proto::DEFAULT_SCALE)
        .iter()
        .map(|(t, i)| (t.to_string(), i))
        .collect();
    let terms = sparse
        .by_weight()
        .into_iter()
        .filter_map(|(t, w)| {
            serde_json::Number::from_f64(f64::from(w)).map(|n| (t.to_string(), n.into()))
        })
        .collect();
    Ok(Json(EncodeResponse {
        terms,
        impacts,
        dense: dense.map(Vec::from),
    }))
}
