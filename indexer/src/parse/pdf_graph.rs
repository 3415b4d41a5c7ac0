//! Checks of a PDF page's object graph that the text extractor (`pdf-extract`) relies on without
//! making them itself. It follows a page's `/Parent` links to find inherited attributes, and each `Do`
//! operator into the drawn XObject's content, both by recursion: a `/Parent` chain that loops, or a form
//! that draws itself (directly or through others), recurses until the stack overflows, and forms drawn
//! many times within forms drawn many times multiply into a run without end. So before a page is
//! extracted, its `/Parent` chain must end within [`ParseLimits::max_depth`] links, and what its
//! content draws must hold no loop, nest at most [`MAX_FORM_NESTING`] deep, and come to at most
//! [`MAX_FORM_DRAWS`] drawings in all. XObjects are resolved as the extractor resolves them: by name in
//! the current resources, a form's own `/Resources` replacing them inside it.

use std::collections::HashSet;

use lopdf::content::Content;
use lopdf::{Dictionary, Document, Object, ObjectId};

use super::ParseLimits;
use super::limits::{Limit, exceeded};
use crate::error::{IndexerError, Result};

/// Forms drawn within forms, at most (the extractor's stack holds far more; real files nest a few).
pub(crate) const MAX_FORM_NESTING: usize = 32;

/// XObject drawings one page may make, counting each time a form is drawn inside another.
pub(crate) const MAX_FORM_DRAWS: usize = 10_000;

/// Checks page `page_id`'s `/Parent` chain and what its content draws; `corrupt` makes the error
/// for a loop.
pub(crate) fn check_page(
    doc: &Document,
    page_id: ObjectId,
    limits: &ParseLimits,
    corrupt: fn(String) -> IndexerError,
) -> Result<()> {
    let Ok(page) = doc.get_dictionary(page_id) else {
        return Ok(());
    };
    let resources = inherited_resources(doc, page, limits.max_depth).map_err(corrupt)?;
    let Ok(content) = doc.get_page_content(page_id) else {
        return Ok(());
    };
    let empty = Dictionary::new();
    let mut walk = Drawings {
        doc,
        path: Vec::new(),
        draws: 0,
    };
    walk.visit(&content, resources.unwrap_or(&empty))
        .map_err(|found| match found {
            Found::Loop(reason) => corrupt(reason),
            Found::TooMany(detail) => exceeded(Limit::NestingDepth, detail),
        })
}

/// The page's `/Resources`, its own or the nearest ancestor's; an error when the `/Parent` chain
/// loops or runs past `max_depth` links.
fn inherited_resources<'a>(
    doc: &'a Document,
    page: &'a Dictionary,
    max_depth: usize,
) -> std::result::Result<Option<&'a Dictionary>, String> {
    let mut seen = HashSet::new();
    let mut node = page;
    let mut found = None;
    loop {
        if found.is_none() {
            found = dictionary(doc, node.get(b"Resources").ok());
        }
        let Some(parent) = node.get(b"Parent").ok().and_then(|p| p.as_reference().ok()) else {
            return Ok(found);
        };
        if !seen.insert(parent) || seen.len() > max_depth {
            return Err("the page tree's parent links loop".to_owned());
        }
        let Ok(next) = doc.get_dictionary(parent) else {
            return Ok(found);
        };
        node = next;
    }
}

/// What a walk of the drawings found wrong.
enum Found {
    Loop(String),
    TooMany(String),
}

/// A depth-first walk of the XObjects a content stream draws.
struct Drawings<'a> {
    doc: &'a Document,
    /// The forms being drawn, outermost first.
    path: Vec<ObjectId>,
    /// Drawings made so far on this page.
    draws: usize,
}

impl<'a> Drawings<'a> {
    fn visit(
        &mut self,
        content: &[u8],
        resources: &'a Dictionary,
    ) -> std::result::Result<(), Found> {
        // Content the extractor cannot decode is its to report.
        let Ok(content) = Content::decode(content) else {
            return Ok(());
        };
        let xobjects = dictionary(self.doc, resources.get(b"XObject").ok());
        for op in content.operations.iter().filter(|op| op.operator == "Do") {
            let Some(name) = op.operands.first().and_then(|o| o.as_name().ok()) else {
                continue;
            };
            let Some(id) = xobjects
                .and_then(|x| x.get(name).ok())
                .and_then(|o| o.as_reference().ok())
            else {
                continue;
            };
            self.draw(id, resources)?;
        }
        Ok(())
    }

    /// Walks into XObject `id`, drawn where `resources` are current.
    fn draw(&mut self, id: ObjectId, resources: &'a Dictionary) -> std::result::Result<(), Found> {
        let Ok(stream) = self.doc.get_object(id).and_then(Object::as_stream) else {
            return Ok(());
        };
        if self.path.contains(&id) {
            return Err(Found::Loop(format!(
                "XObject {} {} draws itself",
                id.0, id.1
            )));
        }
        self.draws += 1;
        if self.draws > MAX_FORM_DRAWS {
            return Err(Found::TooMany(format!(
                "a page draws XObjects more than {MAX_FORM_DRAWS} times"
            )));
        }
        if self.path.len() >= MAX_FORM_NESTING {
            return Err(Found::TooMany(format!(
                "XObjects drawn within each other more than {MAX_FORM_NESTING} deep"
            )));
        }
        let inner = dictionary(self.doc, stream.dict.get(b"Resources").ok()).unwrap_or(resources);
        let content = match stream.filters() {
            Ok(_) => stream
                .decompressed_content()
                .unwrap_or_else(|_| stream.content.clone()),
            Err(_) => stream.content.clone(),
        };
        self.path.push(id);
        let walked = self.visit(&content, inner);
        self.path.pop();
        walked
    }
}

/// `object` as a dictionary, following one reference.
fn dictionary<'a>(doc: &'a Document, object: Option<&'a Object>) -> Option<&'a Dictionary> {
    match object? {
        Object::Reference(id) => doc.get_dictionary(*id).ok(),
        Object::Dictionary(d) => Some(d),
        _ => None,
    }
}
