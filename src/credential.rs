//! Credential scopes and sealing keys: which tenant a request belongs to, and the key its
//! stored user content is encrypted under, without keeping the credential.
//!
//! `docs/architecture.md#credentials`: a credential is the first present of `x-api-key`,
//! `authorization`, `x-goog-api-key`, or the `key` query parameter (`server.client_token`,
//! header `x-cachekeeper-token`, is the proxy's own and takes no part). Rotating OAuth tokens
//! therefore start fresh scopes and keys. The scope (a hash) keeps per-tenant state apart
//! (the transcode cache, captured carriers) and is never logged with the credential; the
//! sealing key ([`SealKey`], `docs/state.md#carrier-records`) is derived separately from the
//! raw value, so the stored scope reveals nothing of it.

use hkdf::Hkdf;
use sha2::{Digest, Sha256};

use crate::state::seal::{SealKey, KEY_BYTES};

/// The scope of a request without any credential.
pub(crate) const NO_CREDENTIAL: &str = "";

/// HKDF salt prefix of the sealing key; the credential's header name follows it (RFC 5869
/// §3.1: a salt adds strength; the name keeps an `x-api-key` and a `key` query parameter of
/// the same value apart, as the scope does).
const SEAL_SALT: &[u8] = b"cachekeeper-seal-salt-v1\0";

/// HKDF `info` of the sealing key (RFC 5869 §3.2: binds the output to its use; no other key
/// is derived with it).
const SEAL_INFO: &[u8] = b"cachekeeper carrier sealing key v1";

/// Who a request is, for state kept on its behalf.
#[derive(Debug, Clone)]
pub(crate) struct Credential {
    /// Hex of the first 16 bytes of SHA-256 over a domain tag, the header name and the
    /// credential; [`NO_CREDENTIAL`] without one.
    pub scope: String,
    /// The key records of this credential are sealed with; `None` without a credential (its
    /// user content stays in memory only).
    pub sealing: Option<SealKey>,
}

/// The first present of `x-api-key`, `authorization`, `x-goog-api-key` (header name, raw
/// value), else the non-empty `key` query parameter (`query` is the URI's query string,
/// without `?`), as given.
fn find<'a>(
    headers: &'a http::HeaderMap,
    query: Option<&'a str>,
) -> Option<(&'static str, &'a [u8])> {
    for name in ["x-api-key", "authorization", "x-goog-api-key"] {
        if let Some(v) = headers.get(name) {
            return Some((name, v.as_bytes()));
        }
    }
    let key = query.and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("key=").filter(|v| !v.is_empty()))
    })?;
    Some(("key", key.as_bytes()))
}

/// The request's credential: its scope and its sealing key, HKDF-SHA256 (RFC 5869) with
/// the raw credential value as input keying material, [`SEAL_SALT`] + the header name as salt
/// and [`SEAL_INFO`] as info, 32 bytes ([`KEY_BYTES`]). Both are [`NO_CREDENTIAL`] / `None`
/// when no credential is present.
pub(crate) fn identify(headers: &http::HeaderMap, query: Option<&str>) -> Credential {
    match find(headers, query) {
        Some((name, value)) => Credential {
            scope: digest(name, value),
            sealing: sealing_key(name, value),
        },
        None => Credential {
            scope: NO_CREDENTIAL.to_owned(),
            sealing: None,
        },
    }
}

/// Hex of the first 16 bytes of SHA-256 over a domain tag, the header's name and its value,
/// for the credential [`identify`] picks; [`NO_CREDENTIAL`] when none is present.
#[cfg(test)]
pub(crate) fn scope(headers: &http::HeaderMap, query: Option<&str>) -> String {
    match find(headers, query) {
        Some((name, value)) => digest(name, value),
        None => NO_CREDENTIAL.to_owned(),
    }
}

fn sealing_key(name: &str, value: &[u8]) -> Option<SealKey> {
    let mut salt = Vec::with_capacity(SEAL_SALT.len() + name.len());
    salt.extend_from_slice(SEAL_SALT);
    salt.extend_from_slice(name.as_bytes());
    let mut okm = [0u8; KEY_BYTES];
    // 32 bytes is far below HKDF-SHA256's limit of 255 × 32.
    Hkdf::<Sha256>::new(Some(&salt), value)
        .expand(SEAL_INFO, &mut okm)
        .ok()?;
    let key = SealKey::from_bytes(okm);
    zeroize::Zeroize::zeroize(&mut okm);
    Some(key)
}

fn digest(name: &str, value: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"cachekeeper-credential-v1\0");
    h.update(name.as_bytes());
    h.update([0]);
    h.update(value);
    let d = h.finalize();
    d[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, http::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn first_present_wins_and_never_leaks() {
        let a = scope(
            &headers(&[("x-api-key", "sk-1"), ("authorization", "Bearer x")]),
            None,
        );
        assert_eq!(
            a,
            scope(&headers(&[("x-api-key", "sk-1")]), Some("key=zzz"))
        );
        assert_ne!(a, scope(&headers(&[("x-api-key", "sk-2")]), None));
        assert_eq!(a.len(), 32);
        assert!(!a.contains("sk-1"));
        let b = scope(&headers(&[("authorization", "Bearer t")]), None);
        assert_ne!(a, b);
        let g = scope(&headers(&[]), Some("alt=sse&key=AIza1"));
        assert_eq!(g, scope(&headers(&[]), Some("key=AIza1")));
        assert_ne!(g, scope(&headers(&[("x-goog-api-key", "AIza1")]), None));
        assert_eq!(scope(&headers(&[]), Some("alt=sse")), NO_CREDENTIAL);
        assert_eq!(scope(&headers(&[]), None), NO_CREDENTIAL);
    }

    #[test]
    fn identify_gives_the_scope_and_a_key_per_credential() {
        let a = identify(&headers(&[("x-api-key", "sk-1")]), None);
        assert_eq!(a.scope, scope(&headers(&[("x-api-key", "sk-1")]), None));
        let ka = a.sealing.clone().unwrap();
        // Same credential, same key (a restart finds its records).
        let again = identify(
            &headers(&[("x-api-key", "sk-1"), ("authorization", "Bearer x")]),
            Some("key=zzz"),
        );
        assert_eq!(again.sealing.as_ref(), Some(&ka));
        // Different credentials, or the same value under another name: different keys.
        let others = [
            identify(&headers(&[("x-api-key", "sk-2")]), None),
            identify(&headers(&[("authorization", "sk-1")]), None),
            identify(&headers(&[("x-goog-api-key", "sk-1")]), None),
            identify(&headers(&[]), Some("key=sk-1")),
        ];
        for o in &others {
            assert_ne!(o.sealing.as_ref().unwrap(), &ka);
            assert_ne!(o.scope, a.scope);
        }
        // The client token is not a credential.
        let none = identify(&headers(&[("x-cachekeeper-token", "t")]), Some("alt=sse"));
        assert_eq!(none.scope, NO_CREDENTIAL);
        assert!(none.sealing.is_none());
        assert!(identify(&headers(&[]), None).sealing.is_none());
    }

    #[test]
    fn the_key_is_not_derived_from_the_scope() {
        let a = identify(&headers(&[("x-api-key", "sk-1")]), None);
        let key = a.sealing.unwrap();
        // Whatever one derives from the stored scope with the same construction, it is not
        // the key: the key's input is the raw credential.
        let from_scope = [
            sealing_key("x-api-key", a.scope.as_bytes()).unwrap(),
            sealing_key("scope", a.scope.as_bytes()).unwrap(),
        ];
        for k in &from_scope {
            assert_ne!(k, &key);
        }
        // Pinned (a restart must derive the same key): RFC 5869 computed independently,
        // PRK = HMAC-SHA256(salt, "sk-1"), OKM = HMAC-SHA256(PRK, info || 0x01).
        let want = "2198abcea3302a2176aa58627417f97ceea9c9de6526c60849478f3d394b3fb8";
        let mut bytes = [0u8; KEY_BYTES];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&want[i * 2..i * 2 + 2], 16).unwrap();
        }
        assert_eq!(SealKey::from_bytes(bytes), key);
        assert!(!format!("{key:?}").contains("sk-1"));
    }
}
