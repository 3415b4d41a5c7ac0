//! End to end through real HTTP: upload real documents (a SQuAD article as text, a generated PDF),
//! follow their jobs, list, ask with route=rag (plain and streamed), delete, and see the document
//! gone from search — on SQLite and on PostgreSQL.

use crate::parse_support;
use crate::support;

use serde_json::{Value, json};
use support::{Database, Options, Server};

on_both_databases! {
    fn a_document_goes_from_upload_to_answer_to_deletion(db) {
        // The lifecycle and its citations, on the base model, which always answers: the shipped
        // reader rightly refuses this question when retrieval leaves out the paragraph that says it
        // (the reader's own answers are tested in reader.rs).
        let server = Server::start(Options::new(db).arg("--adapter", "none"));
        let (_, key) = server.tenant("acme");
        let (title, text, questions) = support::squad_article(0);
        let (doc, job) = server.ingest(&key, &format!("{title}.txt"), text.into_bytes(), "text/plain");
        assert_eq!(job["status"], "succeeded", "{job}");
        assert_eq!(job["percent"], 100.0);
        let steps: Vec<&str> = job["steps"].as_array().unwrap().iter().map(|s| s["state"].as_str().unwrap()).collect();
        assert_eq!(steps, ["done", "done", "done", "done"]);

        let got: Value = server.get(&format!("/v1/documents/{doc}"), &key).json().unwrap();
        assert_eq!(got["status"], "ready");
        assert_eq!(got["format"], "text");
        assert!(got["chunk_count"].as_i64().unwrap() > 5, "{got}");

        // The original comes back byte for byte.
        let original = server.get(&format!("/v1/documents/{doc}/original"), &key);
        assert_eq!(original.status(), 200);
        assert_eq!(original.bytes().unwrap().len() as i64, got["size_bytes"].as_i64().unwrap());

        // A question whose answer is in the article: the cited chunk holds the answer.
        let (question, answers) = &questions[0];
        let res = server.post("/v1/ask", &key, &json!({
            "question": question, "route": "rag", "scope": { "document_ids": [doc] }, "max_tokens": 24,
        }));
        assert_eq!(res.status(), 200);
        let answer: Value = res.json().unwrap();
        assert_eq!(answer["route"], "rag");
        assert!(!answer["route_reasons"].as_array().unwrap().is_empty());
        let citations = answer["citations"].as_array().unwrap();
        assert!(!citations.is_empty(), "{answer}");
        assert!(citations.iter().all(|c| c["document_id"] == doc.as_str() && c["page_start"].as_i64() == Some(1)));
        assert!(answer["usage"]["prompt_tokens"].as_u64().unwrap() <= 1024);
        assert!(answer["usage"]["completion_tokens"].as_u64().unwrap() >= 1);
        let search: Value = server.post("/v1/search", &key, &json!({ "query": question, "k": 5 })).json().unwrap();
        let top_texts: Vec<&str> = search["hits"].as_array().unwrap().iter().map(|h| h["text"].as_str().unwrap()).collect();
        assert!(top_texts.iter().any(|t| answers.iter().any(|a| t.contains(a.as_str()))), "answer {answers:?} not in the top 5 chunks");

        // The stored answer matches.
        let stored: Value = server.get(&format!("/v1/answers/{}", answer["answer_id"].as_str().unwrap()), &key).json().unwrap();
        assert_eq!(stored["status"], "succeeded");
        assert_eq!(stored["answer"], answer["answer"]);
        assert_eq!(stored["route"], "rag");

        // The document's history holds the question; its text holds each citation's quote in its span.
        let history: Value = server.get(&format!("/v1/documents/{doc}/answers"), &key).json().unwrap();
        let ids: Vec<&str> = history["answers"].as_array().unwrap().iter().map(|a| a["answer_id"].as_str().unwrap()).collect();
        assert_eq!(ids, [answer["answer_id"].as_str().unwrap()]);
        assert_eq!(history["answers"][0]["question"], question.as_str());
        let view: Value = server.get(&format!("/v1/documents/{doc}/text"), &key).json().unwrap();
        assert_eq!(view["page_starts"], json!([0]));
        let chars: Vec<char> = view["text"].as_str().unwrap().chars().collect();
        for c in citations {
            let span: String = chars[c["char_start"].as_u64().unwrap() as usize..c["char_end"].as_u64().unwrap() as usize].iter().collect();
            assert!(span.contains(c["quote"].as_str().unwrap()), "{span:?} lacks the quote {}", c["quote"]);
        }

        // Streaming: token events that add up to the final answer event.
        let res = server.req(reqwest::Method::POST, "/v1/ask", Some(&key))
            .json(&json!({ "question": question, "route": "rag", "stream": true, "max_tokens": 24 }))
            .send().unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
        let events = support::read_events(res);
        let (last_name, last_data) = events.last().expect("events");
        assert_eq!(last_name, "answer");
        let last: Value = serde_json::from_str(last_data).unwrap();
        let streamed: String = events.iter().filter(|(n, _)| n == "token")
            .map(|(_, d)| serde_json::from_str::<Value>(d).unwrap()["text"].as_str().unwrap().to_string()).collect();
        assert!(events.iter().filter(|(n, _)| n == "token").count() >= 2);
        assert_eq!(streamed.trim(), last["answer"].as_str().unwrap());
        // Greedy decoding over the same prompt gives the same answer as the unstreamed call.
        assert_eq!(last["answer"], answer["answer"]);

        // Delete: gone from get, list and search.
        assert_eq!(server.delete(&format!("/v1/documents/{doc}"), &key).status(), 204);
        assert_eq!(server.get(&format!("/v1/documents/{doc}"), &key).status(), 404);
        for gone in ["text", "answers"] {
            assert_eq!(server.get(&format!("/v1/documents/{doc}/{gone}"), &key).status(), 404);
        }
        let list: Value = server.get("/v1/documents", &key).json().unwrap();
        assert_eq!(list["total"], 0);
        let search: Value = server.post("/v1/search", &key, &json!({ "query": question })).json().unwrap();
        assert_eq!(search["hits"].as_array().unwrap().len(), 0);
        let res = server.post("/v1/ask", &key, &json!({ "question": question, "scope": { "document_ids": [doc] } }));
        assert_eq!(res.status(), 404);
    }

    fn several_files_in_one_upload_become_documents_of_a_collection(db) {
        let server = Server::start(Options::new(db));
        let (_, key) = server.tenant("acme");
        let mut pdf = parse_support::text_pdf("Quarterly report", &[
            &["The widget factory opened in Lyon in 1998.", "It employs four hundred people."],
            &["Revenue grew by twelve percent in the third quarter.", "The board approved a new plant."],
        ]);
        let pdf = parse_support::pdf_bytes(&mut pdf);
        let res = server.upload(&key, &[
            ("report.pdf", pdf, "application/pdf"),
            ("notes.md", b"# Notes\n\nThe plant will be built in Porto.\n".to_vec(), "text/markdown"),
        ], Some("reports"));
        assert_eq!(res.status(), 202);
        let v: Value = res.json().unwrap();
        let docs = v["documents"].as_array().unwrap();
        assert_eq!(docs.len(), 2);
        for d in docs {
            let job = server.wait_job(&key, d["job_id"].as_str().unwrap());
            assert_eq!(job["status"], "succeeded", "{job}");
        }
        let list: Value = server.get("/v1/documents?collection=reports&status=ready", &key).json().unwrap();
        assert_eq!(list["total"], 2);
        let pdf_doc = list["documents"].as_array().unwrap().iter().find(|d| d["format"] == "pdf").unwrap();
        assert_eq!(pdf_doc["page_count"], 2);
        assert_eq!(pdf_doc["title"], "Quarterly report");
        // Paging.
        let page: Value = server.get("/v1/documents?limit=1&offset=1", &key).json().unwrap();
        assert_eq!(page["documents"].as_array().unwrap().len(), 1);
        assert_eq!(page["total"], 2);
        // A search scoped to the collection finds the PDF's second page.
        let hits: Value = server.post("/v1/search", &key, &json!({
            "query": "revenue third quarter", "scope": { "collection": "reports" }, "mode": "bm25",
        })).json().unwrap();
        let top = &hits["hits"][0];
        assert_eq!(top["document_id"], pdf_doc["id"]);
        assert_eq!(top["page_end"], 2);
        // Asking about the collection uses both documents' chunks.
        let answer: Value = server.post("/v1/ask", &key, &json!({
            "question": "Where will the new plant be built?", "route": "rag",
            "scope": { "collection": "reports" }, "max_tokens": 16,
        })).json().unwrap();
        assert_eq!(answer["route"], "rag", "{answer}");
    }
}

#[test]
fn a_job_whose_steps_outlast_the_lease_is_not_taken_for_a_crashed_one() {
    // A 1-second lease: embedding a whole SQuAD article takes longer than that between two progress
    // reports on a CPU, so without a heartbeat of its own the sweeper would requeue the running job.
    let server = Server::start(Options::new(Database::Sqlite).arg("--job-lease-secs", 1));
    let (_, key) = server.tenant("lease");
    let (title, text, _) = support::squad_article(1);
    let (_, job) = server.ingest(
        &key,
        &format!("{title}.txt"),
        text.into_bytes(),
        "text/plain",
    );
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"], 1, "{job}");
}

#[test]
fn a_document_cancelled_while_embedding_stays_cancelled_with_no_chunks_across_a_crash() {
    let mut server = Server::start(Options::new(Database::Sqlite));
    let (_, key) = server.tenant("embed-cancel");
    let text =
        "The harbour master logged every ship that entered the bay that year. ".repeat(15_000);
    let res = server.upload(&key, &[("log.txt", text.into_bytes(), "text/plain")], None);
    assert_eq!(res.status(), 202);
    let v: Value = res.json().unwrap();
    let (doc, job) = (
        v["document_id"].as_str().unwrap(),
        v["job_id"].as_str().unwrap(),
    );
    let started = std::time::Instant::now();
    loop {
        let j: Value = server.get(&format!("/v1/jobs/{job}"), &key).json().unwrap();
        if j["step"] == "embed" {
            break;
        }
        assert_eq!(
            j["status"]
                .as_str()
                .map(|s| s == "running" || s == "queued"),
            Some(true),
            "{j}"
        );
        assert!(
            started.elapsed().as_secs() < 120,
            "never reached the embed step: {j}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let facts: Value = server
        .get(&format!("/v1/documents/{doc}"), &key)
        .json()
        .unwrap();
    assert!(
        facts["chunk_count"].as_i64().unwrap() > 100,
        "chunked before embedding: {facts}"
    );
    let res = server.post(&format!("/v1/jobs/{job}/cancel"), &key, &json!({}));
    assert_eq!(res.status(), 200);
    assert_eq!(server.wait_job(&key, job)["status"], "cancelled");
    // The cancel settles the document with the job: killed before its worker noticed, the server
    // finds both cancelled at its next start.
    server.kill();
    server.restart();
    let got: Value = server
        .get(&format!("/v1/documents/{doc}"), &key)
        .json()
        .unwrap();
    assert_eq!(got["status"], "cancelled", "{got}");
    assert_eq!(got["chunk_count"], Value::Null, "{got}");
    let stats: Value = server.get("/v1/stats", &key).json().unwrap();
    assert_eq!(stats["database_chunks"], 0, "{stats}");
}
