//! Rejected thinking signatures, a typed view over [`Kind::RejectedSignature`] records.
//!
//! When Anthropic answers a request with "Invalid `signature` in `thinking` block", every
//! signed block of that request is remembered as rejected for the credential scope that sent
//! it, and the shaping pass strips those blocks from every later request of the scope, after
//! restarts too (`docs/reasoning.md#rejected-signatures`). A signature that fails once fails
//! forever (any byte difference, another account, another conversation's prefix), so
//! resending it can only fail again.
//!
//! Record layout: scope = the credential scope, key = [`SignatureId`] (hex), value
//! `{"type":"thinking"}` (the block type). No content: the id is a one-way hash of the opaque
//! signature (or `redacted_thinking` data).

use std::fmt;

use sha2::{Digest as _, Sha256};

use super::{Kind, Record, RecordKey, Store};

/// Hash tag, part of every [`SignatureId`]: changing the rule changes the tag.
const TAG: &[u8] = b"cachekeeper.signature.v1\0";

/// SHA-256 of a signed block's type and opaque value (`signature` of a `thinking` block,
/// `data` of a `redacted_thinking` block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SignatureId(pub [u8; 32]);

impl SignatureId {
    /// The id of a block of `block_type` (`thinking`, `redacted_thinking`) whose opaque value
    /// is `opaque` (the JSON string's decoded text).
    pub fn of(block_type: &str, opaque: &str) -> Self {
        let mut h = Sha256::new();
        h.update(TAG);
        h.update(block_type.as_bytes());
        h.update([0]);
        h.update(opaque.as_bytes());
        Self(h.finalize().into())
    }
}

impl fmt::Display for SignatureId {
    /// Lower-case hex, 64 characters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// What the shaping pass asks: was this signed block rejected for the request's scope?
pub trait SignatureLookup {
    /// True when `id` was rejected for the request's credential scope.
    fn is_rejected(&self, id: &SignatureId) -> bool;
}

/// Nothing rejected (tests, benchmarks, routes without a store).
impl SignatureLookup for () {
    fn is_rejected(&self, _id: &SignatureId) -> bool {
        false
    }
}

/// The rejected signatures of one credential scope, in the store's memory (the kind is
/// resident, so this never reads the backend).
pub struct ScopedRejections<'a> {
    store: &'a Store,
    scope: &'a str,
}

impl<'a> ScopedRejections<'a> {
    pub fn new(store: &'a Store, scope: &'a str) -> Self {
        Self { store, scope }
    }

    fn key(&self, id: &SignatureId) -> RecordKey {
        RecordKey {
            kind: Kind::RejectedSignature,
            scope: self.scope.to_owned(),
            key: id.to_string(),
        }
    }

    /// Remember `ids` (blocks of the given types) as rejected. Returns how many were new
    /// (0: nothing learned, nothing written).
    pub fn learn(&self, ids: &[(SignatureId, &str)]) -> usize {
        let mut new = 0;
        for (id, block_type) in ids {
            let key = self.key(id);
            let written = self.store.update(&key, |current| {
                if current.is_some() {
                    return None;
                }
                let value = serde_json::json!({ "type": block_type }).to_string();
                Some(Record::new(
                    Kind::RejectedSignature,
                    self.scope,
                    &key.key,
                    value.into_bytes(),
                ))
            });
            new += usize::from(written.is_some());
        }
        new
    }
}

impl SignatureLookup for ScopedRejections<'_> {
    fn is_rejected(&self, id: &SignatureId) -> bool {
        self.store.get_cached(&self.key(id)).is_some()
    }
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
    use crate::MemoryBackend;

    #[test]
    fn rejections_are_per_scope_and_learned_once() {
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 30, 1 << 20, 1 << 20);
        let a = ScopedRejections::new(&store, "scope-a");
        let b = ScopedRejections::new(&store, "scope-b");
        let sig = SignatureId::of("thinking", "EqQBsig");
        assert_ne!(sig, SignatureId::of("redacted_thinking", "EqQBsig"));
        assert_eq!(sig.to_string().len(), 64);
        assert!(!a.is_rejected(&sig));
        assert_eq!(a.learn(&[(sig, "thinking")]), 1);
        assert_eq!(a.learn(&[(sig, "thinking")]), 0, "nothing new");
        assert!(a.is_rejected(&sig));
        assert!(
            !b.is_rejected(&sig),
            "another credential's rejection is not ours"
        );
        store.flush();
        let recs = store.scan_cached(Kind::RejectedSignature);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].value, br#"{"type":"thinking"}"#);
        assert!(!recs[0].key.key.contains("EqQB"));
    }
}
