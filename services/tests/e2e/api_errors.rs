//! Every error status the API defines, provoked for real: 401, 403, 404, 405, 409, 413, 415, 422 and 429
//! (with Retry-After), each with the one error body `{"error_type", "message"}`; and bad input loses
//! nothing (the data before the error is intact after it).

use crate::support;

use serde_json::{Value, json};
use support::{Options, Server};

fn assert_error(
    res: reqwest::blocking::Response,
    status: u16,
    error_type: &str,
) -> reqwest::header::HeaderMap {
    assert_eq!(res.status().as_u16(), status);
    let headers = res.headers().clone();
    let body: Value = res.json().expect("error body is JSON");
    assert_eq!(body["error_type"], error_type, "{body}");
    assert!(
        !body["message"].as_str().unwrap_or_default().is_empty(),
        "{body}"
    );
    headers
}

on_both_databases! {
    fn each_bad_request_gets_its_status_and_error_type(db) {
        let server = Server::start(Options::new(db).arg("--max-upload-bytes", 200_000));
        let (_, key) = server.tenant("t");
        let (doc, job) = server.ingest(&key, "keep.txt", b"The archive keeps every record for ten years.".to_vec(), "text/plain");
        assert_eq!(job["status"], "succeeded");

        // 401: no key, wrong key, malformed header.
        assert_error(server.req(reqwest::Method::GET, "/v1/documents", None).send().unwrap(), 401, "unauthorized");
        assert_error(server.get("/v1/documents", "dq_not_a_real_key"), 401, "unauthorized");
        assert_error(server.req(reqwest::Method::GET, "/v1/documents", None).header("Authorization", "Basic abc").send().unwrap(), 401, "unauthorized");
        // 404: unknown object and unknown route.
        assert_error(server.get("/v1/documents/00000000-0000-0000-0000-000000000000", &key), 404, "not_found");
        assert_error(server.get("/v1/nothing-here", &key), 404, "not_found");
        // 413: larger than the limit.
        assert_error(server.upload(&key, &[("big.txt", vec![b'a'; 300_000], "text/plain")], None), 413, "payload_too_large");
        // 415: a type docqa cannot read, and a body that is not multipart.
        let png = [&[0x89u8, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a][..], &[0u8; 64]].concat();
        assert_error(server.upload(&key, &[("image.png", png, "image/png")], None), 415, "unsupported_media_type");
        assert_error(server.req(reqwest::Method::POST, "/v1/documents", Some(&key)).body("plain").send().unwrap(), 415, "unsupported_media_type");
        // 422: validation of JSON bodies and queries.
        assert_error(server.post("/v1/ask", &key, &json!({ "question": "" })), 422, "validation_error");
        assert_error(server.post("/v1/ask", &key, &json!({ "question": "q", "max_tokens": 100000 })), 422, "validation_error");
        assert_error(server.post("/v1/ask", &key, &json!({ "question": "q", "route": "sideways" })), 422, "validation_error");
        assert_error(server.post("/v1/ask", &key, &json!({ "question": "q", "unknown_field": 1 })), 422, "validation_error");
        assert_error(server.get("/v1/documents?limit=0", &key), 422, "validation_error");
        assert_error(server.get(&format!("/v1/documents?q={}", "a".repeat(30_000)), &key), 422, "validation_error");
        // 405: a path the API serves, with a method it does not take.
        assert_error(server.req(reqwest::Method::PUT, "/v1/documents", Some(&key)).send().unwrap(), 405, "method_not_allowed");
        assert_error(server.req(reqwest::Method::POST, &format!("/v1/documents/{doc}/text"), Some(&key)).send().unwrap(), 405, "method_not_allowed");
        assert_error(server.req(reqwest::Method::POST, "/v1/ask", Some(&key)).header("content-type", "application/json").body("{not json").send().unwrap(), 422, "validation_error");
        // A question within the character limit that the tokenizer splits into thousands of tokens
        // (combining marks) is refused by the token limit before anything runs.
        let marks = format!("a{}", "\u{301}".repeat(3999));
        let res = server.post("/v1/ask", &key, &json!({ "question": marks, "max_tokens": 1 }));
        assert_eq!(res.status(), 422);
        let body: Value = res.json().unwrap();
        assert!(body["message"].as_str().unwrap().contains("tokens long, more than 1536"), "{body}");
        // 413 too for a JSON body over its limit (1 MiB), not 422.
        let long_question = "why? ".repeat(300_000);
        assert_error(server.post("/v1/ask", &key, &json!({ "question": long_question })), 413, "payload_too_large");
        // 409: cancelling a job that has ended.
        assert_error(server.post(&format!("/v1/jobs/{}/cancel", job["job_id"].as_str().unwrap()), &key, &json!({})), 409, "conflict");

        // Nothing was lost: the document is still there and searchable.
        let got: Value = server.get(&format!("/v1/documents/{doc}"), &key).json().unwrap();
        assert_eq!(got["status"], "ready");
        let hits: Value = server.post("/v1/search", &key, &json!({ "query": "archive records", "mode": "bm25" })).json().unwrap();
        assert_eq!(hits["hits"][0]["document_id"], doc.as_str());
    }

    fn a_malformed_pdf_fails_its_job_with_a_reason_and_is_never_searchable(db) {
        let server = Server::start(Options::new(db));
        let (_, key) = server.tenant("t");
        let mut bytes = b"%PDF-1.5\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n".to_vec();
        bytes.extend_from_slice(&[0xffu8; 300]);
        let (doc, job) = server.ingest(&key, "broken.pdf", bytes, "application/pdf");
        assert_eq!(job["status"], "failed", "{job}");
        assert!(job["error"].as_str().unwrap().to_lowercase().contains("pdf"), "{job}");
        let got: Value = server.get(&format!("/v1/documents/{doc}"), &key).json().unwrap();
        assert_eq!(got["status"], "failed");
        // Asking about it: 409 (not ready), never an answer from half a document.
        assert_error(server.post("/v1/ask", &key, &json!({ "question": "what?", "scope": { "document_ids": [doc] } })), 409, "conflict");
    }

    fn a_lost_original_file_is_a_500_for_its_download_and_search_still_works(db) {
        let server = Server::start(Options::new(db));
        let (tenant, key) = server.tenant("t");
        let (doc, job) = server.ingest(&key, "a.txt", b"The vault opens at nine.".to_vec(), "text/plain");
        assert_eq!(job["status"], "succeeded");
        // Someone removes the stored original behind docqa's back.
        std::fs::remove_file(server.data_dir.join("originals").join(&tenant).join(&doc)).unwrap();
        assert_error(server.get(&format!("/v1/documents/{doc}/original"), &key), 500, "internal_error");
        // The document stays searchable: the database and the indexes do not depend on the original.
        let hits: Value = server.post("/v1/search", &key, &json!({ "query": "vault opens", "mode": "bm25" })).json().unwrap();
        assert_eq!(hits["hits"][0]["document_id"], doc.as_str());
    }

    fn a_key_over_its_rate_limit_gets_429_with_retry_after(db) {
        let server = Server::start(Options::new(db).arg("--rate-limit-per-minute", 5));
        let (_, key) = server.tenant("t");
        let statuses: Vec<u16> = (0..8).map(|_| server.get("/v1/documents", &key).status().as_u16()).collect();
        assert_eq!(&statuses[..5], &[200; 5]);
        let res = server.get("/v1/documents", &key);
        let headers = assert_error(res, 429, "rate_limited");
        let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry), "Retry-After {retry}");
        // Other keys are not affected.
        let (_, other) = server.tenant("u");
        assert_eq!(server.get("/v1/documents", &other).status(), 200);
    }
}
