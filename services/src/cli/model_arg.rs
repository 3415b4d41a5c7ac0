//! What `--model` names: a Hugging Face model directory, used as it is, or a GGUF file (llama.cpp's
//! format), converted once into the models directory and used from there on every later start.
//!
//! A GGUF file's directory is `converted/<key>/<file stem>` under the models directory, the key a hash
//! of the file's canonical path, length and modification time, so a file replaced in place is
//! converted again; the directory's own name, which `/v1/info` and the OpenAI API report as the
//! model's, is the file's. The conversion is built out of sight and renamed into place, as the shipped
//! models are (`docqa_engine::fetch::atomic`): a directory under its final name is whole, and what a
//! killed conversion leaves is removed by the next.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Instant, UNIX_EPOCH};

use anyhow::Context;
use docqa_engine::convert::{CONVERTED_FILES, convert_gguf_to_hf};
use docqa_engine::fetch::atomic;
use sha2::{Digest, Sha256};

/// The first bytes of every GGUF file.
const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// The model directory `--model model` stands for: `model` itself where it is a model directory, its
/// converted directory where it is a GGUF file (converting it first when no whole one exists).
pub fn model_dir(models_dir: &Path, model: &Path) -> anyhow::Result<PathBuf> {
    let meta = std::fs::metadata(model)
        .with_context(|| format!("--model {}: cannot read it", model.display()))?;
    if meta.is_dir() {
        anyhow::ensure!(
            model.join("config.json").is_file(),
            "--model {}: no config.json there (a Hugging Face model directory holds config.json, \
             the safetensors weights and tokenizer.json; a GGUF file can be named instead)",
            model.display()
        );
        return Ok(model.to_path_buf());
    }
    anyhow::ensure!(
        is_gguf(model)?,
        "--model {}: neither a model directory nor a GGUF file (it does not begin with the GGUF \
         magic); name a Hugging Face model directory or a GGUF file",
        model.display()
    );
    let dir = converted_dir(models_dir, model, &meta)?;
    if is_whole(&dir) {
        return Ok(dir);
    }
    convert_once(model, &dir)?;
    Ok(dir)
}

/// Whether the file begins with the GGUF magic.
fn is_gguf(path: &Path) -> anyhow::Result<bool> {
    let mut head = [0u8; 4];
    let mut file =
        std::fs::File::open(path).with_context(|| format!("--model {}", path.display()))?;
    Ok(file.read_exact(&mut head).is_ok() && &head == GGUF_MAGIC)
}

/// `models_dir/converted/<key>/<stem>` for the GGUF file at `path`.
fn converted_dir(
    models_dir: &Path,
    path: &Path,
    meta: &std::fs::Metadata,
) -> anyhow::Result<PathBuf> {
    let canonical = path
        .canonicalize()
        .with_context(|| format!("--model {}", path.display()))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let mut hasher = Sha256::new();
    hasher.update(canonical.as_os_str().as_encoded_bytes());
    hasher.update(meta.len().to_le_bytes());
    hasher.update(modified.to_le_bytes());
    let key = hex::encode(&hasher.finalize()[..6]);
    let stem = path
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy());
    Ok(models_dir.join("converted").join(key).join(&*stem))
}

/// Whether `dir` holds every file a conversion writes.
fn is_whole(dir: &Path) -> bool {
    CONVERTED_FILES.iter().all(|f| dir.join(f).is_file())
}

/// Converts the GGUF file into `dir` the way the shipped models are built (`fetch::atomic`): under the
/// directory's lock, in a hidden staging sibling, fsynced, then renamed into place. A process that
/// waited on the lock while another converted finds the directory whole and converts nothing; the
/// staging directories of killed conversions are removed first.
fn convert_once(gguf: &Path, dir: &Path) -> anyhow::Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let _lock = atomic::DirLock::acquire(parent, &name)?;
    if is_whole(dir) {
        return Ok(());
    }
    atomic::remove_leftovers(parent, &name)?;
    eprintln!(
        "docqa: converting {} (GGUF) into {}, once: later starts use that directory; it holds \
         bf16 weights, about 2 bytes a parameter",
        gguf.display(),
        dir.display()
    );
    let started = Instant::now();
    let staging = atomic::staging_dir(parent, &name)?;
    convert_gguf_to_hf(gguf, staging.path())
        .with_context(|| format!("--model {}: converting the GGUF file", gguf.display()))?;
    atomic::sync_tree(staging.path())?;
    atomic::install(staging, dir)?;
    eprintln!(
        "docqa: converted in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the entries of `dir` but the builders' lock files (`.NAME.lock`).
    fn names_in(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".lock"))
            .collect()
    }

    /// A one-layer random Llama with a SentencePiece vocabulary (tests/reference/sentencepiece_gguf.py).
    fn fixture() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/golden/sentencepiece_gguf/spm.gguf")
    }

    /// A temporary directory holding a copy of the fixture as `tiny.gguf`, and the models directory
    /// to use beside it (not created).
    fn fixture_copy() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let gguf = tmp.path().join("tiny.gguf");
        std::fs::copy(fixture(), &gguf).unwrap();
        let models = tmp.path().join("models");
        (tmp, gguf, models)
    }

    #[test]
    fn a_gguf_file_is_converted_once_and_its_directory_reused() {
        let (_tmp, gguf, models) = fixture_copy();
        let dir = model_dir(&models, &gguf).unwrap();
        assert!(
            dir.starts_with(models.join("converted")),
            "{}",
            dir.display()
        );
        assert_eq!(dir.file_name().unwrap(), "tiny");
        assert!(is_whole(&dir));
        let written = std::fs::metadata(dir.join("model.safetensors"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(model_dir(&models, &gguf).unwrap(), dir);
        let again = std::fs::metadata(dir.join("model.safetensors"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(written, again, "the second start converted again");
        let leftovers = names_in(dir.parent().unwrap());
        assert_eq!(leftovers, ["tiny"], "{leftovers:?}");
        assert_eq!(names_in(&models.join("converted")).len(), 1);
    }

    #[test]
    fn what_a_killed_conversion_left_is_removed_by_the_next() {
        let (_tmp, gguf, models) = fixture_copy();
        let dir = model_dir(&models, &gguf).unwrap();
        let parent = dir.parent().unwrap();
        let leftover = parent.join(".tiny.partial-killed");
        std::fs::create_dir(&leftover).unwrap();
        std::fs::write(leftover.join("model.safetensors"), b"half").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(model_dir(&models, &gguf).unwrap(), dir);
        assert_eq!(names_in(parent), ["tiny"]);
    }

    #[test]
    fn an_incomplete_converted_directory_is_converted_again() {
        let (_tmp, gguf, models) = fixture_copy();
        let dir = model_dir(&models, &gguf).unwrap();
        std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
        assert_eq!(model_dir(&models, &gguf).unwrap(), dir);
        assert!(is_whole(&dir));
    }

    #[test]
    fn a_file_that_is_not_gguf_is_refused_with_what_model_takes() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("weights.bin");
        std::fs::write(&file, b"not a model").unwrap();
        let err = model_dir(tmp.path(), &file).unwrap_err().to_string();
        assert!(
            err.contains("neither a model directory nor a GGUF file"),
            "{err}"
        );
        assert!(!tmp.path().join("converted").exists());
    }

    #[test]
    fn a_broken_gguf_file_fails_and_leaves_no_directory_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let gguf = tmp.path().join("cut.gguf");
        let whole = std::fs::read(fixture()).unwrap();
        std::fs::write(&gguf, &whole[..whole.len() / 2]).unwrap();
        let models = tmp.path().join("models");
        let err = format!("{:#}", model_dir(&models, &gguf).unwrap_err());
        assert!(err.contains("converting the GGUF file"), "{err}");
        let keys = names_in(&models.join("converted"));
        assert_eq!(keys.len(), 1, "{keys:?}");
        let left = names_in(&models.join("converted").join(&keys[0]));
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_directory_without_config_json_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let err = model_dir(tmp.path(), tmp.path()).unwrap_err().to_string();
        assert!(err.contains("no config.json there"), "{err}");
    }

    #[test]
    fn a_missing_path_is_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nowhere.gguf");
        let err = model_dir(tmp.path(), &missing).unwrap_err().to_string();
        assert!(err.contains("nowhere.gguf: cannot read it"), "{err}");
    }
}
