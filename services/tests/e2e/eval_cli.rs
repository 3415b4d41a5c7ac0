//! `docqa eval` as users run it: in-process and against a running server (same answers for the same
//! seed and greedy decoding), and interrupted with `kill -9` then resumed (no question asked twice,
//! the same results as an uninterrupted run).

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Database, Options, Server};

/// A dataset of two SQuAD articles, four answerable questions each, in docqa's JSON Lines format.
fn write_dataset(dir: &Path) -> std::path::PathBuf {
    let mut lines = Vec::new();
    for i in [3, 10] {
        let (title, text, questions) = support::squad_article(i);
        let qs: Vec<Value> = questions
            .iter()
            .take(4)
            .enumerate()
            .map(|(n, (q, a))| json!({ "id": format!("a{i}-q{n}"), "question": q, "answers": a, "kind": "extractive" }))
            .collect();
        lines.push(json!({ "id": format!("article-{i}"), "source": "squad_v2", "title": title, "text": text, "questions": qs }).to_string());
    }
    let path = dir.join("mini.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn eval(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_docqa"));
    cmd.arg("eval").args(args);
    cmd
}

/// (question id, route) → answer, from a results file.
fn answers(out: &Path) -> HashMap<(String, String), String> {
    let text = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let mut seen = HashMap::new();
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let key = (
            r["question_id"].as_str().unwrap().to_string(),
            r["route_requested"].as_str().unwrap().to_string(),
        );
        assert!(r["error"].is_null(), "{r}");
        let previous = seen.insert(key.clone(), r["answer"].as_str().unwrap().to_string());
        assert!(previous.is_none(), "{key:?} was asked twice");
    }
    seen
}

#[test]
fn an_interrupted_run_resumes_and_matches_an_uninterrupted_one_and_a_server_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_dataset(dir.path());
    let data = data.to_str().unwrap();
    // Four questions in a 512-token window: each of the four runs below asks them on the CPU.
    let common = [
        "--routes",
        "rag",
        "--limit",
        "4",
        "--seed",
        "3",
        "--max-tokens",
        "16",
        "--rag-window",
        "512",
    ];

    // Uninterrupted, in-process.
    let full = dir.path().join("full");
    let status = eval(&["--dataset", data, "--out", full.to_str().unwrap()])
        .args(common)
        .status()
        .unwrap();
    assert!(status.success());
    let reference = answers(&full);
    assert_eq!(reference.len(), 4);
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(full.join("results.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let adapter = first["adapter"].as_str().unwrap_or_default().to_string();
    assert!(
        adapter.starts_with("docqa-reader@"),
        "each result records the adapter: {first}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(full.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["summaries"][0]["questions"], 4);
    assert!(
        std::fs::read_to_string(full.join("report.md"))
            .unwrap()
            .contains("| rag | 4 |")
    );

    // The report alone, written again from the results without asking anything: the same tables.
    let table = |md: &str| md[md.find("\n## ").unwrap()..].to_string();
    let first = std::fs::read_to_string(full.join("report.md")).unwrap();
    std::fs::remove_file(full.join("report.md")).unwrap();
    let status = eval(&["--report-only", "--out", full.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    let again = std::fs::read_to_string(full.join("report.md")).unwrap();
    assert!(again.contains("4 answers read from"), "{again}");
    assert!(again.contains(&format!("adapter {adapter}")), "{again}");
    assert_eq!(table(&again), table(&first));

    // Killed after its second answer, then resumed.
    let cut = dir.path().join("cut");
    let mut child = eval(&["--dataset", data, "--out", cut.to_str().unwrap()])
        .args(common)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    while std::fs::read_to_string(cut.join("results.jsonl")).map_or(0, |t| t.lines().count()) < 2 {
        assert!(Instant::now() < deadline, "no answer within 10 minutes");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = answers(&cut).len();
    assert!((2..4).contains(&before), "{before} answers before the kill");
    let status = eval(&["--dataset", data, "--out", cut.to_str().unwrap()])
        .args(common)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        answers(&cut),
        reference,
        "the resumed run answers exactly as the uninterrupted one"
    );

    // Against a running server over HTTP, with a tenant key.
    let server = Server::start(
        Options::new(Database::Sqlite)
            .arg("--rag-window", 512)
            .arg("--rate-limit-per-minute", 0),
    );
    let (_, key) = server.tenant("eval");
    let remote = dir.path().join("remote");
    let status = eval(&[
        "--dataset",
        data,
        "--out",
        remote.to_str().unwrap(),
        "--url",
        &server.base,
        "--api-key",
        &key,
    ])
    .args(common)
    .status()
    .unwrap();
    assert!(status.success());
    assert_eq!(
        answers(&remote),
        reference,
        "in-process and HTTP runs give the same answers"
    );

    // The two runs compared: same answers, so no question moved either way.
    let compared = dir.path().join("compared");
    let out = support::succeed(&mut eval(&[
        "--compare",
        full.to_str().unwrap(),
        remote.join("report.json").to_str().unwrap(),
        "--out",
        compared.to_str().unwrap(),
    ]));
    let md = std::fs::read_to_string(compared.join("compare.md")).unwrap();
    assert_eq!(
        md.trim_end(),
        String::from_utf8_lossy(&out.stdout).trim_end()
    );
    assert!(
        md.contains("0 better, 0 worse, 4 the same; 0 asked"),
        "{md}"
    );
    let row = md
        .lines()
        .find(|l| l.contains("| rag | 4 / 4 |"))
        .expect("the rag row");
    assert!(row.contains("| +0.0 |"), "{row}");
}

#[test]
fn a_directory_of_documents_with_a_questions_file_is_evaluated_from_the_original_files() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("contracts");
    std::fs::create_dir(&data).unwrap();
    let mut pdf = crate::parse_support::text_pdf(
        "Lease",
        &[
            &["This lease is made between Acme Ltd and Beta LLC."],
            &["The lease ends on 31 March 2031.", "Rent is paid monthly."],
        ],
    );
    std::fs::write(
        data.join("lease.pdf"),
        crate::parse_support::pdf_bytes(&mut pdf),
    )
    .unwrap();
    let (_, text, questions) = support::squad_article(3);
    std::fs::write(data.join("article.txt"), text).unwrap();
    let lines = [
        json!({ "document": "lease.pdf", "question": "When does the lease end?", "answers": ["31 March 2031"] }),
        json!({ "document": "article.txt", "question": questions[0].0, "answers": questions[0].1 }),
    ];
    let body: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(data.join("questions.jsonl"), body.join("\n")).unwrap();

    let out = dir.path().join("out");
    let status = eval(&[
        "--dataset",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--routes",
        "rag",
        "--max-tokens",
        "16",
        "--rag-window",
        "1024",
    ])
    .status()
    .unwrap();
    assert!(status.success());
    let seen = answers(&out);
    assert_eq!(seen.len(), 2);
    assert!(seen.contains_key(&("lease.pdf#1".to_string(), "rag".to_string())));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let lease = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["question_id"] == "lease.pdf#1")
        .unwrap();
    assert_eq!(lease["dataset"], "contracts");
    // Uploaded from its file (the directory form has no text to upload) and ingested as a PDF.
    let server_docs: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("documents.json")).unwrap())
            .unwrap();
    assert!(server_docs["lease.pdf"].is_string(), "{server_docs}");
    assert!(lease["document_tokens"].as_u64().unwrap() > 10, "{lease}");
}

#[test]
fn each_route_starts_from_a_cold_kv_cache_and_keeps_what_it_cached_itself() {
    let dir = tempfile::tempdir().unwrap();
    // The article's first 6,000 characters: about 1,400 tokens, beyond the RAG budget (so auto
    // retrieves first) and long enough for the cached read to count, at a third of a whole read's cost.
    let (title, text, questions) = support::squad_article(3);
    let text: String = text.chars().take(6000).collect();
    let qs: Vec<Value> = questions
        .iter()
        .take(2)
        .enumerate()
        .map(|(n, (q, a))| json!({ "id": format!("q{n}"), "question": q, "answers": a, "kind": "extractive" }))
        .collect();
    let line = json!({ "id": "article", "source": "squad_v2", "title": title, "text": text, "questions": qs });
    let data = dir.path().join("one.jsonl");
    std::fs::write(&data, line.to_string()).unwrap();
    let out = dir.path().join("out");
    let status = eval(&[
        "--dataset",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--routes",
        "rag,long,auto",
        "--max-tokens",
        "8",
        "--rag-window",
        "1024",
    ])
    .status()
    .unwrap();
    assert!(status.success());

    // Results come route by route, in question order.
    let text = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let order: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["route_requested"].as_str().unwrap(),
                r["question_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("rag", "q0"),
            ("rag", "q1"),
            ("long", "q0"),
            ("long", "q1"),
            ("auto", "q0"),
            ("auto", "q1")
        ]
    );
    let cached = |i: usize| rows[i]["cached_tokens"].as_u64().unwrap();
    // The long route's first read is cold and its second reuses the document it cached; auto's first
    // question finds nothing that rag or long left behind, neither the document nor a RAG prompt.
    assert!(cached(2) < 64, "{}", rows[2]);
    assert!(cached(3) > 1000, "{}", rows[3]);
    assert!(cached(4) < 64, "{}", rows[4]);
}

#[test]
fn an_in_process_run_splits_its_generator_over_ranks_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_dataset(dir.path());
    let out = dir.path().join("tp");
    let run = support::succeed(&mut eval(&[
        "--dataset",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--routes",
        "rag",
        "--limit",
        "2",
        "--tensor-parallel",
        "3",
    ]));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("3 tensor-parallel ranks"), "{stderr}");
    let got = answers(&out);
    assert_eq!(got.len(), 2, "{got:?}");
}
