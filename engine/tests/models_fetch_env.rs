//! `DOCQA_PYTHON` and `DOCQA_MODELS_DIR` are honoured (own test binary: it changes the environment).

use docqa_engine::EngineError;
use docqa_engine::fetch::{NoProgress, default_models_dir, ensure_models};

#[test]
fn docqa_python_pointing_nowhere_makes_ensure_models_fail_with_a_typed_error() {
    let models = tempfile::tempdir().unwrap();
    // SAFETY: this binary has a single test, so no other thread reads the environment concurrently.
    unsafe {
        std::env::set_var("DOCQA_PYTHON", "/nonexistent");
        std::env::set_var("DOCQA_MODELS_DIR", models.path());
    }
    assert_eq!(default_models_dir(), models.path());
    let err = ensure_models(&default_models_dir(), &NoProgress).unwrap_err();
    match err {
        EngineError::PythonMissing { python, .. } => assert_eq!(python, std::path::Path::new("/nonexistent")),
        other => panic!("unexpected {other:?}"),
    }
}
