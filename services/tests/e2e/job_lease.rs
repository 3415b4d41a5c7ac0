//! A running job keeps its lease however long a step takes: a PDF whose parse alone lasts several
//! leases is ingested once, by the one server running it, on SQLite and on PostgreSQL.

use crate::parse_support::{pdf_bytes, text_pdf};
use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Options, Server};

/// Seconds of the lease the test server runs with.
const LEASE_SECS: u64 = 1;

/// A PDF of `pages` pages of one line each: little text, but a parse of seconds (the PDF reader's
/// time grows faster than the page count). The lines are as short as can be: the parse time comes
/// from the page count, and every word more only lengthens the embedding that follows it.
fn many_page_pdf(pages: usize) -> Vec<u8> {
    let lines: Vec<String> = (0..pages).map(|i| format!("Page {i}.")).collect();
    let pages: Vec<[&str; 1]> = lines.iter().map(|l| [l.as_str()]).collect();
    let pages: Vec<&[&str]> = pages.iter().map(|p| p.as_slice()).collect();
    pdf_bytes(&mut text_pdf("Harbour ledger", &pages))
}

/// Uploads `bytes` and follows the job until it ends; returns its last state and how long after the
/// upload was accepted the job was first seen past its parse step.
fn ingest_timing_the_parse(server: &Server, key: &str, bytes: Vec<u8>) -> (Value, Duration) {
    let res = server.upload(key, &[("ledger.pdf", bytes, "application/pdf")], None);
    assert_eq!(res.status(), 202);
    let accepted = Instant::now();
    let job = res.json::<Value>().unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut parsed_after = None;
    loop {
        let res = server.get(&format!("/v1/jobs/{job}"), key);
        assert_eq!(res.status(), 200, "the job could not be read");
        let v: Value = res.json().unwrap();
        let ended = ["succeeded", "failed", "cancelled"].contains(&v["status"].as_str().unwrap());
        if parsed_after.is_none() && (v["step"] != "parse" || ended) {
            parsed_after = Some(accepted.elapsed());
        }
        if ended {
            return (v, parsed_after.unwrap());
        }
        assert!(
            accepted.elapsed() < Duration::from_secs(600),
            "never ended: {v}"
        );
        // Five polls a second stay under the key's rate limit (600 a minute) however long the parse.
        std::thread::sleep(Duration::from_millis(200));
    }
}

on_both_databases! {
    fn a_job_whose_parse_outlasts_the_lease_succeeds_once_with_one_server(db) {
        let server = Server::start(Options::new(db).arg("--job-lease-secs", LEASE_SECS));
        let (_, key) = server.tenant("lease");
        let (job, parse) = ingest_timing_the_parse(&server, &key, many_page_pdf(3000));
        assert!(
            parse > Duration::from_secs(2 * LEASE_SECS),
            "the parse took {parse:?}, not long enough to outlast the lease of {LEASE_SECS} s"
        );
        assert_eq!(job["status"], "succeeded", "{job}");
        assert_eq!(job["attempts"], 1, "{job}");
        assert_eq!(job["error"], Value::Null, "{job}");
        let doc: Value = server
            .get(&format!("/v1/documents/{}", job["document_id"].as_str().unwrap()), &key)
            .json()
            .unwrap();
        assert_eq!(doc["status"], "ready", "{doc}");
        let stats: Value = server.get("/v1/stats", &key).json().unwrap();
        assert_eq!(stats["database_chunks"], doc["chunk_count"], "{stats}");
        assert_eq!(stats["bm25_chunks"], doc["chunk_count"], "{stats}");
        assert_eq!(stats["dense_chunks"], doc["chunk_count"], "{stats}");
        assert!(
            !server.log_text().contains("recovered an interrupted ingestion job"),
            "{}",
            server.log_text()
        );
    }
}
