//! Where a replica's indexes stand in the index change log: the `seq` of the last change applied, in
//! `<data>/indexes/changes-applied`, written atomically after each batch. A data directory without one
//! (a new replica, or indexes removed to be rebuilt) starts at the log's end: its indexes are rebuilt from
//! the database when first opened, and the changes after that point are applied on top (applying a change
//! twice does no harm).

use std::path::{Path, PathBuf};

use crate::db::Db;

/// The file's name under the indexes directory.
const FILE: &str = "changes-applied";

/// The last change applied, and where it is kept.
#[derive(Debug)]
pub struct Position {
    path: PathBuf,
    seq: i64,
}

impl Position {
    /// The position kept under `indexes_dir`; without a file, the log's end (recorded at once). A file
    /// that cannot be read as a number is reported and replaced by 0: every change is applied again.
    pub async fn load(indexes_dir: &Path, db: &Db) -> Result<Position, sqlx::Error> {
        let path = indexes_dir.join(FILE);
        let seq = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<i64>().unwrap_or_else(|_| {
                tracing::warn!(path = %path.display(), "unreadable index log position; replaying the whole log");
                0
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => db.last_index_change().await?,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the index log position; replaying the whole log");
                0
            }
        };
        let mut position = Position { path, seq };
        if let Err(error) = position.advance(seq) {
            tracing::warn!(path = %position.path.display(), %error, "cannot record the index log position");
        }
        Ok(position)
    }

    /// The `seq` of the last change applied.
    pub fn seq(&self) -> i64 {
        self.seq
    }

    /// Records that every change up to `seq` is applied.
    pub fn advance(&mut self, seq: i64) -> std::io::Result<()> {
        self.seq = seq;
        let temp = self.path.with_extension("tmp");
        std::fs::write(&temp, format!("{seq}\n"))?;
        std::fs::rename(&temp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn database(dir: &Path) -> Db {
        Db::open_sqlite(&dir.join("docqa.db")).await.unwrap()
    }

    #[tokio::test]
    async fn a_recorded_position_is_read_back_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let db = database(dir.path()).await;
        let mut p = Position::load(dir.path(), &db).await.unwrap();
        assert_eq!(p.seq(), 0);
        p.advance(42).unwrap();
        let again = Position::load(dir.path(), &db).await.unwrap();
        assert_eq!(again.seq(), 42);
    }

    #[tokio::test]
    async fn a_garbled_position_file_replays_the_whole_log() {
        let dir = tempfile::tempdir().unwrap();
        let db = database(dir.path()).await;
        std::fs::write(dir.path().join(FILE), "not a number").unwrap();
        let p = Position::load(dir.path(), &db).await.unwrap();
        assert_eq!(p.seq(), 0);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
            "0\n"
        );
    }
}
