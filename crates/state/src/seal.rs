//! Encryption at rest for records that hold user content (captured reasoning carriers).
//!
//! A sealed value is `[format byte][nonce][ciphertext + tag]`:
//! - format byte: [`FORMAT_V1`] (XChaCha20-Poly1305 with a random nonce);
//! - nonce: [`NONCE_BYTES`] = 24 bytes, fresh from the OS random number generator for every
//!   value (the extended nonce makes random nonces safe: draft-irtf-cfrg-xchacha, and the
//!   `chacha20poly1305` crate's documentation);
//! - ciphertext of the same length as the plaintext, then the Poly1305 tag of
//!   [`TAG_BYTES`] = 16 bytes.
//!
//! So a sealed value is [`OVERHEAD_BYTES`] = 41 bytes longer than its plaintext. The
//! associated data ([`record_aad`]) binds the value to the record it was written to (kind,
//! credential scope and key): a sealed value copied to another record does not open.
//!
//! The key ([`SealKey`], 32 bytes) is derived from the request's raw credential
//! (`credential::identify`), never stored: the state file alone opens nothing. See
//! `docs/state.md#carrier-records`.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use zeroize::Zeroize;

use super::{Kind, RecordKey};

/// Length of a [`SealKey`], bytes (XChaCha20-Poly1305 key size).
pub const KEY_BYTES: usize = 32;

/// The format byte of XChaCha20-Poly1305 values with a random 24-byte nonce.
pub const FORMAT_V1: u8 = 1;

/// XChaCha20-Poly1305 nonce length, bytes.
pub(crate) const NONCE_BYTES: usize = 24;

/// Poly1305 tag length, bytes.
pub(crate) const TAG_BYTES: usize = 16;

/// Bytes a sealed value adds to its plaintext: format byte + nonce + tag.
pub(crate) const OVERHEAD_BYTES: usize = 1 + NONCE_BYTES + TAG_BYTES;

/// Domain tag at the start of every associated data.
const AAD_TAG: &[u8] = b"cachekeeper-record-v1";

/// A 32-byte sealing key. Its `Debug` shows nothing of the key; it is wiped from memory when
/// dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey([u8; KEY_BYTES]);

impl SealKey {
    /// A key from its 32 bytes (the credential's key derivation; tests).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        Self(bytes)
    }

    /// A 32-byte key for another purpose, derived from this one by HKDF-SHA256 (this key as
    /// input keying material, no salt, `info` naming the purpose), so one credential's
    /// purposes never share a key.
    pub fn subkey(&self, info: &[u8]) -> [u8; KEY_BYTES] {
        let mut okm = [0u8; KEY_BYTES];
        // 32 bytes is far below HKDF-SHA256's 8160-byte limit: expand cannot fail.
        let _ = hkdf::Hkdf::<sha2::Sha256>::new(None, &self.0).expand(info, &mut okm);
        okm
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.0.into())
    }
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl Drop for SealKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// The associated data binding a sealed value to its record: a domain tag, then the kind's
/// stored name, the scope and the key, each preceded by its length (8 bytes, little endian),
/// so no two records give the same bytes.
pub fn record_aad(key: &RecordKey) -> Vec<u8> {
    record_aad_parts(key.kind, &key.scope, &key.key)
}

fn record_aad_parts(kind: Kind, scope: &str, key: &str) -> Vec<u8> {
    let parts = [kind.name().as_bytes(), scope.as_bytes(), key.as_bytes()];
    let mut aad =
        Vec::with_capacity(AAD_TAG.len() + parts.iter().map(|p| p.len() + 8).sum::<usize>());
    aad.extend_from_slice(AAD_TAG);
    for p in parts {
        aad.extend_from_slice(&(p.len() as u64).to_le_bytes());
        aad.extend_from_slice(p);
    }
    aad
}

/// Seal `plaintext` under `key` with associated data `aad` (not stored; the opener gives it
/// again): `[FORMAT_V1][24-byte nonce][ciphertext][16-byte tag]`, [`OVERHEAD_BYTES`] longer
/// than `plaintext`. `None` only if the cipher refuses (a plaintext past its limit of
/// 256 GiB).
pub fn seal(key: &SealKey, aad: &[u8], plaintext: &[u8]) -> Option<Vec<u8>> {
    let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
    let sealed = key
        .cipher()
        .encrypt(
            &nonce,
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .ok()?;
    let mut out = Vec::with_capacity(plaintext.len() + OVERHEAD_BYTES);
    out.push(FORMAT_V1);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    Some(out)
}

/// The plaintext of a value [`seal`]ed under `key` with the same `aad`; `None` when it does
/// not open (another key, another record's associated data, an unknown format byte, a value
/// too short, or altered bytes).
pub fn open(key: &SealKey, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    let (&format, rest) = sealed.split_first()?;
    if format != FORMAT_V1 || rest.len() < NONCE_BYTES + TAG_BYTES {
        return None;
    }
    let (nonce, ciphertext) = rest.split_at(NONCE_BYTES);
    key.cipher()
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: ciphertext,
                aad,
            },
        )
        .ok()
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;

    fn key(b: u8) -> SealKey {
        SealKey::from_bytes([b; KEY_BYTES])
    }

    fn rk(scope: &str, key: &str) -> RecordKey {
        RecordKey {
            kind: Kind::Carrier,
            scope: scope.into(),
            key: key.into(),
        }
    }

    #[test]
    fn round_trip_with_the_documented_layout() {
        let aad = record_aad(&rk("s", "h\nm\nfp"));
        let text = "Reasoning: \u{2028} \"quoted\" é".as_bytes();
        let sealed = seal(&key(7), &aad, text).unwrap();
        assert_eq!(sealed.len(), text.len() + OVERHEAD_BYTES);
        assert_eq!(sealed[0], FORMAT_V1);
        assert!(!sealed.windows(text.len()).any(|w| w == text));
        assert_eq!(open(&key(7), &aad, &sealed).unwrap(), text);
        // A fresh nonce every time: the same plaintext seals differently.
        let again = seal(&key(7), &aad, text).unwrap();
        assert_ne!(sealed[1..1 + NONCE_BYTES], again[1..1 + NONCE_BYTES]);
        assert_ne!(sealed, again);
        // Empty plaintext is fine.
        let empty = seal(&key(7), &aad, b"").unwrap();
        assert_eq!(empty.len(), OVERHEAD_BYTES);
        assert_eq!(open(&key(7), &aad, &empty).unwrap(), b"");
    }

    #[test]
    fn wrong_key_moved_record_or_altered_bytes_do_not_open() {
        let aad = record_aad(&rk("scope-a", "h\nm\nfp1"));
        let sealed = seal(&key(1), &aad, b"secret thoughts").unwrap();
        assert!(open(&key(2), &aad, &sealed).is_none(), "another key");
        for other in [
            rk("scope-b", "h\nm\nfp1"),
            rk("scope-a", "h\nm\nfp2"),
            rk("scope-a", "h\nm2\nfp1"),
            RecordKey {
                kind: Kind::Session,
                ..rk("scope-a", "h\nm\nfp1")
            },
        ] {
            assert!(
                open(&key(1), &record_aad(&other), &sealed).is_none(),
                "moved to {other:?}"
            );
        }
        // Length prefixes: shifting bytes between scope and key changes the data.
        assert_ne!(
            record_aad(&rk("ab", "c")),
            record_aad(&rk("a", "bc")),
            "parts are delimited"
        );
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(open(&key(1), &aad, &flipped).is_none(), "altered tag");
        let mut format = sealed.clone();
        format[0] = 2;
        assert!(open(&key(1), &aad, &format).is_none(), "unknown format");
        assert!(open(&key(1), &aad, &sealed[..OVERHEAD_BYTES - 1]).is_none());
        assert!(open(&key(1), &aad, b"").is_none());
        assert!(open(&key(1), &aad, b"{\"text\":\"plain json\"}").is_none());
    }

    #[test]
    fn debug_shows_nothing_of_the_key() {
        let k = key(0xab);
        let shown = format!("{k:?} {:#?}", k.clone());
        assert_eq!(shown, "SealKey(..) SealKey(..)");
    }
}
