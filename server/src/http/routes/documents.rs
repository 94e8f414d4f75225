//! Documents: add/replace (JSON batch or one multipart upload), get, delete, and an image
//! document's stored thumbnail.
//!
//! An add request is all-or-nothing: every document is validated and encoded first; only then
//! are they written and committed, so a bad document changes nothing and a successful call
//! returns once its documents are searchable.

use std::collections::HashSet;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::multipart::MultipartError;
use axum::extract::{FromRequest, Multipart, Path, Query, State};
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lexlip_index::DocExtras;
use lexlip_proto::{DenseVector, DocId, Document, Modality, QuantizedVector, VectorInput};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::{blocking, decode_base64, is_multipart, parse_json, read_body};
use lexlip_proto::api::StoredDocument;

use crate::http::api::{AddDocuments, AddedDocuments, Deleted, NewDocument};
use crate::http::error::{ApiError, ApiResult};
use crate::http::gate::CommitGate;
use crate::http::state::{Open, SharedState};

pub fn multipart_error(e: MultipartError) -> ApiError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(format!("multipart body too large: {e}"))
    } else {
        ApiError::bad_request(format!("multipart: {e}"))
    }
}

/// One document ready to write.
struct Prepared {
    doc: Document,
    impacts: QuantizedVector,
    extras: DocExtras,
}

/// A document as received, with its image already decoded from base64 / read from multipart.
struct Incoming {
    new: NewDocument,
    image: Option<Arc<Vec<u8>>>,
}

async fn prepare(
    state: &SharedState,
    name: &str,
    open: &Open,
    decode_slots: &Semaphore,
    n: usize,
    incoming: Incoming,
) -> ApiResult<Prepared> {
    let at = |e: ApiError| ApiError {
        message: format!("document {n} ({:?}): {}", incoming.new.id, e.message),
        ..e
    };
    let c = &open.collection;
    let d = &incoming.new;
    let id = DocId::new(d.id.clone()).map_err(|e| at(e.into()))?;
    let modality = d.modality.unwrap_or(if incoming.image.is_some() {
        Modality::Image
    } else {
        Modality::Text
    });
    let mut doc = Document::new(id, modality);
    doc.uri = d.uri.clone();
    doc.text = d.text.clone();
    doc.metadata = d.metadata.clone().unwrap_or_default();
    // Image documents keep a thumbnail where the collection stores them: from the decode the
    // encoder makes anyway, or from the image alone when the vector is precomputed.
    let want_thumbnail =
        modality == Modality::Image && incoming.image.is_some() && c.stores_thumbnails();
    let (scale_input, thumbnail) = match (&d.vector, &incoming.image, &d.text) {
        (Some(v), _, _) => (
            VectorInput::from_json(v.clone())
                .map_err(|e| at(ApiError::unprocessable(format!("vector: {e}"))))?,
            None,
        ),
        (None, Some(bytes), _) if modality == Modality::Image => {
            state.check_encodable(name, c).map_err(at)?;
            let (pre, thumbnail) = {
                let _slot = decode_slots
                    .acquire()
                    .await
                    .map_err(|e| at(ApiError::internal(e.to_string())))?;
                state
                    .encoders
                    .preprocess_image(
                        bytes.clone(),
                        format!("document {n} ({})", d.id),
                        want_thumbnail,
                    )
                    .await
                    .map_err(at)?
            };
            let v = state.encoders.encode_preprocessed(pre).await.map_err(at)?;
            (VectorInput::Weights(v), thumbnail)
        }
        (None, _, Some(text)) => {
            state.check_encodable(name, c).map_err(at)?;
            (
                VectorInput::Weights(
                    state
                        .encoders
                        .text_document(text.clone())
                        .await
                        .map_err(at)?,
                ),
                None,
            )
        }
        _ => {
            return Err(at(ApiError::unprocessable(
                "give text, image or a precomputed vector",
            )));
        }
    };
    let thumbnail = match (thumbnail, &incoming.image) {
        (None, Some(bytes)) if want_thumbnail && d.vector.is_some() => {
            // Image bytes that do not decode are refused as when they are encoded (422).
            Some(
                thumbnail_of(bytes.clone(), format!("document {n} ({})", d.id))
                    .await
                    .map_err(at)?,
            )
        }
        (t, _) => t,
    };
    let impacts = c
        .quantizer()
        .document(scale_input)
        .map_err(|e| at(e.into()))?;
    let dense = match (&d.dense, c.manifest().settings.dense_dim) {
        (Some(v), _) => {
            let v = DenseVector::new(v.clone()).map_err(|e| at(e.into()))?;
            c.check_dense(&v).map_err(|e| at(e.into()))?;
            Some(v)
        }
        (None, Some(_)) if state.encoders.has_dense() => {
            let v = match (&incoming.image, &d.text) {
                (Some(bytes), _) if modality == Modality::Image => Some(
                    state
                        .encoders
                        .dense_image(bytes.clone(), format!("document {n} ({})", d.id))
                        .await
                        .map_err(at)?,
                ),
                (_, Some(text)) => Some(state.encoders.dense_text(text.clone()).await.map_err(at)?),
                _ => None,
            };
            if let Some(v) = &v {
                c.check_dense(v).map_err(|e| at(e.into()))?;
            }
            v
        }
        _ => None,
    };
    Ok(Prepared {
        doc,
        impacts,
        extras: DocExtras { dense, thumbnail },
    })
}

/// The thumbnail of image bytes, decoded on a blocking thread (documents with a precomputed
/// vector: no encoder decodes their image).
async fn thumbnail_of(bytes: Arc<Vec<u8>>, name: String) -> ApiResult<Vec<u8>> {
    blocking(move || Ok(lexlip_model::thumbnail::from_bytes(&bytes, &name)?)).await
}

/// Reads one document from a multipart form: fields `id`, `modality`, `text`, `uri`,
/// `metadata` (a JSON object) and a file part `image`.
async fn from_multipart(mut form: Multipart) -> ApiResult<Incoming> {
    let mut new = NewDocument {
        id: String::new(),
        modality: None,
        text: None,
        image: None,
        uri: None,
        metadata: None,
        vector: None,
        dense: None,
    };
    let mut image = None;
    while let Some(field) = form.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_string();
        let file_name = field.file_name().map(str::to_string);
        let data = field.bytes().await.map_err(multipart_error)?;
        let text = || String::from_utf8_lossy(&data).into_owned();
        match name.as_str() {
            "id" => new.id = text(),
            "modality" => {
                new.modality = Some(text().parse().map_err(|e: lexlip_proto::DocumentError| {
                    ApiError::unprocessable(e.to_string())
                })?)
            }
            "text" => new.text = Some(text()),
            "uri" => new.uri = Some(text()),
            "metadata" => {
                new.metadata = Some(serde_json::from_slice(&data).map_err(|e| {
                    ApiError::unprocessable(format!("metadata must be a JSON object: {e}"))
                })?)
            }
            "image" | "file" => {
                image = Some(Arc::new(super::multipart_image(
                    file_name.as_deref(),
                    &data,
                )?))
            }
            other => {
                return Err(ApiError::unprocessable(format!(
                    "unknown multipart field {other:?} (expected id, modality, text, uri, metadata, image)"
                )));
            }
        }
    }
    if new.id.is_empty() {
        return Err(ApiError::unprocessable("multipart field id is missing"));
    }
    Ok(Incoming { new, image })
}

/// `POST /v1/collections/{name}/documents`
#[utoipa::path(post, path = "/v1/collections/{name}/documents", tag = "documents",
    params(("name" = String, Path, description = "collection")),
    request_body = AddDocuments,
    responses((status = 400, body = lexlip_proto::api::ErrorResponse), (status = 415, body = lexlip_proto::api::ErrorResponse),
        (status = 200, body = AddedDocuments), (status = 404, body = lexlip_proto::api::ErrorResponse),
        (status = 413, body = lexlip_proto::api::ErrorResponse), (status = 422, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse), (status = 507, body = lexlip_proto::api::ErrorResponse)))]
pub async fn add(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    gate: CommitGate,
    request: Request<Body>,
) -> ApiResult<Json<AddedDocuments>> {
    let open = state.get(&name)?;
    let incoming: Vec<Incoming> = if is_multipart(request.headers()) {
        let form = Multipart::from_request(request, &state)
            .await
            .map_err(|e| ApiError::bad_request(format!("multipart: {e}")))?;
        vec![from_multipart(form).await?]
    } else {
        let (parts, body) = request.into_parts();
        let bytes = read_body(body, state.limits.max_body_bytes).await?;
        let req: AddDocuments = parse_json(&parts.headers, &bytes)?;
        let mut out = Vec::with_capacity(req.documents.len());
        for (n, d) in req.documents.into_iter().enumerate() {
            let image = match &d.image {
                Some(b64) => Some(Arc::new(decode_base64(
                    &format!("documents[{n}].image"),
                    b64,
                )?)),
                None => None,
            };
            out.push(Incoming { new: d, image });
        }
        out
    };
    if incoming.is_empty() {
        return Err(ApiError::unprocessable("documents is empty"));
    }
    if incoming.len() > state.limits.max_batch_docs {
        return Err(ApiError::too_large(format!(
            "{} documents in one request; the limit is {} (--max-batch-docs)",
            incoming.len(),
            state.limits.max_batch_docs
        )));
    }
    let mut seen = HashSet::new();
    for d in &incoming {
        if !seen.insert(d.new.id.as_str()) {
            return Err(ApiError::unprocessable(format!(
                "id {:?} appears twice in this request",
                d.new.id
            )));
        }
    }
    // Encode concurrently: the batchers group these with other requests' items. A request's
    // images are decoded a few at a time, so that each waits for the decode budget behind other
    // requests' images rather than behind all of its own (which, under load, would run every
    // request of many images past the budget's wait and refuse them all).
    let decode_slots = Semaphore::new(IMAGE_DECODES_PER_REQUEST);
    let futures = incoming
        .into_iter()
        .enumerate()
        .map(|(n, d)| prepare(&state, &name, &open, &decode_slots, n, d));
    let prepared: Vec<Prepared> = futures_util::future::try_join_all(futures).await?;
    let n = prepared.len();
    let _writer = open.lock_for_write(&name).await?;
    let c = open.collection.clone();
    let documents = blocking(move || {
        c.transaction_unless_abandoned(
            |c| {
                for p in prepared {
                    c.add_with(p.doc, p.impacts, p.extras)?;
                }
                Ok(())
            },
            || gate.begin_commit(),
        )?;
        Ok(c.snapshot()?.num_docs())
    })
    .await?;
    state.metrics.set_documents(&name, documents);
    Ok(Json(AddedDocuments {
        added: n,
        committed: true,
        documents,
    }))
}

#[derive(Debug, Deserialize)]
pub struct GetParams {
    #[serde(default)]
    explain: bool,
}

/// `GET /v1/collections/{name}/documents/{id}`
#[utoipa::path(get, path = "/v1/collections/{name}/documents/{id}", tag = "documents",
    params(("name" = String, Path, description = "collection"), ("id" = String, Path, description = "document id"),
        ("explain" = Option<bool>, Query, description = "include the document's terms")),
    responses((status = 200, body = StoredDocument), (status = 404, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse)))]
pub async fn get(
    State(state): State<SharedState>,
    Path((name, id)): Path<(String, String)>,
    Query(params): Query<GetParams>,
) -> ApiResult<Json<StoredDocument>> {
    let open = state.get(&name)?;
    let c = open.collection.clone();
    let explain = params.explain;
    let lookup = id.clone();
    let found = blocking(move || Ok(c.snapshot()?.get(&lookup, explain)?)).await?;
    match found {
        Some(found) => Ok(Json(found)),
        None => Err(ApiError::not_found(format!(
            "no document {id:?} in collection {name:?}"
        ))),
    }
}

/// `DELETE /v1/collections/{name}/documents/{id}`
#[utoipa::path(delete, path = "/v1/collections/{name}/documents/{id}", tag = "documents",
    params(("name" = String, Path, description = "collection"), ("id" = String, Path, description = "document id")),
    responses((status = 200, body = Deleted), (status = 404, body = lexlip_proto::api::ErrorResponse), (status = 401, body = lexlip_proto::api::ErrorResponse), (status = 503, body = lexlip_proto::api::ErrorResponse), (status = 507, body = lexlip_proto::api::ErrorResponse)))]
pub async fn delete(
    State(state): State<SharedState>,
    Path((name, id)): Path<(String, String)>,
    gate: CommitGate,
) -> ApiResult<Json<Deleted>> {
    let open = state.get(&name)?;
    let doc_id = DocId::new(id.clone())?;
    let _writer = open.lock_for_write(&name).await?;
    let c = open.collection.clone();
    let (existed, documents) = blocking(move || {
        let existed =
            c.transaction_unless_abandoned(|c| c.delete(&doc_id), || gate.begin_commit())?;
        Ok((existed, c.snapshot()?.num_docs()))
    })
    .await?;
    if !existed {
        return Err(ApiError::not_found(format!(
            "no document {id:?} in collection {name:?}"
        )));
    }
    state.metrics.set_documents(&name, documents);
    Ok(Json(Deleted { deleted: true }))
}

/// How long browsers and proxies may reuse a thumbnail without asking again. A replaced
/// document's new thumbnail shows after at most this long (sooner on a reload, which revalidates
/// with the ETag).
const THUMBNAIL_MAX_AGE_S: u32 = 3600;

/// Images of one request decoded at once (the process-wide decode budget bounds all requests).
const IMAGE_DECODES_PER_REQUEST: usize = 2;

/// `GET /v1/collections/{name}/documents/{id}/thumbnail`: the image document's stored thumbnail
/// (never a file from disk), with an ETag of its bytes so a page revalidates with a 304.
#[utoipa::path(get, path = "/v1/collections/{name}/documents/{id}/thumbnail", tag = "documents",
    params(("name" = String, Path, description = "collection"), ("id" = String, Path, description = "document id"),
        ("If-None-Match" = Option<String>, Header, description = "ETags the client holds: 304 when one is current")),
    responses(
        (status = 200, description = "The thumbnail: a JPEG whose longest side is at most 256 px, the image composited over white. Cacheable (Cache-Control max-age 3600; private with --protect-reads).",
            content(("image/jpeg")),
            headers(("ETag" = String, description = "hash of the bytes"), ("Cache-Control" = String))),
        (status = 304, description = "Not modified: the If-None-Match ETag is current",
            headers(("ETag" = String), ("Cache-Control" = String))),
        (status = 404, description = "No such collection or document, or the document has no thumbnail (a text document, an image added without image bytes or with thumbnails off, or a collection made before thumbnails existed)",
            body = lexlip_proto::api::ErrorResponse)))]
pub async fn thumbnail(
    State(state): State<SharedState>,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let open = state.get(&name)?;
    let c = open.collection.clone();
    let lookup = id.clone();
    let (found, has_field) = blocking(move || {
        let snapshot = c.snapshot()?;
        Ok((
            snapshot.get(&lookup, false)?,
            snapshot.has_thumbnail_field(),
        ))
    })
    .await?;
    let Some(found) = found else {
        return Err(ApiError::not_found(format!(
            "no document {id:?} in collection {name:?}"
        )));
    };
    let Some(bytes) = found.thumbnail else {
        return Err(ApiError::not_found(if !has_field {
            format!(
                "collection {name:?} was created before thumbnails were stored: none of its \
                 documents has one (index its images again into a new collection to get them)"
            )
        } else if found.doc.modality != Modality::Image {
            format!(
                "document {id:?} is a {} document: only images have thumbnails",
                found.doc.modality
            )
        } else {
            format!(
                "document {id:?} has no thumbnail (added without image bytes, or while \
                 thumbnails were off)"
            )
        }));
    };
    let etag = etag_of(&bytes);
    let cache = if state.limits.protect_reads && !state.limits.api_keys.is_empty() {
        format!("private, max-age={THUMBNAIL_MAX_AGE_S}")
    } else {
        format!("public, max-age={THUMBNAIL_MAX_AGE_S}")
    };
    let common = [(header::ETAG, etag.clone()), (header::CACHE_CONTROL, cache)];
    if crate::http::layers::matches_etag(&headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, common).into_response());
    }
    Ok((
        StatusCode::OK,
        common,
        [
            (header::CONTENT_TYPE, lexlip_model::thumbnail::CONTENT_TYPE),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        bytes,
    )
        .into_response())
}

/// A strong ETag of the thumbnail's bytes (128 bits of their SHA-256): the same document
/// replaced by another image gets another tag.
fn etag_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}
