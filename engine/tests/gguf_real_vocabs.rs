//! GGUF vocabularies of real models converted to `tokenizer.json` and checked against the models' own
//! tokenizers: llama.cpp's test vocabularies (`tests/reference/llama_vocabs.sh` fetches them into
//! `.cache/llama-vocabs/`, or `$DOCQA_LLAMA_VOCABS` names a folder) of Llama 2 (SentencePiece), Llama 3
//! (byte-level BPE, `llama-bpe`) and Qwen2 (`qwen2`), each with 46 texts (spaces, tabs and newlines
//! alone and in runs, accents, Cyrillic, Chinese, emoji, digits, code) and the ids the model's Hugging
//! Face tokenizer gives them, special tokens not added. Where the folder is missing the tests print
//! why and pass, unless `DOCQA_REQUIRE_LLAMA_VOCABS=1`.

use std::path::PathBuf;

use docqa_engine::convert::tokenizer::{GgufVocab, build_tokenizer};
use docqa_engine::gguf::GgufFile;

/// Separates the texts of a `.inp` file (and ends it).
const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

fn vocabs_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("DOCQA_LLAMA_VOCABS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/llama-vocabs"),
        PathBuf::from,
    );
    if dir.is_dir() {
        return Some(dir);
    }
    let why = format!(
        "{} is missing (run tests/reference/llama_vocabs.sh)",
        dir.display()
    );
    assert!(
        std::env::var("DOCQA_REQUIRE_LLAMA_VOCABS").as_deref() != Ok("1"),
        "{why}"
    );
    println!("skipped: {why}");
    None
}

/// Converts `ggml-vocab-<name>.gguf` and checks every test text's ids; returns how many it checked.
fn check(name: &str) -> usize {
    let Some(dir) = vocabs_dir() else { return 0 };
    let base = dir.join(format!("ggml-vocab-{name}.gguf"));
    let gguf = GgufFile::open(&base).expect("open the vocabulary");
    let tokenizer = build_tokenizer(&GgufVocab::from_gguf(&gguf).expect("read it")).expect("build");
    let read = |ext: &str| std::fs::read_to_string(base.with_extension(ext)).expect(ext);
    let (inputs, outputs) = (read("gguf.inp"), read("gguf.out"));
    let texts: Vec<&str> = inputs
        .strip_suffix(SEPARATOR)
        .unwrap_or(&inputs)
        .split(SEPARATOR)
        .collect();
    let expected: Vec<&str> = outputs.lines().collect();
    assert_eq!(texts.len(), expected.len(), "{name}: texts and id lines");
    for (text, ids) in texts.iter().zip(expected) {
        let want: Vec<u32> = ids.split_whitespace().map(|i| i.parse().unwrap()).collect();
        let got = tokenizer
            .encode(*text, false)
            .expect("encode")
            .get_ids()
            .to_vec();
        assert_eq!(got, want, "{name}: {text:?}");
    }
    texts.len()
}

#[test]
fn llama_2_s_sentencepiece_vocabulary_tokenizes_as_its_own_tokenizer() {
    let checked = check("llama-spm");
    assert!(checked == 0 || checked > 40, "{checked}");
}

#[test]
fn llama_3_s_byte_level_vocabulary_tokenizes_as_its_own_tokenizer() {
    let checked = check("llama-bpe");
    assert!(checked == 0 || checked > 40, "{checked}");
}

#[test]
fn qwen2_s_byte_level_vocabulary_tokenizes_as_its_own_tokenizer() {
    let checked = check("qwen2");
    assert!(checked == 0 || checked > 40, "{checked}");
}
