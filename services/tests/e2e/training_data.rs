//! The reader's training data against the evaluation data: `training/data/overlap.py check` compares
//! the committed fingerprints of every training document and question with the evaluation data
//! (`$DOCQA_DATA`, else `../shared/data`; the test runs when it is there) and must find no copied
//! passage or question (training/data/DATA_CARD.md), and the check's own tests show it catches a
//! planted one. Python 3's standard library is all they need.

use std::process::Command;

fn python() -> String {
    std::env::var("DOCQA_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn repo(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[String]) -> String {
    let out = Command::new(python())
        .args(args)
        .current_dir(repo(""))
        .output()
        .expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{args:?} failed:\n{text}");
    text
}

#[test]
fn no_training_document_or_question_overlaps_the_evaluation_data() {
    let Some(qa) = crate::support::test_data::evaluation_data("qa") else {
        return;
    };
    let shared = qa.parent().expect("the evaluation data folder");
    let printed = run(&[
        repo("training/data/overlap.py"),
        "check".into(),
        "--fingerprints".into(),
        repo("training/data/fingerprints.bin"),
        "--shared".into(),
        shared.display().to_string(),
    ]);
    assert!(printed.contains("PASS"), "{printed}");
    assert!(printed.contains("squad2_articles_dev"), "{printed}");
}

#[test]
fn the_overlap_check_catches_a_planted_passage() {
    run(&[
        "-m".into(),
        "unittest".into(),
        "training/data/test_overlap.py".into(),
        "training/data/test_normalise.py".into(),
    ]);
}
