//! The byte-level BPE vocabularies of GGUF (`tokenizer.ggml.model = gpt2`): the pre-tokenizers of the
//! `smollm`, `llama-bpe` (Llama 3.x) and `qwen2` types, each as the model's original `tokenizer.json`
//! defines it. SmolLM2 splits digits one by one, Llama 3 and Qwen2 split with a regular expression
//! (contractions, letters with one leading non-letter, numbers of up to three digits or of one,
//! punctuation runs, newlines, spaces), then all three map bytes to characters without a prefix space.
//! Llama 3 takes a word that is a token whole before trying merges.

use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::sequence::Sequence as ProcessorSequence;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use crate::error::{EngineError, Result};

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

    /// Whether a word that is itself a token is taken whole, before any merge (Llama 3's BPE does so:
    /// some of its words cannot be reached by its merges).
    fn ignores_merges(self) -> bool {
        self == Self::Llama3
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

/// The byte-level BPE tokenizer of `vocab` and `merges` (highest priority first), split by `pre`, with
/// `bos_first` (if any) put before every encoding.
pub fn tokenizer(
    vocab: Vocab,
    merges: Vec<(String, String)>,
    pre: PreTokenizer,
    bos_first: Option<TemplateProcessing>,
) -> Result<Tokenizer> {
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre.ignores_merges())
        .build()
        .map_err(|e| EngineError::Tokenizer(format!("cannot build BPE model: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    // SmolLM2's byte-level step splits again on GPT-2's expression; Llama 3's and Qwen2's do not.
    let byte_level_splits = pre == PreTokenizer::SmolLm;
    tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![
        pre.split()?,
        ByteLevel::new(false, true, byte_level_splits).into(),
    ])));
    let byte_level = ByteLevel::new(true, false, true);
    match bos_first {
        None => tokenizer.with_post_processor(Some(byte_level)),
        Some(bos) => tokenizer.with_post_processor(Some(ProcessorSequence::new(vec![
            byte_level.into(),
            bos.into(),
        ]))),
    };
    tokenizer.with_decoder(Some(ByteLevel::new(true, true, true)));
    Ok(tokenizer)
}
