//! Tokenizers the question-answering tests run on: the generator's own (SmolLM2's byte-level BPE,
//! fetched as `docqa models fetch` does) and a SentencePiece one, converted from the fixture GGUF
//! `tests/golden/sentencepiece_gguf/spm.gguf` (its normaliser puts a `▁` before every text it encodes,
//! as Llama 2's and Mistral's do).

use docqa_engine::fetch::{NoProgress, default_models_dir, ensure_models};
use docqa_engine::text::TextTokenizer;

/// The generator's tokenizer.
pub fn generator() -> TextTokenizer {
    let models = ensure_models(&default_models_dir(), &NoProgress).expect("models");
    TextTokenizer::from_model_dir(&models.generator).expect("tokenizer")
}

/// The fixture GGUF's SentencePiece tokenizer.
pub fn sentencepiece() -> TextTokenizer {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let gguf = root.join("tests/golden/sentencepiece_gguf/spm.gguf");
    docqa_engine::convert::convert_gguf_to_hf(&gguf, dir.path()).expect("convert the fixture GGUF");
    TextTokenizer::from_model_dir(dir.path()).expect("tokenizer")
}
