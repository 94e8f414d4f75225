//! `POST /v1/encode`: text or image → sparse terms (and the dense embedding on request), cut
//! and quantized exactly as a collection stores them (the named one, or scale 100).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use lexlip_index::Quantizer;

use super::{decode_base64, parse_json, read_body};
use crate::http::api::{EncodeRequest, EncodeResponse};
use crate::http::error::{ApiError, ApiResult};
use crate::http::state::SharedState;

#[utoipa::path(post, path = "/v1/encode", tag = "encode",
    request_body = EncodeRequest,
    responses((status = 400, body = lexlip_proto::api::ErrorResponse), (status = 415, body = lexlip_proto::api::ErrorResponse),
        (status = 200, body = EncodeResponse), (status = 422, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse)))]
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
    // Exactly what the named collection (or a default one) would store.
    let quantizer = match &req.collection {
        Some(name) => {
            let open = state.get(name)?;
            state.check_encodable(name, &open.collection)?;
            open.collection.quantizer().clone()
        }
        None => Quantizer::default(),
    };
    let quantizer = match req.top_k_terms {
        Some(k) => quantizer.with_top_k(k)?,
        None => quantizer,
    };
    let (sparse, impacts) = quantizer.encode(&sparse)?;
    let impacts: BTreeMap<String, u32> = impacts.into();
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
