//! The `--data-dir` and `--database-url` flags of the subcommands that open `docqa serve`'s database
//! (`keys`, `reindex`), with the same defaults and environment variables as the server.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::db::Db;

/// Where the server's database is.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// The server's data directory [default: $XDG_DATA_HOME/docqa or ~/.local/share/docqa].
    #[arg(long, env = "DOCQA_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Database URL [default: SQLite file `docqa.db` in the data directory].
    #[arg(long, env = "DOCQA_DATABASE_URL")]
    pub database_url: Option<String>,
}

impl DatabaseArgs {
    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(crate::config::default_data_dir)
    }

    /// Opens the database (applying pending migrations, as the server does).
    pub async fn open(&self) -> anyhow::Result<Db> {
        match &self.database_url {
            Some(url) => Db::connect(url)
                .await
                .context("connecting to the database given by --database-url"),
            None => {
                let path = self.data_dir().join("docqa.db");
                Db::open_sqlite(&path)
                    .await
                    .with_context(|| format!("opening {}", path.display()))
            }
        }
    }
}
