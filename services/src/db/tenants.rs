//! Tenants and their API keys. Keys are stored as SHA-256 hashes (they are 256-bit random secrets, so a
//! plain hash is enough); the clear key is shown once, when it is created.

use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;

use super::{Db, new_id, now_ms};

/// The tenant used by local single-user mode.
pub const LOCAL_TENANT: &str = "local";

/// A tenant.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Tenant {
    /// Tenant id.
    pub id: String,
    /// Unique name.
    pub name: String,
    /// Creation time (Unix ms).
    pub created_at: i64,
}

/// An API key as listed (never its secret).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApiKeyInfo {
    /// Key id (for revoking).
    pub id: String,
    /// The tenant it belongs to; none for admin keys.
    pub tenant_id: Option<String>,
    /// A label.
    pub name: String,
    /// The first characters of the key, to recognise it.
    pub prefix: String,
    /// Whether it is an admin key.
    pub is_admin: bool,
    /// Creation time (Unix ms).
    pub created_at: i64,
    /// When it was revoked (Unix ms), if it was.
    pub revoked_at: Option<i64>,
}

/// Who a valid key belongs to.
#[derive(Debug, Clone)]
pub struct KeyOwner {
    /// Key id.
    pub key_id: String,
    /// Tenant of a tenant key.
    pub tenant_id: Option<String>,
    /// Admin key.
    pub is_admin: bool,
}

/// A new random API key: `dq_` then 43 URL-safe base64 characters (256 bits).
pub fn generate_key() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    format!(
        "dq_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The stored hash of a key.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn key_prefix(key: &str) -> String {
    key.chars().take(10).collect()
}

impl Db {
    /// Creates a tenant; `None` when the name is taken.
    pub async fn create_tenant(&self, name: &str) -> Result<Option<Tenant>, sqlx::Error> {
        self.insert_tenant(&new_id(), name).await
    }

    async fn insert_tenant(&self, id: &str, name: &str) -> Result<Option<Tenant>, sqlx::Error> {
        let created_at = now_ms();
        let inserted = sqlx::query(
            "INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(name)
        .bind(created_at)
        .execute(self.pool())
        .await?;
        Ok((inserted.rows_affected() == 1).then(|| Tenant {
            id: id.to_string(),
            name: name.to_string(),
            created_at,
        }))
    }

    /// Makes sure the local single-user tenant exists.
    pub async fn ensure_local_tenant(&self) -> Result<(), sqlx::Error> {
        self.insert_tenant(LOCAL_TENANT, LOCAL_TENANT)
            .await
            .map(|_| ())
    }

    /// Every tenant, oldest first.
    pub async fn list_tenants(&self) -> Result<Vec<Tenant>, sqlx::Error> {
        let rows = sqlx::query("SELECT id, name, created_at FROM tenants ORDER BY created_at, id")
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Tenant {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Whether a tenant exists.
    pub async fn tenant_exists(&self, id: &str) -> Result<bool, sqlx::Error> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM tenants WHERE id = $1")
            .bind(id)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get::<i64, _>("n")? > 0)
    }

    /// Stores a key (its hash) and returns its listing.
    pub async fn insert_key(
        &self,
        key: &str,
        tenant_id: Option<&str>,
        name: &str,
        is_admin: bool,
    ) -> Result<ApiKeyInfo, sqlx::Error> {
        let info = ApiKeyInfo {
            id: new_id(),
            tenant_id: tenant_id.map(str::to_string),
            name: name.to_string(),
            prefix: key_prefix(key),
            is_admin,
            created_at: now_ms(),
            revoked_at: None,
        };
        sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, name, prefix, key_hash, is_admin, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&info.id)
        .bind(tenant_id)
        .bind(name)
        .bind(&info.prefix)
        .bind(hash_key(key))
        .bind(i64::from(is_admin))
        .bind(info.created_at)
        .execute(self.pool())
        .await?;
        Ok(info)
    }

    /// Whether any admin key that is not revoked exists.
    pub async fn has_admin_key(&self) -> Result<bool, sqlx::Error> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM api_keys WHERE is_admin = 1 AND revoked_at IS NULL",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(row.try_get::<i64, _>("n")? > 0)
    }

    /// The owner of a key that is valid now (known and not revoked).
    pub async fn key_owner(&self, key: &str) -> Result<Option<KeyOwner>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT id, tenant_id, is_admin FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash_key(key))
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(KeyOwner {
                key_id: r.try_get("id")?,
                tenant_id: r.try_get("tenant_id")?,
                is_admin: r.try_get::<i64, _>("is_admin")? != 0,
            })
        })
        .transpose()
    }

    /// The keys of a tenant (or the admin keys, for `None`), newest first.
    pub async fn list_keys(&self, tenant_id: Option<&str>) -> Result<Vec<ApiKeyInfo>, sqlx::Error> {
        let rows = match tenant_id {
            Some(t) => {
                sqlx::query(
                    "SELECT id, tenant_id, name, prefix, is_admin, created_at, revoked_at \
                     FROM api_keys WHERE tenant_id = $1 ORDER BY created_at DESC, id",
                )
                .bind(t)
                .fetch_all(self.pool())
                .await?
            }
            None => {
                sqlx::query(
                    "SELECT id, tenant_id, name, prefix, is_admin, created_at, revoked_at \
                     FROM api_keys WHERE tenant_id IS NULL ORDER BY created_at DESC, id",
                )
                .fetch_all(self.pool())
                .await?
            }
        };
        rows.iter()
            .map(|r| {
                Ok(ApiKeyInfo {
                    id: r.try_get("id")?,
                    tenant_id: r.try_get("tenant_id")?,
                    name: r.try_get("name")?,
                    prefix: r.try_get("prefix")?,
                    is_admin: r.try_get::<i64, _>("is_admin")? != 0,
                    created_at: r.try_get("created_at")?,
                    revoked_at: r.try_get("revoked_at")?,
                })
            })
            .collect()
    }

    /// Revokes a key; false when no such key is active.
    pub async fn revoke_key(&self, key_id: &str) -> Result<bool, sqlx::Error> {
        let done =
            sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now_ms())
                .bind(key_id)
                .execute(self.pool())
                .await?;
        Ok(done.rows_affected() == 1)
    }
}
