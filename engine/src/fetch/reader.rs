//! The shipped reader: docqa's LoRA adapter for SmolLM2-135M-Instruct, compiled into the binary from
//! `training/reader/` and installed beside the base model as `MODELS_DIR/docqa-reader/`.
//!
//! The embedded files are checked against the embedded `SHA256SUMS` before anything is written. An
//! installed directory whose `SHA256SUMS` equals the embedded one and whose files match it is left
//! alone; otherwise (absent, damaged, or a binary shipping another reader) the files are written to a
//! hidden staging directory, fsynced and swapped in ([`super::atomic`]), under the directory's lock.
//! Nothing here depends on the adapter's rank or size: it installs whatever files `SHA256SUMS` lists.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::atomic;
use crate::adapter::{SUMS_FILE, parse_sums};
use crate::error::{EngineError, Result};

/// An adapter directory compiled into the binary.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedAdapter {
    /// Directory name under the models directory.
    pub dir_name: &'static str,
    /// The files, by name (without `SHA256SUMS`).
    pub files: &'static [(&'static str, &'static [u8])],
    /// Their `sha256sum` listing.
    pub sha256sums: &'static str,
}

/// docqa's reader, from `training/reader/`.
pub const READER: EmbeddedAdapter = EmbeddedAdapter {
    dir_name: "docqa-reader",
    files: &[
        (
            "adapter_config.json",
            include_bytes!("../../../training/reader/adapter_config.json"),
        ),
        (
            "adapter_model.safetensors",
            include_bytes!("../../../training/reader/adapter_model.safetensors"),
        ),
    ],
    sha256sums: include_str!("../../../training/reader/SHA256SUMS"),
};

impl EmbeddedAdapter {
    /// Fails unless `SHA256SUMS` lists exactly the embedded files, each with its digest.
    pub fn verify(&self) -> Result<()> {
        let sums = parse_sums(self.sha256sums);
        let bad = |problem: String| {
            EngineError::Internal(format!("embedded {}: {problem}", self.dir_name))
        };
        if sums.len() != self.files.len() {
            return Err(bad(format!(
                "SHA256SUMS lists {} files, {} embedded",
                sums.len(),
                self.files.len()
            )));
        }
        for (name, bytes) in self.files {
            let digest = hex::encode(Sha256::digest(bytes));
            if sums.get(name) != Some(&digest.as_str()) {
                return Err(bad(format!("{name} does not match SHA256SUMS")));
            }
        }
        Ok(())
    }
}

/// Makes sure `models_dir/<dir_name>` holds exactly the embedded adapter; returns its path.
pub fn ensure_embedded(models_dir: &Path, adapter: &EmbeddedAdapter) -> Result<PathBuf> {
    adapter.verify()?;
    std::fs::create_dir_all(models_dir).map_err(|e| EngineError::io(models_dir, e))?;
    let target = models_dir.join(adapter.dir_name);
    let _lock = match atomic::DirLock::acquire(models_dir, adapter.dir_name) {
        Ok(lock) => lock,
        // A read-only models directory is fine as long as it already holds this adapter.
        Err(e) => return installed(&target, adapter).then_some(target).ok_or(e),
    };
    atomic::remove_leftovers(models_dir, adapter.dir_name)?;
    if installed(&target, adapter) {
        return Ok(target);
    }
    if target.exists() {
        tracing::info!(dir = %target.display(), "installing the reader adapter this binary ships");
    }
    let staging = atomic::staging_dir(models_dir, adapter.dir_name)?;
    let files = adapter.files.iter().copied();
    for (name, bytes) in files.chain([(SUMS_FILE, adapter.sha256sums.as_bytes())]) {
        let path = staging.path().join(name);
        std::fs::write(&path, bytes).map_err(|e| EngineError::io(&path, e))?;
    }
    atomic::sync_tree(staging.path())?;
    atomic::install(staging, &target)?;
    Ok(target)
}

/// Whether `target` holds the adapter: the same `SHA256SUMS`, and every file listed matching it.
fn installed(target: &Path, adapter: &EmbeddedAdapter) -> bool {
    let same_sums = std::fs::read_to_string(target.join(SUMS_FILE))
        .is_ok_and(|text| text == adapter.sha256sums);
    same_sums
        && adapter.files.iter().all(|(name, bytes)| {
            std::fs::read(target.join(name)).is_ok_and(|found| found.as_slice() == *bytes)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-file adapter whose weights are `weights`; `wrong_sum` breaks its listing.
    fn tiny(weights: &'static [u8], wrong_sum: bool) -> EmbeddedAdapter {
        let files: &'static [(&'static str, &'static [u8])] =
            Box::leak(Box::new([("a.json", &b"{}"[..]), ("b.bin", weights)]));
        let sum = |b: &[u8]| hex::encode(Sha256::digest(b));
        let b_sum = if wrong_sum {
            sum(b"other")
        } else {
            sum(weights)
        };
        let sums = format!("{}  a.json\n{b_sum}  b.bin\n", sum(b"{}"));
        EmbeddedAdapter {
            dir_name: "tiny-reader",
            files,
            sha256sums: Box::leak(sums.into_boxed_str()),
        }
    }

    #[test]
    fn the_shipped_reader_matches_its_sha256sums() {
        READER
            .verify()
            .expect("training/reader/SHA256SUMS lists the embedded files");
    }

    #[test]
    fn an_embedded_file_that_differs_from_its_sum_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let err = ensure_embedded(dir.path(), &tiny(b"weights", true)).unwrap_err();
        assert!(err.to_string().contains("b.bin does not match"), "{err}");
        assert!(!dir.path().join("tiny-reader").exists());
    }

    #[test]
    fn the_reader_installs_once_and_is_reinstalled_when_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let target = ensure_embedded(dir.path(), &READER).unwrap();
        let weights = target.join("adapter_model.safetensors");
        let modified = std::fs::metadata(&weights).unwrap().modified().unwrap();
        assert_eq!(ensure_embedded(dir.path(), &READER).unwrap(), target);
        let again = std::fs::metadata(&weights).unwrap().modified().unwrap();
        assert_eq!(modified, again, "a valid install is left alone");
        std::fs::write(&weights, b"damaged").unwrap();
        ensure_embedded(dir.path(), &READER).unwrap();
        assert!(installed(&target, &READER));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".lock"))
            .collect();
        assert_eq!(names, ["docqa-reader"], "no staging directory is left");
    }

    #[test]
    fn a_binary_shipping_another_reader_replaces_the_installed_one() {
        let dir = tempfile::tempdir().unwrap();
        let target = ensure_embedded(dir.path(), &tiny(b"first", false)).unwrap();
        ensure_embedded(dir.path(), &tiny(b"second", false)).unwrap();
        assert_eq!(std::fs::read(target.join("b.bin")).unwrap(), b"second");
        assert!(installed(&target, &tiny(b"second", false)));
    }
}
