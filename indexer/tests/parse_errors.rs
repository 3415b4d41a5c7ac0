//! Bad input gives typed errors, never a silently empty document: corrupt, encrypted and scanned
//! PDFs, zero bytes, whitespace only, inputs over the size limit (as uploaded and as inflated from
//! a DOCX), invalid UTF-8 (rejected, with the offset of the first bad byte) and unsupported types.

use crate::parse_support;

use docqa_indexer::{
    DocumentFormat, IndexerError, Limit, ParseLimits, parse_document, parse_document_with_limits,
};
use parse_support::{docx, docx_with_media, image_only_pdf, noise, para, pdf_bytes, text_pdf};

#[test]
fn corrupt_pdf_is_a_corrupt_error() {
    let bytes =
        b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >>\nthis is not a PDF body\n%%EOF";
    let err = parse_document(bytes, Some("broken.pdf"), None).unwrap_err();
    assert!(
        matches!(
            err,
            IndexerError::Corrupt {
                format: DocumentFormat::Pdf,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn truncated_pdf_is_not_a_silent_success() {
    let bytes = pdf_bytes(&mut text_pdf("T", &[&["Some text on a page."]]));
    let err = parse_document(&bytes[..bytes.len() / 3], None, None).unwrap_err();
    assert!(
        matches!(
            err,
            IndexerError::Corrupt { .. } | IndexerError::EmptyDocument(_)
        ),
        "{err:?}"
    );
}

#[test]
fn pdfs_cut_anywhere_give_text_or_a_typed_error_and_never_panic() {
    let bytes = pdf_bytes(&mut text_pdf("T", &[&["Alpha beta."], &["Gamma delta."]]));
    for cut in (8..bytes.len()).step_by(bytes.len() / 40) {
        match parse_document(&bytes[..cut], None, None) {
            Ok(doc) => assert!(!doc.text.trim().is_empty()),
            Err(IndexerError::Corrupt { .. } | IndexerError::EmptyDocument(_)) => {}
            Err(other) => panic!("cut at {cut}: unexpected {other:?}"),
        }
    }
}

#[test]
fn pdf_with_a_user_password_is_an_encrypted_error() {
    let mut pdf = text_pdf("Secret", &[&["Confidential figures."]]);
    let state = lopdf::EncryptionState::try_from(lopdf::EncryptionVersion::V2 {
        document: &pdf,
        owner_password: "owner-secret",
        user_password: "user-secret",
        key_length: 128,
        permissions: lopdf::Permissions::all(),
    })
    .unwrap();
    pdf.encrypt(&state).unwrap();
    let err = parse_document(&pdf_bytes(&mut pdf), Some("secret.pdf"), None).unwrap_err();
    assert!(matches!(err, IndexerError::EncryptedPdf), "{err:?}");
}

#[test]
fn scanned_pdf_without_text_layer_is_a_scanned_error() {
    let bytes = pdf_bytes(&mut image_only_pdf(2));
    let err = parse_document(&bytes, Some("scan.pdf"), None).unwrap_err();
    assert!(
        matches!(err, IndexerError::ScannedPdf { pages: 2 }),
        "{err:?}"
    );
}

#[test]
fn zero_bytes_is_an_empty_document() {
    let err = parse_document(b"", Some("empty.txt"), None).unwrap_err();
    assert!(matches!(err, IndexerError::EmptyDocument(_)), "{err:?}");
}

#[test]
fn whitespace_only_text_is_an_empty_document() {
    let err = parse_document(b" \n\t\r\n\x0c \n", Some("blank.txt"), None).unwrap_err();
    assert!(matches!(err, IndexerError::EmptyDocument(_)), "{err:?}");
}

#[test]
fn html_with_only_a_script_is_an_empty_document() {
    let html = b"<html><head><title>T</title><script>alert(1)</script></head><body> </body></html>";
    let err = parse_document(html, Some("a.html"), None).unwrap_err();
    assert!(matches!(err, IndexerError::EmptyDocument(_)), "{err:?}");
}

#[test]
fn input_over_the_size_limit_is_too_large() {
    let limits = ParseLimits {
        max_bytes: 10,
        ..ParseLimits::default()
    };
    let err = parse_document_with_limits(b"eleven byte", None, None, &limits).unwrap_err();
    assert!(
        matches!(
            err,
            IndexerError::TooLarge {
                size: 11,
                max_bytes: 10
            }
        ),
        "{err:?}"
    );
    assert!(parse_document_with_limits(b"ten bytes!", None, None, &limits).is_ok());
}

#[test]
fn a_100_mb_text_file_is_too_large_under_the_default_limit() {
    let text = "A line of an enormous log file.\n".repeat((100 << 20) / 32);
    assert_eq!(text.len(), 100 << 20);
    let err = parse_document(text.as_bytes(), Some("huge.txt"), Some("text/plain")).unwrap_err();
    assert!(
        matches!(
            err,
            IndexerError::TooLarge { size, max_bytes: ParseLimits::DEFAULT_MAX_BYTES } if size == 100 << 20
        ),
        "{err:?}"
    );
}

#[test]
fn docx_inflating_past_the_inflation_limit_is_refused_naming_it() {
    let body = para(None, &"All work and no play. ".repeat(20_000));
    let bytes = docx(&body, None);
    let limits = ParseLimits {
        max_inflated_bytes: 100_000,
        ..ParseLimits::default()
    };
    assert!(
        (bytes.len() as u64) < limits.max_inflated_bytes,
        "the package itself is small"
    );
    let err = parse_document_with_limits(&bytes, None, None, &limits).unwrap_err();
    assert!(
        matches!(
            err,
            IndexerError::LimitExceeded {
                limit: Limit::InflatedBytes,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("inflated_bytes limit"), "{err}");
}

#[test]
fn invalid_utf8_text_is_rejected_with_the_offset_of_the_first_bad_byte() {
    let bytes = b"Caf\xe9 au lait";
    let err = parse_document(bytes, Some("latin1.txt"), None).unwrap_err();
    assert!(
        matches!(err, IndexerError::InvalidUtf8 { byte_offset: 3 }),
        "{err:?}"
    );
    let err = parse_document(b"# T\n\n\xff", Some("a.md"), None).unwrap_err();
    assert!(
        matches!(err, IndexerError::InvalidUtf8 { byte_offset: 5 }),
        "{err:?}"
    );
}

#[test]
fn unsupported_types_are_named() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    let err = parse_document(png, Some("photo.png"), None).unwrap_err();
    assert!(
        matches!(&err, IndexerError::UnsupportedType(t) if t.contains("PNG")),
        "{err:?}"
    );
    let err = parse_document(b"plain words", Some("sheet.xlsx"), None).unwrap_err();
    assert!(matches!(err, IndexerError::UnsupportedType(_)), "{err:?}");
    let zip = parse_support::zip_parts(&[("readme.txt", "hi".to_owned())]);
    let err = parse_document(&zip, None, None).unwrap_err();
    assert!(matches!(err, IndexerError::UnsupportedType(_)), "{err:?}");
}

#[test]
fn a_docx_name_on_text_content_is_corrupt() {
    let err = parse_document(b"not a zip", Some("report.docx"), None).unwrap_err();
    assert!(
        matches!(
            err,
            IndexerError::Corrupt {
                format: DocumentFormat::Docx,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_docx_cut_before_its_central_directory_is_corrupt() {
    let whole = docx_with_media(
        &para(None, "Some text."),
        &[("image1.png", noise(70_000, 3))],
    );
    let cut = &whole[..whole.len() - 100];
    let err = parse_document(cut, Some("cut.docx"), None).unwrap_err();
    assert!(
        matches!(
            err,
            IndexerError::Corrupt {
                format: DocumentFormat::Docx,
                ..
            }
        ),
        "{err:?}"
    );
}
