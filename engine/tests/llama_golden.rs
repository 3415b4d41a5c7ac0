//! SmolLM2-135M-Instruct end to end on the CPU backend: greedy decoding of the ChatML prompt for
//! "What is the capital of France?" answers Paris.

mod common;

use docqa_engine::backend::KvDtype;
use docqa_engine::backend::cpu::CpuBackend;
use docqa_engine::models::generate::SingleSequence;
use docqa_engine::models::llama::Llama;
use tokenizers::Tokenizer;

const MODEL: &str = "smollm2-135m-instruct";

#[test]
fn greedy_chatml_answer_names_paris() {
    let dir = common::model_dir(MODEL);
    let model = Llama::load(CpuBackend::new(), &dir).expect("load model");
    let tok = Tokenizer::from_file(dir.join("tokenizer.json")).expect("tokenizer");
    let prompt = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let ids = tok
        .encode(prompt, false)
        .expect("encode")
        .get_ids()
        .to_vec();
    let mut seq = SingleSequence::new(&model, 256, 256, KvDtype::F32).expect("driver");
    let out = seq.greedy(&ids, 24).expect("generate");
    let text = tok.decode(&out, true).expect("decode");
    eprintln!("prompt ids {ids:?}\nanswer {out:?} = {text:?}");
    assert!(text.contains("Paris"), "answer: {text:?}");
}
