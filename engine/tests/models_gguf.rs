//! GGUF reader and dequantisation, on small GGUF files built byte by byte in the tests.
//! The reference for the quantised formats is the block formula of DESIGN.md §4:
//! Q4_1 `w = q·d + m` (low nibbles are weights 0–15, high nibbles 16–31), Q8_0 `w = q·d`.

#[path = "support/gguf_builder.rs"]
mod gguf_builder;

use docqa_engine::EngineError;
use docqa_engine::gguf::{GgmlType, GgufFile, MetadataValue};
use gguf_builder::{RawTensor, build_gguf, gguf_string, kv, q4_1_block, q8_0_block};
use half::{bf16, f16};

fn tensor(name: &str, dims: &[u64], type_id: u32, data: Vec<u8>) -> RawTensor {
    RawTensor {
        name: name.to_owned(),
        dims: dims.to_vec(),
        type_id,
        data,
    }
}

/// Two Q4_1 blocks with exactly representable scales, and the values the formula gives.
fn q4_1_fixture() -> (Vec<u8>, Vec<f32>) {
    let mut data = Vec::new();
    let mut expected = Vec::new();
    for (d, m) in [(0.5f32, -4.0f32), (0.25, 1.0)] {
        let q: [u8; 32] = std::array::from_fn(|i| ((i * 7 + 3) % 16) as u8);
        data.extend(q4_1_block(d, m, &q));
        expected.extend(q.iter().map(|&v| f32::from(v) * d + m));
    }
    (data, expected)
}

fn q8_0_fixture() -> (Vec<u8>, Vec<f32>) {
    let q: [i8; 32] = std::array::from_fn(|i| (i as i8 - 16) * 8 + 1);
    let d = 0.125f32;
    (
        q8_0_block(d, &q),
        q.iter().map(|&v| f32::from(v) * d).collect(),
    )
}

#[test]
fn q4_1_blocks_dequantise_to_q_times_d_plus_m() {
    let (data, expected) = q4_1_fixture();
    let bytes = build_gguf(3, &[], &[tensor("w", &[32, 2], 3, data)], 32);
    let file = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(file.tensor_info("w").unwrap().dtype, GgmlType::Q4_1);
    assert_eq!(file.tensor_f32("w").unwrap(), expected);
}

#[test]
fn q8_0_blocks_dequantise_to_q_times_d() {
    let (data, expected) = q8_0_fixture();
    let bytes = build_gguf(3, &[], &[tensor("w", &[32], 8, data)], 32);
    let file = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(file.tensor_f32("w").unwrap(), expected);
}

#[test]
fn float_tensors_read_back_exactly() {
    let values = [1.5f32, -2.25, 0.0, 65504.0, 1e-3, -7.0];
    let f32_data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let f16_data: Vec<u8> = values
        .iter()
        .flat_map(|&v| f16::from_f32(v).to_le_bytes())
        .collect();
    let bf16_data: Vec<u8> = values
        .iter()
        .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
        .collect();
    let tensors = [
        tensor("a", &[3, 2], 0, f32_data),
        tensor("b", &[6], 1, f16_data),
        tensor("c", &[2, 3], 30, bf16_data),
    ];
    let file = GgufFile::from_bytes(build_gguf(3, &[], &tensors, 32)).unwrap();
    assert_eq!(file.tensor_f32("a").unwrap(), values);
    let f16_expected: Vec<f32> = values.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_eq!(file.tensor_f32("b").unwrap(), f16_expected);
    let bf16_expected: Vec<f32> = values.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
    assert_eq!(file.tensor_f32("c").unwrap(), bf16_expected);
    assert_eq!(file.tensor_info("a").unwrap().shape(), vec![2, 3]);
}

#[test]
fn every_metadata_value_type_round_trips() {
    let mut array = 4u32.to_le_bytes().to_vec(); // array of u32
    array.extend_from_slice(&3u64.to_le_bytes());
    for v in [7u32, 8, 9] {
        array.extend_from_slice(&v.to_le_bytes());
    }
    let mut strings = 8u32.to_le_bytes().to_vec(); // array of strings
    strings.extend_from_slice(&2u64.to_le_bytes());
    strings.extend(gguf_string("Ġ t"));
    strings.extend(gguf_string("日本"));
    let kvs = [
        kv("u8", 0, vec![200]),
        kv("i8", 1, vec![0xfe]),
        kv("u16", 2, 60000u16.to_le_bytes().to_vec()),
        kv("i16", 3, (-300i16).to_le_bytes().to_vec()),
        kv("u32", 4, 4_000_000_000u32.to_le_bytes().to_vec()),
        kv("i32", 5, (-5i32).to_le_bytes().to_vec()),
        kv("f32", 6, 1e-5f32.to_le_bytes().to_vec()),
        kv("bool", 7, vec![1]),
        kv("str", 8, gguf_string("smollm")),
        kv("arr", 9, array),
        kv("u64", 10, u64::MAX.to_le_bytes().to_vec()),
        kv("i64", 11, i64::MIN.to_le_bytes().to_vec()),
        kv("f64", 12, 100000.5f64.to_le_bytes().to_vec()),
        kv("strs", 9, strings),
    ];
    let file = GgufFile::from_bytes(build_gguf(3, &kvs, &[], 32)).unwrap();
    use MetadataValue as V;
    assert_eq!(file.get("u8"), Some(&V::U8(200)));
    assert_eq!(file.get("i8"), Some(&V::I8(-2)));
    assert_eq!(file.get("u16"), Some(&V::U16(60000)));
    assert_eq!(file.get("i16"), Some(&V::I16(-300)));
    assert_eq!(file.get_u64("u32").unwrap(), 4_000_000_000);
    assert_eq!(file.get("i32"), Some(&V::I32(-5)));
    assert_eq!(file.get("f32"), Some(&V::F32(1e-5)));
    assert_eq!(file.get("bool"), Some(&V::Bool(true)));
    assert_eq!(file.get_str("str").unwrap(), "smollm");
    assert_eq!(
        file.get("arr"),
        Some(&V::Array(vec![V::U32(7), V::U32(8), V::U32(9)]))
    );
    assert_eq!(file.get("u64"), Some(&V::U64(u64::MAX)));
    assert_eq!(file.get("i64"), Some(&V::I64(i64::MIN)));
    assert_eq!(file.get_f64("f64").unwrap(), 100000.5);
    let strs = file.get_array("strs").unwrap();
    assert_eq!(strs[1].as_str(), Some("日本"));
    assert!(matches!(
        file.get_str("u8"),
        Err(EngineError::GgufMetadata { .. })
    ));
    assert!(matches!(
        file.get_u64("absent"),
        Err(EngineError::GgufMetadata { .. })
    ));
}

#[test]
fn tensor_data_honours_a_custom_alignment() {
    let (q8, q8_expected) = q8_0_fixture();
    let kvs = [kv("general.alignment", 4, 64u32.to_le_bytes().to_vec())];
    let tensors = [
        tensor("first", &[3], 0, vec![0u8; 12]),
        tensor("second", &[32], 8, q8),
    ];
    let file = GgufFile::from_bytes(build_gguf(3, &kvs, &tensors, 64)).unwrap();
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.tensor_info("second").unwrap().offset, 64);
    assert_eq!(file.tensor_f32("second").unwrap(), q8_expected);
}

#[test]
fn a_bad_magic_is_a_typed_error() {
    let mut bytes = build_gguf(3, &[], &[], 32);
    bytes[..4].copy_from_slice(b"GGML");
    let err = GgufFile::from_bytes(bytes).err().unwrap();
    assert!(
        matches!(err, EngineError::GgufBadMagic { found } if &found == b"GGML"),
        "{err}"
    );
}

#[test]
fn version_two_is_refused_with_a_typed_error() {
    let err = GgufFile::from_bytes(build_gguf(2, &[], &[], 32))
        .err()
        .unwrap();
    assert!(
        matches!(err, EngineError::GgufUnsupportedVersion(2)),
        "{err}"
    );
}

#[test]
fn every_truncation_is_a_typed_error_and_never_a_panic() {
    let (data, _) = q4_1_fixture();
    let kvs = [
        kv("name", 8, gguf_string("tiny")),
        kv("n", 4, 5u32.to_le_bytes().to_vec()),
    ];
    let bytes = build_gguf(3, &kvs, &[tensor("w", &[32, 2], 3, data)], 32);
    let data_start = bytes.len() - 40;
    for len in 0..bytes.len() {
        match GgufFile::from_bytes(bytes[..len].to_vec()).err() {
            Some(EngineError::GgufTruncated { .. }) => assert!(len < data_start, "cut at {len}"),
            Some(EngineError::GgufTensorOutOfBounds { .. }) => {}
            other => panic!("cut at {len}: unexpected {other:?}"),
        }
    }
    let in_data = GgufFile::from_bytes(bytes[..data_start + 20].to_vec()).err();
    assert!(matches!(
        in_data,
        Some(EngineError::GgufTensorOutOfBounds { .. })
    ));
    assert!(GgufFile::from_bytes(bytes).is_ok());
}

#[test]
fn an_unknown_tensor_type_is_a_typed_error() {
    let bytes = build_gguf(3, &[], &[tensor("w", &[4], 99, vec![0; 16])], 32);
    let err = GgufFile::from_bytes(bytes).err().unwrap();
    assert!(
        matches!(err, EngineError::GgufUnknownTensorType { type_id: 99, .. }),
        "{err}"
    );
}

#[test]
fn an_i_quant_tensor_is_refused_by_its_name_with_the_types_docqa_reads() {
    // IQ3_S, ggml type 21: 110 bytes a block of 256.
    let bytes = build_gguf(
        3,
        &[],
        &[tensor("blk.0.ffn_down.weight", &[256], 21, vec![0; 110])],
        32,
    );
    let message = GgufFile::from_bytes(bytes).err().unwrap().to_string();
    assert_eq!(
        message,
        "tensor blk.0.ffn_down.weight: ggml type 21 (IQ3_S) is not one docqa reads (it reads F32, \
         F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, BF16)"
    );
}

#[test]
fn a_known_but_unsupported_type_opens_and_refuses_to_dequantise() {
    let bytes = build_gguf(3, &[], &[tensor("w", &[256], 15, vec![0; 292])], 32);
    let file = GgufFile::from_bytes(bytes).unwrap();
    let err = file.tensor_f32("w").err().unwrap();
    assert!(
        matches!(err, EngineError::GgufUnknownTensorType { type_id: 15, .. }),
        "{err}"
    );
}

#[test]
fn a_tensor_pointing_past_the_end_is_a_typed_error() {
    let (data, _) = q8_0_fixture();
    let mut bytes = build_gguf(3, &[], &[tensor("w", &[32], 8, data)], 32);
    // The offset field is the last 8 bytes of the tensor info, just before the padding.
    let info_end = 4 + 4 + 8 + 8 + (8 + 1) + 4 + 8 + 4 + 8;
    bytes[info_end - 8..info_end].copy_from_slice(&4096u64.to_le_bytes());
    let err = GgufFile::from_bytes(bytes).err().unwrap();
    assert!(
        matches!(err, EngineError::GgufTensorOutOfBounds { start: 4096, .. }),
        "{err}"
    );
}
