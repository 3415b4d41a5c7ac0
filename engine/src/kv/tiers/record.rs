//! The disk tier's file format: one KV block per file, a fixed header then the block's bytes.
//!
//! ```text
//! magic "DOCQAKV1" | block hash u128 | namespace u64 | payload length u64 | xxh3-64 checksum u64 | payload
//! ```
//! All integers little-endian. The checksum covers the header fields before it and the payload, so a
//! torn write, a truncated file, a flipped bit or a file renamed to another block's name all fail
//! [`decode`] and read as a miss.

use xxhash_rust::xxh3::Xxh3;

use crate::kv::block_hash::BlockHash;
use crate::kv::manager::CacheNamespace;

const MAGIC: &[u8; 8] = b"DOCQAKV1";
/// Bytes before the payload.
pub(crate) const HEADER_BYTES: usize = 8 + 16 + 8 + 8 + 8;

/// Why a file is not the block it was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecordError {
    /// Shorter than its header or than the payload its header announces.
    Truncated,
    /// Not a docqa KV file.
    BadMagic,
    /// A valid file of another block.
    OtherBlock,
    /// The content does not match its checksum.
    Checksum,
}

fn checksum(hash: BlockHash, namespace: CacheNamespace, payload: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(MAGIC);
    h.update(&hash.0.to_le_bytes());
    h.update(&namespace.to_le_bytes());
    h.update(&(payload.len() as u64).to_le_bytes());
    h.update(payload);
    h.digest()
}

/// The header of a record holding `payload` for block `hash` of `namespace`.
pub(crate) fn header(hash: BlockHash, namespace: CacheNamespace, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&hash.0.to_le_bytes());
    out.extend_from_slice(&namespace.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(hash, namespace, payload).to_le_bytes());
    out
}

/// The payload of `file` if it is block `hash`'s record, whole and unaltered.
#[cfg(test)]
pub(crate) fn decode(file: &[u8], hash: BlockHash) -> Result<&[u8], RecordError> {
    if file.len() < HEADER_BYTES {
        return Err(RecordError::Truncated);
    }
    let (header, payload) = file.split_at(HEADER_BYTES);
    check(header, payload, hash)?;
    Ok(payload)
}

/// The payload length a record's header states, once its magic and block are checked.
pub(crate) fn payload_len(header: &[u8], hash: BlockHash) -> Result<u64, RecordError> {
    if header.len() < HEADER_BYTES {
        return Err(RecordError::Truncated);
    }
    if &header[..8] != MAGIC {
        return Err(RecordError::BadMagic);
    }
    let stored_hash = u128::from_le_bytes(header[8..24].try_into().unwrap_or([0; 16]));
    if stored_hash != hash.0 {
        return Err(RecordError::OtherBlock);
    }
    Ok(word(header, 32))
}

/// Checks a record read as its header and its payload.
pub(crate) fn check(header: &[u8], payload: &[u8], hash: BlockHash) -> Result<(), RecordError> {
    let len = payload_len(header, hash)?;
    if payload.len() as u64 != len {
        return Err(RecordError::Truncated);
    }
    if checksum(hash, word(header, 24), payload) != word(header, 40) {
        return Err(RecordError::Checksum);
    }
    Ok(())
}

fn word(header: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or([0; 8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(hash: BlockHash, payload: &[u8]) -> Vec<u8> {
        let mut file = header(hash, 7, payload);
        file.extend_from_slice(payload);
        file
    }

    #[test]
    fn a_record_reads_back_its_payload() {
        let payload: Vec<u8> = (0..=255).collect();
        let file = record(BlockHash(42), &payload);
        assert_eq!(file.len(), HEADER_BYTES + 256);
        assert_eq!(decode(&file, BlockHash(42)), Ok(&payload[..]));
    }

    #[test]
    fn truncated_flipped_foreign_and_alien_files_are_refused() {
        let file = record(BlockHash(42), &[1, 2, 3, 4]);
        assert_eq!(
            decode(&file[..file.len() - 1], BlockHash(42)),
            Err(RecordError::Truncated)
        );
        assert_eq!(
            decode(&file[..10], BlockHash(42)),
            Err(RecordError::Truncated)
        );
        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(decode(&flipped, BlockHash(42)), Err(RecordError::Checksum));
        let mut namespace_changed = file.clone();
        namespace_changed[24] ^= 1;
        assert_eq!(
            decode(&namespace_changed, BlockHash(42)),
            Err(RecordError::Checksum)
        );
        assert_eq!(decode(&file, BlockHash(43)), Err(RecordError::OtherBlock));
        let mut alien = file;
        alien[0] = b'X';
        assert_eq!(decode(&alien, BlockHash(42)), Err(RecordError::BadMagic));
    }
}
