//! A linear pre-scan of HTML for its element nesting depth, run before the DOM is built: an HTML
//! tree builder spends time on every start tag in proportion to the open elements, so a file of a
//! hundred thousand unclosed `<div>`s takes minutes. The scan counts start tags against end tags
//! of elements that must be closed; void elements, elements whose end tag may be left out (the tree
//! builder closes those itself), comments and raw text (`<script>`, `<style>`…) do not count.
//! The count is an upper bound of the tree's depth for well-formed input and close to it otherwise.

use super::limits::{Limit, exceeded};
use crate::error::Result;

/// Elements without content or end tag.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "keygen", "basefont", "bgsound", "frame", "image", "isindex",
];

/// Elements whose end tag may be omitted.
const OPTIONAL_END: &[&str] = &[
    "p", "li", "dt", "dd", "option", "optgroup", "rb", "rt", "rp", "rtc", "tr", "td", "th",
    "thead", "tbody", "tfoot", "colgroup", "caption", "html", "head", "body",
];

/// Elements whose content is text up to their own end tag.
const RAW_TEXT: &[&str] = &[
    "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes",
];

/// Fails with [`Limit::NestingDepth`] when more than `max_depth` elements are open at once.
pub(crate) fn check_depth(source: &str, max_depth: usize) -> Result<()> {
    let bytes = source.as_bytes();
    let mut depth = 0usize;
    let mut at = 0usize;
    while let Some(offset) = find(bytes, at, b"<") {
        let tag = offset + 1;
        at = match bytes.get(tag) {
            Some(b'!') if bytes[tag..].starts_with(b"!--") => {
                find(bytes, tag + 3, b"-->").map_or(bytes.len(), |end| end + 3)
            }
            Some(b'!' | b'?') => tag_end(bytes, tag),
            Some(b'/') => {
                let name = name_at(bytes, tag + 1);
                if counts(&name) {
                    depth = depth.saturating_sub(1);
                }
                tag_end(bytes, tag)
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let name = name_at(bytes, tag);
                let end = tag_end(bytes, tag);
                let self_closing = end >= 2 && bytes[end - 2] == b'/';
                if RAW_TEXT.contains(&name.as_str()) {
                    skip_raw_text(bytes, end, &name)
                } else {
                    if counts(&name) && !self_closing {
                        depth += 1;
                        if depth > max_depth {
                            return Err(exceeded(
                                Limit::NestingDepth,
                                format!("more than {max_depth} nested HTML elements"),
                            ));
                        }
                    }
                    end
                }
            }
            _ => tag,
        };
    }
    Ok(())
}

/// Whether an element's start and end tags count towards the depth.
fn counts(name: &str) -> bool {
    !name.is_empty() && !VOID.contains(&name) && !OPTIONAL_END.contains(&name)
}

/// The lower-cased tag name starting at `at`.
fn name_at(bytes: &[u8], at: usize) -> String {
    bytes[at.min(bytes.len())..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b':')
        .map(|b| b.to_ascii_lowercase() as char)
        .collect()
}

/// One past the `>` that ends the tag starting at `at`, skipping quoted attribute values.
fn tag_end(bytes: &[u8], at: usize) -> usize {
    let mut quote = None;
    for (i, &b) in bytes.iter().enumerate().skip(at) {
        match (quote, b) {
            (None, b'"' | b'\'') => quote = Some(b),
            (Some(q), _) if b == q => quote = None,
            (None, b'>') => return i + 1,
            _ => {}
        }
    }
    bytes.len()
}

/// One past the end tag `</name…>` that closes raw text starting at `at`.
fn skip_raw_text(bytes: &[u8], at: usize, name: &str) -> usize {
    let mut from = at;
    while let Some(open) = find(bytes, from, b"</") {
        let candidate = &bytes[open + 2..];
        if candidate.len() >= name.len()
            && candidate[..name.len()].eq_ignore_ascii_case(name.as_bytes())
        {
            return tag_end(bytes, open + 2);
        }
        from = open + 2;
    }
    bytes.len()
}

/// Offset of the first `needle` at or after `from`.
fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(html: &str, max: usize) -> bool {
        check_depth(html, max).is_ok()
    }

    #[test]
    fn closed_siblings_never_add_up() {
        let html = "<div>a</div>".repeat(10_000);
        assert!(depth_ok(&html, 2));
    }

    #[test]
    fn unclosed_nesting_beyond_the_bound_is_refused() {
        let html = "<div>".repeat(600);
        assert!(depth_ok(&html, 600));
        assert!(!depth_ok(&html, 599));
    }

    #[test]
    fn void_optional_end_comment_and_script_content_do_not_count() {
        let html =
            "<p>x<br><img src='a>b'><li>y<!-- <div><div> --><script>if (a<b) '<div>'</script>"
                .repeat(1_000);
        assert!(depth_ok(&html, 1));
    }

    #[test]
    fn self_closing_foreign_elements_do_not_count() {
        let html = format!("<svg>{}</svg>", "<path d='M0 0'/>".repeat(1_000));
        assert!(depth_ok(&html, 1));
    }
}
