//! Uploads judged on the whole file: a real DOCX whose zip directory lies far beyond its first 64 KiB
//! (a photo stored in `word/media/`) is accepted, ingested and searchable, and a DOCX cut short is
//! refused with 415 and leaves nothing behind — on SQLite and on PostgreSQL.

use crate::parse_support::{docx_with_media, noise, para};
use crate::support;

use serde_json::{Value, json};
use support::{Options, Server};

const DOCX_MIME: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";

/// A DOCX of two paragraphs and a 70 KB incompressible image.
fn docx_with_photo() -> Vec<u8> {
    let body = [
        para(
            None,
            "The lighthouse on Skerry Point was built in 1854 by Alan Stevenson.",
        ),
        para(None, "Its lamp was converted to solar power in 2002."),
    ]
    .concat();
    docx_with_media(&body, &[("image1.jpeg", noise(70_000, 11))])
}

/// Files left in the tenant's originals folder (stored documents and temporary uploads alike).
fn stored_files(server: &Server, tenant: &str) -> usize {
    std::fs::read_dir(server.data_dir.join("originals").join(tenant))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

on_both_databases! {
    fn a_docx_larger_than_the_sniff_window_is_accepted_and_searchable(db) {
        let server = Server::start(Options::new(db));
        let (_, key) = server.tenant("t");
        let bytes = docx_with_photo();
        assert!(bytes.len() > 70_000, "{} bytes", bytes.len());
        let (doc, job) = server.ingest(&key, "lighthouse.docx", bytes, DOCX_MIME);
        assert_eq!(job["status"], "succeeded", "{job}");
        let got: Value = server.get(&format!("/v1/documents/{doc}"), &key).json().unwrap();
        assert_eq!(got["status"], "ready", "{got}");
        assert_eq!(got["format"], "docx", "{got}");
        let hits: Value = server
            .post("/v1/search", &key, &json!({ "query": "Skerry Point lighthouse Stevenson", "mode": "bm25" }))
            .json()
            .unwrap();
        assert_eq!(hits["hits"][0]["document_id"], doc.as_str(), "{hits}");
        let text: Value = server.get(&format!("/v1/documents/{doc}/text"), &key).json().unwrap();
        assert!(text["text"].as_str().unwrap().contains("converted to solar power"), "{text}");
    }

    fn a_docx_cut_short_is_refused_with_415_and_nothing_is_kept(db) {
        let server = Server::start(Options::new(db));
        let (tenant, key) = server.tenant("t");
        let whole = docx_with_photo();
        let cut = whole[..whole.len() - 200].to_vec();
        let res = server.upload(&key, &[("cut.docx", cut, DOCX_MIME)], None);
        assert_eq!(res.status(), 415);
        let body: Value = res.json().unwrap();
        assert_eq!(body["error_type"], "unsupported_media_type", "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("cut.docx") && message.contains("corrupt docx"), "{message}");
        let list: Value = server.get("/v1/documents", &key).json().unwrap();
        assert_eq!(list["total"], 0, "{list}");
        assert_eq!(stored_files(&server, &tenant), 0);
    }
}
