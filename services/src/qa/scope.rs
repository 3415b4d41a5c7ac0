//! Which documents a question covers. A document of another tenant is
//! indistinguishable from one that does not exist (404); a document still being ingested is a 409.

use crate::api::error::ApiError;
use crate::db::documents::{Document, DocumentQuery, status};
use crate::qa::types::Scope;
use crate::state::AppState;

/// Most documents a scope without a document list may cover.
const MAX_SCOPE_DOCUMENTS: i64 = 10_000;

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
