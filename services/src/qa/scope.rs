//! Which documents a question covers, and which path answers it. A document of another tenant is
//! indistinguishable from one that does not exist (404); a document still being ingested is a 409.

use crate::api::error::ApiError;
use crate::db::documents::{Document, DocumentQuery, status};
use crate::qa::types::{Route, RouteChoice, Scope};
use crate::state::AppState;

/// Prompt tokens the long path needs beyond the document itself (instructions, title, question,
/// chat-template markers); checked exactly once the prompt is built.
pub const LONG_PATH_OVERHEAD: usize = 320;

/// Most documents a scope without a document list may cover.
const MAX_SCOPE_DOCUMENTS: i64 = 10_000;

/// The chosen path and the reasons given to the caller.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The path.
    pub route: Route,
    /// Why, in words.
    pub reasons: Vec<String>,
}

/// The ready documents a scope covers (at least one).
pub async fn resolve(
    state: &AppState,
    tenant_id: &str,
    scope: &Scope,
) -> Result<Vec<Document>, ApiError> {
    let mut docs = Vec::new();
    if let Some(ids) = &scope.document_ids {
        for id in ids {
            let doc = state
                .db
                .document(tenant_id, id)
                .await?
                .ok_or_else(|| ApiError::not_found("document", id))?;
            if doc.status != status::READY {
                return Err(ApiError::conflict(format!(
                    "document {id} is {}; it can be asked about once its ingestion job has succeeded",
                    doc.status
                )));
            }
            if scope
                .collection
                .as_ref()
                .is_none_or(|c| doc.collection.as_ref() == Some(c))
            {
                docs.push(doc);
            }
        }
    } else {
        if let Some(name) = &scope.collection
            && state
                .db
                .collection_id(tenant_id, name, false)
                .await?
                .is_none()
        {
            return Err(ApiError::not_found("collection", name));
        }
        let query = DocumentQuery {
            collection: scope.collection.clone(),
            status: Some(status::READY.to_string()),
            search: None,
            limit: MAX_SCOPE_DOCUMENTS,
            offset: 0,
        };
        docs = state.db.list_documents(tenant_id, &query).await?.0;
    }
    if docs.is_empty() {
        return Err(ApiError::validation(
            "no ready document in the scope: upload documents and wait for their ingestion jobs to succeed",
        ));
    }
    Ok(docs)
}

/// Picks the path for a question over `docs` with an answer budget of `max_tokens`.
pub fn choose_route(
    state: &AppState,
    docs: &[Document],
    choice: RouteChoice,
    max_tokens: usize,
) -> Result<Plan, ApiError> {
    let window = state.max_context;
    let doc_tokens = docs.first().and_then(|d| d.token_count).unwrap_or(0) as usize;
    let fits = docs.len() == 1 && doc_tokens + LONG_PATH_OVERHEAD + max_tokens <= window;
    match choice {
        RouteChoice::Rag => Ok(Plan {
            route: Route::Rag,
            reasons: vec!["the RAG path was asked for".into()],
        }),
        RouteChoice::Long if docs.len() != 1 => Err(ApiError::validation(format!(
            "the long-context path reads one document, and the scope covers {}",
            docs.len()
        ))),
        RouteChoice::Long if !fits => Err(ApiError::validation(format!(
            "the document has {doc_tokens} tokens; with the prompt and {max_tokens} answer tokens it \
             does not fit the model's {window}-token window: use route=rag"
        ))),
        RouteChoice::Long => Ok(Plan {
            route: Route::Long,
            reasons: vec!["the long-context path was asked for".into()],
        }),
        RouteChoice::Auto if fits => Ok(Plan {
            route: Route::Long,
            reasons: vec![
                format!(
                    "the scope is one document of {doc_tokens} tokens, which fits the {window}-token \
                     window with the answer"
                ),
                "reading the whole document misses nothing, and its KV cache is kept for the next \
                 question"
                    .into(),
            ],
        }),
        RouteChoice::Auto => Ok(Plan {
            route: Route::Rag,
            reasons: vec![if docs.len() == 1 {
                format!(
                    "the document has {doc_tokens} tokens, more than the {window}-token window holds \
                     with the answer"
                )
            } else {
                format!(
                    "the scope covers {} documents; retrieval picks the best passages of all",
                    docs.len()
                )
            }],
        }),
    }
}
