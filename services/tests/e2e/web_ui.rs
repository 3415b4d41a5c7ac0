//! The web UI in headless Chromium (`tests/browser/ui.test.mjs`, Playwright's `playwright-core` driving
//! Debian's `chromium`) against a real server with the real models. Without node, the browser or the
//! package the test says so and returns, unless `DOCQA_REQUIRE_BROWSER=1` (set by `.ci/run`).
//! Two documents are uploaded: SQuAD 2.0 dev article 0 as one page, and article 2 in pages of a few
//! paragraphs. Screenshots of each screen land in `target/tmp/browser-screenshots/`.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Database, Options, Server};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/browser")
}

fn chromium() -> String {
    std::env::var("DOCQA_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

/// Why the browser test cannot run here, if it cannot.
fn missing_tools() -> Option<String> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Some("node is not installed".into());
    }
    if !Path::new(&chromium()).exists() {
        return Some(format!("{} does not exist", chromium()));
    }
    if !browser_dir().join("node_modules/playwright-core").exists() {
        return Some("playwright-core is not installed: run `npm ci` in tests/browser".into());
    }
    None
}

fn browser_available() -> bool {
    let Some(why) = missing_tools() else {
        return true;
    };
    assert!(
        std::env::var("DOCQA_REQUIRE_BROWSER").as_deref() != Ok("1"),
        "DOCQA_REQUIRE_BROWSER=1 but {why}"
    );
    eprintln!("not run: {why}");
    false
}

/// Paragraphs per page of the paged document.
const PARAGRAPHS_PER_PAGE: usize = 3;

/// An article as a document of pages (form feeds between them, as text files give pages), a few
/// paragraphs each, for the viewer's page indicator.
fn in_pages(text: &str) -> String {
    let paragraphs: Vec<&str> = text
        .split("\n\n")
        .filter(|p| !p.trim().is_empty())
        .collect();
    paragraphs
        .chunks(PARAGRAPHS_PER_PAGE)
        .map(|page| page.join("\n\n"))
        .collect::<Vec<_>>()
        .join("\u{0C}")
}

#[test]
fn the_web_ui_uploads_asks_cites_and_deletes_in_a_real_browser() {
    if !browser_available() {
        return;
    }
    // The UI's behaviour on the base model, which always answers with citations (the reader may
    // rightly refuse the article's first question at the tests' small RAG window; reader.rs tests it).
    let server = Server::start(
        Options::new(Database::Sqlite)
            .arg("--max-upload-bytes", 1_000_000)
            .arg("--adapter", "none"),
    );
    let (_, key) = server.tenant("browser");
    let (title, text, questions) = support::squad_article(0);
    let document = server.data_dir.join(format!("{title}.txt"));
    std::fs::write(&document, text).expect("document written");
    let (paged_title, paged_text, paged_questions) = support::squad_article(2);
    let paged = server.data_dir.join(format!("{paged_title}.txt"));
    std::fs::write(&paged, in_pages(&paged_text)).expect("paged document written");
    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-screenshots");
    let out = Command::new("node")
        .arg("--test")
        .arg("--test-reporter=spec")
        .arg("ui.test.mjs")
        .current_dir(browser_dir())
        .env("DOCQA_BASE_URL", &server.base)
        .env("DOCQA_API_KEY", &key)
        .env("DOCQA_DOCUMENT", &document)
        .env("DOCQA_QUESTION", &questions[0].0)
        .env("DOCQA_PAGED_DOCUMENT", &paged)
        .env("DOCQA_PAGED_QUESTION", &paged_questions[0].0)
        .env("DOCQA_SCREENSHOTS", &screenshots)
        .env("DOCQA_CHROMIUM", chromium())
        .output()
        .expect("node runs");
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("{report}\nscreenshots: {}", screenshots.display());
    assert!(
        out.status.success(),
        "the browser tests failed:\n{report}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    for shot in [
        "01-sign-in",
        "03-library",
        "03b-duplicate",
        "05b-question-too-long",
        "06-answer",
        "06d-citations",
        "07-document-view",
        "07b-page-indicator",
        "08-phone-dark",
        "08b-phone-light",
        "08c-desktop-dark",
        "10-history-two-documents",
    ] {
        assert!(
            screenshots.join(format!("{shot}.png")).exists(),
            "{shot}.png was saved"
        );
    }
}
