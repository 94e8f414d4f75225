//! API errors: every failure is `{"error": {"code", "message"}}` with the status that fits.
//! Bad input is always a 4xx; a 5xx means the server itself failed.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lexlip_index::IndexError;
use lexlip_model::ModelError;
use lexlip_proto::api::{ErrorBody, ErrorCode, ErrorResponse};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    /// Seconds a client should wait before retrying (429/503).
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, m)
    }
    pub fn unprocessable(m: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::Unprocessable,
            m,
        )
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, m)
    }
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, ErrorCode::Conflict, m)
    }
    pub fn unsupported_media(m: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            m,
        )
    }
    pub fn too_large(m: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge, m)
    }
    pub fn forbidden(m: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, m)
    }
    pub fn unauthorized(m: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, m)
    }
    /// The server is busy or not ready: retry later.
    pub fn unavailable(m: impl Into<String>, retry_after: u32) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable, m)
        }
    }
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal, m)
    }
    /// The disk is full: the write was rolled back; reads keep working.
    pub fn storage_full(m: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::InsufficientStorage,
            m,
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() && self.status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(status = %self.status, message = %self.message, "request failed");
        }
        let body = ErrorResponse {
            error: ErrorBody {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}

/// An error and its sources, `outer: inner: …`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl From<lexlip_search::SearchError> for ApiError {
    fn from(e: lexlip_search::SearchError) -> Self {
        use lexlip_search::SearchError;
        match e {
            SearchError::Invalid(m) => ApiError::unprocessable(m),
            SearchError::Index(e) => e.into(),
            SearchError::Rerank(m) => ApiError::internal(format!("re-ranking: {m}")),
        }
    }
}

impl From<IndexError> for ApiError {
    fn from(e: IndexError) -> Self {
        let message = chain(&e);
        if e.is_storage_full() {
            return ApiError::storage_full(format!(
                "the data directory's disk is full; nothing of this write was stored (free space \
                 and retry): {message}"
            ));
        }
        match &e {
            IndexError::InvalidQuery(_)
            | IndexError::InvalidSetting(_)
            | IndexError::InvalidName(_)
            | IndexError::UnknownTerm { .. }
            | IndexError::BadArchive { .. } => ApiError::unprocessable(message),
            IndexError::TermSpaceMismatch { .. } | IndexError::AlreadyExists(_) => {
                ApiError::conflict(message)
            }
            IndexError::NoSuchCollection(_) | IndexError::NoSuchSnapshot { .. } => {
                ApiError::not_found(message)
            }
            // Only a request that was abandoned (timed out, client gone) cancels its search.
            IndexError::Cancelled => ApiError::unavailable(message, 1),
            _ => ApiError::internal(message),
        }
    }
}

impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> Self {
        let message = chain(&e);
        match &e {
            ModelError::Image { .. } | ModelError::Tokenize { .. } | ModelError::Invalid(_) => {
                ApiError::unprocessable(message)
            }
            ModelError::Busy(_) => ApiError::unavailable(message, 1),
            _ => ApiError::internal(message),
        }
    }
}

impl From<lexlip_proto::VectorError> for ApiError {
    fn from(e: lexlip_proto::VectorError) -> Self {
        ApiError::unprocessable(e.to_string())
    }
}

impl From<lexlip_proto::DocumentError> for ApiError {
    fn from(e: lexlip_proto::DocumentError) -> Self {
        ApiError::unprocessable(e.to_string())
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
