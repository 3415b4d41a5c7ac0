//! Ingestion runs in a bounded budget, in a child process: hostile uploads fail with the typed error
//! that names the limit they break while the server's own memory stays small; a parse that needs
//! more memory than `--ingest-memory-mib` or more time than `--parse-timeout-secs` is stopped and
//! says so; a cancel stops a running parse within a second; ordinary documents still ingest.

use crate::parse_support::{pdf_bytes, text_pdf};
use crate::support::{Database, Options, Server};

use std::io::Write;
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::write::ZlibEncoder;
use lopdf::{Object, Stream, dictionary};
use serde_json::Value;

/// The bound on the server process's peak resident memory while it refuses hostile uploads.
const SERVER_PEAK_BYTES: u64 = 1536 << 20;

/// HTML nested 500 deep (under the depth limit), `blocks` times over: legal, and slow to build a
/// tree of (the tree builder's work per tag grows with the open elements).
fn slow_html(blocks: usize) -> Vec<u8> {
    let block = format!("{}x{}", "<div>".repeat(500), "</div>".repeat(500));
    format!("<html><body>{}</body></html>", block.repeat(blocks)).into_bytes()
}

/// Blocks of [`slow_html`] whose parse outlasts a one-second deadline, and a half-second wait before
/// a cancel, with room to spare (1,000 blocks parsed in under a second on a quiet two-core machine).
const SLOW_BLOCKS: usize = 2500;

/// A one-page PDF whose content stream inflates to a gibibyte (about a megabyte on disk).
fn pdf_bomb() -> Vec<u8> {
    let mut doc = text_pdf("Bomb", &[&["A page of text."]]);
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::best());
    encoder
        .write_all(b"BT /F1 12 Tf 72 720 Td (Hello) Tj ET\n")
        .unwrap();
    let spaces = vec![b' '; 1 << 20];
    for _ in 0..1024 {
        encoder.write_all(&spaces).unwrap();
    }
    let stream = Stream::new(
        dictionary! { "Filter" => "FlateDecode" },
        encoder.finish().unwrap(),
    );
    let bomb = doc.add_object(stream);
    let page = *doc.get_pages().values().next().unwrap();
    doc.get_dictionary_mut(page)
        .unwrap()
        .set("Contents", Object::Reference(bomb));
    pdf_bytes(&mut doc)
}

fn vm_hwm_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib << 10
}

/// Process ids of the server's running parse workers.
fn parse_workers(server_pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            parent == Some(server_pid)
                && String::from_utf8_lossy(&cmdline).contains("ingest-worker")
        })
        .collect()
}

/// Ingests a short text and requires it to succeed: the bounds leave ordinary documents alone.
fn a_small_text_ingests(server: &Server, key: &str) {
    let text = b"The harbour dues were paid in full on Monday.".to_vec();
    let (_, job) = server.ingest(key, "small.txt", text, "text/plain");
    assert_eq!(job["status"], "succeeded", "{job}");
}

/// Uploads one file and returns its job id.
fn upload(server: &Server, key: &str, name: &str, bytes: Vec<u8>, mime: &str) -> String {
    let res = server.upload(key, &[(name, bytes, mime)], None);
    assert_eq!(res.status(), 202, "upload of {name} accepted");
    let v: Value = res.json().unwrap();
    v["job_id"].as_str().unwrap().to_string()
}

/// Ingests and requires failure with the error naming `limit`; returns the error.
fn fails_with_limit(server: &Server, key: &str, name: &str, bytes: Vec<u8>, limit: &str) -> String {
    let (doc, job) = server.ingest(key, name, bytes, "application/octet-stream");
    assert_eq!(job["status"], "failed", "{name}: {job}");
    let error = job["error"].as_str().unwrap().to_string();
    assert!(
        error.contains(&format!("the {limit} limit")),
        "{name} fails naming the {limit} limit: {error}"
    );
    let d: Value = server
        .get(&format!("/v1/documents/{doc}"), key)
        .json()
        .unwrap();
    assert_eq!(d["status"], "failed", "{d}");
    assert_eq!(d["error"].as_str(), Some(error.as_str()), "{d}");
    error
}

#[test]
fn hostile_uploads_fail_naming_their_limits_while_the_server_stays_under_1_5_gb() {
    let server = Server::start(Options::new(Database::Sqlite));
    let (_, key) = server.tenant("hostile");
    let deep = format!("<html><body>{}deep</body></html>", "<div>".repeat(100_000));
    fails_with_limit(
        &server,
        &key,
        "deep.html",
        deep.into_bytes(),
        "nesting_depth",
    );
    fails_with_limit(&server, &key, "bomb.pdf", pdf_bomb(), "inflated_bytes");
    let line = "lorem ipsum dolor sit amet ".repeat((63 << 20) / 27);
    let one_line = format!("<html><body><span>{line}</span></body></html>");
    fails_with_limit(
        &server,
        &key,
        "one-line.html",
        one_line.into_bytes(),
        "line_chars",
    );
    let peak = vm_hwm_bytes(server.pid());
    assert!(
        peak < SERVER_PEAK_BYTES,
        "the server's peak resident memory is {} MiB",
        peak >> 20
    );
    a_small_text_ingests(&server, &key);
}

#[test]
fn a_parse_that_needs_more_memory_than_the_ceiling_fails_with_the_memory_limit() {
    let server = Server::start(Options::new(Database::Sqlite).arg("--ingest-memory-mib", 64));
    let (_, key) = server.tenant("memory");
    a_small_text_ingests(&server, &key);
    let error = fails_with_limit(&server, &key, "slow.html", slow_html(3000), "memory");
    assert!(error.contains("64 MiB"), "{error}");
    assert!(parse_workers(server.pid()).is_empty());
}

#[test]
fn a_parse_past_its_deadline_is_stopped_and_fails_with_the_time_limit() {
    let server = Server::start(Options::new(Database::Sqlite).arg("--parse-timeout-secs", 1));
    let (_, key) = server.tenant("deadline");
    let started = Instant::now();
    let error = fails_with_limit(&server, &key, "slow.html", slow_html(SLOW_BLOCKS), "time");
    assert!(error.contains("longer than 1 s"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "stopped at the deadline, not at the end of the parse: {:?}",
        started.elapsed()
    );
    assert!(parse_workers(server.pid()).is_empty());
}

#[test]
fn cancelling_a_running_parse_stops_it_within_a_second() {
    let server = Server::start(Options::new(Database::Sqlite));
    let (_, key) = server.tenant("cancel");
    let job = upload(
        &server,
        &key,
        "slow.html",
        slow_html(SLOW_BLOCKS),
        "text/html",
    );
    let waiting = Instant::now();
    while parse_workers(server.pid()).is_empty() {
        assert!(
            waiting.elapsed() < Duration::from_secs(30),
            "no parse worker started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let res = server.post(&format!("/v1/jobs/{job}/cancel"), &key, &Value::Null);
    assert_eq!(res.status(), 200);
    let cancelled = Instant::now();
    while !parse_workers(server.pid()).is_empty() {
        assert!(
            cancelled.elapsed() < Duration::from_secs(1),
            "the parse worker still runs {:?} after the cancel",
            cancelled.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let v = server.wait_job(&key, &job);
    assert_eq!(v["status"], "cancelled", "{v}");
}
