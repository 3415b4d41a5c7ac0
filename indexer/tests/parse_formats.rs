//! Parsing real documents of every supported format: page numbers of a multi-page PDF, a DOCX
//! with a table and page breaks, HTML without scripts and hidden text, Markdown without markup,
//! and plain text paged at form feeds.

use crate::parse_support;

use docqa_indexer::{
    ChunkerConfig, DocumentFormat, ParsedDocument, chunk_document, detect_file_format,
    parse_document,
};
use parse_support::{docx, docx_with_media, noise, page_break, para, pdf_bytes, table, text_pdf};

/// Character offset of `needle` in the document text.
fn char_offset(doc: &ParsedDocument, needle: &str) -> usize {
    let byte = doc
        .text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not found in {:?}", doc.text));
    doc.text[..byte].chars().count()
}

/// The page on which `needle` starts.
fn page_of(doc: &ParsedDocument, needle: &str) -> u32 {
    doc.pages.page_of(char_offset(doc, needle))
}

const PDF_PAGES: [&[&str]; 3] = [
    &[
        "The first page opens the report.",
        "Revenue grew by 12 percent.",
    ],
    &[
        "The second page lists the risks.",
        "Supply chains remain fragile.",
    ],
    &[
        "The third page holds the outlook.",
        "Growth should continue in 2027.",
    ],
];

#[test]
fn pdf_sentences_are_found_on_their_own_pages() {
    let bytes = pdf_bytes(&mut text_pdf("Annual Report", &PDF_PAGES));
    let doc = parse_document(&bytes, Some("report.pdf"), Some("application/pdf")).unwrap();
    assert_eq!(doc.format, DocumentFormat::Pdf);
    assert_eq!(doc.title, "Annual Report");
    assert_eq!(doc.pages.page_count(), 3);
    for (page, lines) in PDF_PAGES.iter().enumerate() {
        for line in lines.iter() {
            assert_eq!(
                page_of(&doc, line),
                page as u32 + 1,
                "{line:?} in {:?}",
                doc.text
            );
        }
    }
}

#[test]
fn pdf_page_map_covers_every_character_of_the_page() {
    let bytes = pdf_bytes(&mut text_pdf("Annual Report", &PDF_PAGES));
    let doc = parse_document(&bytes, None, None).unwrap();
    let second = char_offset(&doc, "The second page");
    let last_of_first = char_offset(&doc, "Revenue grew by 12 percent.") + 26;
    assert_eq!(doc.text.chars().nth(last_of_first), Some('.'));
    assert_eq!(doc.pages.page_of(last_of_first), 1);
    assert_eq!(doc.pages.page_of(second), 2);
    assert_eq!(doc.pages.page_starts()[1], second);
}

#[test]
fn pdf_chunks_carry_the_pages_of_their_sentences() {
    let pages: [&[&str]; 3] = [
        &[
            "Costs fell sharply this year.",
            "The outlook for the next year depends on",
        ],
        &[
            "the price of energy and on demand.",
            "Staffing stays level.",
        ],
        &["Nothing else changes."],
    ];
    let bytes = pdf_bytes(&mut text_pdf("Outlook", &pages));
    let doc = parse_document(&bytes, None, None).unwrap();
    let words = |t: &str| t.split_whitespace().count();
    let cfg = ChunkerConfig {
        max_tokens: 16,
        overlap_tokens: 0,
    };
    let chunks = chunk_document(&doc, &words, &cfg);
    let spanning = chunks
        .iter()
        .find(|c| c.text.contains("depends on\nthe price"))
        .unwrap_or_else(|| panic!("no chunk holds the sentence across pages: {chunks:#?}"));
    assert_eq!(
        (spanning.page_start, spanning.page_end),
        (1, 2),
        "{spanning:?}"
    );
    let last = chunks.last().unwrap();
    assert_eq!(last.text, "Staffing stays level.\nNothing else changes.");
    assert_eq!((last.page_start, last.page_end), (2, 3), "{last:?}");
    assert_eq!(chunks[0].page_start, 1);
}

#[test]
fn pdf_with_only_an_owner_password_is_read() {
    let mut pdf = text_pdf("Owner only", &PDF_PAGES);
    let state = lopdf::EncryptionState::try_from(lopdf::EncryptionVersion::V2 {
        document: &pdf,
        owner_password: "owner-secret",
        user_password: "",
        key_length: 128,
        permissions: lopdf::Permissions::all(),
    })
    .unwrap();
    pdf.encrypt(&state).unwrap();
    let doc = parse_document(&pdf_bytes(&mut pdf), None, None).unwrap();
    assert_eq!(page_of(&doc, "Supply chains remain fragile."), 2);
}

#[test]
fn docx_paragraphs_tables_pages_and_title_are_read() {
    let body = [
        para(Some("Title"), "Quarterly Review"),
        para(None, "Sales rose in every region &amp; segment."),
        table(&[&["Region", "Sales"], &["North", "120"], &["South", "95"]]),
        page_break(),
        para(Some("Heading1"), "Outlook"),
        para(None, "We expect further growth."),
    ]
    .concat();
    let bytes = docx(&body, Some("Q3 Review"));
    let doc = parse_document(&bytes, Some("review.docx"), None).unwrap();
    assert_eq!(doc.format, DocumentFormat::Docx);
    assert_eq!(doc.title, "Q3 Review");
    assert!(
        doc.text.contains("Sales rose in every region & segment."),
        "{:?}",
        doc.text
    );
    assert!(
        doc.text.contains("Region | Sales\nNorth | 120\nSouth | 95"),
        "{:?}",
        doc.text
    );
    assert_eq!(page_of(&doc, "Quarterly Review"), 1);
    assert_eq!(page_of(&doc, "South | 95"), 1);
    assert_eq!(page_of(&doc, "We expect further growth."), 2);
}

#[test]
fn docx_title_falls_back_to_the_title_style() {
    let body = [
        para(Some("Title"), "Styled Title"),
        para(None, "Body text."),
    ]
    .concat();
    let doc = parse_document(&docx(&body, None), Some("x.docx"), None).unwrap();
    assert_eq!(doc.title, "Styled Title");
}

#[test]
fn a_docx_larger_than_its_first_64_kib_is_recognised_from_the_stored_file() {
    let body = para(None, "The photo shows the harbour at dawn.");
    let bytes = docx_with_media(&body, &[("image1.png", noise(70_000, 7))]);
    assert!(bytes.len() > 70_000);
    let mut file = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut file, &bytes).unwrap();
    let format = detect_file_format(&mut file, Some("harbour.docx"), None).unwrap();
    assert_eq!(format, DocumentFormat::Docx);
    let doc = parse_document(&bytes, Some("harbour.docx"), None).unwrap();
    assert!(doc.text.contains("harbour at dawn"), "{:?}", doc.text);
}

const HTML: &str = r#"<!DOCTYPE html>
<html><head><title>Field Guide</title><style>p { color: red; }</style>
<script>var secret = "do not index";</script></head>
<body><nav aria-hidden="true">Skip menu</nav>
<h1>Birds of the Coast</h1>
<p>The <b>gull</b> is   common
on beaches.</p><div hidden>Hidden promo text</div>
<p style="display: none">Invisible paragraph</p>
<ul><li>Herring gull</li><li>Common tern</li></ul>
<table><tr><th>Bird</th><th>Length</th></tr><tr><td>Gull</td><td>60 cm</td></tr></table>
<noscript>Enable JavaScript</noscript><pre>line one
  line two</pre></body></html>"#;

#[test]
fn html_keeps_visible_text_and_drops_scripts_styles_and_hidden_elements() {
    let doc = parse_document(HTML.as_bytes(), Some("guide.html"), None).unwrap();
    assert_eq!(doc.format, DocumentFormat::Html);
    assert_eq!(doc.title, "Field Guide");
    for hidden in [
        "secret",
        "color",
        "Skip menu",
        "Hidden promo",
        "Invisible",
        "JavaScript",
    ] {
        assert!(
            !doc.text.contains(hidden),
            "{hidden:?} leaked into {:?}",
            doc.text
        );
    }
    assert!(
        doc.text
            .contains("Birds of the Coast\n\nThe gull is common on beaches."),
        "{:?}",
        doc.text
    );
    assert!(
        doc.text.contains("Herring gull\nCommon tern"),
        "{:?}",
        doc.text
    );
    assert!(
        doc.text.contains("Bird | Length\nGull | 60 cm"),
        "{:?}",
        doc.text
    );
    assert!(doc.text.contains("line one\nline two"), "{:?}", doc.text);
}

const MARKDOWN: &str = "---\ntitle: \"Setup Guide\"\n---\n\n# Installing docqa\n\nRun the **installer**\nand follow [the prompts](https://example.com/help).\n\n## Requirements\n\n- A `64-bit` CPU\n- 8 GB of memory\n\n| Item | Size |\n|---|---|\n| model | 270 MB |\n\n<div>raw html</div>\n\n![diagram](d.png)\n";

#[test]
fn markdown_keeps_text_and_headings_without_markup() {
    let doc = parse_document(MARKDOWN.as_bytes(), Some("setup.md"), None).unwrap();
    assert_eq!(doc.format, DocumentFormat::Markdown);
    assert_eq!(doc.title, "Setup Guide");
    let expected = "Installing docqa\n\nRun the installer and follow the prompts.\n\nRequirements\n\nA 64-bit CPU\n8 GB of memory\n\nItem | Size\nmodel | 270 MB";
    assert_eq!(doc.text, expected);
}

#[test]
fn markdown_title_is_the_first_heading_without_front_matter() {
    let doc = parse_document(b"Intro text.\n\n# Main Title\n\nBody.", Some("a.md"), None).unwrap();
    assert_eq!(doc.title, "Main Title");
}

#[test]
fn text_is_paged_at_form_feeds_and_normalised() {
    let raw = "Page one  has\ttwo sentences.\r\nStill page one.\u{c}Cafe\u{301} on page two.\u{c}\u{c}Page four.";
    let doc = parse_document(raw.as_bytes(), Some("notes.txt"), None).unwrap();
    assert_eq!(doc.format, DocumentFormat::Text);
    assert_eq!(doc.title, "notes");
    assert_eq!(
        doc.text,
        "Page one has two sentences.\nStill page one.\nCaf\u{e9} on page two.\nPage four."
    );
    assert_eq!(doc.pages.page_count(), 4);
    assert_eq!(page_of(&doc, "Still page one."), 1);
    assert_eq!(page_of(&doc, "Café"), 2);
    assert_eq!(page_of(&doc, "Page four."), 4);
}
