//! The disk tier's file format: one KV block per file, a fixed header then the block's bytes.
//!
//! ```text
//! magic "DOCQAKV2" | block hash u128 | parent hash u128 | namespace u64 | payload length u64 |
//! xxh3-64 checksum u64 | payload
//! ```
//! All integers little-endian; the parent is the block computed right before this one (0: none; see
//! [`crate::kv::lineage`]). The checksum covers the header fields before it and the payload, so a torn
//! write, a truncated file, a flipped bit or a file renamed to another block's name all fail [`decode`]
//! and read as a miss (as does a file of the first format, "DOCQAKV1", which had no parent).

use xxhash_rust::xxh3::Xxh3;

use crate::kv::block_hash::BlockHash;
use crate::kv::manager::CacheNamespace;

const MAGIC: &[u8; 8] = b"DOCQAKV2";
/// Bytes before the payload.
pub(crate) const HEADER_BYTES: usize = 8 + 16 + 16 + 8 + 8 + 8;
const PARENT_AT: usize = 24;
const NAMESPACE_AT: usize = 40;
const LEN_AT: usize = 48;
const CHECKSUM_AT: usize = 56;

/// Who a cached block belongs to: its tenant's cache namespace, and the block computed right before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockOwner {
    /// The tenant's cache namespace.
    pub namespace: CacheNamespace,
    /// The block before it, whose KV its own was computed over.
    pub parent: Option<BlockHash>,
}

impl From<CacheNamespace> for BlockOwner {
    /// A block of `namespace` with no parent.
    fn from(namespace: CacheNamespace) -> Self {
        BlockOwner {
            namespace,
            parent: None,
        }
    }
}

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

fn checksum(hash: BlockHash, owner: BlockOwner, payload: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(MAGIC);
    h.update(&hash.0.to_le_bytes());
    h.update(&owner.parent.map_or(0, |p| p.0).to_le_bytes());
    h.update(&owner.namespace.to_le_bytes());
    h.update(&(payload.len() as u64).to_le_bytes());
    h.update(payload);
    h.digest()
}

/// The header of a record holding `payload` for block `hash` of `owner`.
pub(crate) fn header(hash: BlockHash, owner: BlockOwner, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&hash.0.to_le_bytes());
    out.extend_from_slice(&owner.parent.map_or(0, |p| p.0).to_le_bytes());
    out.extend_from_slice(&owner.namespace.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(hash, owner, payload).to_le_bytes());
    out
}

/// The parent a record's header names, unverified (the checksum needs the payload): a hint for
/// forgetting, never for reuse. None when the header is not a record's or names no parent.
pub(crate) fn parent_hint(header: &[u8]) -> Option<BlockHash> {
    if header.len() < HEADER_BYTES || &header[..8] != MAGIC {
        return None;
    }
    let parent = u128::from_le_bytes(header[PARENT_AT..PARENT_AT + 16].try_into().ok()?);
    (parent != 0).then_some(BlockHash(parent))
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
    Ok(word(header, LEN_AT))
}

/// Checks a record read as its header and its payload.
pub(crate) fn check(header: &[u8], payload: &[u8], hash: BlockHash) -> Result<(), RecordError> {
    let len = payload_len(header, hash)?;
    if payload.len() as u64 != len {
        return Err(RecordError::Truncated);
    }
    let owner = BlockOwner {
        namespace: word(header, NAMESPACE_AT),
        parent: parent_hint(header),
    };
    if checksum(hash, owner, payload) != word(header, CHECKSUM_AT) {
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
        let owner = BlockOwner {
            namespace: 7,
            parent: Some(BlockHash(41)),
        };
        let mut file = header(hash, owner, payload);
        file.extend_from_slice(payload);
        file
    }

    #[test]
    fn a_record_reads_back_its_payload() {
        let payload: Vec<u8> = (0..=255).collect();
        let file = record(BlockHash(42), &payload);
        assert_eq!(file.len(), HEADER_BYTES + 256);
        assert_eq!(decode(&file, BlockHash(42)), Ok(&payload[..]));
        assert_eq!(parent_hint(&file), Some(BlockHash(41)));
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
        for (field, at) in [("parent", PARENT_AT), ("namespace", NAMESPACE_AT)] {
            let mut changed = file.clone();
            changed[at] ^= 1;
            assert_eq!(
                decode(&changed, BlockHash(42)),
                Err(RecordError::Checksum),
                "{field} changed"
            );
        }
        assert_eq!(decode(&file, BlockHash(43)), Err(RecordError::OtherBlock));
        let mut alien = file;
        alien[0] = b'X';
        assert_eq!(decode(&alien, BlockHash(42)), Err(RecordError::BadMagic));
    }
}
