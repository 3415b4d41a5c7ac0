//! Keys for the local user: clients such as the OpenAI SDK always send a key, so local mode prints one
//! at the first start (once, never again on restarts), and `docqa keys create` mints more on the
//! running server's database. A key acts as the same local user as a request without one.

use std::process::Command;

use crate::support;

use serde_json::Value;
use support::{Database, Options, Server};

const ANNOUNCEMENT: &str = "created an API key for the local user";

/// The key printed after the announcement in the server's log.
fn printed_key(log: &str) -> String {
    let after = &log[log.find(ANNOUNCEMENT).expect("no local key announced")..];
    after
        .split_whitespace()
        .find(|w| w.starts_with("dq_"))
        .expect("no key after the announcement")
        .to_string()
}

fn docqa_keys(server: &Server, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_docqa"))
        .arg("keys")
        .args(args)
        .arg("--data-dir")
        .arg(&server.data_dir)
        .output()
        .expect("docqa keys runs")
}

fn document_ids(server: &Server, key: Option<&str>) -> Vec<String> {
    let res = server
        .req(reqwest::Method::GET, "/v1/documents", key)
        .send()
        .unwrap();
    assert_eq!(res.status(), 200);
    let list: Value = res.json().unwrap();
    list["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn local_mode_prints_a_key_once_and_docqa_keys_creates_more_for_the_same_local_user() {
    let mut server = Server::start(Options::new(Database::Sqlite).arg("--local-mode", "on"));
    let first = printed_key(&server.log_text());
    let (doc, _) = server.ingest(
        &first,
        "note.txt",
        b"The gate code is 4471.".to_vec(),
        "text/plain",
    );
    assert_eq!(document_ids(&server, None), [doc.as_str()]);
    assert_eq!(document_ids(&server, Some(&first)), [doc.as_str()]);

    // Minted on the running server's database, usable at once.
    let out = docqa_keys(&server, &["create"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let minted = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(minted.starts_with("dq_") && minted != first, "{minted}");
    assert_eq!(document_ids(&server, Some(&minted)), [doc.as_str()]);
    let out = docqa_keys(&server, &["list"]);
    let listing = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        listing.lines().filter(|l| l.contains("\tactive\t")).count(),
        2,
        "{listing}"
    );
    assert!(
        !listing.contains(&first) && !listing.contains(&minted),
        "a secret was listed"
    );

    // A wrong key is still refused, and a tenant that does not exist gets no key.
    let res = server
        .req(reqwest::Method::GET, "/v1/documents", Some("dq_not_a_key"))
        .send()
        .unwrap();
    assert_eq!(res.status(), 401);
    let out = docqa_keys(&server, &["create", "--tenant", "nobody"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tenant with id nobody"));

    // Restarts print no new key; the old ones keep working.
    server.restart();
    assert_eq!(server.log_text().matches(ANNOUNCEMENT).count(), 1);
    assert_eq!(document_ids(&server, Some(&first)), [doc.as_str()]);
}
