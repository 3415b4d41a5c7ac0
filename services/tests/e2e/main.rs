//! End-to-end tests of `docqa serve` and `docqa eval`: real server processes on loopback, the real models
//! on the CPU engine, SQLite and PostgreSQL (several replicas on one database, behind HAProxy), talked to
//! over HTTP. One test binary, one module per area.

#[macro_use]
mod support;
#[path = "../../../indexer/tests/parse_support/mod.rs"]
mod parse_support;

mod abstention;
mod answer_crash;
mod answer_progress;
mod api_crash;
mod api_errors;
mod api_library;
mod api_lifecycle;
mod api_openai;
mod api_operations;
mod api_tenants;
mod api_uploads;
mod eval_cli;
mod follow_ups;
mod generate_cli;
mod ingest_bounds;
mod job_lease;
mod kv_tiers;
mod local_keys;
mod own_model;
mod perplexity_cli;
mod prompts;
mod qa_routes;
mod reader;
mod replicas;
mod tensor_parallel;
mod training_data;
mod web_ui;
