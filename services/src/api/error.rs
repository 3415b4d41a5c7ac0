//! The one error body of the HTTP API: `{"error_type": "...", "message": "..."}` with a status code chosen
//! by the kind of failure. `error_type` values are stable; messages are for people.

use std::fmt;

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderValue, RETRY_AFTER};
use actix_web::{HttpResponse, ResponseError};
use docqa_engine::EngineError;
use serde::Serialize;

/// An error answered to an API caller.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable kind (`not_found`, `unauthorized`, …).
    pub error_type: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// Seconds after which a retry may succeed (429 and 503).
    pub retry_after_secs: Option<u64>,
}

/// The JSON body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable kind of the error.
    pub error_type: String,
    /// Human-readable explanation.
    pub message: String,
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    fn new(status: StatusCode, error_type: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            error_type,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// 401: no key, or a wrong or revoked key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403 for admin-only endpoints called with a tenant key (never for tenant data: that is 404).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404: unknown object, or one of another tenant.
    pub fn not_found(what: &str, id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no {what} with id {id}"),
        )
    }

    /// 405: the path exists, but not with this method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{path} does not take {method}"),
        )
    }

    /// 409: the object is in a state that forbids the operation.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 413: the upload is larger than allowed.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// 415: a file type docqa cannot read.
    pub fn unsupported_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            message,
        )
    }

    /// 422: the request is well-formed but its values are not acceptable.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_error",
            message,
        )
    }

    /// 429: too many requests; retry after the given seconds.
    pub fn rate_limited(message: impl Into<String>, retry_after_secs: u64) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message);
        e.retry_after_secs = Some(retry_after_secs.max(1));
        e
    }

    /// 429: the engine's queue is full; retry after the given seconds.
    pub fn overloaded(message: impl Into<String>, retry_after_secs: u64) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "overloaded", message);
        e.retry_after_secs = Some(retry_after_secs.max(1));
        e
    }

    /// 503: a dependency (engine, database) cannot serve now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message);
        e.retry_after_secs = Some(5);
        e
    }

    /// 500: a bug or an unexpected failure; the details go to the log.
    pub fn internal(message: impl fmt::Display) -> Self {
        tracing::error!(%message, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("internal error: {message}"),
        )
    }

    /// The body this error is answered with.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error_type: self.error_type.to_string(),
            message: self.message.clone(),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.error_type, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status);
        if let Some(secs) = self.retry_after_secs {
            res.insert_header((RETRY_AFTER, HeaderValue::from(secs)));
        }
        res.json(self.body())
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        let connection_lost = match &e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => true,
            // SQLSTATE class 08 (connection exception), 57P (operator intervention: shutdown,
            // terminated connection), 55000 (e.g. the database does not allow connections now).
            sqlx::Error::Database(db) => db
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "55000"),
            _ => false,
        };
        if connection_lost {
            ApiError::unavailable(format!("database unavailable: {e}"))
        } else {
            ApiError::internal(format!("database: {e}"))
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Overloaded { .. } => ApiError::overloaded(e.to_string(), 2),
            EngineError::RequestTooLarge { .. } | EngineError::ContextTooLong { .. } => {
                ApiError::validation(e.to_string())
            }
            EngineError::InvalidSampling(_) => ApiError::validation(e.to_string()),
            other => {
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "engine_error",
                    format!("the inference engine failed: {other}"),
                );
                err.retry_after_secs = Some(5);
                err
            }
        }
    }
}

impl From<docqa_indexer::IndexerError> for ApiError {
    fn from(e: docqa_indexer::IndexerError) -> Self {
        ApiError::internal(format!("search index: {e}"))
    }
}

/// Turns actix's own JSON, path and query extraction failures into the API's error body (422).
pub fn extraction_error(message: String) -> actix_web::Error {
    ApiError::validation(message).into()
}

/// A JSON body actix could not read: 413 when it is over the size limit, 422 otherwise.
pub fn json_error(err: &actix_web::error::JsonPayloadError) -> actix_web::Error {
    use actix_web::error::JsonPayloadError as E;
    match err {
        E::Overflow { limit } | E::OverflowKnownLength { limit, .. } => ApiError::too_large(
            format!("the JSON body is larger than the limit of {limit} bytes"),
        )
        .into(),
        other => extraction_error(format!("invalid JSON body: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use actix_web::error::JsonPayloadError;
    use actix_web::http::StatusCode;

    use super::{ApiError, json_error};

    /// The README's paragraph on errors.
    fn readme_errors() -> &'static str {
        let readme = include_str!("../../../README.md");
        let start = readme
            .find("Errors always have the body")
            .expect("the errors paragraph");
        let end = start + readme[start..].find("\n\n").expect("its end");
        &readme[start..end]
    }

    #[test]
    fn every_error_type_the_api_answers_is_in_the_readme_with_its_status() {
        let errors = [
            ApiError::unauthorized("m"),
            ApiError::forbidden("m"),
            ApiError::not_found("document", "x"),
            ApiError::conflict("m"),
            ApiError::too_large("m"),
            ApiError::unsupported_type("m"),
            ApiError::validation("m"),
            ApiError::rate_limited("m", 1),
            ApiError::overloaded("m", 1),
            ApiError::internal("m"),
            ApiError::unavailable("m"),
            docqa_engine::EngineError::Internal("m".into()).into(),
        ];
        let text = readme_errors().replace('\n', " ");
        for e in errors {
            let status = e.status.as_u16().to_string();
            assert!(
                text.contains(&format!("`{}`", e.error_type)),
                "{} missing",
                e.error_type
            );
            assert!(text.contains(&status), "{status} missing");
        }
    }

    #[test]
    fn a_json_body_over_the_limit_is_413_and_a_malformed_one_422() {
        let status = |e: JsonPayloadError| json_error(&e).as_response_error().status_code();
        let over = JsonPayloadError::OverflowKnownLength {
            length: 2 << 20,
            limit: 1 << 20,
        };
        assert_eq!(status(over), StatusCode::PAYLOAD_TOO_LARGE);
        let streamed_over = JsonPayloadError::Overflow { limit: 1 << 20 };
        assert_eq!(status(streamed_over), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            status(JsonPayloadError::ContentType),
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }
}
