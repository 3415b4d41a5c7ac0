//! Fuzz target: any bytes parsed as a `.md` upload (the content decides the format, as in the
//! service), checked against the parser's promises (`docqa_indexer_fuzz::check`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: docqa_indexer_fuzz::init(), |data: &[u8]| {
    docqa_indexer_fuzz::check(data, "x.md");
});
