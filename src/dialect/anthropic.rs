//! Anthropic Messages (`/v1/messages`, `/v1/messages/count_tokens`): where images live.
//!
//! - Reserved images: `image` blocks directly in a message's `content` array (uploads).
//! - Carriers: `tool_result` blocks whose `content` array holds `image` blocks. A carrier is
//!   retired as one unit; it keeps its `tool_use_id` and text blocks, and each image block
//!   becomes a text block with [`crate::texts::RETIRED_IMAGE`] (keeping the image's
//!   `cache_control`, if it had one).
//! - Bytes of an image = length of its `source.data` string as sent (base64 source); 0 for
//!   `url` / `file` sources and for a block without `source`. Those are unprobeable, hence large.
//!   (See `docs/wire-formats.md#anthropic-messages`.)

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::{drain_seq, parse_body, raw_is, str_at, string_value, Items, List};
use crate::dialect::doc::{CarrierInfo, Payload, Placement, Site, TextStyle, Walk};
use crate::dialect::ParseError;
use crate::json_edit::span_of;

const DIALECT: &str = "anthropic";

/// The body: one skimming pass decodes messages and their top-level blocks; the blocks inside
/// a `tool_result` are kept raw (their spans are what a retirement replaces).
#[derive(serde::Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
}

#[derive(serde::Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<Items<'a>>,
}

/// A content block: the fields the image pass reads; all others are skipped. Decoding never
/// fails on a field's type or a duplicate key (the last one wins), and a non-object decodes
/// to an empty block, so odd blocks cannot make the body fail.
#[derive(Default)]
struct Block<'a> {
    kind: Option<&'a RawValue>,
    tool_use_id: Option<&'a RawValue>,
    content: Option<Vec<&'a RawValue>>,
    source: Option<Source<'a>>,
    cache_control: Option<&'a RawValue>,
}

/// An image block's `source`, read leniently.
enum Source<'a> {
    /// An object; `data` and `media_type` when it has them.
    Object {
        data: Option<&'a RawValue>,
        media_type: Option<&'a RawValue>,
    },
    /// Not an object: a string of this many bytes, or another value (0).
    Bogus(u64),
}

enum Field {
    Type,
    ToolUseId,
    Content,
    Source,
    CacheControl,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Field, E> {
                Ok(match s {
                    "type" => Field::Type,
                    "tool_use_id" => Field::ToolUseId,
                    "content" => Field::Content,
                    "source" => Field::Source,
                    "cache_control" => Field::CacheControl,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Block<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BlockVisitor(PhantomData))
    }
}

struct BlockVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for BlockVisitor<'a> {
    type Value = Block<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a content block")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut b = Block::default();
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Type => b.kind = Some(map.next_value()?),
                Field::ToolUseId => b.tool_use_id = Some(map.next_value()?),
                Field::Content => b.content = map.next_value::<Items<'a>>()?.0,
                Field::Source => b.source = Some(map.next_value()?),
                Field::CacheControl => b.cache_control = Some(map.next_value()?),
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(b)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        Ok(Block::default())
    }
    scalars_as!(Block::default());
}

impl<'de: 'a, 'a> Deserialize<'de> for Source<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SourceVisitor(PhantomData))
    }
}

struct SourceVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for SourceVisitor<'a> {
    type Value = Source<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an image source")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut data = None;
        let mut media_type = None;
        while let Some(key) = map.next_key::<SourceKey>()? {
            match key {
                SourceKey::Data => data = Some(map.next_value::<&'de RawValue>()?),
                SourceKey::MediaType => media_type = Some(map.next_value::<&'de RawValue>()?),
                SourceKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Source::Object { data, media_type })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        Ok(Source::Bogus(0))
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Source::Bogus(s.len() as u64))
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Source::Bogus(0))
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Source::Bogus(0))
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Source::Bogus(0))
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Source::Bogus(0))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Source::Bogus(0))
    }
}

/// A key of an image `source`.
enum SourceKey {
    Data,
    MediaType,
    Other,
}

impl<'de> Deserialize<'de> for SourceKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SourceKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<SourceKey, E> {
                Ok(match s {
                    "data" => SourceKey::Data,
                    "media_type" => SourceKey::MediaType,
                    _ => SourceKey::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl<'a> Block<'a> {
    /// For an image block: what it holds, with spans into `text`.
    fn payload(&self, text: &'a str) -> Payload<'a> {
        match &self.source {
            None | Some(Source::Object { data: None, .. }) => Payload::Opaque { bytes: 0 },
            Some(Source::Bogus(len)) => Payload::Opaque { bytes: *len },
            Some(Source::Object {
                data: Some(d),
                media_type,
            }) => match str_at(text, d) {
                Some(data) => Payload::Base64 {
                    data,
                    media_type: media_type.and_then(|m| str_at(text, m)),
                },
                None => Payload::Opaque {
                    bytes: d.get().len() as u64,
                },
            },
        }
    }
}

fn locate(text: &str, raw: &RawValue) -> Result<std::ops::Range<usize>, ParseError> {
    span_of(text, raw.get()).ok_or_else(|| ParseError::Shape {
        dialect: DIALECT,
        detail: "internal: a block does not point into the body".to_owned(),
    })
}

/// Walk an Anthropic Messages body: its `model` and every image in it, with spans.
///
/// Uploads: `image` blocks directly in a message's `content`. Agent images: `image` blocks in
/// a `tool_result`'s `content` (each such tool result is one carrier).
pub fn walk(body: &[u8]) -> Result<Walk<'_>, ParseError> {
    let (text, parsed): (&str, Body<'_>) = parse_body(body, DIALECT)?;
    let mut walk = Walk::new(string_value(parsed.model), TextStyle::Text);
    for (mi, message) in parsed.messages.unwrap_or_default().iter().enumerate() {
        let Some(List(Some(blocks))) = &message.content else {
            continue;
        };
        for (bi, raw) in blocks.iter().enumerate() {
            let Ok(block) = serde_json::from_str::<Block<'_>>(raw.get()) else {
                continue;
            };
            if raw_is(block.kind, "image") {
                walk.sites.push(Site {
                    path: format!("messages[{mi}].content[{bi}]"),
                    carrier: None,
                    block: locate(text, raw)?,
                    payload: block.payload(text),
                    keep: block.cache_control.map(|cc| ("cache_control", cc.get())),
                    placement: Placement::InList,
                    needs_sniff: false,
                });
            } else if raw_is(block.kind, "tool_result") {
                let carrier = walk.carriers.len();
                let mut images = 0usize;
                for (ii, inner_raw) in block.content.iter().flatten().enumerate() {
                    let Ok(inner) = serde_json::from_str::<Block<'_>>(inner_raw.get()) else {
                        continue;
                    };
                    if !raw_is(inner.kind, "image") {
                        continue;
                    }
                    images += 1;
                    walk.sites.push(Site {
                        path: format!("messages[{mi}].content[{bi}].content[{ii}]"),
                        carrier: Some(carrier),
                        block: locate(text, inner_raw)?,
                        payload: inner.payload(text),
                        keep: inner.cache_control.map(|cc| ("cache_control", cc.get())),
                        placement: Placement::InList,
                        needs_sniff: false,
                    });
                }
                if images > 0 {
                    walk.carriers.push(CarrierInfo {
                        path: format!("messages[{mi}].content[{bi}]"),
                        label: string_value(block.tool_use_id)
                            .map(|id| format!("tool_use_id {id}")),
                    });
                }
            }
        }
    }
    Ok(walk)
}
