//! Cold-cache eviction's memory: the images a session retired while its prompt cache was cold
//! (`docs/images.md#cold-cache-eviction`).
//!
//! When a session has been idle longer than the provider's cache TTL, its next turn is a full
//! cache write anyway, so retiring images then costs nothing extra: the eviction pass retires
//! down to the low-water mark and the session remembers what it retired, keyed by a keyed
//! digest of each image's bytes ([`crate::digest::DigestKey`]) — not by position, since agents
//! compact and reorder history — so every later turn retires the same images and stays
//! byte-stable.
//!
//! How the eviction pass ([`crate::images::evict`]) uses a [`ColdInputs`]:
//! 1. carriers the set names are retired first ([`RetiredSet::take`]: a multiset, each digest's
//!    count spent on its oldest occurrences; a carrier matches only when every image in it has
//!    count left; uploads are never matched);
//! 2. the step function ([`crate::images::policy::retire_count`]) runs on the carriers left;
//! 3. when `cold` is set and the image blocks left are above the low-water mark, the oldest
//!    carriers left are retired down to it, and the new set is the old one plus every image
//!    retired on this turn by steps 2 and 3 (so the next turn's step function, on what the set
//!    leaves, does not move).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::DigestKey;

/// Digest tag of an image's base64 text (of a base64 source, or the data part of a data URL).
const IMAGE_TAG: &[u8] = b"image";
/// Digest tag of an image that has no base64 text (a URL or file id source): its whole block
/// as sent.
const IMAGE_BLOCK_TAG: &[u8] = b"image-block";

/// The images one session retired by a cold-cache decision: keyed digest of an image's
/// base64 / data-URL text (hex) → how many of its occurrences, oldest first, are retired.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RetiredSet {
    pub images: BTreeMap<String, u32>,
}

impl RetiredSet {
    /// Nothing retired.
    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// Add one occurrence of each digest in `digests` (hex, as [`image_digest`] gives).
    pub(crate) fn add<'d>(&mut self, digests: impl IntoIterator<Item = &'d String>) {
        for d in digests {
            let n = self.images.entry(d.clone()).or_insert(0);
            *n = n.saturating_add(1);
        }
    }

    /// Which of `carriers` (each its images' digests, OLDEST carrier first) the set retires:
    /// walking oldest first, a carrier whose every digest still has count left (counting a
    /// digest as often as the carrier holds it) is retired and spends that count. A carrier
    /// with no digests is never matched.
    pub(crate) fn take(&self, carriers: &[&[String]]) -> Vec<bool> {
        let mut left: BTreeMap<&str, u32> =
            self.images.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        carriers
            .iter()
            .map(|digests| {
                if digests.is_empty() {
                    return false;
                }
                let mut need: BTreeMap<&str, u32> = BTreeMap::new();
                for d in digests.iter() {
                    *need.entry(d.as_str()).or_insert(0) += 1;
                }
                let matches = need
                    .iter()
                    .all(|(d, n)| left.get(d).is_some_and(|have| have >= n));
                if matches {
                    for (d, n) in need {
                        if let Some(have) = left.get_mut(d) {
                            *have -= n;
                        }
                    }
                }
                matches
            })
            .collect()
    }
}

/// What the eviction pass reads of the session for cold-cache eviction.
#[derive(Debug, Clone, Copy)]
pub struct ColdInputs<'a> {
    /// The session's retired set (empty for a new session).
    pub retired: &'a RetiredSet,
    /// Make a new cold-cache decision on this turn: the session's previous turn is older than
    /// the provider's cache TTL (judged by the caller from the session record). `false` when
    /// the record could not be read, the TTL is unknown, or the cache is warm.
    pub cold: bool,
    /// The credential's digest key (image digests).
    pub key: &'a DigestKey,
}

impl ColdInputs<'_> {
    /// Whether the eviction pass needs image digests on this request: a set to apply or a
    /// decision to make (hashing every image costs: up to the 24 MB byte budget).
    pub(crate) fn needs_digests(&self) -> bool {
        self.cold || !self.retired.is_empty()
    }
}

/// The keyed digest (32 hex digits) of one image: of its base64 text as sent (`b64`: the
/// raw JSON string text of a base64 source, or the data part of a data URL, so the same
/// image matches in either form), else of its whole block as sent (`block`: a URL or file-id
/// source).
pub(crate) fn image_digest(key: &DigestKey, b64: Option<&str>, block: &str) -> String {
    let d = match b64 {
        Some(b) => key.digest(IMAGE_TAG, &[b.as_bytes()]),
        None => key.digest(IMAGE_BLOCK_TAG, &[block.as_bytes()]),
    };
    d.iter().map(|b| format!("{b:02x}")).collect()
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

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn take_spends_counts_on_the_oldest_occurrences() {
        let mut set = RetiredSet::default();
        set.add(&s(&["a", "b", "a"]));
        assert_eq!(set.images.get("a"), Some(&2));
        let (a, b, ab, aa, c) = (
            s(&["a"]),
            s(&["b"]),
            s(&["a", "b"]),
            s(&["a", "a"]),
            s(&["c"]),
        );
        // Oldest first: the first two `a` carriers match, the third does not.
        let got = set.take(&[&a, &c, &a, &a, &b]);
        assert_eq!(got, vec![true, false, true, false, true]);
        // A carrier matches only when each of its digests has count left.
        assert_eq!(set.take(&[&ab, &ab]), vec![true, false]);
        assert_eq!(set.take(&[&aa, &a]), vec![true, false]);
        assert_eq!(set.take(&[&[]]), vec![false]);
        assert_eq!(RetiredSet::default().take(&[&a]), vec![false]);
    }

    #[test]
    fn digests_are_keyed_and_form_independent() {
        let k = DigestKey::for_credential(None);
        let d = image_digest(&k, Some("AAAA"), "{\"source\":1}");
        assert_eq!(d.len(), 32);
        assert_eq!(d, image_digest(&k, Some("AAAA"), "other block"));
        assert_ne!(d, image_digest(&k, Some("AAAB"), ""));
        assert_ne!(d, image_digest(&k, None, "AAAA"));
    }

    #[test]
    fn the_set_serializes_as_a_map() {
        let mut set = RetiredSet::default();
        set.add(&s(&["ab", "ab"]));
        assert_eq!(serde_json::to_string(&set).unwrap(), r#"{"ab":2}"#);
    }
}
