//! What every parser fuzz target shares: the limits a fuzz iteration parses under, the check of the
//! promises `docqa_indexer::parse_document_with_limits` makes, and the structure-aware wrappers that
//! turn raw input into a well-formed PDF or DOCX around it.
//!
//! The promises: parsing never panics (the PDF parser catches panics inside `pdf-extract` itself and
//! reports a corrupt file; a panic that gets out is a finding) and stays within the limits; a
//! success has text with something other than white space in it, within the text limits, a page map
//! that starts at 0 with non-decreasing starts within the text's length in characters, and a
//! non-empty title of at most `ParsedDocument::MAX_TITLE_CHARS` characters. Errors are fine.

use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

use docqa_indexer::{ParseLimits, ParsedDocument, parse_document_with_limits};

/// Limits small enough that one iteration stays fast, large enough for every seed.
pub fn limits() -> ParseLimits {
    ParseLimits {
        max_bytes: 1 << 20,
        max_inflated_bytes: 8 << 20,
        max_depth: 256,
        max_pages: 256,
        max_text_chars: 1 << 20,
        max_line_chars: 256 << 10,
    }
}

/// The last panic's message and place, kept by the hook [`init`] installs.
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

/// Replaces libFuzzer's panic hook, which aborts on every panic, even one the parser catches (the
/// PDF parser does, by design), with one that only records the panic: [`check`] reports a panic
/// that gets out of the parser, with that record, and aborts.
pub fn init() {
    panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = format!("{message}{place}");
        }
    }));
}

/// Parses `data` as an upload named `file_name` under [`limits`] and aborts (a finding) when a
/// panic gets out or a success breaks a promise.
pub fn check(data: &[u8], file_name: &str) {
    let limits = limits();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        parse_document_with_limits(data, Some(file_name), None, &limits)
    }));
    match outcome {
        Err(_) => {
            let last = LAST_PANIC.lock().map(|l| l.clone()).unwrap_or_default();
            finding(&format!("a panic got out of the parser: {last}"));
        }
        Ok(Err(_)) => {}
        Ok(Ok(doc)) => {
            if let Err(broken) = promises_kept(&doc, &limits) {
                finding(&broken);
            }
        }
    }
}

/// Checks a parsed document against the parser's promises; `Err` says which one it breaks.
pub fn promises_kept(doc: &ParsedDocument, limits: &ParseLimits) -> Result<(), String> {
    if doc.text.trim().is_empty() {
        return Err(format!("a success without text: {:?}", doc.text));
    }
    let chars = doc.char_len();
    if chars > limits.max_text_chars {
        return Err(format!(
            "{chars} characters of text, more than {}",
            limits.max_text_chars
        ));
    }
    if let Some(line) = doc
        .text
        .split('\n')
        .map(|l| l.chars().count())
        .find(|&n| n > limits.max_line_chars)
    {
        return Err(format!(
            "a line of {line} characters, more than {}",
            limits.max_line_chars
        ));
    }
    let starts = doc.pages.page_starts();
    if starts.first() != Some(&0) {
        return Err(format!("the page map does not start at 0: {starts:?}"));
    }
    if starts.windows(2).any(|w| w[0] > w[1]) {
        return Err(format!("page starts decrease: {starts:?}"));
    }
    if let Some(&last) = starts.last().filter(|&&s| s > chars) {
        return Err(format!(
            "a page starts at {last}, past the text's {chars} characters"
        ));
    }
    let title_chars = doc.title.chars().count();
    if doc.title.trim().is_empty() || title_chars > ParsedDocument::MAX_TITLE_CHARS {
        return Err(format!(
            "a title of {title_chars} characters (at most {} and not blank): {:?}",
            ParsedDocument::MAX_TITLE_CHARS,
            doc.title
        ));
    }
    Ok(())
}

fn finding(what: &str) -> ! {
    eprintln!("docqa parser fuzzing: {what}");
    std::process::abort();
}

/// A well-formed one-page PDF whose page shows `content` as its content stream, with Helvetica as
/// `/F1` and a correct cross-reference table.
pub fn pdf_with_content(content: &[u8]) -> Vec<u8> {
    let objects: [Vec<u8>; 5] = [
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 /MediaBox [0 0 612 792] >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_vec(),
        [
            format!("<< /Length {} >>\nstream\n", content.len()).as_bytes(),
            content,
            b"\nendstream",
        ]
        .concat(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    let mut out = b"%PDF-1.5\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// A DOCX package from raw input: `word/document.xml` is the input up to its first NUL byte, and
/// `docProps/core.xml` what follows it, if anything.
pub fn docx_from_input(data: &[u8]) -> Vec<u8> {
    match data.iter().position(|&b| b == 0) {
        Some(nul) => docx_with_parts(&data[..nul], Some(&data[nul + 1..])),
        None => docx_with_parts(data, None),
    }
}

/// A DOCX package (stored, not compressed) holding `document` as `word/document.xml` and `core`
/// as `docProps/core.xml`.
pub fn docx_with_parts(document: &[u8], core: Option<&[u8]>) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let parts = [
        ("word/document.xml", Some(document)),
        ("docProps/core.xml", core),
    ];
    for (name, bytes) in parts {
        if let Some(bytes) = bytes {
            let written = zip
                .start_file(name, stored)
                .and_then(|()| zip.write_all(bytes).map_err(Into::into));
            if written.is_err() {
                finding(&format!("the harness could not write {name} into a zip"));
            }
        }
    }
    match zip.finish() {
        Ok(cursor) => cursor.into_inner(),
        Err(e) => finding(&format!("the harness could not finish a zip: {e}")),
    }
}
