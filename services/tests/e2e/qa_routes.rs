//! The answer paths and the router, end to end on the real model (CPU engine, SQLite): a document that
//! fits the RAG budget is read whole; a specific question on a longer one goes through Self-Route; a
//! global question reads the whole document; the next question on it reuses its cached KV; RAG
//! passages are laid out in document order; dropping a document's cached KV, or deleting the document,
//! makes the next long read compute it anew; an explicit long route beyond the model's window streams
//! through a sink window.

use crate::support;

use serde_json::{Value, json};
use support::{Database, Options, Server};

fn ask(server: &Server, key: &str, doc: &str, question: &str, route: &str) -> Value {
    server.ask(key, (doc, route), question, 24)
}

/// Uploads SQuAD article `index` as a text file; returns its document id and questions.
fn ingest_article(
    server: &Server,
    key: &str,
    index: usize,
) -> (String, Vec<(String, Vec<String>)>) {
    let (title, text, questions) = support::squad_article(index);
    let (doc, _) = server.ingest(
        key,
        &format!("{title}.txt"),
        text.into_bytes(),
        "text/plain",
    );
    (doc, questions)
}

fn reasons(a: &Value) -> String {
    a["route_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[test]
fn the_router_reads_small_documents_whole_self_routes_specific_questions_and_reuses_cached_kv() {
    // The router's decisions as written for the base model, which never refuses: with the reader, a
    // refusal adds Self-Route fallbacks this test does not expect (its failure with the reader is
    // still to be read).
    let server = Server::start(
        Options::new(Database::Sqlite)
            .arg("--kv-cache-mib", 512)
            .arg("--adapter", "none"),
    );
    let (_, key) = server.tenant("qa");
    let (small, _) = server.ingest(
        &key,
        "memo.txt",
        b"Memo. The audit starts on 4 March and lasts two weeks. Maria Lopez leads it.".to_vec(),
        "text/plain",
    );
    // The article's first 6,000 characters: about 1,400 tokens, beyond the 1,024-token RAG budget, at
    // a third of a whole article's reads (each about 3,650 tokens) on the CPU.
    let (title, text, questions) = support::squad_article(3);
    let text: String = text.chars().take(6000).collect();
    let (article, _) = server.ingest(
        &key,
        &format!("{title}.txt"),
        text.clone().into_bytes(),
        "text/plain",
    );

    // Fits the 1,024-token RAG budget: read whole, no retrieval needed.
    let a = ask(&server, &key, &small, "Who leads the audit?", "auto");
    assert_eq!(a["route"], "long", "{a}");
    assert!(reasons(&a).contains("read whole"), "{}", reasons(&a));
    assert_eq!(a["signals"]["fits_rag_budget"], true);
    assert!(a["passages"].as_array().unwrap().is_empty());

    // A specific question on a document larger than the budget: Self-Route, RAG tried first.
    let (question, _) = &questions[0];
    let a = ask(&server, &key, &article, question, "auto");
    assert!(
        reasons(&a).contains("sought first in the most relevant passages"),
        "{}",
        reasons(&a)
    );
    let s = &a["signals"];
    assert_eq!(s["fits_rag_budget"], false);
    assert_eq!(s["fits_model_window"], true);
    assert!(s["rag_cost_tokens"].as_u64().unwrap() < s["long_cost_tokens"].as_u64().unwrap());
    if a["self_route_fallback"] == true {
        assert_eq!(a["route"], "long");
    } else {
        assert_eq!(a["route"], "rag");
        assert!(a["usage"]["prompt_tokens"].as_u64().unwrap() <= 1024);
    }

    // RAG passages: numbered in document order.
    let a = ask(&server, &key, &article, question, "rag");
    let ordinals: Vec<i64> = a["passages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ordinal"].as_i64().unwrap())
        .collect();
    assert!(ordinals.len() >= 2, "{a}");
    assert!(
        ordinals.windows(2).all(|w| w[0] < w[1]),
        "passages not in document order: {ordinals:?}"
    );
    let numbers: Vec<u64> = a["passages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());

    // A global question reads the whole document; its citations quote the document.
    let first = ask(
        &server,
        &key,
        &article,
        "Summarize the main points of the document.",
        "auto",
    );
    assert_eq!(first["route"], "long", "{first}");
    assert!(
        reasons(&first).contains("whole document"),
        "{}",
        reasons(&first)
    );
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 1024, "{prompt_tokens} prompt tokens");
    for c in first["citations"].as_array().unwrap() {
        let quote = c["quote"].as_str().unwrap();
        assert!(
            !quote.is_empty() && text.contains(quote),
            "quote not from the document: {quote:?}"
        );
    }

    // The next question on it: the document's KV is cached, so the router takes the long path and
    // only the question is computed.
    let (question, _) = &questions[1];
    let second = ask(&server, &key, &article, question, "auto");
    assert_eq!(second["route"], "long", "{}", reasons(&second));
    assert!(
        reasons(&second).contains("already read for an earlier question"),
        "{}",
        reasons(&second)
    );
    let cached = second["usage"]["cached_prompt_tokens"].as_u64().unwrap();
    let total = second["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        total - cached < 96,
        "{cached} of {total} prompt tokens cached"
    );
    assert!(
        second["signals"]["long_seconds"].as_f64().is_some() && reasons(&second).contains(" s)"),
        "{}: {}",
        second["signals"],
        reasons(&second)
    );

    // Another tenant with the same text gets no cache hit from the first one's KV: prefix caches are
    // per tenant, so timing cannot tell it what the first tenant has read. Its copy is the document's
    // first 2,500 characters (about 600 tokens), so its prompts share that many leading tokens with
    // the first tenant's cached one, and any sharing would show as a hit; the whole document would
    // cost three longer reads below for nothing more.
    let (_, other_key) = server.tenant("other");
    let beginning: String = text.chars().take(2500).collect();
    let (copy, _) = server.ingest(
        &other_key,
        &format!("{title}.txt"),
        beginning.into_bytes(),
        "text/plain",
    );
    let other = ask(&server, &other_key, &copy, question, "long");
    assert!(
        other["usage"]["cached_prompt_tokens"].as_u64().unwrap() < 64,
        "{}",
        other["usage"]
    );

    // Dropping a document's cached KV frees its blocks and keeps the document: the next long read
    // computes it anew. The first tenant's cache of its own copy is untouched by either drop.
    let dropped: Value = server
        .delete(&format!("/v1/documents/{copy}/kv-cache"), &other_key)
        .json()
        .unwrap();
    assert_eq!(dropped["document_id"], copy.as_str());
    assert!(dropped["dropped_blocks"].as_u64().unwrap() > 4, "{dropped}");
    let recomputed = ask(&server, &other_key, &copy, question, "long");
    assert!(
        recomputed["usage"]["cached_prompt_tokens"]
            .as_u64()
            .unwrap()
            < 64,
        "{}",
        recomputed["usage"]
    );
    // Dropping the tenant's whole cache takes the recomputed copy (and its RAG prompts) too.
    let dropped: Value = server.delete("/v1/kv-cache", &other_key).json().unwrap();
    assert!(dropped["dropped_blocks"].as_u64() > Some(4), "{dropped}");
    let again = ask(&server, &other_key, &copy, question, "long");
    assert!(
        again["usage"]["cached_prompt_tokens"].as_u64().unwrap() < 64,
        "{}",
        again["usage"]
    );
    let still_cached = ask(&server, &key, &article, question, "long");
    assert!(
        still_cached["usage"]["cached_prompt_tokens"]
            .as_u64()
            .unwrap()
            > 1000,
        "{}",
        still_cached["usage"]
    );
    let unknown = server.delete("/v1/documents/no-such-document/kv-cache", &key);
    assert_eq!(unknown.status(), 404);

    // Deleting the document drops its cached KV: the same file uploaded again is computed anew.
    assert_eq!(
        server
            .delete(&format!("/v1/documents/{article}"), &key)
            .status(),
        204
    );
    let (again, _) = server.ingest(
        &key,
        &format!("{title}.txt"),
        text.into_bytes(),
        "text/plain",
    );
    let fresh = ask(&server, &key, &again, question, "long");
    assert!(
        fresh["usage"]["cached_prompt_tokens"].as_u64().unwrap() < 64,
        "{}",
        fresh["usage"]
    );
}

#[test]
fn an_explicit_long_route_beyond_the_window_streams_through_a_sink_window_and_reuses_it() {
    // A 32 MiB bf16 KV cache holds about 1,450 tokens, so the article's first 10,000 characters (about
    // 2,400 tokens) are beyond the long path's window: route=long streams them through 4 sink tokens and
    // a window of about 900 recent tokens.
    let server = Server::start(Options::new(Database::Sqlite).arg("--kv-cache-mib", 32));
    let (_, key) = server.tenant("qa");
    let (doc, questions) = server.ingest_squad_opening(&key, 3, 10_000);
    let (question, _) = &questions[0];
    let first = ask(&server, &key, &doc, question, "long");
    assert_eq!(first["route"], "long", "{first}");
    assert!(
        reasons(&first).contains("sliding window"),
        "{}",
        reasons(&first)
    );
    assert_eq!(first["signals"]["fits_model_window"], false);
    // The path asked for tells its cost (with a time once the engine has read a prompt: below).
    assert!(
        reasons(&first).contains("tokens to read the whole document"),
        "{}",
        reasons(&first)
    );
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt_tokens > 2000,
        "the whole document was read: {prompt_tokens} tokens"
    );
    assert!(
        !first["answer"].as_str().unwrap().trim().is_empty(),
        "{first}"
    );

    // The next question streams from the cached sinks and window: only the question is computed.
    let (question, _) = &questions[1];
    let second = ask(&server, &key, &doc, question, "long");
    let cached = second["usage"]["cached_prompt_tokens"].as_u64().unwrap();
    let total = second["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        total - cached < 96,
        "{cached} of {total} prompt tokens cached"
    );
    assert!(
        second["signals"]["long_seconds"].as_f64().is_some() && reasons(&second).contains(" s)"),
        "{}: {}",
        second["signals"],
        reasons(&second)
    );

    // Auto does not stream: retrieval picks the passages, and the reasons say why.
    let a = ask(&server, &key, &doc, question, "auto");
    assert_eq!(a["route"], "rag");
    // The reason names the limit it was held to: the smaller of the context and the KV cache.
    let window = a["signals"]["model_window"].as_u64().unwrap();
    let scope = a["signals"]["scope_tokens"].as_u64().unwrap();
    assert!(
        window > 0 && window < scope,
        "window {window}, scope {scope}"
    );
    assert!(
        reasons(&a).contains("more than the model reads at once here ("),
        "{}",
        reasons(&a)
    );
}

#[test]
fn an_explicit_long_route_is_refused_when_the_kv_cache_cannot_hold_a_window() {
    // Two KV blocks (1 MiB of bf16): too small to stream anything through.
    let server = Server::start(Options::new(Database::Sqlite).arg("--kv-cache-mib", 1));
    let (_, key) = server.tenant("qa");
    let (doc, _) = ingest_article(&server, &key, 3);
    let res = server.post("/v1/ask", &key, &json!({ "question": "What is it about?", "route": "long", "scope": { "document_ids": [doc] } }));
    assert_eq!(res.status(), 422);
    let body: Value = res.json().unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("too small to stream"),
        "{body}"
    );
}

#[test]
fn a_server_with_an_int8_kv_cache_answers_from_the_whole_document() {
    let server = Server::start(Options::new(Database::Sqlite).arg("--kv-dtype", "int8"));
    let (_, key) = server.tenant("qa");
    let (memo, _) = server.ingest(
        &key,
        "memo.txt",
        b"Memo. The audit starts on 4 March and lasts two weeks. Maria Lopez leads it.".to_vec(),
        "text/plain",
    );
    let a = ask(&server, &key, &memo, "Who leads the audit?", "long");
    assert_eq!(a["route"], "long", "{a}");
    assert!(a["usage"]["prompt_tokens"].as_u64().unwrap() > 20, "{a}");
    assert!(!a["answer"].as_str().unwrap().trim().is_empty(), "{a}");
}

#[test]
fn yarn_stretches_the_context_the_server_reports_and_answers_with() {
    let server = Server::start(
        Options::new(Database::Sqlite)
            .arg("--long-context", "yarn")
            .arg("--rope-factor", 2),
    );
    let (_, key) = server.tenant("qa");
    let info: Value = server.get("/v1/info", &key).json().unwrap();
    assert_eq!(info["trained_context"], 8192, "{info}");
    assert_eq!(info["max_context"], 16384, "{info}");
    let (memo, _) = server.ingest(
        &key,
        "memo.txt",
        b"Memo. The audit starts on 4 March and lasts two weeks. Maria Lopez leads it.".to_vec(),
        "text/plain",
    );
    let a = ask(&server, &key, &memo, "Who leads the audit?", "long");
    assert_eq!(a["route"], "long", "{a}");
    assert!(!a["answer"].as_str().unwrap().trim().is_empty(), "{a}");
    assert!(
        !reasons(&a).contains("YaRN"),
        "a short scope needs no stretching: {}",
        reasons(&a)
    );
}
