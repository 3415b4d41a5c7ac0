//! `docqa serve --tensor-parallel 3` on the CPU (SmolLM2-135M split over three ranks, one thread
//! each): the service above the engine does not change. A question is answered and cited on the RAG
//! path, a long read's KV, written by the three ranks, serves the next question from the cache and,
//! kept on the disk tier at a clean exit (each block's record holding the three ranks' shares), the
//! first question after a restart; `/v1/info` says how many ranks the generator runs on.

use crate::support;

use support::{Database, Options, Server};

#[test]
fn a_server_over_three_ranks_answers_cites_and_reuses_a_long_reads_kv() {
    let server = Server::start(Options::new(Database::Sqlite).arg("--tensor-parallel", 3));
    let (_, key) = server.tenant("tp");
    let memo = b"Memo. The audit starts on 4 March and lasts two weeks. Maria Lopez leads it.";
    let (doc, _) = server.ingest(&key, "memo.txt", memo.to_vec(), "text/plain");

    let rag = server.ask(&key, (&doc, "rag"), "Who leads the audit?", 24);
    let answer = rag["answer"].as_str().expect("answer");
    assert!(answer.contains("Maria Lopez"), "{rag}");
    assert!(
        !rag["citations"].as_array().expect("citations").is_empty(),
        "{rag}"
    );

    let first = server.ask(&key, (&doc, "long"), "When does the audit start?", 24);
    assert!(
        first["answer"].as_str().expect("answer").contains("March"),
        "{first}"
    );
    let second = server.ask(&key, (&doc, "long"), "How long does the audit last?", 24);
    let total = second["usage"]["prompt_tokens"]
        .as_u64()
        .expect("prompt tokens");
    let cached = second["usage"]["cached_prompt_tokens"]
        .as_u64()
        .expect("cached");
    assert!(
        total - cached < 48,
        "{cached} of {total} prompt tokens cached"
    );

    let info: serde_json::Value = server
        .http
        .get(format!("{}/v1/info", server.base))
        .send()
        .expect("info")
        .json()
        .expect("json");
    assert_eq!(info["tensor_parallel"], 3, "{info}");

    let log = server.log_text();
    assert!(log.contains("3 tensor-parallel ranks"), "{log}");

    let mut server = server;
    server.terminate_keeping_kv();
    server.restart();
    let third = server.ask(&key, (&doc, "long"), "Who leads the audit?", 24);
    let cached = third["usage"]["cached_prompt_tokens"]
        .as_u64()
        .expect("cached");
    assert!(cached >= 64, "{cached} prompt tokens cached: {third}");
    let stats: serde_json::Value = server.get("/v1/stats", &key).json().expect("stats");
    assert!(
        stats["kv_cache"]["disk_hits"].as_u64().expect("disk hits") >= cached / 16,
        "{stats}"
    );
    assert!(
        third["answer"].as_str().expect("answer").contains("Maria"),
        "{third}"
    );
}
