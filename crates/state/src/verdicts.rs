//! Unknown-field verdicts, a typed view over [`Kind::Verdict`] records.
//!
//! A verdict says what one (upstream host, model) does not accept, learned from its 4xx
//! answers (`reasoning::detect`) and applied to every later request. It holds field
//! names and the provider's wording, never user content or credentials, so it is not scoped
//! to a credential.
//!
//! Fields are namespaced ([`Field`]): a top-level request parameter (`param:reasoning`) and a
//! field of assistant messages (`message:reasoning`) can share a name and are told apart.
//!
//! Record layout: scope `""`, key `["host","model"]` (JSON), value
//! `{"fields":["message:reasoning_content",...],"wording":"..."}`; `learned_at` is the
//! record's `written_at`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{now_secs, Kind, Record, RecordKey, Store};

/// One thing a provider does not accept.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// A top-level request parameter (`store`, `reasoning`); dotted for a key of a top-level
    /// object (`thinking.clear_thinking`). Written `param:<name>`.
    Param(String),
    /// A field of assistant messages or their tool calls: a reasoning carrier
    /// (`reasoning_content`, `reasoning`, `reasoning_details`, `extra_content`,
    /// `reasoning_opaque`). Written `message:<name>`.
    Message(String),
    /// The model takes no image input (learned from an image rejection). Written
    /// `model:image_input`.
    NoImageInput,
    /// Carrier restore is off for this (host, model): a request whose restored carriers the
    /// upstream rejected (`docs/reasoning.md#when-a-restore-is-rejected`). Written
    /// `model:no_restore`.
    NoRestore,
    /// An `anthropic-beta` header value the provider rejected for this (host, model)
    /// ("Unexpected value(s) `…` for the `anthropic-beta` header", "invalid beta flag"): not
    /// sent again, nor the body field it enables (`docs/reasoning.md#beta-headers`). Written
    /// `beta:<value>`.
    Beta(String),
}

/// Carrier names a v1 (flat) verdict could hold; they migrate to [`Field::Message`].
const V1_CARRIERS: [&str; 5] = [
    "reasoning_content",
    "reasoning",
    "reasoning_details",
    "extra_content",
    "reasoning_opaque",
];

/// The marker v1 stored for "this model sees no images".
const V1_NO_IMAGE_INPUT: &str = "image_input";

impl Field {
    /// `Field::Param(name)`.
    pub fn param(name: &str) -> Self {
        Field::Param(name.to_owned())
    }

    /// `Field::Message(name)`.
    pub fn message(name: &str) -> Self {
        Field::Message(name.to_owned())
    }

    /// A flat name of a v1 verdict: a carrier name is a message field, v1's `image_input`
    /// marker is [`Field::NoImageInput`], any other name a top-level parameter.
    pub(crate) fn from_flat(name: &str) -> Self {
        if V1_CARRIERS.contains(&name) {
            Field::message(name)
        } else if name == V1_NO_IMAGE_INPUT {
            Field::NoImageInput
        } else {
            Field::param(name)
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Param(n) => write!(f, "param:{n}"),
            Field::Message(n) => write!(f, "message:{n}"),
            Field::NoImageInput => f.write_str("model:image_input"),
            Field::NoRestore => f.write_str("model:no_restore"),
            Field::Beta(v) => write!(f, "beta:{v}"),
        }
    }
}

/// A string that is not `param:<name>`, `message:<name>`, `model:image_input`,
/// `model:no_restore` or `beta:<value>`.
#[derive(Debug, thiserror::Error)]
#[error("not a verdict field: {0:?} (expected param:<name>, message:<name>, model:image_input, model:no_restore or beta:<value>)")]
pub struct FieldParseError(String);

impl FromStr for Field {
    type Err = FieldParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some(("param", n)) if !n.is_empty() => Ok(Field::param(n)),
            Some(("message", n)) if !n.is_empty() => Ok(Field::message(n)),
            Some(("model", "image_input")) => Ok(Field::NoImageInput),
            Some(("model", "no_restore")) => Ok(Field::NoRestore),
            Some(("beta", v)) if !v.is_empty() => Ok(Field::Beta(v.to_owned())),
            _ => Err(FieldParseError(s.to_owned())),
        }
    }
}

impl Serialize for Field {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A set of [`Field`]s: what to omit for one (host, model).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FieldSet(BTreeSet<Field>);

impl FieldSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// From flat v1 names ([`Field::from_flat`]).
    #[cfg(any(test, feature = "testing"))]
    pub fn from_flat<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        names.into_iter().map(Field::from_flat).collect()
    }

    pub fn contains(&self, f: &Field) -> bool {
        self.0.contains(f)
    }

    /// The top-level parameter `name` is in the set.
    pub fn has_param(&self, name: &str) -> bool {
        self.params().any(|p| p == name)
    }

    /// The message field `name` is in the set.
    pub fn has_message_field(&self, name: &str) -> bool {
        self.0
            .iter()
            .any(|f| matches!(f, Field::Message(n) if n == name))
    }

    /// The top-level parameter names, sorted.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|f| match f {
            Field::Param(n) => Some(n.as_str()),
            _ => None,
        })
    }

    /// Add `f`; true if it was new.
    pub fn insert(&mut self, f: Field) -> bool {
        self.0.insert(f)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Field> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The fields of `self` not in `other`.
    pub(crate) fn difference(&self, other: &FieldSet) -> FieldSet {
        self.0.difference(&other.0).cloned().collect()
    }

    /// The fields as written (`message:reasoning,param:store`), comma-separated, sorted.
    pub fn joined(&self) -> String {
        self.0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl FromIterator<Field> for FieldSet {
    fn from_iter<I: IntoIterator<Item = Field>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl Extend<Field> for FieldSet {
    fn extend<I: IntoIterator<Item = Field>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl IntoIterator for FieldSet {
    type Item = Field;
    type IntoIter = std::collections::btree_set::IntoIter<Field>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<const N: usize> From<[Field; N]> for FieldSet {
    fn from(a: [Field; N]) -> Self {
        a.into_iter().collect()
    }
}

/// Key of a verdict: the upstream host (lowercase, no port) and the model (case kept).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VerdictKey {
    pub host: String,
    pub model: String,
}

impl VerdictKey {
    /// The key for `host` (lowercased) and `model` (as is).
    pub(crate) fn new(host: &str, model: &str) -> Self {
        Self {
            host: host.to_ascii_lowercase(),
            model: model.to_owned(),
        }
    }

    /// Where this verdict is stored.
    pub(crate) fn record_key(&self) -> RecordKey {
        RecordKey {
            kind: Kind::Verdict,
            scope: String::new(),
            key: serde_json::to_string(&(&self.host, &self.model)).unwrap_or_default(),
        }
    }

    fn from_record_key(k: &RecordKey) -> Option<Self> {
        let (host, model): (String, String) = serde_json::from_str(&k.key).ok()?;
        Some(Self { host, model })
    }
}

/// What a provider told us it does not accept, for one (host, model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What to omit.
    pub fields: FieldSet,
    /// The provider's wording that taught us (at most [`MAX_WORDING_CHARS`](super::MAX_WORDING_CHARS) chars).
    pub wording: String,
    /// When it was last learned, Unix seconds.
    pub learned_at: i64,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    fields: FieldSet,
    wording: String,
}

impl Verdict {
    /// The record holding this verdict for `key`.
    pub(crate) fn to_record(&self, key: &VerdictKey) -> Record {
        let payload = Payload {
            fields: self.fields.clone(),
            wording: self.wording.clone(),
        };
        Record {
            key: key.record_key(),
            version: Kind::Verdict.version(),
            value: serde_json::to_vec(&payload).unwrap_or_default(),
            written_at: self.learned_at,
        }
    }

    /// The verdict in `rec`; `None` when it is not a verdict record of a version this build
    /// reads, or malformed.
    pub(crate) fn from_record(rec: &Record) -> Option<(VerdictKey, Verdict)> {
        if rec.key.kind != Kind::Verdict || rec.version > Kind::Verdict.version() {
            return None;
        }
        let key = VerdictKey::from_record_key(&rec.key)?;
        let p: Payload = serde_json::from_slice(&rec.value).ok()?;
        Some((
            key,
            Verdict {
                fields: p.fields,
                wording: p.wording,
                learned_at: rec.written_at,
            },
        ))
    }
}

/// Read access to learned verdicts: what to omit for (upstream host, model). Served from
/// memory; never touches disk.
pub trait VerdictLookup: Sync {
    /// Fields learned as not accepted by `host` (lowercase, no port) and `model` (case kept).
    fn omit(&self, host: &str, model: &str) -> FieldSet;
}

/// No verdicts (tests, benchmarks).
impl VerdictLookup for () {
    fn omit(&self, _host: &str, _model: &str) -> FieldSet {
        FieldSet::new()
    }
}

impl VerdictLookup for Store {
    fn omit(&self, host: &str, model: &str) -> FieldSet {
        self.verdicts()
            .get(host, model)
            .map(|v| v.fields)
            .unwrap_or_default()
    }
}

/// The verdicts view of a [`Store`] ([`Store::verdicts`]).
pub struct Verdicts<'a> {
    store: &'a Store,
}

impl<'a> Verdicts<'a> {
    pub(super) fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// The verdict for (host, model), if any. Memory only.
    pub(crate) fn get(&self, host: &str, model: &str) -> Option<Verdict> {
        let rec = self
            .store
            .get_cached(&VerdictKey::new(host, model).record_key())?;
        Verdict::from_record(&rec).map(|(_, v)| v)
    }

    /// Every verdict, sorted by key.
    pub fn all(&self) -> Vec<(VerdictKey, Verdict)> {
        let mut all: Vec<(VerdictKey, Verdict)> = self
            .store
            .scan_cached(Kind::Verdict)
            .iter()
            .filter_map(Verdict::from_record)
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Add `fields` to the verdict for (host, model). Returns the fields that were new
    /// (empty: nothing learned, nothing written). The wording (cut to [`MAX_WORDING_CHARS`](super::MAX_WORDING_CHARS)
    /// chars) replaces the stored one only when something was learned. Memory is updated at
    /// once; the backend by the writer thread.
    pub fn learn(&self, host: &str, model: &str, fields: &FieldSet, wording: &str) -> FieldSet {
        let key = VerdictKey::new(host, model);
        let mut new = FieldSet::new();
        self.store.update(&key.record_key(), |current| {
            let mut verdict = current
                .and_then(Verdict::from_record)
                .map(|(_, v)| v)
                .unwrap_or(Verdict {
                    fields: FieldSet::new(),
                    wording: String::new(),
                    learned_at: 0,
                });
            new = fields.difference(&verdict.fields);
            if new.is_empty() {
                return None;
            }
            verdict.fields.extend(new.iter().cloned());
            verdict.wording = super::wording_excerpt(wording);
            verdict.learned_at = now_secs();
            Some(verdict.to_record(&key))
        });
        new
    }

    /// Remove the verdicts for `host` (one model, or all). Returns how many were removed.
    pub fn clear(&self, host: &str, model: Option<&str>) -> usize {
        let host = host.to_ascii_lowercase();
        let doomed: Vec<RecordKey> = self
            .all()
            .into_iter()
            .filter(|(k, _)| k.host == host && model.is_none_or(|m| k.model == m))
            .map(|(k, _)| k.record_key())
            .collect();
        for k in &doomed {
            self.store.delete(k);
        }
        doomed.len()
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

    #[test]
    fn fields_are_written_with_their_namespace_and_read_back() {
        for (f, s) in [
            (
                Field::param("thinking.clear_thinking"),
                "param:thinking.clear_thinking",
            ),
            (Field::message("reasoning"), "message:reasoning"),
            (Field::NoImageInput, "model:image_input"),
            (Field::NoRestore, "model:no_restore"),
        ] {
            assert_eq!(f.to_string(), s);
            assert_eq!(s.parse::<Field>().unwrap(), f);
        }
        for bad in ["reasoning", "param:", "model:other", "messages:reasoning"] {
            assert!(bad.parse::<Field>().is_err(), "{bad}");
        }
        let v = Verdict {
            fields: FieldSet::from_flat(["reasoning", "reasoning_effort", "image_input"]),
            wording: "w".into(),
            learned_at: 7,
        };
        let rec = v.to_record(&VerdictKey::new("H", "M"));
        assert_eq!(
            String::from_utf8(rec.value.clone()).unwrap(),
            r#"{"fields":["param:reasoning_effort","message:reasoning","model:image_input"],"wording":"w"}"#
        );
        assert_eq!(rec.key.key, r#"["h","M"]"#);
        assert_eq!(
            Verdict::from_record(&rec),
            Some((VerdictKey::new("h", "M"), v))
        );
        // A newer payload version is not read.
        let newer = Record {
            version: Kind::Verdict.version() + 1,
            ..rec
        };
        assert_eq!(Verdict::from_record(&newer), None);
    }
}
