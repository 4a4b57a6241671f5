//! Typed, borrowing reads of the hot response events (every streamed delta), read exactly as
//! the `serde_json::Value` path reads them.
//!
//! A streamed response is mostly small delta events (an Anthropic stream of a few hundred
//! tokens is a `content_block_delta` per token or two). Parsing each into a `Value` builds a
//! map per object and a `String` per key and value: about 5,000 instructions for a 150-byte
//! event (callgrind, `benches/instructions.py`, the 50-event SSE case). The views here
//! deserialize only the fields an observer reads, borrow strings that hold no escapes, and
//! skip everything else without building it.
//!
//! Leniency: a field's JSON type is never an error here (a [`Scalar`] takes any value, and
//! keeps only a string or a non-negative integer), so a view reads what `Value::as_str` /
//! `Value::as_u64` would. Anything a view cannot take as the `Value` path would (not an
//! object, a duplicate key, a nested field that is not an object) fails the typed parse, and
//! the caller falls back to the `Value` path: the two never disagree on what they accept.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// Any JSON value, kept only as far as `Value::as_str` / `Value::as_u64` would read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scalar<'a> {
    /// A string (borrowed from the input when it holds no escape).
    Str(Cow<'a, str>),
    /// A non-negative integer that fits a `u64`.
    U64(u64),
    /// Anything else (null, bool, negative or fractional number, array, object): skipped.
    Other,
}

impl<'a> Scalar<'a> {
    /// The string, when it is one (`Value::as_str`).
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, when it is one (`Value::as_u64`).
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Scalar::U64(n) => Some(*n),
            _ => None,
        }
    }
}

/// The string of an optional field (`v.get(key).and_then(Value::as_str)`).
pub(crate) fn str_of<'s>(field: &'s Option<Scalar<'_>>) -> Option<&'s str> {
    field.as_ref().and_then(Scalar::as_str)
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor(std::marker::PhantomData))
    }
}

struct ScalarVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for ScalarVisitor<'a> {
    type Value = Scalar<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Scalar::U64(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        // serde_json gives a non-negative integer as u64; a negative one is not `as_u64`.
        Ok(u64::try_from(v).map(Scalar::U64).unwrap_or(Scalar::Other))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

/// `T` read from a JSON object only. serde's derived structs also take a JSON array (fields
/// by position), which the `Value` path reads as no fields at all: through this, an array
/// fails the view and the caller falls back.
#[derive(Debug)]
pub(crate) struct MapOnly<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = MapOnly<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(MapOnly)
            }
        }
        d.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

/// An Anthropic `content_block_delta` event (`docs/usage.md#anthropic-messages`; read it
/// through [`MapOnly`]):
/// `{"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"…"}}`,
/// the delta's payload under `text`, `thinking`, `signature` or `partial_json`.
#[derive(Debug, Deserialize)]
pub(crate) struct AnthropicDelta<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(crate) kind: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    pub(crate) index: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    pub(crate) delta: Option<MapOnly<AnthropicDeltaBody<'a>>>,
}

/// The `delta` object of [`AnthropicDelta`] (read through [`MapOnly`]).
#[derive(Debug, Deserialize)]
pub(crate) struct AnthropicDeltaBody<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(crate) kind: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    pub(crate) text: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    pub(crate) thinking: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    pub(crate) signature: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    pub(crate) partial_json: Option<Scalar<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_scalar_reads_what_value_as_str_and_as_u64_read() {
        for (json, s, n) in [
            (r#""plain""#, Some("plain"), None),
            (r#""esc\naped""#, Some("esc\naped"), None),
            ("7", None, Some(7)),
            ("18446744073709551615", None, Some(u64::MAX)),
            ("-1", None, None),
            ("1.5", None, None),
            ("1e2", None, None),
            ("true", None, None),
            ("null", None, None),
            (r#"[1,{"a":[]}]"#, None, None),
            (r#"{"a":{"b":"c"}}"#, None, None),
        ] {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            let got: Scalar<'_> = serde_json::from_str(json).unwrap();
            assert_eq!(got.as_str(), v.as_str(), "{json}");
            assert_eq!(got.as_u64(), v.as_u64(), "{json}");
            assert_eq!((got.as_str(), got.as_u64()), (s, n), "{json}");
        }
    }

    #[test]
    fn a_delta_without_escapes_borrows_its_text() {
        let data = br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#;
        let Ok(MapOnly(ev)) = serde_json::from_slice::<MapOnly<AnthropicDelta<'_>>>(data) else {
            panic!("parses");
        };
        let Some(Scalar::Str(Cow::Borrowed(text))) = ev.delta.and_then(|d| d.0.text) else {
            panic!("borrowed text");
        };
        assert_eq!(text, "Hello");
    }

    /// What the `Value` path accepts differently fails the view (the caller falls back).
    #[test]
    fn shapes_the_view_cannot_take_fail_rather_than_misread() {
        for data in [
            &br#"[1]"#[..],
            br#"["content_block_delta",0,{"type":"text_delta","text":"x"}]"#,
            br#"{"type":"content_block_delta","index":0,"delta":["text_delta","x"]}"#,
            br#""x""#,
            br#"{"type":"content_block_delta","delta":"text"}"#,
            br#"{"type":"content_block_delta","index":0,"index":1}"#,
            br#"{"delta":{"text":"a","text":"b"}}"#,
        ] {
            assert!(
                serde_json::from_slice::<MapOnly<AnthropicDelta<'_>>>(data).is_err(),
                "{}",
                String::from_utf8_lossy(data)
            );
        }
    }
}
