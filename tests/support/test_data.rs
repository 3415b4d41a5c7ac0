//! Where tests, benchmarks and examples find their data, shared by every crate through `#[path]`.
//!
//! - Fixtures: small excerpts of the evaluation sets that the repository ships under `tests/fixtures/`
//!   (its README gives each file's source, licence and cut). Tests that check behaviour read these.
//! - The full evaluation sets: `$DOCQA_DATA`, else `../shared/data` beside the checkout. Tests whose
//!   point is a whole data set ask for it with [`evaluation_data`]: when it is absent they print
//!   `skipped: <test>: <reason> (set DOCQA_DATA)` and return, unless `DOCQA_REQUIRE_DATA=1`, where the
//!   absence is a failure.
//!
//! Every crate sits one folder below the workspace root, so the root is `CARGO_MANIFEST_DIR`'s parent.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// The workspace root.
fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate's folder has a parent")
}

/// `relative` under `tests/fixtures/`; the fixtures ship with the repository, so a missing one fails.
pub fn fixture(relative: &str) -> PathBuf {
    let path = workspace_root().join("tests/fixtures").join(relative);
    assert!(path.exists(), "fixture {} is missing", path.display());
    path
}

/// The folder of the full evaluation sets: `$DOCQA_DATA`, else `../shared/data` beside the checkout.
pub fn evaluation_dir() -> PathBuf {
    std::env::var_os("DOCQA_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared/data"))
}

/// Whether a missing evaluation set fails the test (`DOCQA_REQUIRE_DATA=1`, set by `.ci/run`).
pub fn data_required() -> bool {
    std::env::var("DOCQA_REQUIRE_DATA").as_deref() == Ok("1")
}

/// `relative` inside the evaluation sets, or `None` once the calling test has said why it is skipped.
/// With `DOCQA_REQUIRE_DATA=1` a missing path fails the test instead.
pub fn evaluation_data(relative: &str) -> Option<PathBuf> {
    let path = evaluation_dir().join(relative);
    if path.exists() {
        return Some(path);
    }
    let reason = format!("the evaluation data {} is not there", path.display());
    assert!(
        !data_required(),
        "DOCQA_REQUIRE_DATA=1 but {reason} (set DOCQA_DATA)"
    );
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    // Written to stderr itself, which the test harness does not capture, so every run shows the skip.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test}: {reason} (set DOCQA_DATA)"
    );
    None
}
