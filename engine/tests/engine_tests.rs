//! The engine's integration tests, one module a file, built and linked as one test binary and run in
//! one process, whose threads take the tests of every file together. `models_fetch_env.rs` stays a binary
//! of its own: it sets environment variables, which the other tests' threads would see.

mod common;
#[path = "support/real_model.rs"]
mod real_model;

mod bert_minilm;
mod cpu_attention;
mod cpu_ops;
mod family_gguf;
mod family_parity;
mod gguf_quants;
mod gguf_real_vocabs;
mod kv_manager;
mod kv_tiers_engine;
mod kv_tiers_manager;
mod llama_batch;
mod llama_golden;
mod llama_rope_scaling;
mod lora_adapter;
mod models_convert;
mod models_fetch;
mod models_gguf;
mod perplexity_real;
mod sampling_behaviour;
mod scheduler_budget;
mod sentencepiece_gguf;
mod serving_engine;
mod sink_window_attention;
mod synth_checkpoint;
mod tensor_parallel;
mod tokenizer_smollm2;
