//! PDFs whose object graph would send the text extractor into endless recursion are refused with a
//! typed error before extraction, not a crash: a page tree whose parent links loop, a form XObject
//! that draws itself (directly or through another), forms nested or drawn past the bounds. Forms
//! drawn inside forms, as real files use them, still give their text.

use crate::parse_support;

use docqa_indexer::{DocumentFormat, IndexerError, Limit, parse_document};
use lopdf::{Document, Object, ObjectId, Stream, dictionary};
use parse_support::{pdf_bytes, text_pdf};

/// A one-page PDF saying "The page itself.", and its page's id.
fn one_page() -> (Document, ObjectId) {
    let doc = text_pdf("Forms", &[&["The page itself."]]);
    let page = *doc.get_pages().values().next().expect("a page");
    (doc, page)
}

/// A form XObject whose content is `content`, drawing the named forms of `xobjects`.
fn form(doc: &mut Document, content: &str, xobjects: &[(&str, ObjectId)]) -> ObjectId {
    let mut names = lopdf::Dictionary::new();
    for (name, id) in xobjects {
        names.set(*name, *id);
    }
    let font = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica",
    });
    doc.add_object(Stream::new(
        dictionary! {
            "Type" => "XObject", "Subtype" => "Form",
            "BBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
            "Resources" => dictionary! { "XObject" => names, "Font" => dictionary! { "F1" => font } },
        },
        content.as_bytes().to_vec(),
    ))
}

/// Makes the page draw `/X0`, which is `form`, after its own text.
fn draw_on_page(doc: &mut Document, page: ObjectId, form: ObjectId) {
    let contents = doc.get_page_content(page).expect("page content");
    let mut drawn = contents;
    drawn.extend_from_slice(b"\n/X0 Do\n");
    let content = doc.add_object(Stream::new(dictionary! {}, drawn));
    let page = doc.get_dictionary_mut(page).expect("page");
    page.set("Contents", content);
    let mut resources = page
        .get(b"Resources")
        .and_then(Object::as_dict)
        .unwrap()
        .clone();
    resources.set("XObject", dictionary! { "X0" => form });
    page.set("Resources", resources);
}

fn is_corrupt_saying(err: &IndexerError, words: &str) -> bool {
    matches!(err, IndexerError::Corrupt { format: DocumentFormat::Pdf, reason } if reason.contains(words))
}

#[test]
fn a_page_tree_whose_parent_links_loop_is_corrupt_not_a_stack_overflow() {
    let (mut doc, page) = one_page();
    let pages = doc
        .get_dictionary(page)
        .unwrap()
        .get(b"Parent")
        .and_then(Object::as_reference)
        .unwrap();
    // The page tree's root names itself as its parent, and no longer holds the media box the page
    // inherits, so the extractor would climb the loop for ever looking for it.
    let root = doc.get_dictionary_mut(pages).unwrap();
    root.set("Parent", pages);
    root.remove(b"MediaBox");
    let err = parse_document(&pdf_bytes(&mut doc), Some("loop.pdf"), None).unwrap_err();
    assert!(is_corrupt_saying(&err, "parent links loop"), "{err:?}");
}

#[test]
fn a_form_that_draws_itself_through_another_is_corrupt_not_a_stack_overflow() {
    let (mut doc, page) = one_page();
    // X0 draws X1, which draws X0 again.
    let x0 = doc.new_object_id();
    let x1 = form(&mut doc, "/Back Do", &[("Back", x0)]);
    let drawn = form(&mut doc, "/Next Do", &[("Next", x1)]);
    let object = doc.objects.remove(&drawn).unwrap();
    doc.objects.insert(x0, object);
    draw_on_page(&mut doc, page, x0);
    let err = parse_document(&pdf_bytes(&mut doc), Some("forms.pdf"), None).unwrap_err();
    assert!(is_corrupt_saying(&err, "draws itself"), "{err:?}");
}

#[test]
fn forms_drawn_inside_forms_give_their_text() {
    let (mut doc, page) = one_page();
    let inner = form(
        &mut doc,
        "BT /F1 12 Tf 72 600 Td (Drawn two forms deep.) Tj ET",
        &[],
    );
    let outer = form(&mut doc, "/Inner Do /Inner Do", &[("Inner", inner)]);
    draw_on_page(&mut doc, page, outer);
    let parsed = parse_document(&pdf_bytes(&mut doc), Some("forms.pdf"), None).unwrap();
    assert!(parsed.text.contains("The page itself."), "{}", parsed.text);
    assert!(
        parsed.text.contains("Drawn two forms deep."),
        "{}",
        parsed.text
    );
}

#[test]
fn forms_nested_past_the_bound_or_multiplying_past_it_exceed_the_nesting_limit() {
    // 40 forms, each drawing the next.
    let (mut deep, page) = one_page();
    let mut next = form(&mut deep, "BT /F1 12 Tf (bottom) Tj ET", &[]);
    for _ in 0..40 {
        next = form(&mut deep, "/N Do", &[("N", next)]);
    }
    draw_on_page(&mut deep, page, next);
    // 16 levels, each drawing the next twice: 65,536 drawings from a file of 17 forms.
    let (mut wide, page) = one_page();
    let mut next = form(&mut wide, "BT /F1 12 Tf (leaf) Tj ET", &[]);
    for _ in 0..16 {
        next = form(&mut wide, "/N Do /N Do", &[("N", next)]);
    }
    draw_on_page(&mut wide, page, next);
    for (mut doc, words) in [(deep, "32 deep"), (wide, "10000 times")] {
        let err = parse_document(&pdf_bytes(&mut doc), Some("forms.pdf"), None).unwrap_err();
        assert!(
            matches!(&err, IndexerError::LimitExceeded { limit: Limit::NestingDepth, detail } if detail.contains(words)),
            "{err:?}"
        );
    }
}
