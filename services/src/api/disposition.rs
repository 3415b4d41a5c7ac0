//! The `Content-Disposition` of a downloaded original (RFC 6266): the file name as `filename`, in
//! ASCII with `_` for every other character, and, when the name is not plain ASCII, the whole name
//! as `filename*=UTF-8''…` (percent-encoded), which clients prefer.

use actix_web::http::header::{
    Charset, ContentDisposition, DispositionParam, DispositionType, ExtendedValue,
};

/// An attachment named `file_name`.
pub fn attachment(file_name: &str) -> ContentDisposition {
    let mut parameters = vec![DispositionParam::Filename(ascii_fallback(file_name))];
    if !file_name.is_ascii() {
        parameters.push(DispositionParam::FilenameExt(ExtendedValue {
            charset: Charset::Ext("UTF-8".into()),
            language_tag: None,
            value: file_name.as_bytes().to_vec(),
        }));
    }
    ContentDisposition {
        disposition: DispositionType::Attachment,
        parameters,
    }
}

/// The name with every character outside printable ASCII replaced by `_`.
fn ascii_fallback(file_name: &str) -> String {
    file_name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::attachment;

    #[test]
    fn a_non_ascii_name_is_sent_as_utf8_with_an_ascii_fallback() {
        let header = attachment("Bericht März 2024 – 合同.pdf").to_string();
        assert!(header.is_ascii(), "{header}");
        assert_eq!(
            header,
            "attachment; filename=\"Bericht M_rz 2024 _ __.pdf\"; \
             filename*=UTF-8''Bericht%20M%C3%A4rz%202024%20%E2%80%93%20%E5%90%88%E5%90%8C.pdf"
        );
    }

    #[test]
    fn an_ascii_name_is_sent_as_it_is() {
        assert_eq!(
            attachment("lease \"final\".pdf").to_string(),
            "attachment; filename=\"lease \\\"final\\\".pdf\""
        );
    }
}
