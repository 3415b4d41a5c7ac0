//! GGUF dequantisation against gguf-py's, bit for bit: `tests/golden/gguf_quants/blocks.gguf` (made by
//! `tests/reference/quants_golden.py`) holds random blocks of every quantised type docqa reads (their f16
//! scales drawn finite, among them subnormal, zero and near-one scales) beside gguf-py's dequantisation
//! of them as F32.

use std::path::PathBuf;

use docqa_engine::gguf::{GgmlType, GgufFile};

/// The types the golden file holds, by their GGUF names.
const TYPES: [&str; 12] = [
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
    "IQ4_XS",
];

fn blocks() -> GgufFile {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/gguf_quants/blocks.gguf");
    GgufFile::open(&path).expect("open the golden blocks")
}

#[test]
fn every_quantised_type_dequantises_to_gguf_py_s_floats_bit_for_bit() {
    let file = blocks();
    for name in TYPES {
        let info = file
            .tensor_info(&format!("q.{name}"))
            .expect("the quantised tensor");
        assert!(info.dtype.is_dequantizable(), "{name}");
        let got = file.tensor_f32(&info.name).expect(name);
        let want = file
            .tensor_f32(&format!("f.{name}"))
            .expect("the expected floats");
        assert_eq!(got.len(), want.len(), "{name}");
        let differing = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| g.to_bits() != w.to_bits())
            .count();
        assert_eq!(
            differing,
            0,
            "{name}: {differing} of {} floats differ",
            got.len()
        );
        assert!(
            want.iter().any(|&w| w != 0.0),
            "{name}: the fixture is all zeros"
        );
    }
}

#[test]
fn the_golden_blocks_cover_each_type_docqa_reads() {
    let file = blocks();
    let held: Vec<GgmlType> = TYPES
        .iter()
        .map(|name| file.tensor_info(&format!("q.{name}")).unwrap().dtype)
        .collect();
    let read: Vec<GgmlType> = (0..64)
        .filter_map(GgmlType::from_id)
        .filter(|t| t.is_dequantizable() && t.block_len() > 1)
        .collect();
    for t in &read {
        assert!(held.contains(t), "{t:?} is read but has no golden blocks");
    }
    assert_eq!(held.len(), read.len());
}
