//! Hostile inputs fail fast with the typed error that names the bound they break, and never take
//! the memory they ask for: a PDF stream and a DOCX part that inflate to a gibibyte, HTML nested a
//! hundred thousand deep, a one-line HTML file of 63 MB, too many pages, too much text. Every test
//! checks the process's peak resident memory (`VmHWM` of `/proc/self/status`) against one ceiling,
//! which holds for all of them together since they run in one process.

use crate::parse_support;

use std::io::Write;
use std::time::{Duration, Instant};

use docqa_indexer::{IndexerError, Limit, ParseLimits, parse_document_with_limits};
use flate2::Compression;
use flate2::write::ZlibEncoder;
use lopdf::{Object, Stream, dictionary};
use parse_support::{para, pdf_bytes, text_pdf};

/// Peak resident memory allowed to this test process, all tests together.
const CEILING_BYTES: u64 = 768 << 20;

/// No bounded parse runs for minutes; a regression to unbounded work would.
const NOT_MINUTES: Duration = Duration::from_secs(60);

fn peak_resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs is mounted");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM is reported");
    kib << 10
}

/// Parses under `limits` and returns the error, checking the time and the memory ceiling.
fn refused(bytes: &[u8], name: &str, limits: &ParseLimits) -> IndexerError {
    let started = Instant::now();
    let err = parse_document_with_limits(bytes, Some(name), None, limits)
        .expect_err("the input breaks a bound");
    assert!(
        started.elapsed() < NOT_MINUTES,
        "{name} took {:?}",
        started.elapsed()
    );
    let peak = peak_resident_bytes();
    assert!(
        peak < CEILING_BYTES,
        "peak resident memory {} MiB after {name}",
        peak >> 20
    );
    err
}

fn assert_limit(err: &IndexerError, want: Limit) {
    match err {
        IndexerError::LimitExceeded { limit, .. } if *limit == want => {
            let message = err.to_string();
            assert!(
                message.contains(&format!("the {want} limit")),
                "the message names the limit: {message}"
            );
        }
        other => panic!("expected the {want} limit, got {other:?}"),
    }
}

/// `n` bytes of `byte` through a zlib writer, a mebibyte at a time.
fn deflate_repeated(prefix: &[u8], byte: u8, n: usize, out: impl Write) -> impl Write {
    let mut encoder = ZlibEncoder::new(out, Compression::best());
    encoder.write_all(prefix).expect("in memory");
    let block = vec![byte; 1 << 20];
    for _ in 0..n / block.len() {
        encoder.write_all(&block).expect("in memory");
    }
    encoder.finish().expect("in memory")
}

#[test]
fn a_pdf_whose_content_stream_inflates_to_a_gibibyte_is_refused_by_the_inflation_limit() {
    let mut doc = text_pdf("Bomb", &[&["A page of text."]]);
    let mut compressed = Vec::new();
    deflate_repeated(
        b"BT /F1 12 Tf 72 720 Td (Hello) Tj ET\n",
        b' ',
        1 << 30,
        &mut compressed,
    );
    assert!(
        compressed.len() < 2 << 20,
        "a small file: {} bytes",
        compressed.len()
    );
    let bomb = Stream::new(dictionary! { "Filter" => "FlateDecode" }, compressed);
    let bomb_id = doc.add_object(bomb);
    let page_id = *doc.get_pages().values().next().expect("one page");
    doc.get_dictionary_mut(page_id)
        .expect("the page")
        .set("Contents", Object::Reference(bomb_id));
    let bytes = pdf_bytes(&mut doc);
    let err = refused(&bytes, "bomb.pdf", &ParseLimits::default());
    assert_limit(&err, Limit::InflatedBytes);
}

#[test]
fn a_docx_whose_body_inflates_to_a_gibibyte_is_refused_by_the_inflation_limit() {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let deflated = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("[Content_Types].xml", deflated)
        .expect("in memory");
    zip.write_all(b"<?xml version=\"1.0\"?><Types/>")
        .expect("in memory");
    zip.start_file("word/document.xml", deflated)
        .expect("in memory");
    let head = format!(
        "<w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body>{}",
        para(None, "Hello")
    );
    zip.write_all(head.as_bytes()).expect("in memory");
    let block = vec![b' '; 1 << 20];
    for _ in 0..1024 {
        zip.write_all(&block).expect("in memory");
    }
    let bytes = zip.finish().expect("in memory").into_inner();
    assert!(bytes.len() < 4 << 20, "a small file: {} bytes", bytes.len());
    let err = refused(&bytes, "bomb.docx", &ParseLimits::default());
    assert_limit(&err, Limit::InflatedBytes);
}

#[test]
fn html_nested_a_hundred_thousand_deep_is_refused_by_the_depth_limit() {
    let html = format!("<html><body>{}deep</body></html>", "<div>".repeat(100_000));
    let err = refused(html.as_bytes(), "deep.html", &ParseLimits::default());
    assert_limit(&err, Limit::NestingDepth);
}

#[test]
fn a_one_line_html_file_of_63_mb_is_refused_by_the_line_limit() {
    let words = "lorem ipsum dolor sit amet ".repeat((63 << 20) / 27);
    let html = format!("<html><body><span>{words}</span></body></html>");
    let err = refused(html.as_bytes(), "one-line.html", &ParseLimits::default());
    assert_limit(&err, Limit::LineChars);
}

#[test]
fn text_beyond_the_character_limit_is_refused_by_it() {
    let text = "A short line of text.\n".repeat(10_000);
    let limits = ParseLimits {
        max_text_chars: 100_000,
        ..ParseLimits::default()
    };
    let err = refused(text.as_bytes(), "long.txt", &limits);
    assert_limit(&err, Limit::TextChars);
    let fits = ParseLimits {
        max_text_chars: 300_000,
        ..ParseLimits::default()
    };
    assert!(parse_document_with_limits(text.as_bytes(), Some("long.txt"), None, &fits).is_ok());
}

#[test]
fn a_pdf_with_more_pages_than_the_limit_is_refused_by_it() {
    let page: &[&str] = &["Some text."];
    let mut doc = text_pdf("Pages", &[page; 11]);
    let bytes = pdf_bytes(&mut doc);
    let limits = ParseLimits {
        max_pages: 10,
        ..ParseLimits::default()
    };
    let err = refused(&bytes, "pages.pdf", &limits);
    assert_limit(&err, Limit::Pages);
    let fits = ParseLimits {
        max_pages: 11,
        ..ParseLimits::default()
    };
    assert!(parse_document_with_limits(&bytes, Some("pages.pdf"), None, &fits).is_ok());
}
