//! First contact with a slow answer: while the model reads a long prompt the stream says how far it is,
//! and a caller who stops (closes the stream) frees the engine at the next chunk, with the answer kept in
//! the history as stopped, not failed.

use crate::support;

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Database, Options, Server};

/// The engine's running generations and the tokens it has computed since start, from `/metrics`.
fn engine_now(server: &Server) -> (i64, i64) {
    let text = reqwest::blocking::get(server.url("/metrics"))
        .and_then(|r| r.text())
        .expect("metrics");
    let value = |name: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in /metrics"))
    };
    (
        value("docqa_engine_running_requests"),
        value("docqa_engine_computed_tokens"),
    )
}

/// POSTs a streamed question; the response, once it answered 200.
pub(crate) fn ask_streaming(
    server: &Server,
    key: &str,
    body: &Value,
) -> reqwest::blocking::Response {
    let res = server
        .req(reqwest::Method::POST, "/v1/ask", Some(key))
        .json(body)
        .send()
        .expect("POST /v1/ask");
    assert_eq!(res.status(), 200);
    res
}

/// Reads SSE frames until the first `progress` event and returns its data, leaving the stream open.
pub(crate) fn first_progress(lines: &mut impl Iterator<Item = String>) -> Value {
    let mut name = String::new();
    for line in lines {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            assert_ne!(name, "token", "a token came before any progress event");
            if name == "progress" {
                return serde_json::from_str(d).expect("progress json");
            }
        }
    }
    panic!("the stream ended without a progress event");
}

#[test]
fn a_long_prompt_streams_its_reading_progress_and_a_stop_frees_the_engine_at_its_next_chunks() {
    let server = Server::start(Options::new(Database::Sqlite).arg("--adapter", "none"));
    let (_, key) = server.tenant("t");
    // The article's first 6,000 characters: about 1,400 tokens, six chunks of 256 to read.
    let (doc, questions) = server.ingest_squad_opening(&key, 0, 6000);
    let question = &questions[0].0;
    let body = json!({ "question": question, "route": "long", "stream": true, "max_tokens": 8,
        "scope": { "document_ids": [doc] } });

    // A whole streamed answer: progress events rise, stay below the total, and all come first.
    let events = support::read_events(ask_streaming(&server, &key, &body));
    let answer: Value = serde_json::from_str(&events.last().expect("events").1).unwrap();
    let prompt_tokens = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    let progress: Vec<Value> = events
        .iter()
        .filter(|(n, _)| n == "progress")
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        progress.len() >= 3,
        "a {prompt_tokens}-token prompt read in few chunks: {progress:?}"
    );
    let reads: Vec<u64> = progress
        .iter()
        .map(|p| p["read"].as_u64().unwrap())
        .collect();
    assert!(reads.windows(2).all(|w| w[0] < w[1]), "{reads:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["total"].as_u64() == Some(prompt_tokens))
    );
    assert!(*reads.last().unwrap() < prompt_tokens);
    assert!(
        progress[0]["eta_ms"].is_null() && progress[1]["eta_ms"].is_u64(),
        "{progress:?}"
    );
    let first_token = events
        .iter()
        .position(|(n, _)| n == "token")
        .unwrap_or(events.len());
    assert!(events[first_token..].iter().all(|(n, _)| n != "progress"));
    assert!(["stop", "length", "loop"].contains(&answer["finish_reason"].as_str().unwrap()));

    // Stop the next question while its prompt is read (the document's cached KV dropped first, or
    // the prefix cache would serve most of it at once). On a loaded machine this test may read its
    // first progress event only after the engine finished the whole answer; then it asks again.
    let body = json!({ "question": questions[1].0, "route": "long", "stream": true, "max_tokens": 8,
        "scope": { "document_ids": [doc] } });
    let mut attempts = 0;
    let (lines, computed_before) = loop {
        attempts += 1;
        let forget = server
            .req(
                reqwest::Method::DELETE,
                &format!("/v1/documents/{doc}/kv-cache"),
                Some(&key),
            )
            .send()
            .unwrap();
        assert!(forget.status().is_success(), "{}", forget.status());
        let res = ask_streaming(&server, &key, &body);
        let mut lines = BufReader::new(res).lines().map(|l| l.expect("line"));
        let reading = first_progress(&mut lines);
        assert!(
            reading["read"].as_u64() < reading["total"].as_u64(),
            "{reading}"
        );
        let (running, computed_before) = engine_now(&server);
        if running == 1 {
            break (lines, computed_before);
        }
        assert_eq!(running, 0);
        assert!(
            attempts < 3,
            "the answer was over before its first progress event was read, three times"
        );
        eprintln!(
            "attempt {attempts}: the answer was over before its first progress event was read"
        );
        lines.for_each(drop);
    };
    let stopped_at = Instant::now();
    drop(lines); // the caller stops: the connection closes
    let computed_after = loop {
        let (running, computed) = engine_now(&server);
        if running == 0 {
            break computed;
        }
        assert!(
            stopped_at.elapsed() < Duration::from_secs(60),
            "the engine kept the request"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Dropped at its next chunks (256 tokens each on the CPU), not after the whole prompt: counted in
    // tokens, so that a loaded machine does not make the check flaky; the time is printed.
    let after = computed_after - computed_before;
    eprintln!(
        "the engine let the stopped request go {} ms and {after} tokens after the stop",
        stopped_at.elapsed().as_millis()
    );
    assert!(
        after <= 3 * 256,
        "{after} more tokens computed after the stop"
    );

    // History keeps it as stopped.
    let history_of = || -> Value {
        server
            .get(&format!("/v1/documents/{doc}/answers"), &key)
            .json()
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut history = history_of();
    while !history.to_string().contains("\"stopped\"") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        history = history_of();
    }
    let items = history["answers"].as_array().expect("answers");
    let asked: Vec<&Value> = items
        .iter()
        .filter(|a| a["question"] == questions[1].0)
        .collect();
    assert_eq!(asked.len(), attempts, "{history}");
    // The latest first: the stopped one; any earlier attempt answered in full.
    assert_eq!(asked[0]["status"], "stopped", "{history}");
    assert!(asked[0]["error"].is_null(), "{history}");
    assert!(
        asked[1..].iter().all(|a| a["status"] != "stopped"),
        "{history}"
    );
}
