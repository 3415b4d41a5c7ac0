//! Builders of small real documents for the parser tests: PDFs written with `lopdf` (text pages,
//! image-only pages, encryption) and DOCX packages written with `zip`.

#![allow(dead_code)]

use std::io::Write;

use lopdf::content::{Content, Operation};
use lopdf::{Document, Object, Stream, dictionary};

/// A PDF with one page per entry of `pages`, each line of a page drawn as its own text line in
/// Helvetica 12 pt, and `/Title` set in the document information dictionary.
pub fn text_pdf(title: &str, pages: &[&[&str]]) -> Document {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica",
    });
    let resources = dictionary! { "Font" => dictionary! { "F1" => font_id } };
    let kids: Vec<Object> = pages
        .iter()
        .map(|lines| {
            let content = Content {
                operations: text_operations(lines),
            };
            let bytes = content.encode().unwrap_or_default();
            let content_id = doc.add_object(Stream::new(dictionary! {}, bytes));
            doc.add_object(dictionary! {
                "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
                "Resources" => resources.clone(),
            })
            .into()
        })
        .collect();
    finish(&mut doc, pages_id, kids, title);
    doc
}

/// Operators drawing each line 16 pt below the previous one, from the top-left margin.
fn text_operations(lines: &[&str]) -> Vec<Operation> {
    let mut ops = vec![
        Operation::new("BT", vec![]),
        Operation::new("Tf", vec!["F1".into(), 12.into()]),
        Operation::new("Td", vec![72.into(), 720.into()]),
    ];
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            ops.push(Operation::new("Td", vec![0.into(), (-16).into()]));
        }
        ops.push(Operation::new("Tj", vec![Object::string_literal(*line)]));
    }
    ops.push(Operation::new("ET", vec![]));
    ops
}

/// A PDF whose `pages` pages each show an 8×8 grey image and no text: a scan without OCR.
pub fn image_only_pdf(pages: usize) -> Document {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let image = Stream::new(
        dictionary! {
            "Type" => "XObject", "Subtype" => "Image", "Width" => 8, "Height" => 8,
            "ColorSpace" => "DeviceGray", "BitsPerComponent" => 8,
        },
        (0..64u8).map(|i| i.wrapping_mul(4)).collect(),
    );
    let image_id = doc.add_object(image);
    let kids: Vec<Object> = (0..pages)
        .map(|_| {
            let ops = b"q 400 0 0 400 100 200 cm /Im1 Do Q".to_vec();
            let content_id = doc.add_object(Stream::new(dictionary! {}, ops));
            doc.add_object(dictionary! {
                "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
                "Resources" => dictionary! { "XObject" => dictionary! { "Im1" => image_id } },
            })
            .into()
        })
        .collect();
    finish(&mut doc, pages_id, kids, "Scan");
    doc
}

/// Adds the page tree, catalog and information dictionary.
fn finish(doc: &mut Document, pages_id: lopdf::ObjectId, kids: Vec<Object>, title: &str) {
    let count = i64::try_from(kids.len()).unwrap_or(0);
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages", "Kids" => kids, "Count" => count,
            "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    let info_id = doc.add_object(dictionary! { "Title" => Object::string_literal(title) });
    doc.trailer.set("Root", catalog_id);
    doc.trailer.set("Info", info_id);
    let file_id = Object::String(
        b"docqa-test-file".to_vec(),
        lopdf::StringFormat::Hexadecimal,
    );
    doc.trailer.set("ID", vec![file_id.clone(), file_id]);
}

/// The document's bytes.
pub fn pdf_bytes(doc: &mut Document) -> Vec<u8> {
    let mut out = Vec::new();
    doc.save_to(&mut out)
        .expect("an in-memory PDF can be written");
    out
}

/// A DOCX package from the inner XML of `<w:body>` and an optional `dc:title`.
pub fn docx(body: &str, title: Option<&str>) -> Vec<u8> {
    let mut parts = vec![
        ("[Content_Types].xml", CONTENT_TYPES.to_owned()),
        ("_rels/.rels", RELS.to_owned()),
        (
            "word/document.xml",
            format!("{DOC_HEAD}<w:body>{body}</w:body></w:document>"),
        ),
    ];
    if let Some(title) = title {
        parts.push((
            "docProps/core.xml",
            format!("{CORE_HEAD}<dc:title>{title}</dc:title></cp:coreProperties>"),
        ));
    }
    zip_parts(&parts)
}

/// A DOCX package like [`docx`] that also carries binary media parts (`word/media/...`), stored
/// uncompressed as Word stores images: random bytes make a package as large as the media are.
pub fn docx_with_media(body: &str, media: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let package = std::io::Cursor::new(docx(body, None));
    let mut zip = zip::ZipWriter::new_append(package).expect("a DOCX package to append to");
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in media {
        zip.start_file(format!("word/media/{name}"), stored)
            .expect("zip entry");
        zip.write_all(bytes).expect("zip write");
    }
    zip.finish().expect("zip finish").into_inner()
}

/// `len` pseudo-random bytes (xorshift64 from `seed`): no compressor shrinks them, like a photo.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A zip archive of named text parts (deflated).
pub fn zip_parts(parts: &[(&str, String)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, content) in parts {
        zip.start_file(*name, options).expect("zip entry");
        zip.write_all(content.as_bytes()).expect("zip write");
    }
    zip.finish().expect("zip finish").into_inner()
}

/// A paragraph of plain runs, with an optional paragraph style.
pub fn para(style: Option<&str>, text: &str) -> String {
    let props = style.map_or(String::new(), |s| {
        format!("<w:pPr><w:pStyle w:val=\"{s}\"/></w:pPr>")
    });
    format!("<w:p>{props}<w:r><w:t xml:space=\"preserve\">{text}</w:t></w:r></w:p>")
}

/// A table from rows of cell texts.
pub fn table(rows: &[&[&str]]) -> String {
    let rows: String = rows
        .iter()
        .map(|cells| {
            let cells: String = cells
                .iter()
                .map(|c| format!("<w:tc><w:tcPr/>{}</w:tc>", para(None, c)))
                .collect();
            format!("<w:tr>{cells}</w:tr>")
        })
        .collect();
    format!("<w:tbl><w:tblPr/>{rows}</w:tbl>")
}

/// An explicit page break in its own paragraph.
pub fn page_break() -> String {
    "<w:p><w:r><w:br w:type=\"page\"/></w:r></w:p>".to_owned()
}

const CONTENT_TYPES: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#;

const RELS: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#;

const DOC_HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006">"#;

const CORE_HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/">"#;
