//! The database: SQLite (one file, WAL) by default, PostgreSQL by URL, both through sqlx's `Any` driver
//! so one set of queries serves both. Queries use `$n` placeholders, which both dialects accept, and only
//! types both share (BIGINT, DOUBLE PRECISION, TEXT, bytes). Migrations are compiled in, one folder per
//! dialect.
//!
//! One file per table family: [`tenants`] (tenants and API keys), [`documents`] (and [`token_counts`]
//! for the tokenizer that counted each one), [`chunks`], [`jobs`]
//! (and [`job_recovery`] for jobs a crashed process left running), [`answers`], and [`index_changes`]
//! (the log every replica follows to keep its search indexes in step).

pub mod answers;
pub mod chunks;
pub mod documents;
pub mod index_changes;
mod job_recovery;
pub mod jobs;
pub mod tenants;
#[cfg(test)]
pub mod test_support;
pub mod token_counts;

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

/// Which SQL dialect the pool speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The embedded default.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// The connection pool and its dialect.
#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    dialect: Dialect,
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

impl Db {
    /// Opens the SQLite file at `path` (created if missing) in WAL mode.
    pub async fn open_sqlite(path: &Path) -> Result<Self, sqlx::Error> {
        let url = format!("sqlite://{}?mode=rwc", path.display());
        Self::connect(&url).await
    }

    /// Connects to `url` (`sqlite://…` or `postgres://…`) and applies pending migrations.
    pub async fn connect(url: &str) -> Result<Self, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let dialect = if url.starts_with("postgres") {
            Dialect::Postgres
        } else if url.starts_with("sqlite") {
            Dialect::Sqlite
        } else {
            return Err(sqlx::Error::Configuration(
                format!("unsupported database URL {url:?}: use sqlite://PATH or postgres://…")
                    .into(),
            ));
        };
        let options = AnyConnectOptions::from_str(url)?;
        let pool = AnyPoolOptions::new()
            .max_connections(if dialect == Dialect::Sqlite { 4 } else { 16 })
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        conn.execute("PRAGMA busy_timeout = 30000").await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        if dialect == Dialect::Sqlite {
            pool.execute("PRAGMA journal_mode = WAL").await?;
        }
        let migrator = match dialect {
            Dialect::Sqlite => &SQLITE_MIGRATIONS,
            Dialect::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator.run(&pool).await?;
        Ok(Db { pool, dialect })
    }

    /// The pool, for queries.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    /// Closes every connection (at shutdown).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Now, as Unix milliseconds (the unit of every time column).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A Unix-millisecond time as RFC 3339 (UTC), for API responses.
pub fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// A fresh random id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}
