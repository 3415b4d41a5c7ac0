//! `tokenizer.json` rebuilt from GGUF tokenizer metadata, through the `tokenizers` crate's own types.
//!
//! Supported: `tokenizer.ggml.model = gpt2`, byte-level BPE ([`super::byte_level`]: the `smollm`,
//! `llama-bpe` and `qwen2` pre-tokenizers), and `tokenizer.ggml.model = llama`, SentencePiece BPE
//! ([`super::sentencepiece`]: Llama 2, Mistral). Where the GGUF says `add_bos_token`, encoding with
//! special tokens starts with BOS, as the models' tokenizers do. Every CONTROL token (`token_type` 3)
//! and the UNKNOWN one (2) becomes a special added token, every USER_DEFINED token (4) a plain added
//! token, both matched whole in the text as it is, before any normalisation and BPE (so a SentencePiece
//! vocabulary's space prefix goes after them, as llama.cpp puts it).

use std::path::Path;

use tokenizers::models::bpe::Vocab;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use super::byte_level::{self, PreTokenizer};
use super::sentencepiece;
use crate::error::{EngineError, Result};
use crate::gguf::GgufFile;

/// GGUF token type of an ordinary piece.
pub const TOKEN_TYPE_NORMAL: i64 = 1;
/// GGUF token type of the unknown token.
pub const TOKEN_TYPE_UNKNOWN: i64 = 2;
/// GGUF token type of a control (special) token.
pub const TOKEN_TYPE_CONTROL: i64 = 3;
/// GGUF token type of a user-defined added token.
pub const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// The kind of vocabulary (`tokenizer.ggml.model`) and what it needs beyond the tokens.
#[derive(Debug, Clone)]
pub enum VocabModel {
    /// `gpt2`: byte-level BPE with its merges (highest priority first) and pre-tokenizer.
    ByteLevel {
        /// How text is split before BPE (`tokenizer.ggml.pre`).
        pre: PreTokenizer,
        /// The merges as pairs.
        merges: Vec<(String, String)>,
    },
    /// `llama`: SentencePiece BPE, its merges ranked by the pieces' scores.
    SentencePiece {
        /// Each token's score (`tokenizer.ggml.scores`).
        scores: Vec<f32>,
        /// The unknown token (`tokenizer.ggml.unknown_token_id`).
        unk: Option<u32>,
        /// Whether text starts with a `▁` (`tokenizer.ggml.add_space_prefix`, true by default).
        add_space_prefix: bool,
    },
}

/// The vocabulary part of GGUF tokenizer metadata.
#[derive(Debug, Clone)]
pub struct GgufVocab {
    /// The kind of vocabulary.
    pub model: VocabModel,
    /// The BOS token encoding starts with, where the GGUF asks for one (`tokenizer.ggml.add_bos_token`).
    pub bos_to_add: Option<u32>,
    /// Token strings, indexed by id.
    pub tokens: Vec<String>,
    /// Token types, indexed by id (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
    pub token_types: Vec<i64>,
}

impl GgufVocab {
    /// Reads tokens, token types and the model's own part, checking that the model is supported.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let tokens = strings(gguf, "tokenizer.ggml.tokens")?;
        let token_types = numbers(gguf, "tokenizer.ggml.token_type", tokens.len(), |v| {
            v.as_i64()
        })?;
        let model = match gguf.get_str("tokenizer.ggml.model")? {
            "gpt2" => byte_level_model(gguf)?,
            "llama" => VocabModel::SentencePiece {
                scores: numbers(gguf, "tokenizer.ggml.scores", tokens.len(), |v| {
                    v.as_f64().map(|s| s as f32)
                })?,
                unk: optional_id(gguf, "tokenizer.ggml.unknown_token_id"),
                add_space_prefix: flag(gguf, "tokenizer.ggml.add_space_prefix").unwrap_or(true),
            },
            other => {
                return Err(EngineError::Convert(format!(
                    "tokenizer model {other} is not supported (gpt2 byte-level BPE and llama \
                     SentencePiece BPE are)"
                )));
            }
        };
        let bos_to_add = optional_id(gguf, "tokenizer.ggml.bos_token_id")
            .filter(|_| flag(gguf, "tokenizer.ggml.add_bos_token").unwrap_or(false));
        Ok(Self {
            model,
            bos_to_add,
            tokens,
            token_types,
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

    /// The token text of `id`, where it is in the vocabulary.
    fn text(&self, id: u32) -> Option<&String> {
        self.tokens.get(id as usize)
    }
}

fn byte_level_model(gguf: &GgufFile) -> Result<VocabModel> {
    let pre = gguf
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    let merges = strings(gguf, "tokenizer.ggml.merges")?
        .iter()
        .map(|m| split_merge(m))
        .collect::<Result<Vec<_>>>()?;
    Ok(VocabModel::ByteLevel {
        pre: PreTokenizer::named(pre)?,
        merges,
    })
}

fn flag(gguf: &GgufFile, key: &str) -> Option<bool> {
    gguf.get(key).and_then(|v| v.as_bool())
}

fn optional_id(gguf: &GgufFile, key: &str) -> Option<u32> {
    gguf.get(key)
        .and_then(|v| v.as_u64())
        .and_then(|id| u32::try_from(id).ok())
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

/// The array `key` of numbers, one a token.
fn numbers<T>(
    gguf: &GgufFile,
    key: &str,
    tokens: usize,
    read: impl Fn(&crate::gguf::MetadataValue) -> Option<T>,
) -> Result<Vec<T>> {
    let values = gguf
        .get_array(key)?
        .iter()
        .map(|v| read(v).ok_or_else(|| EngineError::metadata(key, "expected numbers")))
        .collect::<Result<Vec<_>>>()?;
    if values.len() != tokens {
        return Err(EngineError::metadata(
            key,
            format!("{} values for {tokens} tokens", values.len()),
        ));
    }
    Ok(values)
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

/// Builds the `tokenizers` tokenizer for a GGUF vocabulary.
pub fn build_tokenizer(vocab: &GgufVocab) -> Result<Tokenizer> {
    let map: Vocab = vocab.tokens.iter().cloned().zip(0u32..).collect();
    if map.len() != vocab.tokens.len() {
        return Err(EngineError::Convert(
            "the GGUF vocabulary contains duplicate tokens".into(),
        ));
    }
    let bos = vocab
        .bos_to_add
        .map(|bos| bos_first(vocab, bos))
        .transpose()?;
    let mut tokenizer = match &vocab.model {
        VocabModel::ByteLevel { pre, merges } => {
            byte_level::tokenizer(map, merges.clone(), *pre, bos)?
        }
        VocabModel::SentencePiece {
            scores,
            unk,
            add_space_prefix,
        } => {
            let merges =
                sentencepiece::merges_from_scores(&vocab.tokens, &vocab.token_types, scores);
            let unk = unk.and_then(|id| vocab.text(id)).cloned();
            sentencepiece::tokenizer(map, merges, unk, *add_space_prefix, bos)?
        }
    };
    let tok_err =
        |e: tokenizers::Error| EngineError::Tokenizer(format!("cannot add special tokens: {e}"));
    let added = |types: &[i64], special: bool| -> Vec<AddedToken> {
        (0..vocab.tokens.len())
            .filter(|&i| types.contains(&vocab.token_types[i]))
            .map(|i| AddedToken::from(vocab.tokens[i].clone(), special).normalized(false))
            .collect()
    };
    tokenizer
        .add_special_tokens(added(&[TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN], true))
        .map_err(tok_err)?;
    tokenizer
        .add_tokens(added(&[TOKEN_TYPE_USER_DEFINED], false))
        .map_err(tok_err)?;
    Ok(tokenizer)
}

/// A post-processor that starts every encoding with the BOS token `bos`.
fn bos_first(vocab: &GgufVocab, bos: u32) -> Result<TemplateProcessing> {
    let text = vocab.text(bos).ok_or_else(|| {
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
