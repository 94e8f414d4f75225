//! Stable hashes of ids and file signatures.

/// A 128-bit digest of an id (FNV-1a and SipHash side by side), for sets of ids seen in a run:
/// 16 bytes per id whatever its length, and collisions are out of reach (≈ n²/2¹²⁹).
pub fn id_digest(id: &str) -> u128 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    (u128::from(fnv1a(id.as_bytes())) << 64) | u128::from(h.finish())
}

/// FNV-1a 64: stable across platforms and releases (unlike `DefaultHasher`).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
