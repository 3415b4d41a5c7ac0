//! Tenant and key management, for admin keys: create and list tenants, create, list and revoke keys.
//! A new key's secret is in the creation response only.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::AdminCaller;
use super::error::{ApiError, ApiResult, ErrorBody};
use crate::db::tenants::{ApiKeyInfo, Tenant, generate_key};
use crate::state::AppState;

/// A name for a new tenant or key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NameInput {
    /// 1..=100 characters.
    pub name: String,
}

/// A key just created: the only time its secret is shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewKey {
    /// The listing.
    #[serde(flatten)]
    pub info: ApiKeyInfo,
    /// The secret: send it as `Authorization: Bearer <key>`.
    pub key: String,
}

/// A tenant just created, with its first key.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewTenant {
    /// The tenant.
    pub tenant: Tenant,
    /// Its first API key.
    pub api_key: NewKey,
}

fn valid_name(name: &str) -> ApiResult<&str> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(ApiError::validation("`name` must have 1 to 100 characters"));
    }
    Ok(name)
}

/// Create a tenant (and its first key).
#[utoipa::path(post, path = "/v1/tenants", tag = "admin", request_body = NameInput,
    responses((status = 201, body = NewTenant), (status = 409, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn create_tenant(
    state: web::Data<AppState>,
    admin: AdminCaller,
    body: web::Json<NameInput>,
) -> ApiResult<HttpResponse> {
    let name = valid_name(&body.name)?;
    let tenant = state
        .db
        .create_tenant(name)
        .await?
        .ok_or_else(|| ApiError::conflict(format!("a tenant named {name:?} exists")))?;
    let key = generate_key();
    let info = state
        .db
        .insert_key(&key, Some(&tenant.id), "default", false)
        .await?;
    tracing::info!(tenant = %tenant.id, admin_key = %admin.key_id, "tenant created");
    Ok(HttpResponse::Created().json(NewTenant {
        tenant,
        api_key: NewKey { info, key },
    }))
}

/// List tenants.
#[utoipa::path(get, path = "/v1/tenants", tag = "admin", responses((status = 200, body = Vec<Tenant>)))]
pub async fn list_tenants(
    state: web::Data<AppState>,
    _admin: AdminCaller,
) -> ApiResult<web::Json<Vec<Tenant>>> {
    Ok(web::Json(state.db.list_tenants().await?))
}

/// Create another key for a tenant.
#[utoipa::path(post, path = "/v1/tenants/{id}/keys", tag = "admin", request_body = NameInput,
    responses((status = 201, body = NewKey), (status = 404, body = ErrorBody)))]
pub async fn create_key(
    state: web::Data<AppState>,
    _admin: AdminCaller,
    tenant_id: web::Path<String>,
    body: web::Json<NameInput>,
) -> ApiResult<HttpResponse> {
    let name = valid_name(&body.name)?;
    if !state.db.tenant_exists(&tenant_id).await? {
        return Err(ApiError::not_found("tenant", &tenant_id));
    }
    let key = generate_key();
    let info = state
        .db
        .insert_key(&key, Some(&tenant_id), name, false)
        .await?;
    Ok(HttpResponse::Created().json(NewKey { info, key }))
}

/// List a tenant's keys (never their secrets).
#[utoipa::path(get, path = "/v1/tenants/{id}/keys", tag = "admin",
    responses((status = 200, body = Vec<ApiKeyInfo>), (status = 404, body = ErrorBody)))]
pub async fn list_keys(
    state: web::Data<AppState>,
    _admin: AdminCaller,
    tenant_id: web::Path<String>,
) -> ApiResult<web::Json<Vec<ApiKeyInfo>>> {
    if !state.db.tenant_exists(&tenant_id).await? {
        return Err(ApiError::not_found("tenant", &tenant_id));
    }
    Ok(web::Json(state.db.list_keys(Some(&tenant_id)).await?))
}

/// Revoke a key; it stops working at once.
#[utoipa::path(delete, path = "/v1/keys/{id}", tag = "admin",
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn revoke_key(
    state: web::Data<AppState>,
    admin: AdminCaller,
    key_id: web::Path<String>,
) -> ApiResult<HttpResponse> {
    if state.db.revoke_key(&key_id).await? {
        tracing::info!(key = %key_id, admin_key = %admin.key_id, "key revoked");
        Ok(HttpResponse::NoContent().finish())
    } else {
        Err(ApiError::not_found("active key", &key_id))
    }
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/tenants", web::post().to(create_tenant))
        .route("/v1/tenants", web::get().to(list_tenants))
        .route("/v1/tenants/{id}/keys", web::post().to(create_key))
        .route("/v1/tenants/{id}/keys", web::get().to(list_keys))
        .route("/v1/keys/{id}", web::delete().to(revoke_key));
}
