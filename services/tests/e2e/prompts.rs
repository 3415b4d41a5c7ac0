//! The reader's training pipeline renders docqa's prompts in Python (`training/pipeline/prompts.py`);
//! here the same examples go through `docqa prompt-dump` (the service's own prompt code) and through
//! that module, and the two texts must be equal, so the reader is trained on the prompts it is served.
//! The interpreter is `$DOCQA_PYTHON` (else `python3`) and needs `jinja2`; without it the test says so
//! and returns, unless `DOCQA_REQUIRE_JINJA2=1` (set by `.ci/run`).

use std::io::Write;
use std::process::{Command, Stdio};

use docqa_engine::fetch::{NoProgress, default_models_dir, ensure_models};
use serde_json::{Value, json};

fn python() -> String {
    std::env::var("DOCQA_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn jinja2_available() -> bool {
    let ok = Command::new(python())
        .args(["-c", "import jinja2"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("DOCQA_REQUIRE_JINJA2").as_deref() != Ok("1"),
            "DOCQA_REQUIRE_JINJA2=1 but `{} -c 'import jinja2'` fails",
            python()
        );
        eprintln!(
            "not run: the `jinja2` package is not installed for {}",
            python()
        );
    }
    ok
}

/// Examples that exercise every part of both layouts: several sources and page ranges, braces and
/// placeholder names inside the text, Chinese, several documents, surrounding whitespace.
fn examples() -> Vec<Value> {
    vec![
        json!({"route": "rag", "question": "  When did the Normans conquer England? ",
               "sources": [
                   {"title": "Normans", "pages": [1, 1], "text": "In 1066 the Normans {text} came.\n"},
                   {"title": "Normans", "pages": [3, 4], "text": "  William was crowned [2] {question}."}]}),
        json!({"route": "rag", "question": "诺曼人来自哪里？",
               "sources": [{"title": "诺曼人", "text": "诺曼人来自诺曼底。他们是维京人的后代。"}]}),
        json!({"route": "rag", "question": "Is anything here?", "sources": []}),
        json!({"route": "long", "question": "Who wrote it?",
               "documents": [{"title": "Lease", "text": "\n  The lease ends on 31 May 2027. {title}\n"}]}),
        json!({"route": "long", "question": "合同何时结束？",
               "documents": [{"title": "A", "text": "First document."},
                             {"title": "B", "text": "第二份文件：二〇二七年五月。"}]}),
    ]
}

fn lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn run_with_input(command: &mut Command, input: &str) -> Vec<Value> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("input written");
    let out = child.wait_with_output().expect("the command ends");
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&out.stdout)
}

#[test]
fn the_training_pipeline_renders_prompts_exactly_as_the_service_does() {
    if !jinja2_available() {
        return;
    }
    let models = ensure_models(&default_models_dir(), &NoProgress).expect("models");
    let input: String = examples().iter().map(|e| format!("{e}\n")).collect();
    let served = run_with_input(
        Command::new(env!("CARGO_BIN_EXE_docqa")).args(["prompt-dump", "--ids"]),
        &input,
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../training/pipeline/prompts.py"
    );
    let trained = run_with_input(
        Command::new(python())
            .arg(script)
            .arg("render")
            .arg("--model-dir")
            .arg(&models.generator),
        &input,
    );
    assert_eq!(served.len(), examples().len());
    assert_eq!(trained.len(), served.len());
    for (i, (s, t)) in served.iter().zip(&trained).enumerate() {
        assert_eq!(s["prompt"], t["prompt"], "example {i} renders differently");
    }
    let first = served[0]["prompt"].as_str().unwrap_or_default();
    assert!(first.contains("[1] Normans (page 1)\nIn 1066 the Normans {text} came."));
    assert!(first.contains("[2] Normans (pages 3-4)\nWilliam was crowned [2] {question}."));
    assert!(first.ends_with(
        "Question: When did the Normans conquer England?<|im_end|>\n<|im_start|>assistant\n"
    ));
    assert!(
        served[0]["ids"]
            .as_array()
            .is_some_and(|ids| ids.len() > 40)
    );
}
