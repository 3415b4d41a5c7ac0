//! The web UI in headless Chromium (`tests/browser/ui.test.mjs`, Playwright's `playwright-core` driving
//! Debian's `chromium`) against a real server with the real models. Without node, the browser or the
//! package the test says so and returns, unless `DOCQA_REQUIRE_BROWSER=1` (set by `.ci/run`).
//! Two text documents are uploaded: SQuAD 2.0 dev article 0 as one page, and article 2 in pages of a few
//! paragraphs; a PDF of 160 pages (article 1's text on the first pages, a line on each of the others),
//! written with the parser tests' builder, shows the original pages. Screenshots of each screen land in
//! `target/tmp/browser-screenshots/`.

use crate::parse_support;
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

/// Pages of the PDF, the article's first.
const PDF_PAGES: usize = 160;
/// Characters per line and lines per page of the PDF's text (Helvetica 11 pt on a letter page).
const PDF_LINE_CHARS: usize = 86;
const PDF_PAGE_LINES: usize = 44;

/// The text in ASCII (the PDF's standard font has no other glyphs): typographic punctuation made plain,
/// other characters dropped.
fn ascii(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            '\u{2018}' | '\u{2019}' => Some('\''),
            '\u{201C}' | '\u{201D}' => Some('"'),
            '\u{2013}' | '\u{2014}' => Some('-'),
            c if c.is_ascii() && !c.is_ascii_control() => Some(c),
            '\n' => Some('\n'),
            _ => None,
        })
        .collect()
}

/// A paragraph cut into lines of at most PDF_LINE_CHARS characters, at spaces.
fn wrapped(paragraph: &str) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in paragraph.split_whitespace() {
        let line = lines.last_mut().expect("a line");
        if !line.is_empty() && line.len() + 1 + word.len() > PDF_LINE_CHARS {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

/// The article's lines page by page (a blank line between paragraphs), then a line on each page up to
/// PDF_PAGES pages.
fn pdf_pages(text: &str) -> Vec<Vec<String>> {
    let mut lines = Vec::new();
    for paragraph in ascii(text).split("\n\n").filter(|p| !p.trim().is_empty()) {
        lines.extend(wrapped(paragraph));
        lines.push(String::new());
    }
    let mut pages: Vec<Vec<String>> = lines
        .chunks(PDF_PAGE_LINES)
        .map(<[String]>::to_vec)
        .collect();
    while pages.len() < PDF_PAGES {
        let n = pages.len() + 1;
        pages.push(vec![format!(
            "Appendix page {n}: left blank but for this line."
        )]);
    }
    pages
}

/// A PDF with one page per entry of `pages` (each line drawn on its own), titled `title`.
fn pdf(title: &str, pages: &[Vec<String>]) -> Vec<u8> {
    let lines: Vec<Vec<&str>> = pages
        .iter()
        .map(|p| p.iter().map(String::as_str).collect())
        .collect();
    let pages: Vec<&[&str]> = lines.iter().map(Vec::as_slice).collect();
    parse_support::pdf_bytes(&mut parse_support::text_pdf(title, &pages))
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
    let (pdf_title, pdf_text, _) = support::squad_article(1);
    let pdf_path = server.data_dir.join("Article with pages.pdf");
    std::fs::write(&pdf_path, pdf(&ascii(&pdf_title), &pdf_pages(&pdf_text))).expect("PDF written");
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
        .env("DOCQA_PDF_DOCUMENT", &pdf_path)
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
        "11-pdf-page",
        "11b-pdf-page-phone",
        "12-follow-up",
        "12b-follow-up-thread",
        "12c-follow-up-phone",
    ] {
        assert!(
            screenshots.join(format!("{shot}.png")).exists(),
            "{shot}.png was saved"
        );
    }
}
