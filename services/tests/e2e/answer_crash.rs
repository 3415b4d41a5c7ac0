//! An answer cut off by a crash does not stay `running`: `kill -9` while an answer streams, and after
//! the restart on the same data the answer reads `failed`, interrupted, by id and in the history; the
//! temporary upload files the crash left are gone — on SQLite and on PostgreSQL.

use crate::answer_progress::{ask_streaming, first_progress};
use crate::support;

use std::io::{BufRead, BufReader};

use serde_json::{Value, json};
use support::{Options, Server};

/// The id of the tenant's one answer still running, from the history.
fn running_answer(server: &Server, key: &str) -> String {
    let history: Value = server.get("/v1/answers", key).json().unwrap();
    let running: Vec<&Value> = history["answers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == "running")
        .collect();
    assert_eq!(running.len(), 1, "{history}");
    running[0]["answer_id"].as_str().unwrap().to_string()
}

on_both_databases! {
    fn an_answer_cut_off_by_a_crash_reads_failed_interrupted_after_the_restart(db) {
        let mut server = Server::start(Options::new(db).arg("--adapter", "none"));
        let (tenant, key) = server.tenant("t");
        let (doc, questions) = server.ingest_squad_article(&key, 0);
        let body = json!({ "question": questions[0].0, "route": "long", "stream": true,
            "max_tokens": 8, "scope": { "document_ids": [doc] } });
        let res = ask_streaming(&server, &key, &body);
        let mut lines = BufReader::new(res).lines().map(|l| l.expect("line"));
        first_progress(&mut lines);
        let answer = running_answer(&server, &key);
        let leftover = server.data_dir.join("originals").join(&tenant).join("upload-left-by-a-crash");
        std::fs::write(&leftover, b"half an upload").unwrap();

        server.kill();
        drop(lines);
        server.restart();

        let got: Value = server.get(&format!("/v1/answers/{answer}"), &key).json().unwrap();
        assert_eq!(got["status"], "failed", "{got}");
        assert!(got["error"].as_str().unwrap_or_default().starts_with("interrupted"), "{got}");
        let history: Value = server.get(&format!("/v1/documents/{doc}/answers"), &key).json().unwrap();
        assert_eq!(history["answers"][0]["answer_id"], answer.as_str(), "{history}");
        assert_eq!(history["answers"][0]["status"], "failed", "{history}");
        assert!(!leftover.exists(), "the leftover upload is still there");
        let original = server.data_dir.join("originals").join(&tenant).join(&doc);
        assert!(original.exists(), "the document's original must be kept");
    }
}
