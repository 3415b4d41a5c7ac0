//! Who is calling: `Authorization: Bearer <key>` looked up (hashed) in the database on every request, so
//! a revoked key stops working at once. Without a header, local single-user mode (when on) acts as the
//! `local` tenant. Every authenticated call also passes the key's rate limit.
//!
//! Handlers take [`TenantCaller`] (data endpoints: a tenant key or local mode) or [`AdminCaller`]
//! (tenant and key management). The caller of an API route is identified by [`identify_first`], a
//! middleware that runs before any extractor reads the body, so a caller who may not call gets 401 or
//! 403 whatever the body holds (a handler's extractors run concurrently: a lookup still under way would
//! otherwise lose to a malformed body's 422).

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::AUTHORIZATION;
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::error::ApiError;
use crate::db::tenants::LOCAL_TENANT;
use crate::state::AppState;

/// Requests per minute per key.
pub struct RateLimits {
    limiter: Option<DefaultKeyedRateLimiter<String>>,
}

impl RateLimits {
    /// `per_minute` requests a minute per key, with bursts of the same size; 0 turns limiting off.
    pub fn new(per_minute: u32) -> Self {
        RateLimits {
            limiter: NonZeroU32::new(per_minute)
                .map(|n| DefaultKeyedRateLimiter::keyed(Quota::per_minute(n))),
        }
    }

    /// Admits one request of `key_id`, or says how long to wait.
    pub fn check(&self, key_id: &str) -> Result<(), ApiError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        limiter.check_key(&key_id.to_string()).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            ApiError::rate_limited(
                "rate limit of this API key exceeded",
                wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            )
        })
    }
}

/// A caller acting for one tenant.
#[derive(Debug, Clone)]
pub struct TenantCaller {
    /// The tenant whose data the call may touch.
    pub tenant_id: String,
    /// The key used (`local` in local mode).
    pub key_id: String,
}

/// A caller holding an admin key.
#[derive(Debug, Clone)]
pub struct AdminCaller {
    /// The admin key used.
    pub key_id: String,
}

#[derive(Clone)]
enum Identity {
    Local,
    Key {
        key_id: String,
        tenant_id: Option<String>,
        is_admin: bool,
    },
}

fn bearer(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let Some(value) = req.headers().get(AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("the Authorization header is not valid text"))?;
    let key = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(|| ApiError::unauthorized("use `Authorization: Bearer <API key>`"))?;
    Ok(Some(key.trim().to_string()))
}

async fn identify(req: HttpRequest) -> Result<Identity, ApiError> {
    let state = req
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ApiError::internal("application state missing"))?
        .clone();
    let Some(key) = bearer(&req)? else {
        if state.local_mode {
            return Ok(Identity::Local);
        }
        return Err(ApiError::unauthorized(
            "an API key is required: send `Authorization: Bearer <key>`",
        ));
    };
    let owner = state
        .db
        .key_owner(&key)
        .await?
        .ok_or_else(|| ApiError::unauthorized("the API key is not valid or was revoked"))?;
    state.rate_limits.check(&owner.key_id)?;
    Ok(Identity::Key {
        key_id: owner.key_id,
        tenant_id: owner.tenant_id,
        is_admin: owner.is_admin,
    })
}

/// The outcome of identifying a request's caller, kept in the request's extensions.
#[derive(Clone)]
struct Identified(Result<Identity, ApiError>);

/// Middleware: identifies the caller of every `/v1/` request (key lookup and rate limit, once) before
/// the handler's extractors run, and keeps the outcome for [`TenantCaller`] and [`AdminCaller`]. Routes
/// that need no caller ignore it.
pub async fn identify_first(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if req.path().starts_with("/v1/") {
        let identified = identify(req.request().clone()).await;
        req.extensions_mut().insert(Identified(identified));
    }
    next.call(req).await
}

type Extracted<T> = Pin<Box<dyn Future<Output = Result<T, ApiError>>>>;

/// Identifies the caller (as [`identify_first`] found it, else now), then lets `accept` decide whether
/// that identity may call.
fn extract<T: 'static>(
    req: &HttpRequest,
    accept: fn(Identity) -> Result<T, ApiError>,
) -> Extracted<T> {
    if let Some(Identified(identified)) = req.extensions().get::<Identified>().cloned() {
        return Box::pin(std::future::ready(identified.and_then(accept)));
    }
    let req = req.clone();
    Box::pin(async move { accept(identify(req).await?) })
}

fn tenant_caller(identity: Identity) -> Result<TenantCaller, ApiError> {
    match identity {
        Identity::Local => Ok(TenantCaller {
            tenant_id: LOCAL_TENANT.to_string(),
            key_id: "local".to_string(),
        }),
        Identity::Key {
            key_id,
            tenant_id: Some(tenant_id),
            ..
        } => Ok(TenantCaller { tenant_id, key_id }),
        Identity::Key { .. } => Err(ApiError::forbidden(
            "admin keys manage tenants and keys; use a tenant key for data endpoints",
        )),
    }
}

fn admin_caller(identity: Identity) -> Result<AdminCaller, ApiError> {
    match identity {
        Identity::Key {
            key_id,
            is_admin: true,
            ..
        } => Ok(AdminCaller { key_id }),
        Identity::Local => Err(ApiError::unauthorized(
            "an admin API key is required: send `Authorization: Bearer <admin key>`",
        )),
        Identity::Key { .. } => Err(ApiError::forbidden("this endpoint needs an admin key")),
    }
}

impl FromRequest for TenantCaller {
    type Error = ApiError;
    type Future = Extracted<Self>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        extract(req, tenant_caller)
    }
}

impl FromRequest for AdminCaller {
    type Error = ApiError;
    type Future = Extracted<Self>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        extract(req, admin_caller)
    }
}
