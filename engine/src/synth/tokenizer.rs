//! A stand-in `tokenizer.json` for a random checkpoint: byte-level BPE with the 256 byte tokens and no
//! merges (so any text encodes, one token per byte), plus the family's special tokens at their ids. The
//! byte tokens take the 256 lowest ids the special tokens leave free; every other id below the
//! vocabulary size is a filler token `<|synth_ID|>`, so the vocabulary has no holes and every id a
//! random model generates decodes to something.

use std::path::Path;

use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

use super::shape::Shape;
use crate::error::{EngineError, Result};

/// GPT-2's byte-to-character table: printable bytes stand for themselves, the others for the
/// characters from U+0100 on, in byte order.
fn byte_chars() -> Vec<char> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| match printable(b) {
            true => char::from(b),
            false => {
                let c = char::from_u32(next).expect("below the surrogates");
                next += 1;
                c
            }
        })
        .collect()
}

/// The tokenizer of `shape`.
pub fn build_tokenizer(shape: &Shape) -> Result<Tokenizer> {
    let err = |e: tokenizers::Error| EngineError::Tokenizer(format!("synthetic tokenizer: {e}"));
    let taken = |id: u32| shape.special_tokens.iter().any(|(s, _)| *s == id);
    let mut bytes = byte_chars().into_iter();
    let mut vocab: Vocab = (0..shape.vocab as u32)
        .filter(|id| !taken(*id))
        .map(|id| match bytes.next() {
            Some(c) => (c.to_string(), id),
            None => (format!("<|synth_{id}|>"), id),
        })
        .collect();
    for (id, token) in shape.special_tokens {
        vocab.insert((*token).to_owned(), *id);
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, Vec::new())
        .build()
        .map_err(err)?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tokenizer.with_decoder(Some(ByteLevel::new(true, true, true)));
    let specials: Vec<AddedToken> = shape
        .special_tokens
        .iter()
        .map(|(_, token)| AddedToken::from(*token, true))
        .collect();
    tokenizer.add_special_tokens(specials).map_err(err)?;
    Ok(tokenizer)
}

/// Writes the tokenizer of `shape` to `path`.
pub fn write_tokenizer(shape: &Shape, path: &Path) -> Result<()> {
    build_tokenizer(shape)?
        .save(path, false)
        .map_err(|e| EngineError::Tokenizer(format!("cannot save {}: {e}", path.display())))
}
