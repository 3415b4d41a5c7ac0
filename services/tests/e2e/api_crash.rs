//! Crash safety and shutdown, with a real server process: SIGTERM during an ingestion stops cleanly
//! and the job resumes on the next start; `kill -9` during an ingestion leaves no half document
//! visible, and after the restart the job is resumed to success with the indexes agreeing with the
//! database. Cancelling jobs, queued or running, leaves nothing searchable.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Options, Server};

fn upload_one(server: &Server, key: &str, name: &str, bytes: Vec<u8>) -> (String, String) {
    let res = server.upload(key, &[(name, bytes, "text/plain")], None);
    assert_eq!(res.status(), 202);
    let v: Value = res.json().unwrap();
    (
        v["document_id"].as_str().unwrap().to_string(),
        v["job_id"].as_str().unwrap().to_string(),
    )
}

/// Waits until the job is embedding and at least `percent` done; returns its state.
fn wait_until_embedding(server: &Server, key: &str, job: &str, percent: f64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let res = server.get(&format!("/v1/jobs/{job}"), key);
        assert_eq!(res.status(), 200, "the job could not be read");
        let v: Value = res.json().unwrap();
        if v["status"] == "running"
            && v["step"] == "embed"
            && v["percent"].as_f64().unwrap() >= percent
        {
            return v;
        }
        assert!(
            !["succeeded", "failed", "cancelled"].contains(&v["status"].as_str().unwrap()),
            "ended too early: {v}"
        );
        assert!(Instant::now() < deadline, "never reached {percent}%: {v}");
        // Four polls a second stay under the key's rate limit (600 a minute) however slow the machine,
        // and still catch the embedding step, which lasts many seconds, well inside its span.
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// How many of the top 20 hybrid hits for `query` are chunks of `document`.
fn hits_of(server: &Server, key: &str, query: &str, document: &str) -> usize {
    let v: Value = server
        .post("/v1/search", key, &json!({ "query": query, "k": 20 }))
        .json()
        .unwrap();
    let hits = v["hits"].as_array().unwrap();
    hits.iter().filter(|h| h["document_id"] == document).count()
}

fn assert_indexes_agree(server: &Server, key: &str) -> Value {
    let stats: Value = server.get("/v1/stats", key).json().unwrap();
    assert_eq!(stats["database_chunks"], stats["bm25_chunks"], "{stats}");
    assert_eq!(stats["database_chunks"], stats["dense_chunks"], "{stats}");
    stats
}

on_both_databases! {
    fn an_interrupted_ingestion_is_never_half_visible_and_resumes_after_restart(db) {
        // A short lease: on PostgreSQL the restarted server takes the killed one's job back only once
        // its lease has lapsed, and the default 30 s would be spent idle.
        let mut server = Server::start(Options::new(db).arg("--job-lease-secs", 2));
        let (_, key) = server.tenant("t");
        // A small document first, ready before the crash: it must survive untouched.
        let (small, job) = server.ingest(&key, "small.txt", b"The lighthouse keeper logs every passing ship.".to_vec(), "text/plain");
        assert_eq!(job["status"], "succeeded");
        // Four copies of the transcript: an embedding of many seconds even on a fast machine, so both
        // interruptions land inside it, at a third of the CPU time of the ten copies used before.
        let (doc, job) = upload_one(&server, &key, "meetings.txt", support::long_transcript(4));

        // SIGTERM mid-embedding: a clean exit, and the job goes back to the queue.
        let during = wait_until_embedding(&server, &key, &job, 15.0);
        assert_eq!(during["steps"][2]["state"], "running");
        assert!(server.terminate(), "docqa exits cleanly on SIGTERM; log:\n{}", server.log_text());
        server.restart();
        let resumed: Value = server.get(&format!("/v1/jobs/{job}"), &key).json().unwrap();
        assert!(["queued", "running"].contains(&resumed["status"].as_str().unwrap()), "{resumed}");

        // kill -9 mid-embedding of the resumed run.
        wait_until_embedding(&server, &key, &job, 15.0);
        server.kill();
        server.restart();
        // Right after the restart the big document is not ready and nothing of it is searchable.
        let got: Value = server.get(&format!("/v1/documents/{doc}"), &key).json().unwrap();
        assert_ne!(got["status"], "ready", "{got}");
        assert_eq!(hits_of(&server, &key, "meeting project remote control design", &doc), 0);
        assert_eq!(hits_of(&server, &key, "lighthouse keeper ships", &small), 1);
        assert_indexes_agree(&server, &key);

        // The job is resumed and succeeds; the indexes then hold exactly the database's chunks.
        let done = server.wait_job(&key, &job);
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["attempts"], 2, "the clean shutdown does not count as an attempt: {done}");
        let got: Value = server.get(&format!("/v1/documents/{doc}"), &key).json().unwrap();
        assert_eq!(got["status"], "ready");
        let stats = assert_indexes_agree(&server, &key);
        assert_eq!(stats["database_chunks"].as_i64().unwrap(), got["chunk_count"].as_i64().unwrap() + 1);
        assert!(hits_of(&server, &key, "meeting project remote control design", &doc) > 0);
        let small_doc: Value = server.get(&format!("/v1/documents/{small}"), &key).json().unwrap();
        assert_eq!(small_doc["status"], "ready");
    }

    fn cancelled_jobs_queued_or_running_leave_nothing_searchable(db) {
        let server = Server::start(Options::new(db));
        let (_, key) = server.tenant("t");
        let (big, big_job) = upload_one(&server, &key, "meetings.txt", support::long_transcript(7));
        let (queued, queued_job) = upload_one(&server, &key, "later.txt", b"The ferry to the island leaves at noon.".to_vec());
        wait_until_embedding(&server, &key, &big_job, 5.0);
        // The second job waits behind the first (one ingestion worker): cancel it while queued.
        let v: Value = server.post(&format!("/v1/jobs/{queued_job}/cancel"), &key, &json!({})).json().unwrap();
        assert_eq!(v["status"], "cancelled", "{v}");
        // Cancel the running one.
        let v: Value = server.post(&format!("/v1/jobs/{big_job}/cancel"), &key, &json!({})).json().unwrap();
        assert_eq!(v["status"], "cancelled", "{v}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let d: Value = server.get(&format!("/v1/documents/{big}"), &key).json().unwrap();
            if d["status"] == "cancelled" { break; }
            assert!(Instant::now() < deadline, "the worker never settled the cancelled document: {d}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let q: Value = server.get(&format!("/v1/documents/{queued}"), &key).json().unwrap();
        assert_eq!(q["status"], "cancelled");
        assert_eq!(hits_of(&server, &key, "ferry island noon", &queued), 0);
        assert_eq!(hits_of(&server, &key, "meeting project remote control design", &big), 0);
        let stats = assert_indexes_agree(&server, &key);
        assert_eq!(stats["database_chunks"], 0);
    }
}
