//! Building a directory out of sight and swapping it into place atomically.
//!
//! A model directory `NAME` is built in a hidden sibling `.NAME.partial-XXXX`, fsynced, then renamed onto
//! `NAME`. A killed build leaves only the hidden sibling, which the next build removes. Builders of the same
//! directory serialise on an exclusive lock on `.NAME.lock`, so two processes fetching at once end with one
//! valid directory: the second finds it already valid once it gets the lock.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::error::{EngineError, Result};

/// An exclusive lock on a model directory name, released on drop (and by the OS if the process dies).
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Blocks until this process holds the lock for `name` inside `parent`.
    pub fn acquire(parent: &Path, name: &str) -> Result<Self> {
        let path = parent.join(format!(".{name}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| EngineError::io(&path, e))?;
        file.lock().map_err(|e| EngineError::io(&path, e))?;
        Ok(Self { _file: file })
    }
}

/// Creates a fresh hidden staging directory for `name` inside `parent` (deleted on drop).
pub fn staging_dir(parent: &Path, name: &str) -> Result<TempDir> {
    tempfile::Builder::new()
        .prefix(&format!(".{name}.partial-"))
        .tempdir_in(parent)
        .map_err(|e| EngineError::io(parent, e))
}

/// Removes staging and retired directories left by killed builds. Call with the [`DirLock`] held.
pub fn remove_leftovers(parent: &Path, name: &str) -> Result<()> {
    let partial = format!(".{name}.partial-");
    let retired = format!(".{name}.old-");
    for entry in std::fs::read_dir(parent).map_err(|e| EngineError::io(parent, e))? {
        let entry = entry.map_err(|e| EngineError::io(parent, e))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if file_name.starts_with(&partial) || file_name.starts_with(&retired) {
            let path = entry.path();
            std::fs::remove_dir_all(&path).map_err(|e| EngineError::io(&path, e))?;
        }
    }
    Ok(())
}

/// fsyncs every file under `dir`, then `dir` itself.
pub fn sync_tree(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| EngineError::io(dir, e))? {
        let path = entry.map_err(|e| EngineError::io(dir, e))?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            File::open(&path).and_then(|f| f.sync_all()).map_err(|e| EngineError::io(&path, e))?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|f| f.sync_all()).map_err(|e| EngineError::io(dir, e))
}

/// Moves the finished `staging` directory to `target`, replacing any previous directory there.
/// Call with the [`DirLock`] held.
pub fn install(staging: TempDir, target: &Path) -> Result<()> {
    let staged = staging.keep();
    let parent = target.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let mut retired = None;
    if target.exists() {
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let old = parent.join(format!(".{name}.old-{}", std::process::id()));
        std::fs::rename(target, &old).map_err(|e| EngineError::io(target, e))?;
        retired = Some(old);
    }
    std::fs::rename(&staged, target).map_err(|e| EngineError::io(target, e))?;
    sync_dir(&parent)?;
    if let Some(old) = retired {
        std::fs::remove_dir_all(&old).map_err(|e| EngineError::io(&old, e))?;
    }
    Ok(())
}
