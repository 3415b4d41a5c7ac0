//! DOCX (Office Open XML) to text with `zip` and `quick-xml`: every paragraph of
//! `word/document.xml` (body, tables, text boxes) in document order, paragraphs separated by a
//! blank line, table rows as lines with cells joined by ` | `. Deleted revisions and field codes
//! are not text; `mc:Fallback` copies of alternate content are skipped so nothing is read twice.
//!
//! Pages: Word records where it last broke pages (`w:lastRenderedPageBreak`); when a file has
//! those they are the page starts, otherwise explicit page breaks (`<w:br w:type="page"/>`) are.
//! The title is `dc:title` from `docProps/core.xml`, else the first paragraph styled `Title` or
//! `Heading1`.

use quick_xml::Reader;
use quick_xml::events::{BytesRef, BytesStart, Event};

use super::ParseLimits;
use super::limits::InflateBudget;
use super::normalize::Extracted;
use crate::document::DocumentFormat;
use crate::error::{IndexerError, Result};

/// Parses DOCX bytes.
pub(crate) fn parse(bytes: &[u8], limits: &ParseLimits) -> Result<Extracted> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| corrupt(format!("unreadable zip archive: {e}")))?;
    let mut budget = InflateBudget::new(limits);
    let body = read_part(&mut archive, "word/document.xml", &mut budget)?
        .ok_or_else(|| corrupt("no word/document.xml".to_owned()))?;
    let mut walker = Walker::new(body.contains("lastRenderedPageBreak"));
    walker.walk(&body)?;
    let core_title = read_part(&mut archive, "docProps/core.xml", &mut budget)?
        .and_then(|core| core_title(&core));
    Ok(Extracted {
        title: core_title.or(walker.styled_title),
        pages: walker.pages,
    })
}

/// One part of the package as UTF-8 text; `None` when absent. Every part read is charged to the
/// file's inflation budget, as declared and as actually inflated.
fn read_part(
    archive: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>,
    name: &str,
    budget: &mut InflateBudget,
) -> Result<Option<String>> {
    let Some(index) = archive.index_for_name(name) else {
        return Ok(None);
    };
    let file = archive
        .by_index(index)
        .map_err(|e| corrupt(format!("{name}: {e}")))?;
    budget.admit(file.size())?;
    let mut bytes = Vec::new();
    budget.read_into(file, &mut bytes).map_err(|e| match e {
        IndexerError::Io(e) => corrupt(format!("{name}: {e}")),
        e => e,
    })?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| corrupt(format!("{name}: not UTF-8 ({e})")))
}

/// `dc:title` of the core properties.
fn core_title(xml: &str) -> Option<String> {
    let mut reader = Reader::from_str(xml);
    let mut in_title = false;
    let mut title = String::new();
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) if e.local_name().as_ref() == "title" => in_title = true,
            Event::End(e) if e.local_name().as_ref() == "title" => break,
            Event::Text(t) if in_title => title.push_str(&t),
            Event::GeneralRef(r) if in_title => title.push(resolve_ref(&r)?),
            Event::Eof => break,
            _ => {}
        }
    }
    Some(title.trim().to_owned()).filter(|t| !t.is_empty())
}

/// The character an entity or character reference stands for.
fn resolve_ref(r: &BytesRef<'_>) -> Option<char> {
    if let Ok(Some(c)) = r.resolve_char_ref() {
        return Some(c);
    }
    match &**r {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    }
}

/// An open table: the cells of its current row and the cell being filled.
#[derive(Default)]
struct Table {
    cells: Vec<String>,
    cell: String,
}

/// State of the walk over `word/document.xml`.
struct Walker {
    pages: Vec<String>,
    paragraph: String,
    tables: Vec<Table>,
    in_text: bool,
    skip_depth: usize,
    rendered_breaks: bool,
    title_style: bool,
    styled_title: Option<String>,
}

impl Walker {
    fn new(rendered_breaks: bool) -> Self {
        Self {
            pages: vec![String::new()],
            paragraph: String::new(),
            tables: Vec::new(),
            in_text: false,
            skip_depth: 0,
            rendered_breaks,
            title_style: false,
            styled_title: None,
        }
    }

    fn walk(&mut self, xml: &str) -> Result<()> {
        let mut reader = Reader::from_str(xml);
        loop {
            let event = reader
                .read_event()
                .map_err(|e| corrupt(format!("word/document.xml: {e}")))?;
            match event {
                Event::Start(e) => self.start(&e),
                Event::Empty(e) => self.empty(&e),
                Event::End(e) => self.end(e.local_name().as_ref()),
                Event::Text(t) if self.in_text && self.skip_depth == 0 => {
                    self.paragraph.push_str(&t);
                }
                Event::GeneralRef(r) if self.in_text && self.skip_depth == 0 => {
                    self.paragraph.extend(resolve_ref(&r));
                }
                Event::Eof => return Ok(()),
                _ => {}
            }
        }
    }

    fn start(&mut self, e: &BytesStart<'_>) {
        let name = e.local_name();
        if self.skip_depth > 0 || name.as_ref() == "Fallback" {
            self.skip_depth += 1;
            return;
        }
        match name.as_ref() {
            "t" => self.in_text = true,
            "tbl" => self.tables.push(Table::default()),
            "p" => self.title_style = false,
            _ => {}
        }
    }

    fn empty(&mut self, e: &BytesStart<'_>) {
        if self.skip_depth > 0 {
            return;
        }
        match e.local_name().as_ref() {
            "tab" => self.paragraph.push('\t'),
            "br" | "cr" if is_page_break(e) => self.explicit_page_break(),
            "br" | "cr" => self.paragraph.push('\n'),
            "lastRenderedPageBreak" => self.page_break(),
            "pStyle" => self.title_style = attr(e, "val").is_some_and(is_title_style),
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        if self.skip_depth > 0 {
            self.skip_depth -= 1;
            return;
        }
        match name {
            "t" => self.in_text = false,
            "p" => self.end_paragraph(),
            "tc" => {
                if let Some(t) = self.tables.last_mut() {
                    let cell = std::mem::take(&mut t.cell);
                    t.cells.push(cell.trim().to_owned());
                }
            }
            "tr" => self.end_row(),
            "tbl" => {
                self.tables.pop();
                self.emit("\n");
            }
            _ => {}
        }
    }

    fn end_paragraph(&mut self) {
        let text = std::mem::take(&mut self.paragraph);
        if self.title_style && self.styled_title.is_none() && !text.trim().is_empty() {
            self.styled_title = Some(text.trim().to_owned());
        }
        match self.tables.last_mut() {
            Some(t) => {
                t.cell.push(' ');
                t.cell.push_str(&text);
            }
            None => {
                self.emit(&text);
                self.emit("\n\n");
            }
        }
    }

    /// A finished row becomes one line of the enclosing cell (nested tables) or of the page.
    fn end_row(&mut self) {
        let Some(t) = self.tables.pop() else {
            return;
        };
        let row = t.cells.join(" | ");
        self.emit(&row);
        self.emit("\n");
        self.tables.push(Table::default());
    }

    /// Appends to the enclosing table cell, or to the current page.
    fn emit(&mut self, s: &str) {
        match self.tables.last_mut() {
            Some(t) => t.cell.push_str(s),
            None => self.pages.last_mut().map_or((), |p| p.push_str(s)),
        }
    }

    /// An explicit page break counts only in files without rendered page breaks.
    fn explicit_page_break(&mut self) {
        if !self.rendered_breaks {
            self.page_break();
        }
    }

    /// Starts a new page (ignored inside tables, whose rows are emitted whole).
    fn page_break(&mut self) {
        if !self.tables.is_empty() {
            return;
        }
        let head = std::mem::take(&mut self.paragraph);
        self.emit(&head);
        self.pages.push(String::new());
    }
}

fn is_page_break(e: &BytesStart<'_>) -> bool {
    attr(e, "type").is_some_and(|v| v == "page")
}

fn is_title_style(style: String) -> bool {
    matches!(
        style.as_str(),
        "Title" | "Heading1" | "heading1" | "Heading 1"
    )
}

/// An attribute's value by local name (`w:val` → `val`).
fn attr(e: &BytesStart<'_>, local: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == local)
        .map(|a| a.value.into_owned())
}

fn corrupt(reason: String) -> IndexerError {
    IndexerError::Corrupt {
        format: DocumentFormat::Docx,
        reason,
    }
}
