//! `tokenizer.json` rebuilt from GGUF tokenizer metadata, through the `tokenizers` crate's own types.
//!
//! Supported: `tokenizer.ggml.model = gpt2` (byte-level BPE) with the pre-tokenizers of the `smollm`,
//! `llama-bpe` (Llama 3.x) and `qwen2` types, each as the model's original `tokenizer.json` defines it:
//! SmolLM2 splits digits one by one, Llama 3 and Qwen2 split with a regular expression (contractions,
//! letters with one leading non-letter, numbers of up to three digits or of one, punctuation runs,
//! newlines, spaces), then all three map bytes to characters without a prefix space. Where the GGUF says
//! `add_bos_token`, encoding with special tokens starts with BOS, as Llama 3's tokenizer does. Every
//! CONTROL token (`token_type` 3) becomes a special added token, every USER_DEFINED token (4) a plain
//! added token, so that both are matched whole before BPE runs.

use std::path::Path;

use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::sequence::Sequence as ProcessorSequence;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;

/// GGUF token type of a control (special) token.
pub const TOKEN_TYPE_CONTROL: i64 = 3;
/// GGUF token type of a user-defined added token.
pub const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Llama 3's pre-tokenizer expression (`tokenizer.ggml.pre = llama-bpe`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's: Llama 3's with numbers split digit by digit (`tokenizer.ggml.pre = qwen2`).
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How text is split before BPE (`tokenizer.ggml.pre`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `smollm`: digits one by one.
    SmolLm,
    /// `llama-bpe`: [`LLAMA3_SPLIT`].
    Llama3,
    /// `qwen2`: [`QWEN2_SPLIT`].
    Qwen2,
}

impl PreTokenizer {
    /// The pre-tokenizer `tokenizer.ggml.pre` names.
    pub fn named(pre: &str) -> Result<Self> {
        match pre {
            "smollm" => Ok(Self::SmolLm),
            "llama-bpe" => Ok(Self::Llama3),
            "qwen2" => Ok(Self::Qwen2),
            other => Err(EngineError::Convert(format!(
                "pre-tokenizer {other} is not supported (smollm, llama-bpe and qwen2 are)"
            ))),
        }
    }

    /// The split before the byte-level mapping.
    fn split(self) -> Result<PreTokenizerWrapper> {
        let pattern = match self {
            Self::SmolLm => return Ok(Digits::new(true).into()),
            Self::Llama3 => LLAMA3_SPLIT,
            Self::Qwen2 => QWEN2_SPLIT,
        };
        Split::new(
            SplitPattern::Regex(pattern.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map(Into::into)
        .map_err(|e| EngineError::Tokenizer(format!("cannot build the pre-tokenizer: {e}")))
    }
}

/// The vocabulary part of GGUF tokenizer metadata.
#[derive(Debug, Clone)]
pub struct GgufVocab {
    /// How text is split before BPE.
    pub pre: PreTokenizer,
    /// The BOS token encoding starts with, where the GGUF asks for one (`tokenizer.ggml.add_bos_token`).
    pub bos_to_add: Option<u32>,
    /// Token strings, indexed by id.
    pub tokens: Vec<String>,
    /// Token types, indexed by id (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
    pub token_types: Vec<i64>,
    /// BPE merges as pairs, highest priority first.
    pub merges: Vec<(String, String)>,
}

impl GgufVocab {
    /// Reads tokens, token types and merges, checking that the model is a supported byte-level BPE.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let model = gguf.get_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(EngineError::Convert(format!(
                "tokenizer model {model} is not supported (only gpt2 BPE)"
            )));
        }
        let pre = PreTokenizer::named(
            gguf.get("tokenizer.ggml.pre")
                .and_then(|v| v.as_str())
                .unwrap_or("default"),
        )?;
        let add_bos = gguf
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let bos_to_add = gguf
            .get("tokenizer.ggml.bos_token_id")
            .and_then(|v| v.as_u64())
            .and_then(|id| u32::try_from(id).ok())
            .filter(|_| add_bos);
        let tokens = strings(gguf, "tokenizer.ggml.tokens")?;
        let token_types = gguf
            .get_array("tokenizer.ggml.token_type")?
            .iter()
            .map(|v| {
                v.as_i64().ok_or_else(|| {
                    EngineError::metadata("tokenizer.ggml.token_type", "expected integers")
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if token_types.len() != tokens.len() {
            return Err(EngineError::metadata(
                "tokenizer.ggml.token_type",
                format!("{} types for {} tokens", token_types.len(), tokens.len()),
            ));
        }
        let merges = strings(gguf, "tokenizer.ggml.merges")?
            .iter()
            .map(|m| split_merge(m))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            pre,
            bos_to_add,
            tokens,
            token_types,
            merges,
        })
    }

    /// Ids of tokens whose type is CONTROL.
    pub fn control_ids(&self) -> Vec<u32> {
        self.ids_of_type(TOKEN_TYPE_CONTROL)
    }

    fn ids_of_type(&self, ty: i64) -> Vec<u32> {
        (0..self.tokens.len() as u32)
            .filter(|&i| self.token_types[i as usize] == ty)
            .collect()
    }
}

fn strings(gguf: &GgufFile, key: &str) -> Result<Vec<String>> {
    gguf.get_array(key)?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| EngineError::metadata(key, "expected strings"))
        })
        .collect()
}

fn split_merge(merge: &str) -> Result<(String, String)> {
    match merge.split_once(' ') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(' ') => {
            Ok((a.to_owned(), b.to_owned()))
        }
        _ => Err(EngineError::metadata(
            "tokenizer.ggml.merges",
            format!("bad merge {merge:?}"),
        )),
    }
}

/// Builds the `tokenizers` tokenizer for a byte-level BPE vocabulary.
pub fn build_tokenizer(vocab: &GgufVocab) -> Result<Tokenizer> {
    let map: Vocab = vocab.tokens.iter().cloned().zip(0u32..).collect();
    if map.len() != vocab.tokens.len() {
        return Err(EngineError::Convert(
            "the GGUF vocabulary contains duplicate tokens".into(),
        ));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(map, vocab.merges.clone())
        .build()
        .map_err(|e| EngineError::Tokenizer(format!("cannot build BPE model: {e}")))?;
    let tok_err =
        |e: tokenizers::Error| EngineError::Tokenizer(format!("cannot add special tokens: {e}"));
    let mut tokenizer = Tokenizer::new(bpe);
    // SmolLM2's byte-level step splits again on GPT-2's expression; Llama 3's and Qwen2's do not.
    let byte_level_splits = vocab.pre == PreTokenizer::SmolLm;
    let pre = Sequence::new(vec![
        vocab.pre.split()?,
        ByteLevel::new(false, true, byte_level_splits).into(),
    ]);
    tokenizer.with_pre_tokenizer(Some(pre));
    match vocab.bos_to_add {
        None => tokenizer.with_post_processor(Some(ByteLevel::new(true, false, true))),
        Some(bos) => tokenizer.with_post_processor(Some(ProcessorSequence::new(vec![
            ByteLevel::new(true, false, true).into(),
            bos_first(vocab, bos)?.into(),
        ]))),
    };
    tokenizer.with_decoder(Some(ByteLevel::new(true, true, true)));
    let added = |ty: i64, special: bool| -> Vec<AddedToken> {
        vocab
            .ids_of_type(ty)
            .iter()
            .map(|&i| AddedToken::from(vocab.tokens[i as usize].clone(), special))
            .collect()
    };
    tokenizer
        .add_special_tokens(added(TOKEN_TYPE_CONTROL, true))
        .map_err(tok_err)?;
    tokenizer
        .add_tokens(added(TOKEN_TYPE_USER_DEFINED, false))
        .map_err(tok_err)?;
    Ok(tokenizer)
}

/// A post-processor that starts every encoding with the BOS token `bos`.
fn bos_first(vocab: &GgufVocab, bos: u32) -> Result<TemplateProcessing> {
    let text = vocab.tokens.get(bos as usize).ok_or_else(|| {
        EngineError::metadata("tokenizer.ggml.bos_token_id", "beyond the vocabulary")
    })?;
    let err = |e: String| EngineError::Tokenizer(format!("cannot build the BOS template: {e}"));
    TemplateProcessing::builder()
        .try_single(format!("{text} $A"))
        .map_err(err)?
        .try_pair(format!("{text} $A {text} $B"))
        .map_err(err)?
        .special_tokens(vec![(text.clone(), bos)])
        .build()
        .map_err(|e| err(e.to_string()))
}

/// Builds the tokenizer from `gguf` and saves it as `tokenizer.json` at `path`.
pub fn write_tokenizer(vocab: &GgufVocab, path: &Path) -> Result<()> {
    build_tokenizer(vocab)?
        .save(path, false)
        .map_err(|e| EngineError::Tokenizer(format!("cannot save {}: {e}", path.display())))
}
