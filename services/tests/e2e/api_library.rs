//! The library through real HTTP, on SQLite and on PostgreSQL: a second upload of the same file is
//! refused with the stored document named and nothing kept (unless asked for), a rename wins over the
//! file's own title and is searchable, the history answers for any set of documents, a name filter takes
//! `%` and `_` literally, and a download names a non-ASCII file in UTF-8 with an ASCII fallback.

use crate::support;

use serde_json::{Value, json};
use support::{Database, Options, Server};

const REPORT: &str = "Quarterly report of the Harbor Lights cooperative. Revenue rose to 4.2 million \
    euros in the third quarter, up 9 percent on the year. The board approved a new ferry terminal in \
    Oban, to open in the spring. Membership reached 1,180 households.";
const MINUTES: &str = "Minutes of the Harbor Lights board meeting. The chair, Ailsa Grant, opened the \
    meeting at six. The treasurer reported that the ferry terminal budget is 2.6 million euros. The \
    next meeting is on the fourth of March.";

fn document_count(server: &Server, key: &str) -> i64 {
    let list: Value = server.get("/v1/documents", key).json().unwrap();
    list["total"].as_i64().unwrap()
}

fn upload_text(server: &Server, key: &str, name: &str, text: &str, query: &str) -> (u16, Value) {
    let form = reqwest::blocking::multipart::Form::new().part(
        "file",
        reqwest::blocking::multipart::Part::bytes(text.as_bytes().to_vec())
            .file_name(name.to_string())
            .mime_str("text/plain")
            .unwrap(),
    );
    let res = server
        .req(
            reqwest::Method::POST,
            &format!("/v1/documents{query}"),
            Some(key),
        )
        .multipart(form)
        .send()
        .unwrap();
    (res.status().as_u16(), res.json().unwrap())
}

fn patch_title(server: &Server, key: &str, doc: &str, title: &str) -> (u16, Value) {
    let res = server
        .req(
            reqwest::Method::PATCH,
            &format!("/v1/documents/{doc}"),
            Some(key),
        )
        .json(&json!({ "title": title }))
        .send()
        .unwrap();
    (res.status().as_u16(), res.json().unwrap())
}

fn answer_ids(history: &Value) -> Vec<String> {
    history["answers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["answer_id"].as_str().unwrap().to_string())
        .collect()
}

on_both_databases! {
    fn a_second_upload_of_the_same_file_is_refused_naming_the_first_and_kept_only_when_asked(db) {
        let server = Server::start(Options::new(db));
        let (tenant, key) = server.tenant("harbor");
        let (first, job) = server.ingest(&key, "report.txt", REPORT.as_bytes().to_vec(), "text/plain");
        assert_eq!(job["status"], "succeeded", "{job}");

        // The same bytes under another name: 409, the stored document named, nothing kept.
        let (status, body) = upload_text(&server, &key, "report copy.txt", REPORT, "");
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error_type"], "duplicate_document");
        assert_eq!(body["duplicates"][0]["file_name"], "report copy.txt");
        assert_eq!(body["duplicates"][0]["existing"]["id"], first.as_str());
        assert!(body["message"].as_str().unwrap().contains("allow_duplicate=true"), "{body}");
        assert_eq!(document_count(&server, &key), 1);
        let originals = server.data_dir.join("originals").join(&tenant);
        assert_eq!(std::fs::read_dir(&originals).unwrap().count(), 1, "a refused upload left a file");

        // Another tenant's copy of the same file is not a duplicate of this one.
        let (_, other_key) = server.tenant("elsewhere");
        let (status, body) = upload_text(&server, &other_key, "report.txt", REPORT, "");
        assert_eq!(status, 202, "{body}");

        // Asked for, the copy is kept; a different file never needed asking.
        let (status, body) = upload_text(&server, &key, "report copy.txt", REPORT, "?allow_duplicate=true");
        assert_eq!(status, 202, "{body}");
        let (status, body) = upload_text(&server, &key, "minutes.txt", MINUTES, "");
        assert_eq!(status, 202, "{body}");
        assert_eq!(document_count(&server, &key), 3);

        // A misspelt query parameter is refused rather than ignored.
        let (status, body) = upload_text(&server, &key, "again.txt", REPORT, "?allow_duplicates=1");
        assert_eq!(status, 422, "{body}");
    }

    fn a_renamed_document_keeps_the_users_title_through_ingestion_and_is_found_by_it(db) {
        let server = Server::start(Options::new(db));
        let (_, key) = server.tenant("harbor");
        let (status, body) = upload_text(&server, &key, "hl-q3.txt", REPORT, "");
        assert_eq!(status, 202, "{body}");
        let doc = body["document_id"].as_str().unwrap().to_string();

        // Renamed while it may still be ingesting: ingestion's own title must not replace it.
        let (status, renamed) = patch_title(&server, &key, &doc, "  Harbor Lights\n Q3 report ");
        assert_eq!(status, 200, "{renamed}");
        assert_eq!(renamed["title"], "Harbor Lights Q3 report");
        assert_eq!(renamed["file_name"], "hl-q3.txt");
        let job = server.wait_job(&key, body["job_id"].as_str().unwrap());
        assert_eq!(job["status"], "succeeded", "{job}");
        let got: Value = server.get(&format!("/v1/documents/{doc}"), &key).json().unwrap();
        assert_eq!(got["title"], "Harbor Lights Q3 report", "{got}");
        let found: Value = server.get("/v1/documents?q=lights%20q3", &key).json().unwrap();
        assert_eq!(found["total"], 1, "{found}");

        // Bad titles and other people's documents.
        let (status, body) = patch_title(&server, &key, &doc, " \n ");
        assert_eq!((status, body["error_type"].as_str()), (422, Some("validation_error")), "{body}");
        let (status, _) = patch_title(&server, &key, &doc, &"x".repeat(301));
        assert_eq!(status, 422);
        let (status, _) = patch_title(&server, &key, "no-such-document", "A title");
        assert_eq!(status, 404);
        let (_, other_key) = server.tenant("elsewhere");
        let (status, _) = patch_title(&server, &other_key, &doc, "Mine now");
        assert_eq!(status, 404);
        let got: Value = server.get(&format!("/v1/documents/{doc}"), &key).json().unwrap();
        assert_eq!(got["title"], "Harbor Lights Q3 report");
    }

    fn the_history_lists_the_answers_about_any_set_of_documents_with_their_documents(db) {
        let server = Server::start(Options::new(db));
        let (_, key) = server.tenant("harbor");
        let info: Value = server.get("/v1/info", &key).json().unwrap();
        assert_eq!(info["max_question_chars"], 4000, "{info}");
        assert_eq!(info["max_question_tokens"], 1536, "{info}");
        let (report, _) = server.ingest(&key, "report.txt", REPORT.as_bytes().to_vec(), "text/plain");
        let (minutes, _) = server.ingest(&key, "minutes.txt", MINUTES.as_bytes().to_vec(), "text/plain");
        let ask = |docs: &[&str], question: &str| -> String {
            let res = server.post("/v1/ask", &key, &json!({
                "question": question, "max_tokens": 8, "scope": { "document_ids": docs },
            }));
            assert_eq!(res.status(), 200);
            let a: Value = res.json().unwrap();
            a["answer_id"].as_str().unwrap().to_string()
        };
        let on_report = ask(&[&report], "How much did revenue rise?");
        let on_minutes = ask(&[&minutes], "Who chaired the meeting?");
        let on_both = ask(&[&report, &minutes], "Where is the ferry terminal?");

        let history = |query: &str| -> Value {
            let res = server.get(&format!("/v1/answers{query}"), &key);
            assert_eq!(res.status(), 200);
            res.json().unwrap()
        };
        assert_eq!(answer_ids(&history("")), [on_both.as_str(), on_minutes.as_str(), on_report.as_str()]);
        assert_eq!(answer_ids(&history(&format!("?document={report}"))), [on_both.as_str(), on_report.as_str()]);
        let both = history(&format!("?document={report}&document={minutes}&limit=2"));
        assert_eq!(answer_ids(&both), [on_both.as_str(), on_minutes.as_str()]);
        let mut ids: Vec<&str> = both["answers"][0]["document_ids"].as_array().unwrap()
            .iter().map(|d| d.as_str().unwrap()).collect();
        ids.sort();
        let mut expected = [report.as_str(), minutes.as_str()];
        expected.sort();
        assert_eq!(ids, expected);
        assert_eq!(both["answers"][1]["document_ids"], json!([minutes]));

        // The one-document history agrees, and so does a single stored answer.
        let of_minutes: Value = server.get(&format!("/v1/documents/{minutes}/answers"), &key).json().unwrap();
        assert_eq!(answer_ids(&of_minutes), [on_both.as_str(), on_minutes.as_str()]);
        let stored: Value = server.get(&format!("/v1/answers/{on_report}"), &key).json().unwrap();
        assert_eq!(stored["document_ids"], json!([report]));

        // Another tenant sees none of it; bad queries are refused.
        let (_, other_key) = server.tenant("elsewhere");
        let theirs: Value = server.get(&format!("/v1/answers?document={report}"), &other_key).json().unwrap();
        assert_eq!(theirs["answers"], json!([]));
        assert_eq!(server.get("/v1/answers?limit=0", &key).status(), 422);
        assert_eq!(server.get("/v1/answers?documents=x", &key).status(), 422);
    }

    fn a_search_for_percent_or_underscore_finds_only_the_names_holding_them(db) {
        let server = Server::start(Options::new(db));
        let (_, key) = server.tenant("t");
        for (name, text) in [("50% off.txt", REPORT), ("draft_v2.txt", MINUTES), ("notes.txt", "Plain notes.")] {
            let (status, body) = upload_text(&server, &key, name, text, "");
            assert_eq!(status, 202, "{body}");
        }
        let names = |q: &str| -> Vec<String> {
            let list: Value = server.get(&format!("/v1/documents?q={q}"), &key).json().unwrap();
            list["documents"].as_array().unwrap().iter().map(|d| d["file_name"].as_str().unwrap().to_string()).collect()
        };
        assert_eq!(names("%25"), ["50% off.txt"]);
        assert_eq!(names("_"), ["draft_v2.txt"]);
        assert_eq!(names("%5C"), Vec::<String>::new());
        assert_eq!(names("OFF").len(), 1);
    }
}

#[test]
fn a_download_names_a_non_ascii_file_in_utf8_with_an_ascii_fallback() {
    let server = Server::start(Options::new(Database::Sqlite));
    let (_, key) = server.tenant("t");
    let (status, body) = upload_text(&server, &key, "März – 合同.txt", REPORT, "");
    assert_eq!(status, 202, "{body}");
    let doc = body["document_id"].as_str().unwrap();
    let res = server.get(&format!("/v1/documents/{doc}/original"), &key);
    assert_eq!(res.status(), 200);
    let disposition = res.headers()["content-disposition"]
        .to_str()
        .expect("an ASCII header");
    assert_eq!(
        disposition,
        "attachment; filename=\"M_rz _ __.txt\"; filename*=UTF-8''M%C3%A4rz%20%E2%80%93%20%E5%90%88%E5%90%8C.txt"
    );
    assert_eq!(res.text().unwrap(), REPORT);
}
