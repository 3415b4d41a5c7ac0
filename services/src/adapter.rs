//! `--adapter DIR|none` (`DOCQA_ADAPTER`): the LoRA adapter merged into the generator when it loads
//! (`docqa serve`, `generate`, `eval`'s in-process server, `perplexity`). Without the flag, the default
//! generator gets the shipped reader that `docqa models fetch` installs as `MODELS_DIR/docqa-reader/`
//! (a generator of one's own, `--model DIR`, gets none); `none` runs the base model. The merge happens
//! once at load ([`docqa_engine::adapter`]), so an adapter costs nothing per token.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Context;
use docqa_engine::adapter::Adapter;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The value of `--adapter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterFlag {
    /// A PEFT LoRA adapter directory.
    Dir(PathBuf),
    /// No adapter: the base model.
    None,
}

impl FromStr for AdapterFlag {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" => Err("give an adapter directory, or `none`".into()),
            "none" => Ok(AdapterFlag::None),
            dir => Ok(AdapterFlag::Dir(PathBuf::from(dir))),
        }
    }
}

impl std::fmt::Display for AdapterFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdapterFlag::Dir(dir) => write!(f, "{}", dir.display()),
            AdapterFlag::None => f.write_str("none"),
        }
    }
}

/// Loads the adapter the flag names; without the flag, the shipped reader at `default` (when the
/// generator is the default one, else no adapter).
pub fn load(flag: Option<&AdapterFlag>, default: Option<&Path>) -> anyhow::Result<Option<Adapter>> {
    let dir = match (flag, default) {
        (Some(AdapterFlag::None), _) | (None, None) => return Ok(None),
        (Some(AdapterFlag::Dir(dir)), _) => dir.as_path(),
        (None, Some(reader)) => reader,
    };
    let adapter =
        Adapter::load(dir).with_context(|| format!("loading the adapter {}", dir.display()))?;
    Ok(Some(adapter))
}

/// Which adapter is merged into the generator, as `/v1/info` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AdapterInfo {
    /// The adapter directory's name (`docqa-reader` for the shipped reader), or `none`.
    pub name: String,
    /// SHA-256 of its `SHA256SUMS` listing (`sha256sum adapter_config.json adapter_model.safetensors
    /// | sha256sum`); absent with `none`.
    pub sha256: Option<String>,
}

impl AdapterInfo {
    /// The description of `adapter` (or of no adapter).
    pub fn of(adapter: Option<&Adapter>) -> Self {
        match adapter {
            Some(a) => AdapterInfo {
                name: a.name.clone(),
                sha256: Some(a.sha256.clone()),
            },
            None => AdapterInfo {
                name: "none".into(),
                sha256: None,
            },
        }
    }

    /// One word for logs and evaluation results: `none`, or `NAME@` and the digest's first 12 digits.
    pub fn label(&self) -> String {
        match &self.sha256 {
            Some(sum) => format!("{}@{}", self.name, &sum[..sum.len().min(12)]),
            None => self.name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_means_the_base_model_and_anything_else_a_directory() {
        assert_eq!("none".parse(), Ok(AdapterFlag::None));
        assert_eq!(
            "training/reader".parse(),
            Ok(AdapterFlag::Dir("training/reader".into()))
        );
        assert!("".parse::<AdapterFlag>().is_err());
        assert!(
            load(Some(&AdapterFlag::None), Some(Path::new("/nowhere")))
                .unwrap()
                .is_none()
        );
        assert!(load(None, None).unwrap().is_none());
    }

    #[test]
    fn the_shipped_reader_is_described_by_name_and_digest() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../training/reader");
        let reader = load(None, Some(&dir)).unwrap();
        let info = AdapterInfo::of(reader.as_ref());
        assert_eq!(info.name, "reader");
        let sum = info.sha256.clone().unwrap();
        assert!(info.label().starts_with("reader@") && info.label().ends_with(&sum[..12]));
        assert_eq!(AdapterInfo::of(None).label(), "none");
    }
}
