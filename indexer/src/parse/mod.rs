//! Document parsing: bytes in, normalised text with a title and a page map out.
//!
//! One file per format (`text`, `markdown`, `html`, `pdf`, `docx`), each producing raw page
//! texts; [`normalize`] turns those into one text with NFC, `\n` newlines, single spaces and
//! blank-line paragraph breaks, recording where each page starts. Every failure is a typed
//! [`IndexerError`]; a document without text is an error, never an empty success.

mod detect;
mod docx;
mod html;
mod html_depth;
mod limits;
mod markdown;
mod normalize;
mod pdf;
mod pdf_graph;
mod text;

pub use detect::{detect_file_format, detect_format};
pub use limits::{Limit, ParseLimits, exceeded};

use crate::document::{DocumentFormat, ParsedDocument};
use crate::error::{IndexerError, Result};

/// Parses a document with the default [`ParseLimits`]. The format is detected from the content
/// (magic bytes) first, then from `mime`, then from `file_name`'s extension.
pub fn parse_document(
    bytes: &[u8],
    file_name: Option<&str>,
    mime: Option<&str>,
) -> Result<ParsedDocument> {
    parse_document_with_limits(bytes, file_name, mime, &ParseLimits::default())
}

/// Parses a document under explicit limits; see [`parse_document`].
pub fn parse_document_with_limits(
    bytes: &[u8],
    file_name: Option<&str>,
    mime: Option<&str>,
    limits: &ParseLimits,
) -> Result<ParsedDocument> {
    let size = bytes.len() as u64;
    if size > limits.max_bytes {
        return Err(IndexerError::TooLarge {
            size,
            max_bytes: limits.max_bytes,
        });
    }
    if bytes.is_empty() {
        return Err(IndexerError::EmptyDocument("the file has zero bytes"));
    }
    let format = detect::detect_format(bytes, file_name, mime)?;
    let extracted = match format {
        DocumentFormat::Text => text::parse(bytes)?,
        DocumentFormat::Markdown => markdown::parse(bytes)?,
        DocumentFormat::Html => html::parse(bytes, limits)?,
        DocumentFormat::Pdf => pdf::parse(bytes, limits)?,
        DocumentFormat::Docx => docx::parse(bytes, limits)?,
    };
    let (text, pages) = normalize::assemble(&extracted.pages);
    limits::check_text(&text, limits)?;
    if text.is_empty() {
        return Err(IndexerError::EmptyDocument("the document holds no text"));
    }
    let stem = file_name.map(normalize::file_stem);
    let title = normalize::pick_title(&[extracted.title.as_deref(), stem], &text);
    Ok(ParsedDocument {
        title,
        text,
        pages,
        format,
    })
}
