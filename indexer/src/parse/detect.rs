//! Format detection: content first (magic bytes), then the MIME type, then the file name's
//! extension, then a look at the text itself.
//!
//! Content wins over names: a PDF named `notes.txt` is parsed as a PDF. A name or MIME type that
//! promises a binary format the content does not have is a corrupt file, not a text file.
//!
//! Every check but one looks at the file's first [`HEAD_WINDOW`] bytes. A zip archive (DOCX) is
//! recognised by its central directory, which sits at the end of the file, so it is read from the
//! whole file: [`detect_file_format`] seeks there in a stored upload without reading it all.

use std::io::{Read, Seek, SeekFrom};

use crate::document::DocumentFormat;
use crate::error::{IndexerError, Result};

/// How many leading bytes are searched for the `%PDF-` marker (the PDF spec allows junk before it).
const PDF_MAGIC_WINDOW: usize = 1024;

/// Known binary formats docqa does not read, by magic bytes.
const UNSUPPORTED_MAGIC: &[(&[u8], &str)] = &[
    (
        b"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1",
        "legacy Office (OLE) document",
    ),
    (b"\x89PNG", "PNG image"),
    (b"\xFF\xD8\xFF", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"{\\rtf", "RTF document"),
    (b"\x1F\x8B", "gzip archive"),
    (b"7z\xBC\xAF", "7-zip archive"),
];

/// Extensions that name formats docqa does not read.
const UNSUPPORTED_EXTENSIONS: &[&str] = &[
    "doc", "xls", "xlsx", "ppt", "pptx", "odt", "rtf", "epub", "png", "jpg", "jpeg", "gif", "tif",
    "tiff", "zip", "gz",
];

/// How many leading bytes the content checks other than the zip's look at.
const HEAD_WINDOW: u64 = PDF_MAGIC_WINDOW as u64;

/// Picks the format of `bytes` (the whole file), using `file_name` and `mime` as hints.
pub fn detect_format(
    bytes: &[u8],
    file_name: Option<&str>,
    mime: Option<&str>,
) -> Result<DocumentFormat> {
    detect_file_format(std::io::Cursor::new(bytes), file_name, mime)
}

/// Picks the format of a whole file readable from its start, as [`detect_format`] does: its first
/// bytes, and for a zip archive its central directory at the end.
pub fn detect_file_format<R: Read + Seek>(
    mut file: R,
    file_name: Option<&str>,
    mime: Option<&str>,
) -> Result<DocumentFormat> {
    let mut head = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    (&mut file).take(HEAD_WINDOW).read_to_end(&mut head)?;
    if head.starts_with(b"PK\x03\x04") {
        file.seek(SeekFrom::Start(0))?;
        return zip_kind(file);
    }
    let bytes = head.as_slice();
    if let Some(format) = sniff_binary(bytes)? {
        return Ok(format);
    }
    let hint = mime
        .and_then(format_from_mime)
        .or_else(|| file_name.and_then(format_from_extension));
    match hint {
        Some(Ok(DocumentFormat::Pdf)) => Err(corrupt(DocumentFormat::Pdf, "no %PDF- header")),
        Some(Ok(DocumentFormat::Docx)) => Err(corrupt(DocumentFormat::Docx, "not a zip archive")),
        Some(Ok(format)) => Ok(format),
        Some(Err(what)) => Err(IndexerError::UnsupportedType(what)),
        None => Ok(sniff_text(bytes)),
    }
}

/// Formats other than zip recognised from their leading bytes; `Ok(None)` when the content looks
/// like text.
fn sniff_binary(bytes: &[u8]) -> Result<Option<DocumentFormat>> {
    let head = &bytes[..bytes.len().min(PDF_MAGIC_WINDOW)];
    if head.windows(5).any(|w| w == b"%PDF-") {
        return Ok(Some(DocumentFormat::Pdf));
    }
    if let Some((_, what)) = UNSUPPORTED_MAGIC.iter().find(|(m, _)| bytes.starts_with(m)) {
        return Err(IndexerError::UnsupportedType((*what).to_owned()));
    }
    let utf16 = bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF");
    if !utf16 && head.contains(&0) {
        return Err(IndexerError::UnsupportedType("binary data".to_owned()));
    }
    Ok(None)
}

/// A zip archive (the whole file) is a DOCX when it holds `word/document.xml`.
fn zip_kind<R: Read + Seek>(file: R) -> Result<DocumentFormat> {
    let archive = zip::ZipArchive::new(file).map_err(|e| {
        corrupt(
            DocumentFormat::Docx,
            &format!("unreadable zip archive: {e}"),
        )
    })?;
    if archive.index_for_name("word/document.xml").is_some() {
        Ok(DocumentFormat::Docx)
    } else {
        Err(IndexerError::UnsupportedType(
            "zip archive without word/document.xml".to_owned(),
        ))
    }
}

/// Format named by a MIME type (parameters such as `; charset=utf-8` ignored); `Err` names an
/// unsupported type, `None` means no opinion.
fn format_from_mime(mime: &str) -> Option<Result<DocumentFormat, String>> {
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let format = match essence.as_str() {
        "text/plain" => DocumentFormat::Text,
        "text/markdown" | "text/x-markdown" => DocumentFormat::Markdown,
        "text/html" | "application/xhtml+xml" => DocumentFormat::Html,
        "application/pdf" => DocumentFormat::Pdf,
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => {
            DocumentFormat::Docx
        }
        "" | "application/octet-stream" => return None,
        other if other.starts_with("text/") => DocumentFormat::Text,
        other => return Some(Err(format!("MIME type {other}"))),
    };
    Some(Ok(format))
}

/// Format named by a file extension; `Err` names an unsupported one, `None` means no opinion.
fn format_from_extension(file_name: &str) -> Option<Result<DocumentFormat, String>> {
    let (_, ext) = file_name.rsplit_once('.')?;
    let ext = ext.to_ascii_lowercase();
    let format = match ext.as_str() {
        "txt" | "text" | "log" | "csv" | "tsv" => DocumentFormat::Text,
        "md" | "markdown" | "mdown" | "mkd" => DocumentFormat::Markdown,
        "html" | "htm" | "xhtml" => DocumentFormat::Html,
        "pdf" => DocumentFormat::Pdf,
        "docx" => DocumentFormat::Docx,
        e if UNSUPPORTED_EXTENSIONS.contains(&e) => return Some(Err(format!("file type .{e}"))),
        _ => return None,
    };
    Some(Ok(format))
}

/// Text without a hint: HTML when it opens with a doctype or `<html>`, plain text otherwise.
fn sniff_text(bytes: &[u8]) -> DocumentFormat {
    let head = &bytes[..bytes.len().min(512)];
    let head = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    let start = head
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(head.len());
    let lower = head[start..].to_ascii_lowercase();
    if lower.starts_with(b"<!doctype html") || lower.starts_with(b"<html") {
        DocumentFormat::Html
    } else {
        DocumentFormat::Text
    }
}

fn corrupt(format: DocumentFormat, reason: &str) -> IndexerError {
    IndexerError::Corrupt {
        format,
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_wins_over_the_file_name() {
        let pdf = b"%PDF-1.7\n...";
        assert_eq!(
            detect_format(pdf, Some("notes.txt"), None).ok(),
            Some(DocumentFormat::Pdf)
        );
    }

    #[test]
    fn mime_type_wins_over_the_extension() {
        let f = detect_format(b"# Hi", Some("a.txt"), Some("text/markdown; charset=utf-8"));
        assert_eq!(f.ok(), Some(DocumentFormat::Markdown));
    }

    #[test]
    fn html_is_sniffed_from_its_doctype() {
        let f = detect_format(b"\n <!DOCTYPE html><p>x", None, None);
        assert_eq!(f.ok(), Some(DocumentFormat::Html));
    }

    #[test]
    fn a_pdf_name_without_pdf_content_is_corrupt() {
        let f = detect_format(b"hello", Some("x.pdf"), None);
        assert!(matches!(
            f,
            Err(IndexerError::Corrupt {
                format: DocumentFormat::Pdf,
                ..
            })
        ));
    }

    #[test]
    fn images_are_unsupported() {
        let f = detect_format(b"\x89PNG\r\n\x1a\n", None, None);
        assert!(matches!(f, Err(IndexerError::UnsupportedType(_))));
    }
}
