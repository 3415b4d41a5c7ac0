//! `tokenizer.json` rebuilt from GGUF tokenizer metadata, through the `tokenizers` crate's own types.
//!
//! Supported: `tokenizer.ggml.model = gpt2` (byte-level BPE) with the `smollm` pre-tokenizer — digits split
//! one by one, then byte-level splitting without a prefix space — which is how SmolLM2's original
//! `tokenizer.json` is defined. Every CONTROL token (`token_type` 3) becomes a special added token, every
//! USER_DEFINED token (4) a plain added token, so that both are matched whole before BPE runs.

use std::path::Path;

use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;

/// GGUF token type of a control (special) token.
pub const TOKEN_TYPE_CONTROL: i64 = 3;
/// GGUF token type of a user-defined added token.
pub const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// The vocabulary part of GGUF tokenizer metadata.
#[derive(Debug, Clone)]
pub struct GgufVocab {
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
            return Err(EngineError::Convert(format!("tokenizer model {model} is not supported (only gpt2 BPE)")));
        }
        let pre = gguf.get("tokenizer.ggml.pre").and_then(|v| v.as_str()).unwrap_or("default");
        if pre != "smollm" {
            return Err(EngineError::Convert(format!("pre-tokenizer {pre} is not supported (only smollm)")));
        }
        let tokens = strings(gguf, "tokenizer.ggml.tokens")?;
        let token_types = gguf
            .get_array("tokenizer.ggml.token_type")?
            .iter()
            .map(|v| v.as_i64().ok_or_else(|| EngineError::metadata("tokenizer.ggml.token_type", "expected integers")))
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
        (0..self.tokens.len() as u32).filter(|&i| self.token_types[i as usize] == ty).collect()
    }
}

fn strings(gguf: &GgufFile, key: &str) -> Result<Vec<String>> {
    gguf.get_array(key)?
        .iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| EngineError::metadata(key, "expected strings")))
        .collect()
}

fn split_merge(merge: &str) -> Result<(String, String)> {
    match merge.split_once(' ') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(' ') => Ok((a.to_owned(), b.to_owned())),
        _ => Err(EngineError::metadata("tokenizer.ggml.merges", format!("bad merge {merge:?}"))),
    }
}

/// Builds the `tokenizers` tokenizer for a SmolLM2-style byte-level BPE vocabulary.
pub fn build_tokenizer(vocab: &GgufVocab) -> Result<Tokenizer> {
    let map: Vocab = vocab.tokens.iter().cloned().zip(0u32..).collect();
    if map.len() != vocab.tokens.len() {
        return Err(EngineError::Convert("the GGUF vocabulary contains duplicate tokens".into()));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(map, vocab.merges.clone())
        .build()
        .map_err(|e| EngineError::Tokenizer(format!("cannot build BPE model: {e}")))?;
    let tok_err = |e: tokenizers::Error| EngineError::Tokenizer(format!("cannot add special tokens: {e}"));
    let mut tokenizer = Tokenizer::new(bpe);
    let pre = Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]);
    tokenizer.with_pre_tokenizer(Some(pre));
    tokenizer.with_post_processor(Some(ByteLevel::new(true, false, true)));
    tokenizer.with_decoder(Some(ByteLevel::new(true, true, true)));
    let added = |ty: i64, special: bool| -> Vec<AddedToken> {
        vocab
            .ids_of_type(ty)
            .iter()
            .map(|&i| AddedToken::from(vocab.tokens[i as usize].clone(), special))
            .collect()
    };
    tokenizer.add_special_tokens(added(TOKEN_TYPE_CONTROL, true)).map_err(tok_err)?;
    tokenizer.add_tokens(added(TOKEN_TYPE_USER_DEFINED, false)).map_err(tok_err)?;
    Ok(tokenizer)
}

/// Builds the tokenizer from `gguf` and saves it as `tokenizer.json` at `path`.
pub fn write_tokenizer(vocab: &GgufVocab, path: &Path) -> Result<()> {
    build_tokenizer(vocab)?
        .save(path, false)
        .map_err(|e| EngineError::Tokenizer(format!("cannot save {}: {e}", path.display())))
}
