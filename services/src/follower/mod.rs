//! The index follower: every `docqa serve` reads the database's index change log
//! ([`crate::db::index_changes`]) every `--index-poll-ms` and applies the changes it has not seen to its
//! own search indexes ([`apply`]), so a document made ready or deleted through any replica is searchable,
//! or gone, on every replica within about one poll interval. Its place in the log is kept under the data
//! directory ([`position`]): a replica that was stopped catches up when it starts again.
//!
//! With SQLite (one process) every change is this process's own and there is nothing to apply; the
//! follower only moves its position. A database it cannot reach is reported once, retried every
//! interval, and reported again when it answers.

mod apply;
mod position;

use std::sync::Arc;
use std::time::Duration;

pub use apply::Applied;
pub use position::Position;

use crate::db::Db;
use crate::indexes::{IndexOpenError, TenantIndexes};
use crate::state::AppState;

/// Changes read from the log at a time.
const BATCH: i64 = 256;

/// Follows the log until shutdown, from `position`.
pub async fn run(state: Arc<AppState>, mut position: Position) {
    let interval = Duration::from_millis(state.config.index_poll_ms.max(1));
    let mut failing = false;
    loop {
        match catch_up(&state.db, &state.indexes, &state.instance_id, &mut position).await {
            Ok(synced) => {
                if failing {
                    failing = false;
                    tracing::info!(
                        position = position.seq(),
                        "the index change log is readable again"
                    );
                }
                if synced > 0 {
                    tracing::info!(
                        synced,
                        position = position.seq(),
                        "applied index changes of other replicas"
                    );
                }
            }
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, position = position.seq(), "cannot follow the index change log; retrying");
            }
            Err(error) => tracing::debug!(%error, "the index change log is still unreadable"),
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = state.shutdown.cancelled() => return,
        }
    }
}

/// Applies every change after `position` to `indexes` and moves `position` past each; returns how many
/// changes were synced (skipped ones not counted). On an error, `position` stays after the last change
/// applied, so the failed one is tried again next time.
pub async fn catch_up(
    db: &Db,
    indexes: &TenantIndexes,
    own_origin: &str,
    position: &mut Position,
) -> Result<usize, IndexOpenError> {
    let mut synced = 0;
    loop {
        let changes = db.index_changes_after(position.seq(), BATCH).await?;
        let mut done = position.seq();
        let mut result = Ok(());
        for change in &changes {
            match apply::apply(db, indexes, own_origin, change).await {
                Ok(outcome) => {
                    synced += usize::from(outcome == Applied::Synced);
                    done = change.seq;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if done != position.seq()
            && let Err(error) = position.advance(done)
        {
            tracing::warn!(%error, "cannot record the index log position");
        }
        result?;
        if (changes.len() as i64) < BATCH {
            return Ok(synced);
        }
    }
}

#[cfg(test)]
mod tests;
