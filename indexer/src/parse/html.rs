//! HTML to visible text, on the `scraper` (html5ever) DOM.
//!
//! Dropped: `<script>`, `<style>`, `<noscript>`, `<template>`, embedded objects, form controls,
//! and hidden elements (`hidden`, `aria-hidden="true"`, inline `display:none` /
//! `visibility:hidden`). Block elements become line breaks (paragraph-like ones a blank line),
//! table cells are joined by ` | `, whitespace collapses as a browser would except inside `<pre>`.
//! The title is `<title>`, else the first `<h1>`.

use scraper::node::Element;
use scraper::{Html, Node};

use super::ParseLimits;
use super::html_depth::check_depth;
use super::normalize::{BlockText, Extracted};
use super::text::decode;
use crate::error::Result;

/// Elements whose content is never shown as text.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed",
    "select", "textarea", "input", "button",
];

/// Blocks that end a paragraph (a blank line around them).
const PARAGRAPHS: &[&str] = &[
    "p",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
    "pre",
    "table",
    "ul",
    "ol",
    "dl",
    "section",
    "article",
    "header",
    "footer",
    "aside",
    "nav",
    "main",
    "figure",
    "hr",
    "details",
];

/// Blocks that end a line.
const LINES: &[&str] = &[
    "br",
    "div",
    "li",
    "tr",
    "dt",
    "dd",
    "caption",
    "figcaption",
    "summary",
    "address",
    "form",
    "fieldset",
    "legend",
    "thead",
    "tbody",
    "tfoot",
];

/// Parses HTML bytes (UTF-8, or UTF-16 with a byte-order mark); nesting deeper than the limit is
/// refused before the DOM is built.
pub(crate) fn parse(bytes: &[u8], limits: &ParseLimits) -> Result<Extracted> {
    let source = decode(bytes)?;
    check_depth(&source, limits.max_depth)?;
    let html = Html::parse_document(&source);
    let mut w = Writer::default();
    let mut stack = vec![(html.tree.root(), false)];
    while let Some((node, closing)) = stack.pop() {
        let element = match node.value() {
            Node::Text(t) if !closing => {
                w.text(t);
                continue;
            }
            Node::Element(e) => Some(e),
            Node::Document | Node::Fragment => None,
            _ => continue,
        };
        if closing {
            if let Some(e) = element {
                w.close(e);
            }
            continue;
        }
        if let Some(e) = element {
            if e.name() == "title" {
                w.title_from(
                    node.descendants()
                        .filter_map(|d| d.value().as_text().map(|t| t.to_string())),
                );
                continue;
            }
            if is_hidden(e) {
                continue;
            }
            w.open(e);
            stack.push((node, true));
        }
        stack.extend(node.children().rev().map(|c| (c, false)));
    }
    let title = w.title.or(w.h1);
    Ok(Extracted {
        title,
        pages: vec![w.out.into_string()],
    })
}

/// True for elements whose subtree is not rendered.
fn is_hidden(e: &Element) -> bool {
    if SKIPPED.contains(&e.name()) || e.attr("hidden").is_some() {
        return true;
    }
    if e.attr("aria-hidden")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return true;
    }
    e.attr("style").is_some_and(|style| {
        let style: String = style.chars().filter(|c| !c.is_whitespace()).collect();
        let style = style.to_ascii_lowercase();
        style.contains("display:none") || style.contains("visibility:hidden")
    })
}

/// Accumulates visible text while walking the DOM.
#[derive(Default)]
struct Writer {
    out: BlockText,
    pre_depth: usize,
    cells_in_row: usize,
    title: Option<String>,
    h1: Option<String>,
    h1_text: Option<String>,
}

impl Writer {
    fn open(&mut self, e: &Element) {
        let name = e.name();
        self.block_break(name);
        match name {
            "pre" => self.pre_depth += 1,
            "tr" => self.cells_in_row = 0,
            "td" | "th" => {
                if self.cells_in_row > 0 {
                    self.out.push_str(" | ");
                }
                self.cells_in_row += 1;
            }
            "h1" if self.h1.is_none() => self.h1_text = Some(String::new()),
            "img" => self.out.push_str(" "),
            _ => {}
        }
    }

    fn close(&mut self, e: &Element) {
        let name = e.name();
        match name {
            "pre" => self.pre_depth = self.pre_depth.saturating_sub(1),
            "h1" => {
                let text = self.h1_text.take().map(|t| t.trim().to_owned());
                if self.h1.is_none() {
                    self.h1 = text.filter(|t| !t.is_empty());
                }
            }
            "td" | "th" => self.out.push_str(" "),
            _ => {}
        }
        self.block_break(name);
    }

    fn block_break(&mut self, name: &str) {
        if PARAGRAPHS.contains(&name) {
            self.out.request_break(2);
        } else if LINES.contains(&name) {
            self.out.request_break(1);
        }
    }

    fn text(&mut self, t: &str) {
        if let Some(h) = self.h1_text.as_mut() {
            h.push_str(t);
        }
        if self.pre_depth > 0 {
            self.out.push_str(t);
            return;
        }
        let collapsed = t
            .split(|c: char| c.is_ascii_whitespace())
            .collect::<Vec<_>>()
            .join(" ");
        self.out.push_str(&collapsed);
    }

    fn title_from(&mut self, parts: impl Iterator<Item = String>) {
        if self.title.is_none() {
            let title: String = parts.collect();
            let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
            self.title = Some(title).filter(|t| !t.is_empty());
        }
    }
}
