//! Credential scopes: which tenant a request belongs to, without keeping the credential.
//!
//! `docs/architecture.md#credentials`: a credential is identified by a hash of the first present of
//! `x-api-key`, `authorization`, `x-goog-api-key`, or the `key` query parameter. Rotating
//! OAuth tokens therefore start fresh scopes. Used to keep per-tenant caches (the transcode
//! cache) apart; the scope is never logged with the credential.

use sha2::{Digest, Sha256};

/// The scope of a request without any credential.
pub(crate) const NO_CREDENTIAL: &str = "";

/// Hex of the first 16 bytes of SHA-256 over a domain tag, the header's name and its value,
/// for the first present of `x-api-key`, `authorization`, `x-goog-api-key`, or the `key`
/// query parameter (`query` is the URI's query string, without `?`). [`NO_CREDENTIAL`] when
/// none is present.
pub(crate) fn scope(headers: &http::HeaderMap, query: Option<&str>) -> String {
    for name in ["x-api-key", "authorization", "x-goog-api-key"] {
        if let Some(v) = headers.get(name) {
            return digest(name, v.as_bytes());
        }
    }
    let key = query.and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("key=").filter(|v| !v.is_empty()))
    });
    match key {
        Some(v) => digest("key", v.as_bytes()),
        None => NO_CREDENTIAL.to_owned(),
    }
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
}
