//! Markdown (CommonMark with GitHub tables, strikethrough, task lists and front matter) to text:
//! the words a reader sees, without markup. Headings and paragraphs become their own lines
//! separated by a blank line; list items and table rows become lines (table cells joined by
//! ` | `); soft line breaks become spaces; raw HTML and images are dropped. The title is the
//! front matter's `title:` or the first heading (an H1 preferred).

use pulldown_cmark::{Event, HeadingLevel, MetadataBlockKind, Options, Parser, Tag, TagEnd};

use super::normalize::{BlockText, Extracted};
use super::text::decode;
use crate::error::Result;

/// Parses Markdown bytes (UTF-8).
pub(crate) fn parse(bytes: &[u8]) -> Result<Extracted> {
    let source = decode(bytes)?;
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS;
    let mut w = Writer::default();
    for event in Parser::new_ext(&source, options) {
        w.event(event);
    }
    let title = w.front_matter_title().or(w.h1).or(w.first_heading);
    Ok(Extracted {
        title,
        pages: vec![w.out.into_string()],
    })
}

/// Event-by-event text writer.
#[derive(Default)]
struct Writer {
    out: BlockText,
    /// Cells already written in the current table row.
    cells_in_row: usize,
    /// Depth of nested images: their alt text is skipped.
    image_depth: usize,
    /// Inside the YAML front matter.
    in_metadata: bool,
    /// The front matter's text.
    metadata: Option<String>,
    heading: Option<(HeadingLevel, String)>,
    h1: Option<String>,
    first_heading: Option<String>,
}

impl Writer {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) | Event::Code(t) => self.text(&t),
            Event::SoftBreak => self.text(" "),
            Event::HardBreak => self.out.request_break(1),
            Event::Rule => self.out.request_break(2),
            Event::TaskListMarker(_)
            | Event::Html(_)
            | Event::InlineHtml(_)
            | Event::FootnoteReference(_)
            | Event::InlineMath(_)
            | Event::DisplayMath(_) => {}
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { level, .. } => {
                self.out.request_break(2);
                self.heading = Some((level, String::new()));
            }
            Tag::Paragraph | Tag::CodeBlock(_) | Tag::BlockQuote(_) | Tag::Table(_) => {
                self.out.request_break(2);
            }
            Tag::List(_) => self.out.request_break(2),
            Tag::Item => self.out.request_break(1),
            Tag::TableRow | Tag::TableHead => {
                self.out.request_break(1);
                self.cells_in_row = 0;
            }
            Tag::TableCell => {
                if self.cells_in_row > 0 {
                    self.out.push_str(" | ");
                }
                self.cells_in_row += 1;
            }
            Tag::Image { .. } => self.image_depth += 1,
            Tag::MetadataBlock(MetadataBlockKind::YamlStyle) => {
                self.in_metadata = true;
                self.metadata = Some(String::new());
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) => self.finish_heading(),
            TagEnd::Paragraph
            | TagEnd::CodeBlock
            | TagEnd::BlockQuote(_)
            | TagEnd::Table
            | TagEnd::List(_) => self.out.request_break(2),
            TagEnd::Item | TagEnd::TableRow | TagEnd::TableHead => self.out.request_break(1),
            TagEnd::Image => self.image_depth = self.image_depth.saturating_sub(1),
            TagEnd::MetadataBlock(_) => self.in_metadata = false,
            _ => {}
        }
    }

    fn text(&mut self, t: &str) {
        if self.in_metadata {
            self.metadata.get_or_insert_default().push_str(t);
            return;
        }
        if self.image_depth > 0 {
            return;
        }
        if let Some((_, h)) = self.heading.as_mut() {
            h.push_str(t);
        }
        self.out.push_str(t);
    }

    fn finish_heading(&mut self) {
        if let Some((level, text)) = self.heading.take() {
            let text = text.trim().to_owned();
            if !text.is_empty() {
                if level == HeadingLevel::H1 && self.h1.is_none() {
                    self.h1 = Some(text.clone());
                }
                self.first_heading.get_or_insert(text);
            }
        }
        self.out.request_break(2);
    }

    /// `title:` from YAML front matter, quotes removed.
    fn front_matter_title(&self) -> Option<String> {
        let meta = self.metadata.as_deref()?;
        meta.lines()
            .find_map(|l| l.strip_prefix("title:"))
            .map(|t| t.trim().trim_matches(['"', '\'']).to_owned())
            .filter(|t| !t.is_empty())
    }
}
