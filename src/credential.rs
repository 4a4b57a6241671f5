//! Credential scopes and sealing keys: which tenant a request belongs to, and the key its
//! stored user content is encrypted under, without keeping the credential.
//!
//! `docs/dev/architecture.md#credentials`: a credential is the first present of `x-api-key`,
//! `authorization`, `x-goog-api-key`, `api-key` (Azure OpenAI), or the `key` query parameter (`server.client_token`,
//! header `x-cachekeeper-token`, is the proxy's own and takes no part). Rotating OAuth tokens
//! therefore start fresh scopes and keys. The scope (a hash) keeps per-tenant state apart
//! (the transcode cache, captured carriers) and is never logged with the credential; the
//! sealing key ([`SealKey`], `docs/state.md#carrier-records`) is derived separately from the
//! raw value, so the stored scope reveals nothing of it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use hkdf::Hkdf;
use sha2::{Digest, Sha256};

use crate::digest::DigestKey;
use crate::state::seal::{SealKey, KEY_BYTES};

/// The headers a credential is read from, first present wins: Anthropic's `x-api-key`,
/// `authorization` (OpenAI-style bearer keys, OAuth tokens: Vertex AI, Microsoft Entra ID),
/// Gemini's `x-goog-api-key`, Azure OpenAI's `api-key`
/// (https://learn.microsoft.com/azure/ai-foundry/openai/reference#authentication).
const CREDENTIAL_HEADERS: [&str; 4] = ["x-api-key", "authorization", "x-goog-api-key", "api-key"];

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
    /// The key of this credential's content digests ([`DigestKey::for_credential`] of
    /// `sealing`).
    pub digest_key: DigestKey,
}

/// Most credentials whose derived keys [`identify`] keeps in memory; when full, the memory
/// is emptied and refilled as requests come. A credential's keys are two HKDF-SHA256
/// derivations, 52,000 CPU instructions of a 490,000-instruction pass-through request
/// (callgrind, `benches/instructions.py`); an entry is about 200 bytes, so at most ~1 MiB.
pub(crate) const MAX_DERIVED_CREDENTIALS: usize = 4096;

/// The keys derived from a credential, kept by the SHA-256 the scope is cut from (never the
/// credential itself): what [`identify`] derives once per credential rather than per request.
#[derive(Clone)]
struct Derived {
    sealing: SealKey,
    digest_key: DigestKey,
}

/// The derived keys of the credentials seen, bounded by `cap` entries.
struct DerivedKeys {
    cap: usize,
    keys: Mutex<HashMap<[u8; 32], Derived>>,
}

impl DerivedKeys {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// The keys of the credential `value` under `name`, whose credential digest is `id`:
    /// from memory, else derived and remembered. Derivation is deterministic, so the answer
    /// never depends on what the memory holds.
    fn get(&self, id: &[u8; 32], name: &str, value: &[u8]) -> Option<Derived> {
        if let Some(d) = self.keys.lock().ok().and_then(|k| k.get(id).cloned()) {
            return Some(d);
        }
        let sealing = sealing_key(name, value)?;
        let derived = Derived {
            digest_key: DigestKey::for_credential(Some(&sealing)),
            sealing,
        };
        if let Ok(mut k) = self.keys.lock() {
            if k.len() >= self.cap {
                k.clear();
            }
            k.insert(*id, derived.clone());
        }
        Some(derived)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock().map_or(0, |k| k.len())
    }
}

/// The process's [`DerivedKeys`] ([`MAX_DERIVED_CREDENTIALS`] entries).
fn derived_keys() -> &'static DerivedKeys {
    static KEYS: OnceLock<DerivedKeys> = OnceLock::new();
    KEYS.get_or_init(|| DerivedKeys::new(MAX_DERIVED_CREDENTIALS))
}

/// The credential name of an AWS SigV4 request: its access key id, which every request of
/// that key carries while the signature changes with each one. The secret never travels, and
/// the key id is not secret: such a scope's user content stays in memory, never sealed to the
/// store ([`identify`]).
const SIGV4: &str = "aws-sigv4";

/// Whether the request is signed with AWS SigV4 (its `Authorization` reads as one,
/// [`crate::sigv4::parse_authorization`]): its body and `host` are under a signature the
/// proxy cannot renew without AWS credentials of its own.
pub(crate) fn sigv4_signed(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(crate::sigv4::parse_authorization)
        .is_some()
}

/// Whether the request carries a credential in any form [`identify`] reads.
pub(crate) fn present(headers: &http::HeaderMap, query: Option<&str>) -> bool {
    find(headers, query).is_some()
}

/// The first of [`CREDENTIAL_HEADERS`] that holds a credential
/// (header name, raw value as given), else the non-empty `key` query parameter (`query` is
/// the URI's query string, without `?`).
///
/// A header with nothing in it is no credential ([`is_blank`]): `curl -H "x-api-key: $KEY"
/// -H "Authorization: Bearer $TOKEN"` with `KEY` unset sends an empty `x-api-key`, and taking
/// it would put every such client, whatever its token, in one scope (the failing input of a
/// fresh-user pass: one user's reasoning carriers restored into another's request).
fn find<'a>(
    headers: &'a http::HeaderMap,
    query: Option<&'a str>,
) -> Option<(&'static str, Cow<'a, [u8]>)> {
    for name in CREDENTIAL_HEADERS {
        if let Some(v) = headers
            .get_all(name)
            .iter()
            .find(|v| !is_blank(v.as_bytes()))
        {
            // A SigV4 value is scoped by its access key id: one parser reads it
            // ([`crate::sigv4::parse_authorization`]); a malformed one is a credential as sent.
            if let Some(signed) = crate::sigv4::parse_authorization(v) {
                return Some((SIGV4, Cow::Owned(signed.access_key_id.into_bytes())));
            }
            return Some((name, Cow::Borrowed(v.as_bytes())));
        }
    }
    let key = query.and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("key=").filter(|v| !v.is_empty()))
    })?;
    Some(("key", Cow::Borrowed(key.as_bytes())))
}

/// Whether a credential header's value holds no credential: empty or whitespace, or an
/// authorization scheme with no token after it (`Bearer`, `Bearer  `; any case).
fn is_blank(value: &[u8]) -> bool {
    let v = value.trim_ascii();
    let scheme_only = !v.is_empty()
        && !v.iter().any(u8::is_ascii_whitespace)
        && ["bearer", "basic", "token"]
            .iter()
            .any(|s| v.eq_ignore_ascii_case(s.as_bytes()));
    v.is_empty() || scheme_only
}

/// The request's credential: its scope and its sealing key, HKDF-SHA256 (RFC 5869) with
/// the raw credential value as input keying material, [`SEAL_SALT`] + the header name as salt
/// and [`SEAL_INFO`] as info, 32 bytes ([`KEY_BYTES`]). Both are [`NO_CREDENTIAL`] / `None`
/// when no credential is present.
///
/// The derived keys are kept in memory per credential digest ([`MAX_DERIVED_CREDENTIALS`]),
/// so a credential's requests after its first cost one SHA-256, not three HKDF runs.
pub(crate) fn identify(headers: &http::HeaderMap, query: Option<&str>) -> Credential {
    identify_with(derived_keys(), headers, query)
}

fn identify_with(keys: &DerivedKeys, headers: &http::HeaderMap, query: Option<&str>) -> Credential {
    let Some((name, value)) = find(headers, query) else {
        return anonymous();
    };
    let value = &*value;
    let id = credential_digest(name, value);
    if name == SIGV4 {
        return Credential {
            scope: hex16(&id),
            sealing: None,
            digest_key: DigestKey::for_credential(None),
        };
    }
    match keys.get(&id, name, value) {
        Some(d) => Credential {
            scope: hex16(&id),
            sealing: Some(d.sealing),
            digest_key: d.digest_key,
        },
        // HKDF refused (it cannot for 32 bytes): no key, as before the keys were kept.
        None => Credential {
            scope: hex16(&id),
            sealing: None,
            digest_key: DigestKey::for_credential(None),
        },
    }
}

/// No credential: the scope of a request that carries none ([`NO_CREDENTIAL`]), and of a
/// SigV4 request whose signature the proxy could not check but signs anyway (a `sign_all`
/// route: the access key id it names is only a claim, so it scopes nothing).
pub(crate) fn anonymous() -> Credential {
    Credential {
        scope: NO_CREDENTIAL.to_owned(),
        sealing: None,
        digest_key: DigestKey::for_credential(None),
    }
}

/// Hex of the first 16 bytes of SHA-256 over a domain tag, the header's name and its value,
/// for the credential [`identify`] picks; [`NO_CREDENTIAL`] when none is present.
#[cfg(test)]
pub(crate) fn scope(headers: &http::HeaderMap, query: Option<&str>) -> String {
    match find(headers, query) {
        Some((name, value)) => digest(name, &value),
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

#[cfg(test)]
fn digest(name: &str, value: &[u8]) -> String {
    hex16(&credential_digest(name, value))
}

/// SHA-256 over a domain tag, the header's name, a zero byte and the credential: the scope is
/// its first 16 bytes in hex.
fn credential_digest(name: &str, value: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"cachekeeper-credential-v1\0");
    h.update(name.as_bytes());
    h.update([0]);
    h.update(value);
    h.finalize().into()
}

/// Lower-case hex of the first 16 bytes of `d`.
fn hex16(d: &[u8; 32]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(32);
    for b in &d[..16] {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
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

    /// A SigV4 request's credential is its access key id: two requests of one key (each with
    /// its own date and signature) share a scope, another key has its own; nothing is sealed
    /// (the key id is not a secret). A Bedrock API key (`Bearer`) is a credential as sent.
    #[test]
    fn sigv4_scopes_by_access_key_id() {
        let signed = |akid: &str, date: &str, sig: &str| {
            format!(
                "AWS4-HMAC-SHA256 Credential={akid}/{date}/us-east-1/bedrock/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date, Signature={sig}"
            )
        };
        let (aa, bb) = ("a".repeat(64), "b".repeat(64));
        let a1 = signed("AKIDEXAMPLE", "20261207", &aa);
        let a2 = signed("AKIDEXAMPLE", "20261208", &bb);
        let b = signed("AKIDOTHER", "20261207", &aa);
        let h = |v: &str| {
            let mut m = http::HeaderMap::new();
            m.insert("authorization", http::HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(scope(&h(&a1), None), scope(&h(&a2), None));
        assert_ne!(scope(&h(&a1), None), scope(&h(&b), None));
        assert_ne!(scope(&h(&a1), None), NO_CREDENTIAL);
        let c = identify(&h(&a1), None);
        assert_eq!(c.scope, scope(&h(&a1), None));
        assert!(c.sealing.is_none());
        assert!(sigv4_signed(&h(&a1)));
        assert!(!sigv4_signed(&h("Bearer ABSKbedrock-api-key")));
        let bearer = identify(&h("Bearer ABSKbedrock-api-key"), None);
        assert!(bearer.sealing.is_some());
        // A malformed SigV4 value is a credential as sent, and not signed: two such values
        // naming the same key id are two scopes.
        for malformed in [
            "AWS4-HMAC-SHA256 Credential=/x",
            "AWS4-HMAC-SHA256 garbage",
            &signed("AKIDEXAMPLE", "20261207", "aaaa"),
        ] {
            assert!(!sigv4_signed(&h(malformed)), "{malformed}");
            assert_eq!(
                scope(&h(malformed), None),
                digest("authorization", malformed.as_bytes())
            );
        }
    }

    /// Azure OpenAI's `api-key` header is a credential of its own: two keys, two scopes; an
    /// Entra ID bearer token on the same request wins (it comes first).
    #[test]
    fn azure_api_key_scopes() {
        let a = scope(&headers(&[("api-key", "azk-1")]), None);
        let b = scope(&headers(&[("api-key", "azk-2")]), None);
        assert_ne!(a, NO_CREDENTIAL);
        assert_ne!(a, b);
        assert_ne!(a, scope(&headers(&[("x-api-key", "azk-1")]), None));
        let entra = scope(&headers(&[("authorization", "Bearer eyJ0")]), None);
        assert_eq!(
            scope(
                &headers(&[("api-key", "azk-1"), ("authorization", "Bearer eyJ0")]),
                None
            ),
            entra
        );
    }

    #[test]
    fn a_blank_credential_header_is_no_credential() {
        // The failing input: an empty `x-api-key` before two different bearer tokens gave
        // both requests one scope.
        for blank in ["", " ", "Bearer", "bearer  ", "Basic"] {
            for token in ["Bearer tok-a", "Bearer tok-b"] {
                let mut h = http::HeaderMap::new();
                h.insert("x-api-key", http::HeaderValue::from_str(blank).unwrap());
                h.insert("authorization", http::HeaderValue::from_static(token));
                assert_eq!(
                    scope(&h, None),
                    scope(&headers(&[("authorization", token)]), None),
                    "{blank:?}"
                );
            }
            // Blank headers alone: no credential (carriers stay in memory, nothing sealed).
            let mut only = http::HeaderMap::new();
            only.insert("authorization", http::HeaderValue::from_str(blank).unwrap());
            only.insert(
                "x-goog-api-key",
                http::HeaderValue::from_str(blank).unwrap(),
            );
            assert_eq!(scope(&only, None), NO_CREDENTIAL, "{blank:?}");
            assert!(identify(&only, None).sealing.is_none(), "{blank:?}");
            assert_ne!(scope(&only, Some("key=AIza1")), NO_CREDENTIAL);
        }
        // A second, non-blank value of the same header is the credential.
        let mut h = http::HeaderMap::new();
        h.append("x-api-key", http::HeaderValue::from_static(""));
        h.append("x-api-key", http::HeaderValue::from_static("sk-1"));
        assert_eq!(
            scope(&h, None),
            scope(&headers(&[("x-api-key", "sk-1")]), None)
        );
        // A token that looks like a scheme word inside a value is a credential.
        assert_ne!(
            scope(&headers(&[("authorization", "Bearer bearer")]), None),
            NO_CREDENTIAL
        );
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

    /// The kept keys are the keys: a credential's second request gets what a fresh
    /// derivation gives (the scope as `format!("{:02x}")` of the digest gave it, the sealing
    /// key by HKDF, the digest key from it), and another credential never gets another's.
    #[test]
    fn kept_keys_equal_fresh_derivations() {
        let keys = DerivedKeys::new(2);
        let h = headers(&[("x-api-key", "sk-kept")]);
        let want_scope: String = credential_digest("x-api-key", b"sk-kept")[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let want_seal = sealing_key("x-api-key", b"sk-kept").unwrap();
        for _ in 0..3 {
            let c = identify_with(&keys, &h, None);
            assert_eq!(c.scope, want_scope);
            assert_eq!(c.sealing.as_ref(), Some(&want_seal));
            assert_eq!(c.digest_key, DigestKey::for_credential(Some(&want_seal)));
        }
        assert_eq!(keys.len(), 1);
        let other = identify_with(&keys, &headers(&[("authorization", "sk-kept")]), None);
        assert_ne!(other.sealing.as_ref(), Some(&want_seal));
        assert_eq!(
            other.sealing,
            sealing_key("authorization", b"sk-kept"),
            "same value, other header: its own key"
        );
        // Past the bound the memory is emptied, and the answers stay the same.
        let third = identify_with(&keys, &headers(&[("x-api-key", "sk-3")]), None);
        assert!(keys.len() <= 2);
        assert_eq!(third.sealing, sealing_key("x-api-key", b"sk-3"));
        assert_eq!(identify_with(&keys, &h, None).sealing, Some(want_seal));
        let none = identify_with(&keys, &headers(&[]), None);
        assert_eq!(none.scope, NO_CREDENTIAL);
        assert!(none.sealing.is_none());
        assert_eq!(none.digest_key, DigestKey::for_credential(None));
    }
}
