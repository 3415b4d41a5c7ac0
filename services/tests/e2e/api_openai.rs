//! The official OpenAI Python client (`openai` package) against `/v1/chat/completions` and
//! `/v1/models`, streaming and not. The interpreter is `$DOCQA_PYTHON` (else `python3`); without the
//! package the test says so and returns, unless `DOCQA_REQUIRE_OPENAI=1` (set by `.ci/run`).

use crate::support;

use std::process::Command;

use serde_json::Value;
use support::{Database, Options, Server};

fn python() -> String {
    std::env::var("DOCQA_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn openai_available() -> bool {
    let ok = Command::new(python())
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("DOCQA_REQUIRE_OPENAI").as_deref() != Ok("1"),
            "DOCQA_REQUIRE_OPENAI=1 but `{} -c 'import openai'` fails",
            python()
        );
        eprintln!(
            "not run: the `openai` package is not installed for {}",
            python()
        );
    }
    ok
}

#[test]
fn the_openai_python_client_gets_answers_streaming_and_not() {
    if !openai_available() {
        return;
    }
    // The protocol on the base model, which always answers with citations (the reader rightly
    // refuses this question at the tests' small RAG window, whose passages leave out "France").
    let server = Server::start(Options::new(Database::Sqlite).arg("--adapter", "none"));
    let (_, key) = server.tenant("openai");
    let (title, text, _) = support::squad_article(0);
    let (doc, job) = server.ingest(
        &key,
        &format!("{title}.txt"),
        text.into_bytes(),
        "text/plain",
    );
    assert_eq!(job["status"], "succeeded");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/openai_client.py");
    let out = Command::new(python())
        .args([script, &server.base, &key, &doc])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "the client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    let models: Vec<&str> = seen["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(models, ["docqa", "docqa-rag", "docqa-long"]);
    assert!(
        !seen["plain_content"].as_str().unwrap().is_empty(),
        "{seen}"
    );
    assert!(["stop", "length"].contains(&seen["plain_finish_reason"].as_str().unwrap()));
    assert_eq!(seen["plain_route"], "rag");
    assert!(seen["plain_citations"].as_u64().unwrap() >= 1);
    assert!(seen["plain_usage_prompt_tokens"].as_u64().unwrap() > 100);
    // Streaming: role chunk, content chunks, final chunk; the text equals the non-streamed answer
    // (greedy decoding of the same prompt).
    assert!(seen["stream_chunks"].as_u64().unwrap() >= 3);
    assert_eq!(
        seen["stream_content"].as_str().unwrap().trim(),
        seen["plain_content"].as_str().unwrap()
    );
    assert_eq!(seen["stream_route"], "rag");
    assert!(seen["stream_citations"].as_u64().unwrap() >= 1);
    assert_eq!(seen["wrong_key"], 401);
}
