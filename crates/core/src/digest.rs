//! Keyed digests of request content: what cachekeeper stores instead of the content itself
//! (prefix positions of cache accounting, retired-image sets of cold-cache eviction). The key
//! is derived from the credential's sealing key, so a stored digest says nothing about the
//! text without the credential (`docs/accounting.md#what-is-stored`).

use sha2::{Digest as _, Sha256};

use crate::state::seal::SealKey;

/// Compare two secrets (a client token, a SigV4 signature) by their SHA-256 digests, so
/// neither their length nor their content leaks through timing.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    Sha256::digest(a) == Sha256::digest(b)
}

/// HKDF info of the digest key derived from a credential's sealing key.
const DIGEST_KEY_INFO: &[u8] = b"cachekeeper prefix digest key v1";

/// The key the digests of one credential are made with: derived from its sealing key, or
/// all zeros for requests without a credential (their digests are shared by every such
/// client, as their records are).
#[derive(Clone, PartialEq, Eq)]
pub struct DigestKey([u8; 32]);

impl DigestKey {
    /// The key for a request whose credential has `sealing` (`None`: no credential).
    pub fn for_credential(sealing: Option<&SealKey>) -> Self {
        Self(sealing.map_or([0; 32], |k| k.subkey(DIGEST_KEY_INFO)))
    }

    /// A digest of `tag` and `parts`, keyed: the first 16 bytes of SHA-256(key ‖ tag ‖ parts).
    pub(crate) fn digest(&self, tag: &[u8], parts: &[&[u8]]) -> PosDigest {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update((tag.len() as u64).to_le_bytes());
        h.update(tag);
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        let full = h.finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        out
    }
}

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestKey(..)")
    }
}

/// One position's keyed digest.
pub type PosDigest = [u8; 16];
