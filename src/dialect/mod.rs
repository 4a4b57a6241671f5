//! One module per wire format: where images, assistant turns and usage live in its JSON.
//!
//! Bodies are read with a skimming parse: `serde_json` into borrowed structs whose leaves are
//! `&RawValue` slices of the original text, so byte ranges of the original can be computed
//! ([`crate::json_edit::span_of`]) and edits spliced in without re-serializing anything. Fields
//! a module does not name are skipped (but still validated) and always preserved.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A request body's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dialect {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`/chat/completions`).
    Openai,
    /// OpenAI Responses (`/responses`).
    OpenaiResponses,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
}

impl Dialect {
    /// The name used in config and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Anthropic => "anthropic",
            Dialect::Openai => "openai",
            Dialect::OpenaiResponses => "openai-responses",
            Dialect::Gemini => "gemini",
        }
    }
}

/// Why a body was left alone: what reading it as its dialect found.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not valid JSON (truncated, wrong encoding, ...).
    #[error("body is not valid JSON: {0}")]
    NotJson(String),
    /// Valid JSON of a shape the dialect does not describe (e.g. `messages` not an array).
    #[error("body does not have the {dialect} shape: {detail}")]
    Shape {
        dialect: &'static str,
        detail: String,
    },
}

/// Visitor methods that map every scalar (string, number, bool, null) to `$value`.
macro_rules! scalars_as {
    ($value:expr) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

pub mod anthropic;
pub mod doc;
pub mod gemini;
pub mod openai;
pub mod responses;

/// Parse `body` as a JSON object into `T`, borrowing from it. Returns the body as `&str` too
/// (the base of every span).
///
/// Errors: invalid UTF-8 or JSON ⇒ [`ParseError::NotJson`]; valid JSON that is not an object
/// or whose named fields have the wrong type ⇒ [`ParseError::Shape`].
pub(crate) fn parse_body<'a, T: Deserialize<'a>>(
    body: &'a [u8],
    dialect: &'static str,
) -> Result<(&'a str, T), ParseError> {
    let text = std::str::from_utf8(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
    let first = text.bytes().find(|b| !b.is_ascii_whitespace());
    if first != Some(b'{') {
        return Err(match serde_json::from_str::<IgnoredAny>(text) {
            Err(e) => ParseError::NotJson(e.to_string()),
            Ok(_) => ParseError::Shape {
                dialect,
                detail: "the body is not a JSON object".to_owned(),
            },
        });
    }
    match serde_json::from_str::<T>(text) {
        Ok(v) => Ok((text, v)),
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            // A type mismatch may hide a syntax error later in the body: report that first.
            match serde_json::from_str::<IgnoredAny>(text) {
                Err(syntax) => Err(ParseError::NotJson(syntax.to_string())),
                Ok(_) => Err(ParseError::Shape {
                    dialect,
                    detail: e.to_string(),
                }),
            }
        }
        Err(e) => Err(ParseError::NotJson(e.to_string())),
    }
}

/// The text between the quotes of a raw JSON string (escapes left as sent); `None` when `raw`
/// is not a string.
pub(crate) fn raw_str(raw: &RawValue) -> Option<&str> {
    raw.get()
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
}

/// A raw JSON string's text and its span inside `base` (between the quotes); `None` when `raw`
/// is not a string or does not point into `base`.
pub(crate) fn str_at<'a>(base: &'a str, raw: &'a RawValue) -> Option<doc::StrAt<'a>> {
    let text = raw_str(raw)?;
    let span = crate::json_edit::span_of(base, text)?;
    Some(doc::StrAt { text, span })
}

/// True when `raw` is the JSON string `s` (written without escapes).
pub(crate) fn raw_is(raw: Option<&RawValue>, s: &str) -> bool {
    raw.and_then(raw_str) == Some(s)
}

/// The decoded value of a raw JSON string; `None` when absent or not a string.
pub(crate) fn string_value(raw: Option<&RawValue>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// A `content` field: `Some(elements)` when it is an array, `None` for a string, `null` or
/// anything else. Never fails on the value's type (only when an element fails).
#[derive(Debug)]
pub(crate) struct List<T>(pub Option<Vec<T>>);

/// A `content` array with each element kept raw (so its span can be taken).
pub(crate) type Items<'a> = List<&'a RawValue>;

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListVisitor(PhantomData))
    }
}

struct ListVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
    type Value = List<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element::<T>()? {
            items.push(item);
        }
        Ok(List(Some(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(List(None))
    }
    scalars_as!(List(None));
}

/// Skip the rest of a map.
pub(crate) fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Skip the rest of a sequence.
pub(crate) fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// The most of a provider's 4xx body that is read to learn from it (unknown-field verdicts,
/// image rejections), bytes: 1 MiB. Providers such as Mistral echo the offending input in a
/// 422, which can be a long reasoning text; a longer body goes to the client unread.
pub const MAX_ERROR_BODY_BYTES: usize = 1024 * 1024;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_are_classified() {
        let r: Result<(&str, IgnoredAny), _> = parse_body(b"{\"model\": \"x\"", "t");
        assert!(matches!(r, Err(ParseError::NotJson(_))));
        let r: Result<(&str, IgnoredAny), _> = parse_body(b"[1,2]", "t");
        assert!(matches!(r, Err(ParseError::Shape { .. })));
        let r: Result<(&str, IgnoredAny), _> = parse_body(b"[1,2", "t");
        assert!(matches!(r, Err(ParseError::NotJson(_))));
        let r: Result<(&str, IgnoredAny), _> = parse_body(b"\xff{}", "t");
        assert!(matches!(r, Err(ParseError::NotJson(_))));
        let r: Result<(&str, IgnoredAny), _> = parse_body(b"", "t");
        assert!(matches!(r, Err(ParseError::NotJson(_))));
    }

    #[test]
    fn items_never_fail() {
        for v in ["1", "\"s\"", "null", "true", "{\"a\":[1]}", "2.5", "-3"] {
            let items: Items<'_> = serde_json::from_str(v).unwrap();
            assert!(items.0.is_none(), "{v}");
        }
        let items: Items<'_> = serde_json::from_str("[1, {\"a\":2}]").unwrap();
        let got: Vec<&str> = items.0.unwrap().iter().map(|r| r.get()).collect();
        assert_eq!(got, vec!["1", "{\"a\":2}"]);
    }
}
