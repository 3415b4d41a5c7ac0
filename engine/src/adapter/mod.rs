//! PEFT LoRA adapters, merged into the base weights when a model loads, so they cost nothing per token.
//!
//! A PEFT adapter directory holds `adapter_config.json` ([`config`]) and `adapter_model.safetensors`
//! with, per adapted projection, `base_model.model.<module>.lora_A.weight` `[r, in]` and
//! `...lora_B.weight` `[out, r]` (names parsed in `keys`). [`Adapter::load`] reads and validates both: plain LoRA on the Llama
//! projections q/k/v/o/gate/up/down only, every other PEFT feature refused with a typed
//! [`AdapterProblem`]. The model loader checks the adapter against its own projections
//! ([`Adapter::check_targets`]) before uploading anything, then passes each projection through
//! [`Adapter::merge`]: `W' = W + scale · B·A` on the host in f32 (PEFT's `merge_and_unload`, scale =
//! lora_alpha / r, or lora_alpha / √r with `use_rslora`), rounded once to the base tensor's dtype. Every
//! backend uploads the merged tensor as it would the base one, so CPU and CUDA run the same weights.
//!
//! An adapter is identified by the SHA-256 of its `SHA256SUMS` listing (`sha256sum adapter_config.json
//! adapter_model.safetensors | sha256sum`); a `SHA256SUMS` in the directory is checked at load (`sums`).

pub mod config;
mod delta;
mod keys;
mod sums;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::{EngineError, Result};
use crate::weights::{OwnedTensor, TensorRef, Weights};
pub use config::{AdapterConfig, SUPPORTED_MODULES};
use delta::add_delta_rows;
use keys::{Half, parse_key};
use sums::identity;
pub use sums::{parse_sums, sums_listing};

/// The adapter's configuration file.
pub const CONFIG_FILE: &str = "adapter_config.json";
/// The adapter's weights.
pub const WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// The optional checksum listing, in `sha256sum` format.
pub const SUMS_FILE: &str = "SHA256SUMS";

/// Rows of a projection merged by one task (see `delta`).
const MERGE_ROWS: usize = 32;

/// Why an adapter cannot be merged; [`EngineError::Adapter`] names the directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterProblem {
    /// `adapter_config.json` does not parse or holds an impossible value.
    #[error("adapter_config.json: {0}")]
    Config(String),
    /// The PEFT method is not LoRA (LoHa, IA3, ...).
    #[error("peft_type {0:?} is not supported (only LORA)")]
    NotLora(String),
    /// DoRA's magnitude vector rescales each column: not `W + scale · B·A`.
    #[error("DoRA (use_dora: true) is not supported: only plain LoRA merges as W + scale·B·A")]
    Dora,
    /// Conv1D-style (transposed) base weights, as GPT-2 has.
    #[error("fan_in_fan_out: true (transposed Conv1D weights) is not supported")]
    FanInFanOut,
    /// Trained biases (`bias: all` or `lora_only`).
    #[error("bias {0:?} is not supported (only \"none\": the adapter may not train biases)")]
    Bias(String),
    /// Whole modules trained and saved beside the LoRA weights.
    #[error("modules_to_save ({0}) is not supported: only LoRA weights can be merged")]
    ModulesToSave(String),
    /// Another PEFT option that changes the merge (named).
    #[error("{0} is not supported")]
    Feature(&'static str),
    /// A LoRA on a module other than the seven projections (embeddings, the LM head, ...).
    #[error(
        "target module {0:?} is not supported (only q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"
    )]
    UnsupportedTarget(String),
    /// A tensor that is no LoRA A or B weight.
    #[error("tensor {0} is not a LoRA A or B weight")]
    UnexpectedTensor(String),
    /// A LoRA A without its B, or the reverse.
    #[error("tensor {0} has no matching lora_A/lora_B partner")]
    Unpaired(String),
    /// A LoRA tensor whose shape disagrees with the rank or the base projection.
    #[error("tensor {name} has shape {actual:?}, expected {expected:?}")]
    Shape {
        /// The tensor (LoRA or base).
        name: String,
        /// The shape the rank or the base implies.
        expected: Vec<usize>,
        /// The shape found.
        actual: Vec<usize>,
    },
    /// A LoRA whose product B·A has another shape than the base projection: made for another model.
    #[error(
        "the LoRA on {projection} is {lora:?} (B·A) but the base projection is {base:?}: is the adapter for another model?"
    )]
    Misfit {
        /// The base projection.
        projection: String,
        /// Its shape `[out, in]`.
        base: [usize; 2],
        /// The shape of B·A.
        lora: [usize; 2],
    },
    /// The adapter adapts a projection the base model does not have (a layer past its depth...).
    #[error("the base model has no projection {0}")]
    NoBaseTensor(String),
    /// A file differs from the directory's `SHA256SUMS`.
    #[error("{0} does not match SHA256SUMS")]
    Checksum(String),
}

/// One adapted projection: `A [rank, cols]` and `B [rows, rank]`, as f32.
struct LoraPair {
    a: Vec<f32>,
    b: Vec<f32>,
    rank: usize,
    rows: usize,
    cols: usize,
    /// B is all zeros (an untrained LoRA): the merge would give the base weights bit for bit.
    zero: bool,
}

/// A loaded LoRA adapter, ready to merge.
pub struct Adapter {
    /// The adapter directory's name (e.g. `docqa-reader`).
    pub name: String,
    /// Where it was loaded from.
    pub dir: PathBuf,
    /// SHA-256 of its `SHA256SUMS` listing, hex.
    pub sha256: String,
    /// Its configuration.
    pub config: AdapterConfig,
    scale: f32,
    /// By the base tensor's name (`model.layers.0.self_attn.q_proj.weight`).
    pairs: BTreeMap<String, LoraPair>,
}

impl Adapter {
    /// Reads and validates the PEFT adapter directory `dir`.
    pub fn load(dir: &Path) -> Result<Self> {
        let bad = |problem| EngineError::Adapter {
            dir: dir.to_path_buf(),
            problem,
        };
        let sha256 = identity(dir)?;
        let config_path = dir.join(CONFIG_FILE);
        let text =
            std::fs::read_to_string(&config_path).map_err(|e| EngineError::io(&config_path, e))?;
        let config = AdapterConfig::parse(&text).map_err(bad)?;
        let weights = Weights::open_files(&[dir.join(WEIGHTS_FILE)])?;
        let pairs = read_pairs(&weights, config.r).map_err(bad)?;
        Ok(Adapter {
            name: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            dir: dir.to_path_buf(),
            sha256,
            scale: config.scale(),
            config,
            pairs,
        })
    }

    /// Number of adapted projections.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether the adapter adapts nothing.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// `alpha / r` (or `alpha / √r`).
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Checks every adapted projection against the base model's: `projections` maps the name of each
    /// matrix the loader will pass to [`Adapter::merge`] to its `[out, in]` shape.
    pub fn check_targets(&self, projections: &HashMap<String, [usize; 2]>) -> Result<()> {
        for (name, p) in &self.pairs {
            let problem = match projections.get(name) {
                None => AdapterProblem::NoBaseTensor(name.clone()),
                Some(&base) if base != [p.rows, p.cols] => AdapterProblem::Misfit {
                    projection: name.clone(),
                    base,
                    lora: [p.rows, p.cols],
                },
                Some(_) => continue,
            };
            return Err(EngineError::Adapter {
                dir: self.dir.clone(),
                problem,
            });
        }
        Ok(())
    }

    /// `base + scale · B·A` in the base tensor's dtype, or `None` when the adapter leaves `base` alone
    /// (not adapted, or B all zeros).
    pub fn merge(&self, base: &TensorRef<'_>) -> Result<Option<OwnedTensor>> {
        let Some(p) = self.pairs.get(base.name) else {
            return Ok(None);
        };
        base.expect_shape(&[p.rows, p.cols])?;
        if p.zero {
            return Ok(None);
        }
        let mut w = base.to_f32();
        w.par_chunks_mut(p.cols * MERGE_ROWS)
            .zip(p.b.par_chunks(p.rank * MERGE_ROWS))
            .for_each(|(rows, b_rows)| add_delta_rows(rows, b_rows, &p.a, p.cols, self.scale));
        Ok(Some(OwnedTensor::rounded_like(base, &w)))
    }
}

/// Pairs every `lora_A` with its `lora_B` and checks their shapes against the rank `r`.
fn read_pairs(weights: &Weights, r: usize) -> Result<BTreeMap<String, LoraPair>, AdapterProblem> {
    let mut halves: BTreeMap<String, [Option<TensorRef<'_>>; 2]> = BTreeMap::new();
    for key in weights.names() {
        let (base, half) = parse_key(key)?;
        let t = weights
            .get(key)
            .map_err(|e| AdapterProblem::Config(e.to_string()))?;
        halves.entry(base).or_default()[usize::from(half == Half::B)] = Some(t);
    }
    let mut pairs = BTreeMap::new();
    for (base, [a, b]) in halves {
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (a, b) => {
                let name = a.or(b).map_or(base, |t| t.name.to_owned());
                return Err(AdapterProblem::Unpaired(name));
            }
        };
        let cols = a.shape.get(1).copied().unwrap_or(0);
        let rows = b.shape.first().copied().unwrap_or(0);
        let shape = |t: &TensorRef<'_>, expected: Vec<usize>| match t.shape == expected.as_slice() {
            true => Ok(()),
            false => Err(AdapterProblem::Shape {
                name: t.name.into(),
                expected,
                actual: t.shape.into(),
            }),
        };
        shape(&a, vec![r, cols])?;
        shape(&b, vec![rows, r])?;
        let (a, b) = (a.to_f32(), b.to_f32());
        let pair = LoraPair {
            zero: b.iter().all(|&x| x == 0.0),
            a,
            b,
            rank: r,
            rows,
            cols,
        };
        pairs.insert(base, pair);
    }
    Ok(pairs)
}
