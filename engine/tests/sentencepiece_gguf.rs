//! `docqa models convert` on a GGUF with a SentencePiece vocabulary (`tokenizer.ggml.model = llama`, as in
//! Llama 2 and Mistral GGUFs): `tests/golden/sentencepiece_gguf/spm.gguf`, a one-layer random model whose
//! 600 pieces a real SentencePiece BPE model trained (with byte fallback, split digits, control and
//! user-defined symbols), made by `tests/reference/sentencepiece_gguf.py`, which also tokenised its
//! texts with llama.cpp's `llama-tokenize` and with the `sentencepiece` library (`expected.json`).

use std::path::{Path, PathBuf};

use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::convert::convert_gguf_to_hf;
use docqa_engine::models::llama::Llama;
use docqa_engine::text::TextTokenizer;
use serde_json::Value;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden/sentencepiece_gguf")
        .join(name)
}

/// The fixture's texts with llama.cpp's and sentencepiece's ids.
fn cases() -> Vec<(String, Vec<u32>, Vec<u32>)> {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(golden("expected.json")).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect()
    };
    expected["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = c["text"].as_str().unwrap().to_owned();
            (text, ids(&c["llama_cpp"]), ids(&c["sentencepiece"]))
        })
        .collect()
}

/// The HF directory `docqa models convert` makes of the fixture, in a folder of the test's own.
fn converted(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sentencepiece-gguf-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    convert_gguf_to_hf(&golden("spm.gguf"), &dir).expect("convert the GGUF");
    dir
}

fn is_special_free(text: &str) -> bool {
    !text.contains("[INST]") && !text.contains("<|doc|>")
}

#[test]
fn a_sentencepiece_gguf_tokenizes_every_text_as_llama_cpp_does() {
    let tokenizer = TextTokenizer::from_model_dir(&converted("ids")).unwrap();
    for (text, llama_cpp, _) in cases() {
        assert_eq!(
            tokenizer.encode(&text, false).unwrap(),
            llama_cpp,
            "{text:?}"
        );
    }
}

#[test]
fn without_specials_in_the_text_it_also_agrees_with_sentencepiece_itself() {
    let tokenizer = TextTokenizer::from_model_dir(&converted("sentencepiece")).unwrap();
    let mut checked = 0;
    for (text, _, sentencepiece) in cases().into_iter().filter(|c| is_special_free(&c.0)) {
        assert_eq!(
            tokenizer.encode(&text, false).unwrap(),
            sentencepiece,
            "{text:?}"
        );
        checked += 1;
    }
    assert!(checked >= 8, "{checked} texts");
}

#[test]
fn encoding_with_special_tokens_starts_with_bos_and_decoding_gives_the_text_back() {
    let dir = converted("round-trip");
    let tokenizer = TextTokenizer::from_model_dir(&dir).unwrap();
    for (text, llama_cpp, _) in cases().into_iter().filter(|c| is_special_free(&c.0)) {
        let with_bos = tokenizer.encode(&text, true).unwrap();
        assert_eq!(with_bos[0], 1, "{text:?}: BOS first");
        assert_eq!(&with_bos[1..], llama_cpp.as_slice(), "{text:?}");
        assert_eq!(tokenizer.decode(&llama_cpp).unwrap(), text, "{text:?}");
    }
}

#[test]
fn the_converted_directory_loads_as_a_llama_model_with_a_llama_tokenizer_config() {
    let dir = converted("load");
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(config["tokenizer_class"], "LlamaTokenizer");
    assert_eq!(config["add_prefix_space"], true);
    assert_eq!(config["bos_token"], "<s>");
    assert_eq!(config["unk_token"], "<unk>");
    Llama::load(CpuBackend::new(), &dir).expect("load the converted model");
}
