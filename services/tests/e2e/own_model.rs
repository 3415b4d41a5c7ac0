//! `docqa serve --model DIR`: a user's own Llama-family checkpoint served in place of the default
//! generator, with its own chat format and no reader merged; a directory that holds no model stops the
//! start with the reason; documents another model's tokenizer counted are recounted.

use std::path::{Path, PathBuf};
use std::process::Command;

use docqa_engine::fetch::{NoProgress, default_models_dir, ensure_models};
use docqa_engine::text::TextTokenizer;
use serde_json::json;

use crate::support::{self, Database, Options, Server};

/// A cut-down SmolLM2-shaped checkpoint of random weights in `dir/name`: two layers, ChatML, a byte
/// tokenizer.
fn two_layer_model(dir: &Path, name: &str) -> PathBuf {
    let model = dir.join(name);
    support::succeed(Command::new(env!("CARGO_BIN_EXE_docqa")).args([
        "models",
        "synth",
        "--shape",
        "smollm2-135m",
        "--layers",
        "2",
        "--out",
        model.to_str().unwrap(),
    ]));
    model
}

#[test]
fn serve_with_a_model_directory_answers_with_that_model_its_chat_format_and_no_reader() {
    let dir = tempfile::tempdir().unwrap();
    let model = two_layer_model(dir.path(), "my-model");
    let server = Server::start(Options::new(Database::Sqlite).arg("--model", model.display()));
    let (_, key) = server.tenant("own");
    let info: serde_json::Value = server.get("/v1/info", &key).json().unwrap();
    assert_eq!(info["model"], "my-model", "{info}");
    assert_eq!(info["adapter"]["name"], "none", "{info}");

    let text = "The lease ends on 30 June 2031. The tenant pays the rent monthly.".repeat(20);
    let (doc, job) = server.ingest(&key, "lease.txt", text.into_bytes(), "text/plain");
    assert_eq!(job["status"], "succeeded", "{job}");
    let answer = server.ask(&key, (&doc, "rag"), "When does the lease end?", 6);
    // Random weights write noise, but the whole path ran: its prompt in the model's own format, read
    // and answered, with the cost told.
    assert_eq!(answer["route"], "rag", "{answer}");
    assert!(
        answer["usage"]["prompt_tokens"].as_u64().unwrap() > 100,
        "{answer}"
    );
    assert!(
        answer["usage"]["completion_tokens"].as_u64().unwrap() >= 1,
        "{answer}"
    );
    let reasons = answer["route_reasons"].to_string();
    assert!(reasons.contains("tokens to read the passages"), "{reasons}");
    // The router reads this short document whole.
    let body = json!({"question": "When does the lease end?", "scope": {"document_ids": [doc]}, "max_tokens": 6});
    let auto: serde_json::Value = server.post("/v1/ask", &key, &body).json().unwrap();
    assert_eq!(auto["route"], "long", "{auto}");
}

#[test]
fn serve_with_a_directory_that_holds_no_model_stops_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_docqa"))
        .args(["serve", "--bind", "127.0.0.1:0", "--model"])
        .arg(dir.path())
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no config.json there"), "{stderr}");
}

#[test]
fn documents_counted_by_one_models_tokenizer_are_recounted_when_another_model_serves_them() {
    let dir = tempfile::tempdir().unwrap();
    let model = two_layer_model(dir.path(), "bytes-model");
    let mut server = Server::start(Options::new(Database::Sqlite).arg("--model", model.display()));
    let (_, key) = server.tenant("switch");
    let text = "The lease ends on 30 June 2031. The tenant pays the rent monthly. ".repeat(30);
    let (doc, job) = server.ingest(&key, "lease.txt", text.clone().into_bytes(), "text/plain");
    assert_eq!(job["status"], "succeeded", "{job}");
    let path = format!("/v1/documents/{doc}");
    let tokens = |server: &Server| -> u64 {
        let d: serde_json::Value = server.get(&path, &key).json().unwrap();
        d["token_count"].as_u64().expect("a token count")
    };
    // The synthetic checkpoint's byte tokenizer: a token a byte.
    assert_eq!(tokens(&server) as usize, text.trim_end().len());

    // The same data served by the default generator, SmolLM2, whose tokenizer merges whole words.
    server.restart_with(|o| o.without("--model"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while tokens(&server) as usize == text.trim_end().len() {
        assert!(
            std::time::Instant::now() < deadline,
            "not recounted: {}",
            server.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let recounted = tokens(&server);
    let generator = ensure_models(&default_models_dir(), &NoProgress)
        .expect("models")
        .generator;
    let smollm2 = TextTokenizer::from_model_dir(&generator).unwrap();
    let expected = smollm2.encode(text.trim_end(), false).unwrap().len();
    assert_eq!(recounted as usize, expected);
    assert!(
        server
            .log_text()
            .contains("recounted 1 document's tokens for this generator"),
        "{}",
        server.log_text()
    );
    // Once recounted, a further start leaves the count as it is.
    server.restart();
    assert_eq!(tokens(&server), recounted);
    assert_eq!(
        server.log_text().matches("recounted 1 document").count(),
        1,
        "{}",
        server.log_text()
    );
}
