//! Builds small GGUF v3 files byte by byte, independently of the reader under test.

/// A metadata value to write: (GGUF value type id, encoded payload).
pub struct Kv {
    pub key: String,
    pub type_id: u32,
    pub payload: Vec<u8>,
}

/// A tensor to write: name, GGUF dims, ggml type id and raw data bytes.
pub struct RawTensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
}

pub fn gguf_string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(s.as_bytes());
    out
}

pub fn kv(key: &str, type_id: u32, payload: Vec<u8>) -> Kv {
    Kv {
        key: key.to_owned(),
        type_id,
        payload,
    }
}

/// Serialises a GGUF file with the given version, metadata, tensors and alignment.
pub fn build_gguf(version: u32, kvs: &[Kv], tensors: &[RawTensor], alignment: usize) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for kv in kvs {
        out.extend(gguf_string(&kv.key));
        out.extend_from_slice(&kv.type_id.to_le_bytes());
        out.extend_from_slice(&kv.payload);
    }
    let mut offset = 0usize;
    let mut offsets = Vec::new();
    for t in tensors {
        out.extend(gguf_string(&t.name));
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.type_id.to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        offsets.push(offset);
        offset = (offset + t.data.len()).next_multiple_of(alignment);
    }
    out.resize(out.len().next_multiple_of(alignment), 0);
    let data_start = out.len();
    for (t, off) in tensors.iter().zip(offsets) {
        out.resize(data_start + off, 0);
        out.extend_from_slice(&t.data);
    }
    out
}

/// One Q4_1 block from its scale, minimum and 32 4-bit values.
pub fn q4_1_block(d: f32, m: f32, q: &[u8; 32]) -> Vec<u8> {
    let mut out = half::f16::from_f32(d).to_le_bytes().to_vec();
    out.extend_from_slice(&half::f16::from_f32(m).to_le_bytes());
    for i in 0..16 {
        out.push(q[i] | (q[i + 16] << 4));
    }
    out
}

/// One Q8_0 block from its scale and 32 signed values.
pub fn q8_0_block(d: f32, q: &[i8; 32]) -> Vec<u8> {
    let mut out = half::f16::from_f32(d).to_le_bytes().to_vec();
    out.extend(q.iter().map(|&v| v as u8));
    out
}
