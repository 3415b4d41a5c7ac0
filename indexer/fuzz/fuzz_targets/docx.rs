//! Fuzz target: DOCX. An input that starts like a zip archive (`PK`) is parsed as the whole file;
//! any other input is `word/document.xml` (and, after a NUL byte, `docProps/core.xml`), packed into
//! a DOCX (`docqa_indexer_fuzz::docx_with_parts`) so that mutations reach the XML walker instead of
//! breaking the archive's checksums. Either is checked against the parser's promises
//! (`docqa_indexer_fuzz::check`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: docqa_indexer_fuzz::init(), |data: &[u8]| {
    if data.starts_with(b"PK") {
        docqa_indexer_fuzz::check(data, "x.docx");
    } else {
        docqa_indexer_fuzz::check(&docqa_indexer_fuzz::docx_from_input(data), "x.docx");
    }
});
