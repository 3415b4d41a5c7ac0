//! The `tokenizer.json` rebuilt from the GGUF, through [`TextTokenizer`]: round trips, digit splitting,
//! special tokens, the ChatML chat template and streaming detokenisation.

use crate::real_model;

use docqa_engine::text::{ChatMessage, TextTokenizer};

fn tokenizer() -> TextTokenizer {
    TextTokenizer::from_model_dir(real_model::converted_dir()).unwrap()
}

const SAMPLES: [&str; 6] = [
    "The capital of France is Paris.",
    "机器学习是人工智能的一个分支。",
    "Emoji: 👍🏽 🇫🇷 🧑‍💻 done",
    "fn main() {\n    println!(\"{}\", 40 + 2);\n}\n",
    "  leading spaces,\ttabs and trailing newline\n",
    "Ünïcödé — “quotes” and 12345 numbers",
];

#[test]
fn rebuilt_tokenizer_round_trips_english_chinese_emoji_and_code() {
    let tok = tokenizer();
    for text in SAMPLES {
        let ids = tok.encode(text, false).unwrap();
        assert!(!ids.is_empty());
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
}

#[test]
fn digits_are_split_one_token_each() {
    let tok = tokenizer();
    let ids = tok.encode("12345", false).unwrap();
    let pieces: Vec<String> = ids.iter().map(|&id| tok.decode(&[id]).unwrap()).collect();
    assert_eq!(pieces, ["1", "2", "3", "4", "5"]);
}

#[test]
fn special_tokens_are_single_ids_and_no_bos_is_added() {
    let tok = tokenizer();
    assert_eq!(tok.encode("<|im_start|>user", true).unwrap()[0], 1);
    assert_eq!(tok.encode("<|im_end|>", true).unwrap(), vec![2]);
    assert_eq!(tok.encode("<|endoftext|>", false).unwrap(), vec![0]);
    assert_eq!(
        tok.encode("Hello", true).unwrap(),
        tok.encode("Hello", false).unwrap()
    );
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.eos_token_ids(), [2, 0]);
}

#[test]
fn chat_template_renders_the_exact_chatml_string_for_two_turns() {
    let tok = tokenizer();
    let messages = [
        ChatMessage::new("system", "Answer briefly."),
        ChatMessage::new("user", "What is the capital of France?"),
        ChatMessage::new("assistant", "Paris."),
        ChatMessage::new("user", "And of Italy?"),
    ];
    let rendered = tok.apply_chat_template(&messages, true).unwrap();
    let expected = "<|im_start|>system\nAnswer briefly.<|im_end|>\n\
                    <|im_start|>user\nWhat is the capital of France?<|im_end|>\n\
                    <|im_start|>assistant\nParis.<|im_end|>\n\
                    <|im_start|>user\nAnd of Italy?<|im_end|>\n\
                    <|im_start|>assistant\n";
    assert_eq!(rendered, expected);
}

#[test]
fn chat_template_adds_the_default_system_prompt_when_none_is_given() {
    let tok = tokenizer();
    let rendered = tok
        .apply_chat_template(&[ChatMessage::new("user", "Hi")], false)
        .unwrap();
    let expected = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
                    <|im_start|>user\nHi<|im_end|>\n";
    assert_eq!(rendered, expected);
}

#[test]
fn stream_decoder_emits_only_complete_characters_and_reassembles_the_text() {
    let tok = tokenizer();
    for text in SAMPLES {
        let ids = tok.encode(text, false).unwrap();
        let mut stream = tok.stream_decoder();
        let mut out = String::new();
        for &id in &ids {
            if let Some(piece) = stream.push(id).unwrap() {
                assert!(
                    !piece.contains('\u{FFFD}'),
                    "partial character emitted for {text:?}"
                );
                out.push_str(&piece);
            }
        }
        assert_eq!(out, text);
    }
}

#[test]
fn multi_byte_characters_split_over_tokens_wait_for_their_last_byte() {
    let tok = tokenizer();
    let ids = tok.encode("🧑‍💻", false).unwrap();
    assert!(ids.len() > 1, "expected the emoji to span several tokens");
    let mut stream = tok.stream_decoder();
    let first = stream.push(ids[0]).unwrap();
    assert_eq!(
        first, None,
        "the first byte-level token is not a whole character"
    );
}

#[test]
fn rebuilt_tokenizer_gives_llama_cpps_ids_for_every_multilingual_golden_string() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/golden/tokenizer_llamacpp.json"
    );
    let golden: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(
        golden.len() >= 40,
        "the golden file holds {} strings",
        golden.len()
    );
    let tok = tokenizer();
    let mut mismatches = Vec::new();
    for case in &golden {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, false).unwrap();
        if got != want {
            mismatches.push(format!("{text:?}: docqa {got:?}, llama.cpp {want:?}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        golden.len(),
        mismatches.join("\n")
    );
}
