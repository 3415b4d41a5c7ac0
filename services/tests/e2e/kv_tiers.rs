//! The tiered KV cache through `docqa serve`: a document read before a clean restart is answered from
//! the disk tier afterwards (its prompt tokens come from the cache, and `/metrics` and `/v1/stats` count
//! the blocks brought back from disk), and deleting the document removes its block files. Blocks are
//! written through to disk as they are computed, so a document also survives a crash.

use std::path::Path;

use crate::support;

use serde_json::Value;
use support::{Database, Options, Server};

fn ask(server: &Server, key: &str, doc: &str, question: &str) -> Value {
    server.ask(key, (doc, "long"), question, 8)
}

fn block_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map_while(Result::ok)
        .map(|e| match e.path().is_dir() {
            true => block_files(&e.path()),
            false => usize::from(e.path().extension().is_some_and(|x| x == "kv")),
        })
        .sum()
}

fn metric(server: &Server, line_start: &str) -> f64 {
    let text = server
        .http
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in /metrics"))
}

/// What [`read_article`] leaves: the server, the tenant's key, the document, the article's questions
/// with their answers, and the prompt tokens of the first question.
type Read = (Server, String, String, Vec<(String, Vec<String>)>, u64);

/// Starts a server where tenant `tenant` uploads the first `chars` characters of SQuAD article
/// `article` and asks its first question on the long path.
fn read_article(tenant: &str, article: usize, chars: usize) -> Read {
    let server = Server::start(Options::new(Database::Sqlite).arg("--kv-cache-mib", 512));
    let (_, key) = server.tenant(tenant);
    let (title, text, questions) = support::squad_article(article);
    let beginning: String = text.chars().take(chars).collect();
    let (doc, _) = server.ingest(
        &key,
        &format!("{title}.txt"),
        beginning.into_bytes(),
        "text/plain",
    );
    let first = ask(&server, &key, &doc, &questions[0].0);
    assert_eq!(first["route"], "long", "{first}");
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap();
    (server, key, doc, questions, prompt_tokens)
}

/// Asks `question` about `doc` on a restarted server and checks that nearly all of the document's
/// `prompt_tokens` came from the cache, its blocks counted as disk hits; returns the cached tokens.
fn asked_again_from_disk(
    server: &Server,
    key: &str,
    doc: &str,
    question: &str,
    prompt_tokens: u64,
) -> u64 {
    let second = ask(server, key, doc, question);
    let cached = second["usage"]["cached_prompt_tokens"].as_u64().unwrap();
    assert!(
        cached > prompt_tokens - 200,
        "{cached} of about {prompt_tokens} tokens from the cache"
    );
    let stats: Value = server.get("/v1/stats", key).json().unwrap();
    assert!(
        stats["kv_cache"]["disk_hits"].as_u64().unwrap() >= cached / 16,
        "{stats}"
    );
    cached
}

#[test]
fn a_document_read_before_a_restart_comes_back_from_disk_and_deleting_it_removes_its_files() {
    // The article's first 6,000 characters: about 1,400 tokens, some ninety KV blocks to keep on disk
    // and bring back, at a third of the cost of reading the whole article.
    let (mut server, key, doc, questions, prompt_tokens) = read_article("tiers", 3, 6000);

    server.terminate_keeping_kv();
    let kv_dir = server.data_dir.join("kv");
    let kept = block_files(&kv_dir);
    assert!(
        kept as u64 >= prompt_tokens / 16 - 8,
        "{kept} block files for {prompt_tokens} tokens"
    );

    server.restart();
    let cached = asked_again_from_disk(&server, &key, &doc, &questions[1].0, prompt_tokens);
    assert!(metric(&server, "docqa_kv_tier_hits{tier=\"disk\"} ") >= (cached / 16) as f64);
    let stats: Value = server.get("/v1/stats", &key).json().unwrap();
    assert_eq!(stats["kv_cache"]["tiers_attached"], true);

    let deleted = server.delete(&format!("/v1/documents/{doc}"), &key);
    assert_eq!(deleted.status(), 204);
    let left = block_files(&kv_dir);
    assert!(
        left < kept / 4,
        "{left} of {kept} block files left after the deletion"
    );
}

#[test]
fn a_document_read_survives_a_crash_because_its_blocks_are_written_through_to_disk() {
    let (mut server, key, doc, questions, prompt_tokens) = read_article("crash", 8, 4000);
    // The document stays in the KV cache (nothing is evicted), and its blocks reach the disk anyway.
    let wanted = prompt_tokens / 16 - 8;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut on_disk = 0;
    while std::time::Instant::now() < deadline {
        let stats: Value = server.get("/v1/stats", &key).json().unwrap();
        on_disk = stats["kv_cache"]["disk_blocks"].as_u64().unwrap_or(0);
        if on_disk >= wanted {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        on_disk >= wanted,
        "{on_disk} blocks on disk, {wanted} wanted"
    );

    // `restart` ends the server with SIGKILL: no shutdown copy to disk.
    server.restart();
    asked_again_from_disk(&server, &key, &doc, &questions[1].0, prompt_tokens);
}
