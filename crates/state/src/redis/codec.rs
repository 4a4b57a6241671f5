//! Key names and the self-checking value format of the Redis backend (`docs/state.md#redis`).
//!
//! Keys: `ck:v1:<kind>:<scope>:<key>` for a record, scope and key percent-encoded
//! ([`ESCAPED`]: `:` and `%` among others, so the name splits back unambiguously), and three
//! bookkeeping keys under `ck:v1:meta:` ([`index_key`], [`sizes_key`], [`GENERATION_KEY`]).
//!
//! A value ([`encode`]) is the record with a header, big-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 3 | magic `CKR` |
//! | 1 | format version ([`FORMAT_VERSION`]) |
//! | 4 | payload schema version ([`Record::version`]) |
//! | 8 | `written_at`, Unix seconds |
//! | 1 + n | kind name |
//! | 4 + n | scope |
//! | 4 + n | key |
//! | 4 + n | payload |
//! | 8 | XXH3-64 of every byte before it |
//!
//! [`decode`] refuses anything that is not exactly that (too short, trailing bytes, another
//! magic, a newer format, a wrong checksum, or a record that names another key than the one
//! it is stored under): a truncated, foreign or misplaced value is ignored, never misread.

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

use super::super::{Kind, Record, RecordKey};

/// Every key this backend writes starts with it; `v1` is the key layout's version.
pub(crate) const PREFIX: &str = "ck:v1:";

/// The counter every write increments ([`super::RedisBackend`]'s change detection).
pub(crate) const GENERATION_KEY: &str = "ck:v1:meta:generation";

/// Magic bytes at the start of every value.
const MAGIC: &[u8; 3] = b"CKR";

/// Version of the value layout above. A reader ignores values of a newer format (a rolling
/// upgrade: an old instance never misreads a new instance's record).
pub(crate) const FORMAT_VERSION: u8 = 1;

/// Bytes of the header fields of fixed size plus the checksum.
const FIXED_BYTES: usize = 3 + 1 + 4 + 8 + 1 + 4 + 4 + 4 + 8;

/// Characters percent-encoded in the scope and key parts of a key name: controls, the
/// separator `:`, `%` itself (so decoding is exact), space, and the glob characters of
/// `SCAN MATCH`.
const ESCAPED: &AsciiSet = &CONTROLS
    .add(b':')
    .add(b'%')
    .add(b' ')
    .add(b'*')
    .add(b'?')
    .add(b'[')
    .add(b']')
    .add(b'\\');

/// The member naming a record in its kind's index and size hash: `<scope>:<key>`, escaped.
pub(crate) fn member(key: &RecordKey) -> String {
    format!(
        "{}:{}",
        utf8_percent_encode(&key.scope, ESCAPED),
        utf8_percent_encode(&key.key, ESCAPED)
    )
}

/// The record key of `member` in `kind`'s index; `None` when it is not one [`member`] makes.
pub(crate) fn parse_member(kind: Kind, member: &str) -> Option<RecordKey> {
    let (scope, key) = member.split_once(':')?;
    if key.contains(':') {
        return None;
    }
    Some(RecordKey {
        kind,
        scope: percent_decode_str(scope).decode_utf8().ok()?.into_owned(),
        key: percent_decode_str(key).decode_utf8().ok()?.into_owned(),
    })
}

/// The key a record is stored under, from its member ([`member`]).
pub(crate) fn record_key_of(kind: Kind, member: &str) -> String {
    format!("{PREFIX}{}:{member}", kind.name())
}

/// The key a record is stored under: `ck:v1:<kind>:<scope>:<key>`.
pub fn record_key(key: &RecordKey) -> String {
    record_key_of(key.kind, &member(key))
}

/// The sorted set of `kind`'s members, scored by `written_at` (scan, age order, prune).
pub(crate) fn index_key(kind: Kind) -> String {
    format!("{PREFIX}meta:index:{}", kind.name())
}

/// The hash of `kind`'s members to their [`Record::size`] (total size, eviction).
pub(crate) fn sizes_key(kind: Kind) -> String {
    format!("{PREFIX}meta:bytes:{}", kind.name())
}

/// Why a stored value was not read as a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Reject {
    #[error("shorter than a record header, or its lengths do not add up")]
    Length,
    #[error("not a cachekeeper record (no CKR magic)")]
    Magic,
    #[error("written in record format {0}, newer than this build's {FORMAT_VERSION}")]
    NewerFormat(u8),
    #[error("checksum mismatch (truncated or altered)")]
    Checksum,
    #[error("names another key than the one it is stored under")]
    WrongKey,
}

fn put_len(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The stored value of `rec` (the table in the module doc).
pub(crate) fn encode(rec: &Record) -> Vec<u8> {
    let name = rec.key.kind.name().as_bytes();
    let mut out = Vec::with_capacity(
        FIXED_BYTES + name.len() + rec.key.scope.len() + rec.key.key.len() + rec.value.len(),
    );
    out.extend_from_slice(MAGIC);
    out.push(FORMAT_VERSION);
    out.extend_from_slice(&rec.version.to_be_bytes());
    out.extend_from_slice(&rec.written_at.to_be_bytes());
    // Kind names are short ASCII constants (`POLICIES`).
    out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(name);
    put_len(&mut out, rec.key.scope.as_bytes());
    put_len(&mut out, rec.key.key.as_bytes());
    put_len(&mut out, &rec.value);
    let sum = xxhash_rust::xxh3::xxh3_64(&out);
    out.extend_from_slice(&sum.to_be_bytes());
    out
}

/// A cursor over a value being decoded; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Reject> {
        if self.bytes.len() < n {
            return Err(Reject::Length);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Reject> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn with_len(&mut self) -> Result<&'a [u8], Reject> {
        let n = u32::from_be_bytes(self.array()?);
        self.take(usize::try_from(n).map_err(|_| Reject::Length)?)
    }
}

/// The record stored as `bytes` under the name of `expected`, or why it is not one.
pub(crate) fn decode(bytes: &[u8], expected: &RecordKey) -> Result<Record, Reject> {
    if bytes.len() < FIXED_BYTES {
        return Err(Reject::Length);
    }
    if &bytes[..3] != MAGIC {
        return Err(Reject::Magic);
    }
    if bytes[3] > FORMAT_VERSION {
        return Err(Reject::NewerFormat(bytes[3]));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let mut stored = [0u8; 8];
    stored.copy_from_slice(sum);
    if xxhash_rust::xxh3::xxh3_64(body) != u64::from_be_bytes(stored) {
        return Err(Reject::Checksum);
    }
    let mut r = Reader { bytes: &body[4..] };
    let version = u32::from_be_bytes(r.array()?);
    let written_at = i64::from_be_bytes(r.array()?);
    let [name_len] = r.array()?;
    let name = r.take(usize::from(name_len))?;
    let scope = r.with_len()?;
    let key = r.with_len()?;
    let value = r.with_len()?;
    if !r.bytes.is_empty() {
        return Err(Reject::Length);
    }
    if name != expected.kind.name().as_bytes()
        || scope != expected.scope.as_bytes()
        || key != expected.key.as_bytes()
    {
        return Err(Reject::WrongKey);
    }
    Ok(Record {
        key: expected.clone(),
        version,
        value: value.to_vec(),
        written_at,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            key: RecordKey {
                kind: Kind::Carrier,
                scope: "cred:9f2c".into(),
                key: "turn 1/a%b*".into(),
            },
            version: 1,
            value: b"\x00sealed\xff".to_vec(),
            written_at: 1_764_650_000,
        }
    }

    #[test]
    fn key_names_are_namespaced_and_split_back_exactly() {
        let rec = sample();
        assert_eq!(
            record_key(&rec.key),
            "ck:v1:carrier:cred%3A9f2c:turn%201/a%25b%2A"
        );
        assert_eq!(
            parse_member(Kind::Carrier, &member(&rec.key)),
            Some(rec.key.clone())
        );
        let verdict = RecordKey {
            kind: Kind::Verdict,
            scope: String::new(),
            key: "api.mistral.ai\u{1f}Mistral-Large".into(),
        };
        assert_eq!(
            record_key(&verdict),
            "ck:v1:verdict::api.mistral.ai%1FMistral-Large"
        );
        assert_eq!(
            parse_member(Kind::Verdict, &member(&verdict)),
            Some(verdict)
        );
        assert_eq!(index_key(Kind::Usage), "ck:v1:meta:index:usage");
        assert_eq!(sizes_key(Kind::Usage), "ck:v1:meta:bytes:usage");
        assert_eq!(parse_member(Kind::Usage, "a:b:c"), None);
        // No kind can be mistaken for the bookkeeping keys.
        assert!(Kind::ALL.iter().all(|k| k.name() != "meta"));
    }

    #[test]
    fn a_value_round_trips_with_its_header() {
        let rec = sample();
        let bytes = encode(&rec);
        assert_eq!(&bytes[..4], b"CKR\x01");
        assert_eq!(&bytes[4..8], &1u32.to_be_bytes());
        assert_eq!(&bytes[8..16], &1_764_650_000i64.to_be_bytes());
        assert_eq!(bytes.len(), FIXED_BYTES + 7 + 9 + 11 + 8);
        assert_eq!(decode(&bytes, &rec.key), Ok(rec));
    }

    /// The failing inputs of a shared store: a value cut short (a client killed mid-write, a
    /// full Redis), one altered, one of a newer build, a foreign string, and a record copied
    /// under another name. Each is refused, none misread.
    #[test]
    fn a_truncated_altered_foreign_or_misplaced_value_is_refused() {
        let rec = sample();
        let bytes = encode(&rec);
        for cut in [0, 3, 10, FIXED_BYTES, bytes.len() - 9, bytes.len() - 1] {
            let got = decode(&bytes[..cut], &rec.key);
            assert!(
                matches!(got, Err(Reject::Length) | Err(Reject::Checksum)),
                "{cut}: {got:?}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer, &rec.key), Err(Reject::Checksum));
        for i in [5, 20, bytes.len() - 12] {
            let mut altered = bytes.clone();
            altered[i] ^= 0x01;
            assert_eq!(decode(&altered, &rec.key), Err(Reject::Checksum), "{i}");
        }
        let mut newer = bytes.clone();
        newer[3] = FORMAT_VERSION + 1;
        assert_eq!(
            decode(&newer, &rec.key),
            Err(Reject::NewerFormat(FORMAT_VERSION + 1))
        );
        let foreign = br#"{"fields":["reasoning_content"],"wording":"x","learned_at":1}"#;
        assert_eq!(decode(foreign, &rec.key), Err(Reject::Magic));
        let mut other = rec.key.clone();
        other.scope = "cred:other".into();
        assert_eq!(decode(&bytes, &other), Err(Reject::WrongKey));
    }
}
