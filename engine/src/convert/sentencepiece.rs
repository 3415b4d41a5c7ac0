//! SentencePiece BPE vocabularies of GGUF (`tokenizer.ggml.model = llama`: Llama 2, Mistral and their
//! kin) as a `tokenizers` BPE model. The GGUF keeps each piece's score, not merges; SentencePiece's BPE
//! joins, at each step, the adjacent pair whose joined piece scores highest, so the merges are every
//! split of a piece into two pieces of the vocabulary, ranked by the joined piece's score. Text is
//! normalised as llama.cpp does it (spaces become `▁`, and one `▁` goes before the text and before the
//! text after each special token, where `tokenizer.ggml.add_space_prefix` says so, as it does by
//! default); characters outside the vocabulary fall back to their UTF-8 bytes' `<0xXX>` pieces.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{DecoderWrapper, NormalizerWrapper, Tokenizer};

use super::tokenizer::TOKEN_TYPE_NORMAL;
use crate::error::{EngineError, Result};

/// The character SentencePiece writes for a space.
pub const SPACE: &str = "\u{2581}";

/// The merges that rebuild SentencePiece's joins: for every normal piece, each split into a left and a
/// right piece that are both in the vocabulary, ranked by the piece's score (highest first; ties by
/// the lower id, then by the split's left and right scores, highest first).
pub fn merges_from_scores(
    tokens: &[String],
    types: &[i64],
    scores: &[f32],
) -> Vec<(String, String)> {
    let ids: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut ranked: Vec<(f32, usize, f32, f32, &str, &str)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        if types[id] != TOKEN_TYPE_NORMAL {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(at);
            if let (Some(&l), Some(&r)) = (ids.get(left), ids.get(right)) {
                ranked.push((scores[id], id, scores[l], scores[r], left, right));
            }
        }
    }
    ranked.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(b.2.total_cmp(&a.2))
            .then(b.3.total_cmp(&a.3))
    });
    ranked
        .into_iter()
        .map(|(.., left, right)| (left.to_owned(), right.to_owned()))
        .collect()
}

/// The SentencePiece tokenizer of `vocab` and `merges`, `unk` standing for what neither a piece nor
/// a byte piece covers, with a `▁` put before the text where `add_space_prefix`, and `bos_first` (if
/// any) before every encoding.
pub fn tokenizer(
    vocab: Vocab,
    merges: Vec<(String, String)>,
    unk: Option<String>,
    add_space_prefix: bool,
    bos_first: Option<TemplateProcessing>,
) -> Result<Tokenizer> {
    let mut bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .fuse_unk(true)
        .byte_fallback(true);
    if let Some(unk) = unk {
        bpe = bpe.unk_token(unk);
    }
    let bpe = bpe
        .build()
        .map_err(|e| EngineError::Tokenizer(format!("cannot build BPE model: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer
        .with_normalizer(Some(normalizer(add_space_prefix)?))
        .map_err(|e| EngineError::Tokenizer(format!("cannot set the normalizer: {e}")))?;
    tokenizer.with_post_processor(bos_first);
    tokenizer.with_decoder(Some(decoder(add_space_prefix)?));
    Ok(tokenizer)
}

/// Spaces to `▁`, with one `▁` first where `add_space_prefix`.
fn normalizer(add_space_prefix: bool) -> Result<NormalizerWrapper> {
    let spaces = Replace::new(" ", SPACE)
        .map_err(|e| EngineError::Tokenizer(format!("cannot build the normalizer: {e}")))?;
    let mut steps: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        steps.push(Prepend::new(SPACE.to_owned()).into());
    }
    steps.push(spaces.into());
    Ok(NormalizerSequence::new(steps).into())
}

/// `▁` back to spaces, byte pieces back to bytes, and the prefix space taken off again.
fn decoder(add_space_prefix: bool) -> Result<DecoderWrapper> {
    let replace = Replace::new(SPACE, " ")
        .map_err(|e| EngineError::Tokenizer(format!("cannot build the decoder: {e}")))?;
    let mut steps: Vec<DecoderWrapper> = vec![
        replace.into(),
        ByteFallback::default().into(),
        Fuse::default().into(),
    ];
    if add_space_prefix {
        steps.push(Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(steps).into())
}
