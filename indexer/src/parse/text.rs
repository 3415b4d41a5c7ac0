//! Plain text: UTF-8 (an optional byte-order mark is dropped) or UTF-16 with a byte-order mark.
//! Form feeds (`\f`) separate pages, the convention of docqa's datasets.
//!
//! Invalid UTF-8 is rejected with [`IndexerError::InvalidUtf8`] and the offset of the first bad
//! byte: docqa does not guess legacy encodings, and a lossy decode would put replacement
//! characters into answers and citations.

use super::normalize::Extracted;
use crate::error::{IndexerError, Result};

/// Decodes text bytes: UTF-8 (BOM dropped), or UTF-16 LE/BE when they start with its BOM.
pub(crate) fn decode(bytes: &[u8]) -> Result<String> {
    if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        return decode_utf16(rest, u16::from_le_bytes);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        return decode_utf16(rest, u16::from_be_bytes);
    }
    let (bytes, bom) = match bytes.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => (rest, 3),
        None => (bytes, 0),
    };
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(e) => Err(IndexerError::InvalidUtf8 {
            byte_offset: bom + e.valid_up_to(),
        }),
    }
}

/// UTF-16 code units to a string; an odd trailing byte or an unpaired surrogate is invalid.
fn decode_utf16(bytes: &[u8], unit: fn([u8; 2]) -> u16) -> Result<String> {
    let units = bytes.chunks(2).map(|c| match c {
        [a, b] => Ok(unit([*a, *b])),
        _ => Err(()),
    });
    let mut out = String::with_capacity(bytes.len() / 2);
    for (i, u) in char::decode_utf16(units.map_while(|u| u.ok())).enumerate() {
        match u {
            Ok(c) => out.push(c),
            Err(_) => {
                return Err(IndexerError::InvalidUtf8 {
                    byte_offset: 2 + 2 * i,
                });
            }
        }
    }
    if bytes.len() % 2 == 1 {
        return Err(IndexerError::InvalidUtf8 {
            byte_offset: 1 + bytes.len(),
        });
    }
    Ok(out)
}

/// Parses plain text into pages split at form feeds.
pub(crate) fn parse(bytes: &[u8]) -> Result<Extracted> {
    let text = decode(bytes)?;
    Ok(Extracted {
        title: None,
        pages: text.split('\u{0C}').map(str::to_owned).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_with_a_byte_order_mark_is_decoded() {
        let bytes: Vec<u8> = b"\xFF\xFE"
            .iter()
            .copied()
            .chain("Hé".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(decode(&bytes).ok().as_deref(), Some("Hé"));
    }

    #[test]
    fn invalid_utf8_reports_the_offset_of_the_first_bad_byte() {
        let err = decode(b"\xEF\xBB\xBFabc\xFFdef");
        assert!(matches!(
            err,
            Err(IndexerError::InvalidUtf8 { byte_offset: 6 })
        ));
    }
}
