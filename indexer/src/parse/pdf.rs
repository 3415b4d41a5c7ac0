//! PDF to text, page by page, with `lopdf` (document structure, decryption) and `pdf-extract`
//! (text layout per page).
//!
//! A PDF protected by a user password is [`IndexerError::EncryptedPdf`] (one with only an owner
//! password opens with the empty password, as in every viewer). Pages with images but no text
//! anywhere in the file make [`IndexerError::ScannedPdf`]; no text and no images is an empty
//! document. A file `lopdf` cannot load, or a page the extractor fails or panics on, is
//! [`IndexerError::Corrupt`]: docqa never returns a silently truncated document.

use std::panic::{AssertUnwindSafe, catch_unwind};

use lopdf::{Document, Object, ObjectId};
use pdf_extract::{PlainTextOutput, output_doc_page};

use super::limits::{InflateBudget, Limit, exceeded};
use super::normalize::Extracted;
use super::{ParseLimits, pdf_graph};
use crate::document::DocumentFormat;
use crate::error::{IndexerError, Result};

/// Parses PDF bytes into one text per page. A panic inside the PDF libraries (malformed input)
/// is caught and reported as a corrupt file.
pub(crate) fn parse(bytes: &[u8], limits: &ParseLimits) -> Result<Extracted> {
    catch_unwind(AssertUnwindSafe(|| parse_pages(bytes, limits)))
        .unwrap_or_else(|_| Err(corrupt("the file structure cannot be read".to_owned())))
}

fn parse_pages(bytes: &[u8], limits: &ParseLimits) -> Result<Extracted> {
    let doc = load(bytes)?;
    let pages = doc.get_pages();
    if pages.is_empty() {
        return Err(IndexerError::EmptyDocument("the PDF has no pages"));
    }
    if pages.len() > limits.max_pages {
        return Err(exceeded(
            Limit::Pages,
            format!("{} pages, more than {}", pages.len(), limits.max_pages),
        ));
    }
    check_inflated_size(&doc, limits)?;
    let mut texts = Vec::with_capacity(pages.len());
    for (&page_num, &page_id) in &pages {
        pdf_graph::check_page(&doc, page_id, limits, corrupt)?;
        texts.push(page_text(&doc, page_num)?);
    }
    if texts.iter().all(|t| t.trim().is_empty()) {
        let page_count = u32::try_from(pages.len()).unwrap_or(u32::MAX);
        return Err(if pages.values().any(|&id| page_has_images(&doc, id)) {
            IndexerError::ScannedPdf { pages: page_count }
        } else {
            IndexerError::EmptyDocument("the PDF has no text")
        });
    }
    Ok(Extracted {
        title: info_title(&doc),
        pages: texts,
    })
}

/// Loads the document; a remaining `/Encrypt` entry means the empty password did not open it.
fn load(bytes: &[u8]) -> Result<Document> {
    match Document::load_mem(bytes) {
        Ok(doc) if doc.is_encrypted() => Err(IndexerError::EncryptedPdf),
        Ok(doc) => Ok(doc),
        Err(lopdf::Error::Decryption(_) | lopdf::Error::InvalidPassword) => {
            Err(IndexerError::EncryptedPdf)
        }
        Err(e) => Err(corrupt(format!("cannot load: {e}"))),
    }
}

/// Inflates every Flate-compressed stream the text extractor may decode (all but images) into
/// nothing, counting bytes, so that a small file whose streams inflate to gigabytes is refused
/// before any of them is held in memory. A stream that does not inflate cleanly counts for what it
/// gave; the extractor reports it later if it matters.
fn check_inflated_size(doc: &Document, limits: &ParseLimits) -> Result<()> {
    let mut budget = InflateBudget::new(limits);
    for object in doc.objects.values() {
        let Object::Stream(stream) = object else {
            continue;
        };
        let is_image = stream
            .dict
            .get(b"Subtype")
            .and_then(Object::as_name)
            .is_ok_and(|name| name == b"Image");
        let flate = stream
            .filters()
            .is_ok_and(|filters| filters.iter().any(|f| f == b"FlateDecode"));
        if is_image || !flate {
            continue;
        }
        let inflated = flate2::read::ZlibDecoder::new(stream.content.as_slice());
        if let Err(e @ IndexerError::LimitExceeded { .. }) = budget.measure(inflated) {
            return Err(e);
        }
    }
    Ok(())
}

/// The text of one page (1-based), as laid out by `pdf-extract`.
fn page_text(doc: &Document, page_num: u32) -> Result<String> {
    let extracted = catch_unwind(AssertUnwindSafe(|| {
        let mut text = String::new();
        let result = {
            let mut output = PlainTextOutput::new(&mut text);
            output_doc_page(doc, &mut output, page_num)
        };
        result.map(|()| text)
    }));
    match extracted {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(corrupt(format!("page {page_num}: {e}"))),
        Err(_) => Err(corrupt(format!(
            "page {page_num}: the text layer cannot be read"
        ))),
    }
}

/// True when the page's resources hold an image XObject.
fn page_has_images(doc: &Document, page_id: ObjectId) -> bool {
    doc.get_page_images(page_id)
        .is_ok_and(|images| !images.is_empty())
}

/// `/Title` from the document information dictionary.
fn info_title(doc: &Document) -> Option<String> {
    let info = match doc.trailer.get(b"Info").ok()? {
        Object::Reference(id) => doc.get_dictionary(*id).ok()?,
        Object::Dictionary(d) => d,
        _ => return None,
    };
    match info.get(b"Title").ok()? {
        Object::String(bytes, _) => Some(decode_text_string(bytes)),
        _ => None,
    }
    .filter(|t| !t.trim().is_empty())
}

/// A PDF text string: UTF-16BE or UTF-8 with a byte-order mark, else PDFDocEncoding (read as
/// Latin-1, which it equals for printable characters).
fn decode_text_string(bytes: &[u8]) -> String {
    if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        let units = rest
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]));
        return char::decode_utf16(units)
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect();
    }
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        return String::from_utf8_lossy(rest).into_owned();
    }
    bytes.iter().map(|&b| char::from(b)).collect()
}

fn corrupt(reason: String) -> IndexerError {
    IndexerError::Corrupt {
        format: DocumentFormat::Pdf,
        reason,
    }
}
