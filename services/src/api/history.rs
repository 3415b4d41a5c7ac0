//! The questions asked and their answers, newest first, for the page's history and for clients that
//! show past answers: `GET /v1/answers` (all of them, or those about any of the given documents) and
//! `GET /v1/documents/{id}/answers` (those about one document).

use actix_web::{HttpRequest, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ask::AnswerView;
use super::auth::TenantCaller;
use super::documents::find;
use super::error::{ApiError, ApiResult, ErrorBody};
use crate::db::answers::AnswerRow;
use crate::state::AppState;

/// Most documents one history query may name.
const MAX_DOCUMENTS: usize = 100;

/// Query of a document's history.
#[derive(Debug, Deserialize, IntoParams)]
pub struct HistoryParams {
    /// Most answers (1..=200, default 50).
    pub limit: Option<i64>,
}

/// Query of the history (`document` may be repeated).
#[derive(Debug, Default, IntoParams)]
pub struct AnswersParams {
    /// Only answers asked about any of these documents (repeat the parameter); all when absent.
    pub document: Vec<String>,
    /// Most answers (1..=200, default 50).
    pub limit: Option<i64>,
}

/// Answers, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct History {
    /// Newest first.
    pub answers: Vec<AnswerView>,
}

/// The questions asked about a document (alone or with others), newest first.
#[utoipa::path(get, path = "/v1/documents/{id}/answers", tag = "questions", params(HistoryParams),
    responses((status = 200, body = History), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn document_answers(
    state: web::Data<AppState>,
    caller: TenantCaller,
    id: web::Path<String>,
    params: web::Query<HistoryParams>,
) -> ApiResult<web::Json<History>> {
    let limit = checked_limit(params.limit)?;
    let doc = find(&state, &caller, &id).await?;
    let rows = state
        .db
        .answers_about(&caller.tenant_id, &[doc.id], limit)
        .await?;
    Ok(web::Json(history(&state, rows).await?))
}

/// The questions asked, newest first: all of them, or those asked about any of the `document`s.
#[utoipa::path(get, path = "/v1/answers", tag = "questions", params(AnswersParams),
    responses((status = 200, body = History), (status = 422, body = ErrorBody)))]
pub async fn answers(
    state: web::Data<AppState>,
    caller: TenantCaller,
    req: HttpRequest,
) -> ApiResult<web::Json<History>> {
    let params = answers_params(req.query_string())?;
    let limit = checked_limit(params.limit)?;
    let rows = state
        .db
        .answers_about(&caller.tenant_id, &params.document, limit)
        .await?;
    Ok(web::Json(history(&state, rows).await?))
}

/// Reads `document=…&document=…&limit=…` (serde's query parsing keeps only one of repeated keys).
fn answers_params(query: &str) -> ApiResult<AnswersParams> {
    let mut params = AnswersParams::default();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "document" => params.document.push(value.into_owned()),
            "limit" => {
                let limit = value
                    .parse()
                    .map_err(|_| ApiError::validation("`limit` must be a whole number"))?;
                params.limit = Some(limit);
            }
            other => {
                return Err(ApiError::validation(format!(
                    "unknown query parameter `{other}` (expected `document` or `limit`)"
                )));
            }
        }
    }
    if params.document.len() > MAX_DOCUMENTS {
        return Err(ApiError::validation(format!(
            "at most {MAX_DOCUMENTS} `document` parameters"
        )));
    }
    Ok(params)
}

fn checked_limit(limit: Option<i64>) -> ApiResult<i64> {
    let limit = limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::validation("`limit` must be between 1 and 200"));
    }
    Ok(limit)
}

/// The views of stored answers, each with the documents it was asked about.
async fn history(state: &AppState, rows: Vec<AnswerRow>) -> ApiResult<History> {
    let ids: Vec<String> = rows.iter().map(|a| a.id.clone()).collect();
    let mut documents = state.db.documents_of_answers(&ids).await?;
    let answers = rows
        .into_iter()
        .map(|a| {
            let document_ids = documents.remove(&a.id).unwrap_or_default();
            AnswerView::new(a, document_ids)
        })
        .collect();
    Ok(History { answers })
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/answers", web::get().to(answers)).route(
        "/v1/documents/{id}/answers",
        web::get().to(document_answers),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_document_parameter_keeps_every_value() {
        let p = answers_params("document=a&document=b%20c&limit=7").unwrap();
        assert_eq!(p.document, ["a", "b c"]);
        assert_eq!(p.limit, Some(7));
    }

    #[test]
    fn an_unknown_parameter_or_a_bad_limit_is_refused() {
        assert!(answers_params("doc=a").is_err());
        assert!(answers_params("limit=ten").is_err());
        assert!(checked_limit(Some(0)).is_err());
        assert_eq!(checked_limit(None).unwrap(), 50);
    }
}
