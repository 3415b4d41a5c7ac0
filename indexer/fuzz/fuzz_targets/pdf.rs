//! Fuzz target: PDF. An input that holds `%PDF-` is parsed as the whole file; any other input is a
//! page's content stream, wrapped in a well-formed one-page PDF (`docqa_indexer_fuzz::pdf_with_content`)
//! so that mutations reach the text extractor instead of breaking the file's structure. Either is
//! checked against the parser's promises (`docqa_indexer_fuzz::check`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: docqa_indexer_fuzz::init(), |data: &[u8]| {
    if data.windows(5).any(|w| w == b"%PDF-") {
        docqa_indexer_fuzz::check(data, "x.pdf");
    } else {
        docqa_indexer_fuzz::check(&docqa_indexer_fuzz::pdf_with_content(data), "x.pdf");
    }
});
