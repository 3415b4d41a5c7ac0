//! `docqa perplexity --tensor-parallel 3` on the CPU: the generator split over three ranks reads a real
//! article as the whole model does (the same segments, perplexity within bf16 rounding), and the JSON
//! report records the split.

use std::process::Command;

use crate::support;

/// Runs `docqa perplexity` over `text` with `extra` arguments; the JSON report and the stderr.
fn perplexity(text: &std::path::Path, extra: &[&str]) -> (serde_json::Value, String) {
    let json = tempfile::NamedTempFile::new().expect("report file");
    let out = Command::new(env!("CARGO_BIN_EXE_docqa"))
        .args(["perplexity", "--device", "cpu", "--tokens", "400"])
        .args(["--chunk", "128", "--segment", "100"])
        .arg("--text")
        .arg(text)
        .arg("--json")
        .arg(json.path())
        .args(extra)
        .output()
        .expect("docqa runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let report = std::fs::read_to_string(json.path()).expect("report");
    (serde_json::from_str(&report).expect("json"), stderr)
}

#[test]
fn perplexity_over_three_ranks_reads_an_article_as_the_whole_model_does() {
    let (_, article, _) = support::squad_article(3);
    let text = tempfile::NamedTempFile::new().expect("text file");
    std::fs::write(text.path(), article).expect("write the article");
    let (whole, _) = perplexity(text.path(), &[]);
    let (split, stderr) = perplexity(text.path(), &["--tensor-parallel", "3"]);
    assert!(stderr.contains("3 tensor-parallel ranks"), "{stderr}");
    assert_eq!(split["tensor_parallel"], 3, "{split}");
    assert_eq!(whole["tensor_parallel"], 1, "{whole}");
    let segments = |r: &serde_json::Value| r["segments"].as_array().expect("segments").len();
    assert_eq!(segments(&split), 4);
    assert_eq!(segments(&split), segments(&whole));
    let (a, b) = (
        whole["perplexity"].as_f64().expect("whole"),
        split["perplexity"].as_f64().expect("split"),
    );
    assert!(a > 1.0 && a < 100.0, "whole model: {a}");
    assert!(
        (a - b).abs() / a < 0.01,
        "three ranks {b} against whole {a}"
    );
}
