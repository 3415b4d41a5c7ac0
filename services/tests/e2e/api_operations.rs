//! Operating docqa: health, readiness and Prometheus metrics; the OpenAPI document and its offline docs
//! page; local single-user mode (on for loopback, off for other addresses); engine overload (429 with
//! Retry-After); a database that goes away (503, and recovery when it is back); which adapter
//! `/v1/info` says is merged.

use crate::support;

use serde_json::{Value, json};
use support::{Database, Options, Server};

fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name_and_labels} not found in:\n{text}"))
}

on_both_databases! {
    fn health_readiness_metrics_and_the_api_description_are_served(db) {
        let server = Server::start(Options::new(db));
        let health = server.http.get(server.url("/healthz")).send().unwrap();
        assert_eq!(health.status(), 200);
        let ready: Value = server.http.get(server.url("/readyz")).send().unwrap().json().unwrap();
        assert_eq!(ready, json!({ "status": "ready", "database": true, "engine": true, "shutting_down": false }));

        // Two questions about one document: the second reuses the first's prompt prefix. The article's
        // first 1,500 characters: short RAG prompts, which is all the counters need.
        let (_, key) = server.tenant("ops");
        let (doc, questions) = server.ingest_squad_opening(&key, 1, 1500);
        for (q, _) in questions.iter().take(2) {
            let res = server.post("/v1/ask", &key, &json!({ "question": q, "route": "rag", "max_tokens": 8, "scope": { "document_ids": [doc] } }));
            assert_eq!(res.status(), 200);
        }
        let text = server.http.get(server.url("/metrics")).send().unwrap().text().unwrap();
        assert_eq!(metric(&text, "docqa_answers_total{outcome=\"ok\",route=\"rag\"}"), 2.0);
        assert_eq!(metric(&text, "docqa_http_requests_total{method=\"POST\",route=\"/v1/ask\",status=\"200\"}"), 2.0);
        assert_eq!(metric(&text, "docqa_ingestion_jobs{status=\"succeeded\"}"), 1.0);
        assert!(metric(&text, "docqa_engine_kv_blocks_total") > 0.0);
        // Both prompts start with the same system message and "Sources:" header.
        assert!(metric(&text, "docqa_engine_prefix_cache_hit_rate") > 0.0);
        assert!(metric(&text, "docqa_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/ask\"}") >= 2.0);

        // The OpenAPI document lists every route; the docs page renders it.
        let spec: Value = server.http.get(server.url("/openapi.json")).send().unwrap().json().unwrap();
        assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
        let paths = spec["paths"].as_object().unwrap();
        for p in ["/v1/documents", "/v1/documents/{id}", "/v1/documents/{id}/original", "/v1/jobs/{id}",
                  "/v1/jobs/{id}/cancel", "/v1/ask", "/v1/answers/{id}", "/v1/search", "/v1/stats",
                  "/v1/chat/completions", "/v1/models", "/v1/tenants", "/v1/tenants/{id}/keys",
                  "/v1/keys/{id}", "/healthz", "/readyz", "/metrics"] {
            assert!(paths.contains_key(p), "{p} missing from the OpenAPI document");
        }
        assert!(spec["components"]["schemas"]["ErrorBody"].is_object());
        let docs = server.http.get(server.url("/docs")).send().unwrap();
        assert!(docs.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
        let page = docs.text().unwrap();
        assert!(page.contains("/openapi.json") && !page.contains("https://"), "the docs page needs no network");
    }
}

#[test]
fn info_says_which_adapter_is_merged_the_shipped_reader_or_none() {
    let info = |server: &Server| -> Value {
        server
            .http
            .get(server.url("/v1/info"))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let reader = info(&Server::start(Options::new(Database::Sqlite)));
    assert_eq!(reader["adapter"]["name"], "docqa-reader", "{reader}");
    let sum = reader["adapter"]["sha256"].as_str().unwrap_or_default();
    assert!(
        sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_hexdigit()),
        "{reader}"
    );
    let base = info(&Server::start(
        Options::new(Database::Sqlite).arg("--adapter", "none"),
    ));
    assert_eq!(
        base["adapter"],
        json!({ "name": "none", "sha256": null }),
        "{base}"
    );
}

#[test]
fn local_mode_serves_requests_without_a_key_only_when_enabled() {
    let local = Server::start(Options::new(Database::Sqlite).arg("--local-mode", "auto"));
    let res = local.http.get(local.url("/v1/documents")).send().unwrap();
    assert_eq!(res.status(), 200, "loopback + auto: local mode on");
    // A wrong key is still refused in local mode.
    assert_eq!(local.get("/v1/documents", "dq_wrong").status(), 401);

    let public = Server::start(
        Options::new(Database::Sqlite)
            .arg("--local-mode", "auto")
            .arg("--bind", "0.0.0.0:0"),
    );
    let res = public.http.get(public.url("/v1/documents")).send().unwrap();
    assert_eq!(res.status(), 401, "non-loopback + auto: keys required");
}

#[test]
fn a_full_engine_queue_answers_429_with_retry_after_and_loses_nothing() {
    let server = Server::start(Options::new(Database::Sqlite).arg("--max-waiting", 1));
    let (_, key) = server.tenant("busy");
    let (title, text, questions) = support::squad_article(2);
    let (doc, _) = server.ingest(
        &key,
        &format!("{title}.txt"),
        text.into_bytes(),
        "text/plain",
    );
    let statuses: Vec<(u16, Option<String>, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (server, key, doc) = (&server, &key, &doc);
                let q = questions[i % questions.len()].0.clone();
                s.spawn(move || {
                    let res = server.post("/v1/ask", key, &json!({ "question": q, "route": "rag", "max_tokens": 32, "scope": { "document_ids": [doc] } }));
                    let retry = res.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
                    (res.status().as_u16(), retry, res.json().unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = statuses.iter().filter(|(s, _, _)| *s == 200).count();
    let refused: Vec<_> = statuses.iter().filter(|(s, _, _)| *s == 429).collect();
    assert_eq!(ok + refused.len(), 8, "only 200 and 429: {statuses:?}");
    assert!(ok >= 1 && !refused.is_empty(), "{statuses:?}");
    for (_, retry, body) in refused {
        assert_eq!(body["error_type"], "overloaded");
        assert!(retry.as_deref().is_some_and(|r| r.parse::<u64>().is_ok()));
    }
    // Once the queue drains, the same question is answered.
    let res = server.post(
        "/v1/ask",
        &key,
        &json!({ "question": questions[0].0, "route": "rag", "max_tokens": 8 }),
    );
    assert_eq!(res.status(), 200);
}

#[test]
fn a_database_that_goes_away_answers_503_and_recovers() {
    if support::postgres_url().is_none() {
        return;
    }
    let server = Server::start(Options::new(Database::Postgres));
    let (_, key) = server.tenant("db");
    assert_eq!(server.get("/v1/documents", &key).status(), 200);
    let name = server.database_name().unwrap();
    support::psql(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"));
    support::psql(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
    ));
    let res = server.get("/v1/documents", &key);
    assert_eq!(res.status(), 503);
    assert!(res.headers().contains_key("retry-after"));
    assert_eq!(res.json::<Value>().unwrap()["error_type"], "unavailable");
    let ready = server.http.get(server.url("/readyz")).send().unwrap();
    assert_eq!(ready.status(), 503);
    support::psql(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"));
    assert_eq!(server.get("/v1/documents", &key).status(), 200);
    assert_eq!(
        server
            .http
            .get(server.url("/readyz"))
            .send()
            .unwrap()
            .status(),
        200
    );
}

#[test]
fn reindex_rebuilds_lost_indexes_from_the_database() {
    let mut server = Server::start(Options::new(Database::Sqlite));
    let (tenant, key) = server.tenant("re");
    let (title, text, _) = support::squad_article(8);
    let (doc, _) = server.ingest(
        &key,
        &format!("{title}.txt"),
        text.into_bytes(),
        "text/plain",
    );
    let chunks = server
        .get(&format!("/v1/documents/{doc}"), &key)
        .json::<Value>()
        .unwrap()["chunk_count"]
        .as_i64()
        .unwrap();
    assert!(server.terminate());
    std::fs::remove_dir_all(server.data_dir.join("indexes")).unwrap();

    let out = support::succeed(
        std::process::Command::new(env!("CARGO_BIN_EXE_docqa"))
            .arg("reindex")
            .arg("--data-dir")
            .arg(&server.data_dir),
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let expected =
        format!("tenant {tenant}: {chunks} chunks in the database, bm25 {chunks}, dense {chunks}");
    assert!(printed.contains(&expected), "{printed}");
    assert!(
        server
            .data_dir
            .join("indexes")
            .join(&tenant)
            .join("bm25")
            .exists()
    );

    server.restart();
    let stats: Value = server.get("/v1/stats", &key).json().unwrap();
    assert_eq!(stats["bm25_chunks"].as_i64(), Some(chunks));
    assert_eq!(stats["dense_chunks"].as_i64(), Some(chunks));
    let hits: Value = server
        .post(
            "/v1/search",
            &key,
            &json!({ "query": "oil crisis embargo", "mode": "bm25" }),
        )
        .json()
        .unwrap();
    assert_eq!(hits["hits"][0]["document_id"], doc.as_str());
}
