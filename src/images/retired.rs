//! Cold-cache eviction's memory: the images a session retired while its prompt cache was cold
//! (`docs/images.md#cold-cache-eviction`).
//!
//! When a session has been idle longer than the provider's cache TTL, its next turn is a full
//! cache write anyway, so retiring images then costs nothing extra: the eviction pass retires
//! down to the low-water mark and the session remembers what it retired, keyed by a keyed
//! digest of each image's bytes ([`crate::digest::DigestKey`]) — not by position, since agents
//! compact and reorder history — so every later turn retires the same images and stays
//! byte-stable.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::DigestKey;

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
