//! The verification stamp of a model directory: what the files looked like (size, inode, modification
//! and change times) when their digests were last checked, so an unchanged directory is not hashed at
//! every start. Only Unix has the change time that no user call can set back; elsewhere there is no
//! stamp and every verification hashes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{MANIFEST_FILE, Manifest};

/// `.<name>.verified` beside the model directory `dir` (inside it, it would be a file the manifest
/// does not list, and a docqa that knows no stamps would rebuild the directory for it).
fn stamp_path(dir: &Path) -> Option<PathBuf> {
    let name = dir.file_name()?.to_str()?;
    Some(dir.parent()?.join(format!(".{name}.verified")))
}

/// One file's metadata as the stamp records it.
type Fingerprint = [i64; 6];

#[cfg(unix)]
fn fingerprint(path: &Path) -> Option<Fingerprint> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some([
        m.len() as i64,
        m.ino() as i64,
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ])
}

#[cfg(not(unix))]
fn fingerprint(_path: &Path) -> Option<Fingerprint> {
    None
}

/// The fingerprints of the manifest and of every file it lists, or `None` when one cannot be read.
fn fingerprints(dir: &Path, manifest: &Manifest) -> Option<BTreeMap<String, Fingerprint>> {
    std::iter::once(MANIFEST_FILE)
        .chain(manifest.files.keys().map(String::as_str))
        .map(|rel| Some((rel.to_string(), fingerprint(&dir.join(rel))?)))
        .collect()
}

/// Whether `dir`'s stamp describes its files as they are now.
pub(super) fn matches(dir: &Path, manifest: &Manifest) -> bool {
    let Some(Ok(text)) = stamp_path(dir).map(std::fs::read_to_string) else {
        return false;
    };
    let Ok(stamped) = serde_json::from_str::<BTreeMap<String, Fingerprint>>(&text) else {
        return false;
    };
    fingerprints(dir, manifest).is_some_and(|now| now == stamped)
}

/// Records `dir`'s files as verified just now. Best effort: a read-only directory keeps no stamp and
/// is hashed again next time.
pub(super) fn write(dir: &Path, manifest: &Manifest) {
    let (Some(now), Some(path)) = (fingerprints(dir, manifest), stamp_path(dir)) else {
        return;
    };
    let Ok(text) = serde_json::to_string(&now) else {
        return;
    };
    // Written in place: a torn stamp (a crash mid-write) does not parse, and only costs a hash.
    let _ = std::fs::write(path, text);
}

#[cfg(all(test, unix))]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::super::{SourceWheel, verify_dir};
    use super::*;
    use crate::fetch::FetchProgress;

    /// Counts the bytes a verification hashed.
    #[derive(Default)]
    struct Hashed(AtomicU64);

    impl FetchProgress for Hashed {
        fn stage(&self, _name: &str) {}
        fn advance(&self, done: u64, _total: u64) {
            self.0.fetch_max(done, Ordering::Relaxed);
        }
    }

    /// The bytes of both files of [`model_dir`].
    const BOTH_FILES: u64 = 100_002;

    fn verify(dir: &Path) -> (Option<String>, u64) {
        let hashed = Hashed::default();
        let verdict = verify_dir(dir, "pkg", "1.0", &hashed).unwrap();
        (verdict, hashed.0.into_inner())
    }

    /// A model directory of two files with its manifest, in a models directory of its own.
    fn model_dir() -> (tempfile::TempDir, PathBuf) {
        let models = tempfile::tempdir().unwrap();
        let dir = models.path().join("model");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("weights.bin"), vec![7u8; 100_000]).unwrap();
        std::fs::write(dir.join("config.json"), b"{}").unwrap();
        let source = SourceWheel {
            package: "pkg".into(),
            version: "1.0".into(),
            wheel: "pkg-1.0.whl".into(),
            sha256: "00".into(),
        };
        let manifest = Manifest::build(&dir, source, &crate::fetch::NoProgress).unwrap();
        manifest.write(&dir).unwrap();
        (models, dir)
    }

    #[test]
    fn an_unchanged_directory_is_hashed_once_then_trusted_by_its_stamp() {
        let (models, dir) = model_dir();
        assert_eq!(verify(&dir), (None, BOTH_FILES));
        assert!(models.path().join(".model.verified").is_file());
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            3,
            "the stamp lies outside"
        );
        assert_eq!(verify(&dir), (None, 0));
    }

    #[test]
    fn a_file_rewritten_with_other_bytes_of_the_same_size_is_hashed_and_refused() {
        let (_models, dir) = model_dir();
        assert_eq!(verify(&dir).0, None);
        let weights = dir.join("weights.bin");
        let modified = std::fs::metadata(&weights).unwrap().modified().unwrap();
        let mut bytes = std::fs::read(&weights).unwrap();
        bytes[50_000] ^= 1;
        std::fs::write(&weights, bytes).unwrap();
        // Even with its modification time set back, the change time tells.
        std::fs::File::options()
            .write(true)
            .open(&weights)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        let (verdict, _) = verify(&dir);
        assert_eq!(verdict.as_deref(), Some("weights.bin has the wrong sha256"));
    }

    #[test]
    fn a_torn_or_foreign_stamp_only_costs_a_hash() {
        let (models, dir) = model_dir();
        std::fs::write(
            models.path().join(".model.verified"),
            b"{\"manifest.json\": [1,",
        )
        .unwrap();
        assert_eq!(verify(&dir), (None, BOTH_FILES));
        assert_eq!(verify(&dir), (None, 0));
    }
}
