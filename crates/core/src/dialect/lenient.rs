//! Typed, borrowing reads of the hot response events (every streamed delta), read exactly as
//! the `serde_json::Value` path reads them.
//!
//! A streamed response is mostly small delta events (an Anthropic `content_block_delta`, an
//! OpenAI `chat.completion.chunk`, a Responses `response.output_text.delta`, per token or
//! two). Parsing each into a `Value` builds a map per object and a `String` per key and
//! value: about 5,000 instructions for a 150-byte event (callgrind, `benches/instructions.py`,
//! the 50-event SSE cases). The views here deserialize only the fields an observer reads,
//! borrow strings that hold no escapes, and skip everything else without building it.
//!
//! Acceptance: a view accepts exactly the inputs `serde_json::from_slice::<Value>` accepts
//! (or fewer, and the caller then falls back to the `Value` path). Every value a view does
//! not read is still checked as the `Value` parse checks it ([`Skip`]: UTF-8, lone
//! surrogates in `\u` escapes, numbers out of range, nesting past serde_json's limit), never
//! with serde's `IgnoredAny`, which skips syntax only. A view is an object only
//! (`deserialize_map`: serde's derived structs would also take an array, fields by position);
//! a duplicate key of a field a view reads fails the view (the `Value` path keeps the last
//! one); unread duplicates are skipped by both.
//!
//! Leniency: a field's JSON type is never an error here (a [`Scalar`] takes any value, and
//! keeps only a string or a non-negative integer; an [`ObjectOr`] takes any value and reads
//! it only when it is an object), so a view reads what `Value::as_str` / `Value::as_u64` /
//! `Value::get` would.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// `data` read as `T` (a view, or any borrowing type): the event's UTF-8 is checked once, for
/// the whole of it (`str::from_utf8`), then serde_json reads it as text, which does not check
/// each string again as a read of bytes does (`serde_json::from_slice` validates every string
/// it meets: about 100 instructions a string, callgrind). Accepts exactly what
/// `serde_json::from_slice` accepts: input that is not UTF-8 fails either way (a byte outside
/// a string is a syntax error, one inside it a UTF-8 error). `None` when it does not read.
pub(crate) fn read<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Option<T> {
    serde_json::from_str(std::str::from_utf8(data).ok()?).ok()
}

/// Any JSON value, checked as the `Value` parse checks it and dropped: what a view reads in
/// place of every field it does not use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Skip, E> {
        Ok(Skip)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Skip, A::Error> {
        skip_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Skip, A::Error> {
        skip_map(map)
    }
}

/// Every element of a sequence, each checked ([`Skip`]) and dropped.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Skip, A::Error> {
    while seq.next_element::<Skip>()?.is_some() {}
    Ok(Skip)
}

/// Every entry of a map, keys and values checked ([`Skip`]) and dropped.
fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<Skip, A::Error> {
    while map.next_entry::<Skip, Skip>()?.is_some() {}
    Ok(Skip)
}

/// Any JSON value, kept only as far as `Value::as_str` / `Value::as_u64` would read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scalar<'a> {
    /// A string (borrowed from the input when it holds no escape).
    Str(Cow<'a, str>),
    /// A non-negative integer that fits a `u64`.
    U64(u64),
    /// Anything else (null, bool, negative or fractional number, array, object): checked
    /// ([`Skip`]) and dropped.
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

/// The integer of an optional field (`v.get(key).and_then(Value::as_u64)`).
pub(crate) fn u64_of(field: &Option<Scalar<'_>>) -> Option<u64> {
    field.as_ref().and_then(Scalar::as_u64)
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor(PhantomData))
    }
}

struct ScalarVisitor<'a>(PhantomData<&'a ()>);

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

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_seq(seq).map(|_| Scalar::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        skip_map(map).map(|_| Scalar::Other)
    }
}

/// A map key, borrowed from the input when it holds no escape (compared decoded, as the
/// `Value` path's keys are).
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for KeyVisitor<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor(PhantomData))
    }
}

/// A field read once: a second occurrence of the key fails the view.
fn put<T, E: de::Error>(slot: &mut Option<T>, value: T, key: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(key));
    }
    *slot = Some(value);
    Ok(())
}

/// Any JSON value, read as `T` when it is an object (`Value::get` on it finds the fields)
/// and kept as [`ObjectOr::Other`] otherwise (where `Value::get` finds nothing).
#[derive(Debug)]
pub(crate) enum ObjectOr<T> {
    /// An object, read as `T`.
    Object(T),
    /// Any other value (checked and dropped).
    Other,
}

impl<T> ObjectOr<T> {
    /// The object, when the value was one.
    pub(crate) fn object(&self) -> Option<&T> {
        match self {
            ObjectOr::Object(t) => Some(t),
            ObjectOr::Other => None,
        }
    }
}

/// `field` is present and an object (`v.get(key).is_some_and(Value::is_object)`).
pub(crate) fn is_object<T>(field: &Option<ObjectOr<T>>) -> bool {
    field.as_ref().is_some_and(|f| f.object().is_some())
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AnyVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for AnyVisitor<T> {
            type Value = ObjectOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(ObjectOr::Object)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                skip_seq(seq).map(|_| ObjectOr::Other)
            }
            fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Self::Value, E> {
                Ok(ObjectOr::Other)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ObjectOr::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ObjectOr::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ObjectOr::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ObjectOr::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ObjectOr::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(ObjectOr::Other)
            }
        }
        d.deserialize_any(AnyVisitor(PhantomData))
    }
}

/// Any JSON value, read as a list of `T` when it is an array (`Value::as_array`) and as
/// `None` otherwise.
#[derive(Debug)]
pub(crate) struct ListOr<T>(pub(crate) Option<Vec<T>>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ListOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AnyVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for AnyVisitor<T> {
            type Value = ListOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<T>()? {
                    items.push(item);
                }
                Ok(ListOr(Some(items)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                skip_map(map).map(|_| ListOr(None))
            }
            fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Self::Value, E> {
                Ok(ListOr(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ListOr(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ListOr(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ListOr(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ListOr(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ListOr(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(ListOr(None))
            }
        }
        d.deserialize_any(AnyVisitor(PhantomData))
    }
}

/// A view of a JSON object: a struct of optional fields (`None`: the key is absent; a
/// present `null` is `Some` of whatever the field's type makes of it), each read from its
/// key, every other key's value checked ([`Skip`]) and dropped, a repeated read key an
/// error. Read through `deserialize_map`, so only an object is taken.
macro_rules! view {
    (
        $(#[$meta:meta])*
        $name:ident<$lt:lifetime> {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        pub(crate) struct $name<$lt> {
            $( $(#[$fmeta])* pub(crate) $field: Option<$ty>, )*
            _borrow: PhantomData<&$lt ()>,
        }

        impl<'de: $lt, $lt> Deserialize<'de> for $name<$lt> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct ViewVisitor<$lt>(PhantomData<&$lt ()>);
                impl<'de: $lt, $lt> Visitor<'de> for ViewVisitor<$lt> {
                    type Value = $name<$lt>;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a JSON object (", stringify!($name), ")"))
                    }
                    fn visit_map<A: MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<Self::Value, A::Error> {
                        let mut out = $name::default();
                        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                            match &*key {
                                $( $key => put(&mut out.$field, map.next_value::<$ty>()?, $key)?, )*
                                _ => {
                                    map.next_value::<Skip>()?;
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_map(ViewVisitor(PhantomData))
            }
        }
    };
}

view! {
    /// An Anthropic `content_block_delta` event (`docs/usage.md#anthropic-messages`):
    /// `{"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"…"}}`,
    /// the delta's payload under `text`, `thinking`, `signature` or `partial_json`.
    AnthropicDelta<'a> {
        kind: Scalar<'a> = "type",
        index: Scalar<'a> = "index",
        /// `null` is `Some(None)`; any other non-object fails the view.
        delta: Option<AnthropicDeltaBody<'a>> = "delta",
    }
}

view! {
    /// The `delta` object of [`AnthropicDelta`].
    AnthropicDeltaBody<'a> {
        kind: Scalar<'a> = "type",
        text: Scalar<'a> = "text",
        thinking: Scalar<'a> = "thinking",
        signature: Scalar<'a> = "signature",
        partial_json: Scalar<'a> = "partial_json",
    }
}

view! {
    /// An OpenAI Chat Completions stream chunk (`docs/usage.md#openai-chat-completions`):
    /// `{"id":…,"object":"chat.completion.chunk","model":…,"choices":[{"index":0,
    /// "delta":{…}}],"usage":null}`.
    ChatChunk<'a> {
        error: ObjectOr<Skip> = "error",
        model: Scalar<'a> = "model",
        usage: ObjectOr<Skip> = "usage",
        choices: ListOr<ObjectOr<ChatChoice<'a>>> = "choices",
    }
}

view! {
    /// One entry of [`ChatChunk`]'s `choices`.
    ChatChoice<'a> {
        index: Scalar<'a> = "index",
        delta: ObjectOr<ChatDelta<'a>> = "delta",
        usage: ObjectOr<Skip> = "usage",
    }
}

view! {
    /// A [`ChatChoice`]'s `delta`: the text and reasoning fragments by name, the rarer
    /// `reasoning_details` and `extra_content` as `Value`s (read by the `Value` path's own
    /// code), the tool-call fragments.
    ChatDelta<'a> {
        content: Scalar<'a> = "content",
        reasoning_content: Scalar<'a> = "reasoning_content",
        reasoning: Scalar<'a> = "reasoning",
        reasoning_details: Value = "reasoning_details",
        extra_content: Value = "extra_content",
        tool_calls: ListOr<ObjectOr<ChatToolCall<'a>>> = "tool_calls",
    }
}

view! {
    /// One entry of [`ChatDelta`]'s `tool_calls`.
    ChatToolCall<'a> {
        index: Scalar<'a> = "index",
        id: Scalar<'a> = "id",
        function: ObjectOr<ChatFunction<'a>> = "function",
        extra_content: Value = "extra_content",
    }
}

view! {
    /// A [`ChatToolCall`]'s `function`.
    ChatFunction<'a> {
        name: Scalar<'a> = "name",
        arguments: Scalar<'a> = "arguments",
    }
}

view! {
    /// An OpenAI Responses stream event as the observer reads the ones it does not act on
    /// (`docs/usage.md#openai-responses`; `response.output_text.delta` and the like): its
    /// `type` and `sequence_number`.
    ResponsesEvent<'a> {
        kind: Scalar<'a> = "type",
        sequence_number: Scalar<'a> = "sequence_number",
    }
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
            ("18446744073709551616", None, None),
            ("-1", None, None),
            ("1.5", None, None),
            ("1e2", None, None),
            ("true", None, None),
            ("null", None, None),
            (r#"[1,{"a":[]}]"#, None, None),
            (r#"{"a":{"b":"c"}}"#, None, None),
        ] {
            let v: Value = serde_json::from_str(json).unwrap();
            let got: Scalar<'_> = serde_json::from_str(json).unwrap();
            assert_eq!(got.as_str(), v.as_str(), "{json}");
            assert_eq!(got.as_u64(), v.as_u64(), "{json}");
            assert_eq!((got.as_str(), got.as_u64()), (s, n), "{json}");
        }
    }

    #[test]
    fn a_delta_without_escapes_borrows_its_text() {
        let data = br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#;
        let Ok(ev) = serde_json::from_slice::<AnthropicDelta<'_>>(data) else {
            panic!("parses");
        };
        let Some(Scalar::Str(Cow::Borrowed(text))) = ev.delta.flatten().and_then(|d| d.text) else {
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
                serde_json::from_slice::<AnthropicDelta<'_>>(data).is_err(),
                "{}",
                String::from_utf8_lossy(data)
            );
        }
    }

    /// A value no view field reads is still checked as the `Value` parse checks it: what
    /// `Value` rejects, every view rejects (serde's `IgnoredAny` accepted all of these).
    #[test]
    fn skipped_values_are_checked_as_the_value_parse_checks_them() {
        let deep = format!(
            r#"{{"type":"x","skipped":{}0{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let cases: Vec<Vec<u8>> = vec![
            br#"{"type":"x","skipped":"\ud800"}"#.to_vec(),
            br#"{"type":"x","skipped":"\udc00\ud800"}"#.to_vec(),
            br#"{"type":"x","skipped":{"k":"\ud83d"}}"#.to_vec(),
            br#"{"type":"x","sk\ud800":1}"#.to_vec(),
            br#"{"type":"x","skipped":1e400}"#.to_vec(),
            br#"{"type":"x","skipped":[-1e999]}"#.to_vec(),
            b"{\"type\":\"x\",\"skipped\":\"\xff\"}".to_vec(),
            b"{\"type\":\"x\",\"sk\xc3\":1}".to_vec(),
            b"{\"type\":\"x\",\"skipped\":[\"\xed\xa0\x80\"]}".to_vec(),
            deep.into_bytes(),
        ];
        for data in &cases {
            let text = String::from_utf8_lossy(data);
            assert!(serde_json::from_slice::<Value>(data).is_err(), "{text}");
            assert!(serde_json::from_slice::<Skip>(data).is_err(), "{text}");
            assert!(
                serde_json::from_slice::<Scalar<'_>>(data).is_err(),
                "{text}"
            );
            assert!(
                serde_json::from_slice::<AnthropicDelta<'_>>(data).is_err(),
                "{text}"
            );
            assert!(
                serde_json::from_slice::<ChatChunk<'_>>(data).is_err(),
                "{text}"
            );
            assert!(
                serde_json::from_slice::<ResponsesEvent<'_>>(data).is_err(),
                "{text}"
            );
        }
        // The same shapes, valid, are taken.
        let fine = format!(
            r#"{{"type":"x","skipped":{}0{}}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        for data in [
            &br#"{"type":"x","skipped":"\ud83d\ude00","k\u00e9":1e300}"#[..],
            fine.as_bytes(),
        ] {
            assert!(serde_json::from_slice::<Value>(data).is_ok());
            assert!(serde_json::from_slice::<ChatChunk<'_>>(data).is_ok());
            assert!(serde_json::from_slice::<ResponsesEvent<'_>>(data).is_ok());
        }
    }

    /// [`read`] takes what `serde_json::from_slice` takes, and only that: bytes that are not
    /// UTF-8 (inside a string, a skipped one or a read one, or outside) fail both; escapes,
    /// multi-byte characters and lone surrogates read as before.
    #[test]
    fn read_accepts_what_from_slice_accepts() {
        let cases: [&[u8]; 9] = [
            br#"{"type":"x","sequence_number":3}"#,
            "{\"type\":\"gr\u{fc}\u{df}\",\"sequence_number\":3}".as_bytes(),
            br#"{"type":"\u00e9\n","skipped":"\ud83d\ude00"}"#,
            br#"{"type":"x","skipped":"\ud800"}"#,
            b"{\"type\":\"x\",\"skipped\":\"\xff\"}",
            b"{\"type\":\"\xc3\"}",
            b"{\"type\":\"x\"}\xff",
            b"\xef\xbb\xbf{}",
            b"{\"type\":\"x\"} \n",
        ];
        for data in cases {
            let bytes = serde_json::from_slice::<ResponsesEvent<'_>>(data).ok();
            let text = read::<ResponsesEvent<'_>>(data);
            assert_eq!(
                bytes
                    .as_ref()
                    .map(|e| (str_of(&e.kind), u64_of(&e.sequence_number))),
                text.as_ref()
                    .map(|e| (str_of(&e.kind), u64_of(&e.sequence_number))),
                "{}",
                String::from_utf8_lossy(data)
            );
        }
        assert_eq!(
            read::<&str>(br#""a\nb""#),
            None,
            "an escape cannot be borrowed"
        );
        assert_eq!(read::<String>(br#""a\nb""#).as_deref(), Some("a\nb"));
    }

    /// A present `null` is a present field (the `Value` path's `get` finds it), not an
    /// absent one.
    #[test]
    fn a_null_field_is_present() {
        let Ok(c) = serde_json::from_slice::<ChatChoice<'_>>(br#"{"index":null}"#) else {
            panic!("parses");
        };
        assert_eq!(c.index, Some(Scalar::Other));
        let Ok(c) = serde_json::from_slice::<ChatChoice<'_>>(br#"{}"#) else {
            panic!("parses");
        };
        assert_eq!(c.index, None);
    }
}
