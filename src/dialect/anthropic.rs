//! Anthropic Messages (`/v1/messages`, `/v1/messages/count_tokens`): where images live.
//!
//! - Reserved images: `image` blocks directly in a message's `content` array (uploads).
//! - Carriers: `tool_result` blocks whose `content` array holds `image` blocks. A carrier is
//!   retired as one unit; it keeps its `tool_use_id` and text blocks, and each image block
//!   becomes a text block with [`crate::texts::RETIRED_IMAGE`] (keeping the image's
//!   `cache_control`, if it had one).
//! - Bytes of an image = length of its `source.data` string as sent (base64 source); 0 for
//!   `url` / `file` sources and for a block without `source`. Those are unprobeable, hence large.
//!   (See `../shared/wire-formats.md` §2.2.)

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{parse_body, raw_is, raw_str, retired_text_block, string_value, Items};
use crate::images::{Carrier, Inventory};
use crate::json_edit::{span_of, Edit};
use crate::rewrite::RewriteError;

const DIALECT: &str = "anthropic";

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<Items<'a>>,
}

/// A content block: the fields any image pass reads; all others are skipped.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<Items<'a>>,
    #[serde(borrow, default)]
    source: Option<Source<'a>>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Source<'a> {
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

/// Fallback when [`Block`] does not decode (e.g. `source` is not an object).
#[derive(Deserialize)]
struct LooseBlock<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<Items<'a>>,
    #[serde(borrow, default)]
    tool_use_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

/// A decoded block: its type, and for images the bytes and probe text.
struct Seen<'a> {
    kind: Option<&'a RawValue>,
    content: Option<Vec<&'a RawValue>>,
    tool_use_id: Option<&'a RawValue>,
    cache_control: Option<&'a RawValue>,
    /// Image bytes as sent and its base64 text (raw JSON string text), when it has one.
    image: (u64, Option<&'a str>),
}

fn decode(raw: &RawValue) -> Option<Seen<'_>> {
    match serde_json::from_str::<Block<'_>>(raw.get()) {
        Ok(b) => {
            let data = b.source.and_then(|s| s.data);
            let image = match data {
                None => (0, None),
                Some(d) => match raw_str(d) {
                    Some(text) => (text.len() as u64, Some(text)),
                    None => (d.get().len() as u64, None),
                },
            };
            Some(Seen {
                kind: b.kind,
                content: b.content.and_then(|c| c.0),
                tool_use_id: b.tool_use_id,
                cache_control: b.cache_control,
                image,
            })
        }
        Err(_) => {
            let b = serde_json::from_str::<LooseBlock<'_>>(raw.get()).ok()?;
            Some(Seen {
                kind: b.kind,
                content: b.content.and_then(|c| c.0),
                tool_use_id: b.tool_use_id,
                cache_control: b.cache_control,
                // Bytes as sent: the whole block, since its source could not be read.
                image: (raw.get().len() as u64, None),
            })
        }
    }
}

fn locate(text: &str, raw: &RawValue) -> Result<std::ops::Range<usize>, RewriteError> {
    span_of(text, raw.get()).ok_or_else(|| RewriteError::Shape {
        dialect: DIALECT,
        detail: "internal: a block does not point into the body".to_owned(),
    })
}

/// Walk an Anthropic Messages body: its `model` and every image in it.
pub fn inventory(body: &[u8]) -> Result<(Option<String>, Inventory), RewriteError> {
    let (text, parsed): (&str, Body<'_>) = parse_body(body, DIALECT)?;
    let model = string_value(parsed.model);
    let mut inv = Inventory::default();
    for (mi, message) in parsed.messages.unwrap_or_default().iter().enumerate() {
        let Some(Items(Some(blocks))) = &message.content else {
            continue;
        };
        for (bi, raw) in blocks.iter().enumerate() {
            let Some(block) = decode(raw) else { continue };
            if raw_is(block.kind, "image") {
                let (bytes, probe) = block.image;
                inv.observe(bytes, probe);
                inv.reserve(bytes);
            } else if raw_is(block.kind, "tool_result") {
                let mut carrier = Carrier {
                    path: format!("messages[{mi}].content[{bi}]"),
                    label: string_value(block.tool_use_id).map(|id| format!("tool_use_id {id}")),
                    blocks: 0,
                    bytes: 0,
                    edits: Vec::new(),
                };
                for inner_raw in block.content.iter().flatten() {
                    let Some(inner) = decode(inner_raw) else { continue };
                    if !raw_is(inner.kind, "image") {
                        continue;
                    }
                    let (bytes, probe) = inner.image;
                    inv.observe(bytes, probe);
                    carrier.blocks += 1;
                    carrier.bytes = carrier.bytes.saturating_add(bytes);
                    carrier.edits.push(Edit {
                        range: locate(text, inner_raw)?,
                        replacement: retired_text_block(
                            inner.cache_control.map(|cc| ("cache_control", cc)),
                        ),
                    });
                }
                if carrier.blocks > 0 {
                    inv.carriers.push(carrier);
                }
            }
        }
    }
    Ok((model, inv))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_uploads_and_carriers() {
        let body = br#"{"model":"claude-x","messages":[
          {"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},
          {"role":"user","content":[
            {"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]},
            {"type":"tool_result","tool_use_id":"toolu_2","content":"plain"},
            {"type":"tool_result","tool_use_id":"toolu_3","content":[{"type":"image","source":"bogus","cache_control":{"type":"ephemeral"}},{"type":"image"}]}
          ]}]}"#;
        let (model, inv) = inventory(body).unwrap();
        assert_eq!(model.as_deref(), Some("claude-x"));
        assert_eq!(inv.images_seen, 4);
        assert_eq!((inv.reserved_blocks, inv.reserved_bytes), (1, 4));
        assert_eq!(inv.carriers.len(), 2);
        assert_eq!(inv.carriers[0].path, "messages[1].content[0]");
        assert_eq!(inv.carriers[0].label.as_deref(), Some("tool_use_id toolu_1"));
        assert_eq!((inv.carriers[0].blocks, inv.carriers[0].bytes), (1, 0));
        assert_eq!(inv.carriers[1].path, "messages[1].content[2]");
        assert_eq!(inv.carriers[1].blocks, 2);
        assert!(!inv.many_image_safe);
        // The bogus-source block falls back: bytes as sent (whole block), cache_control kept.
        let first = &inv.carriers[1].edits[0];
        assert_eq!(
            &body[first.range.clone()],
            br#"{"type":"image","source":"bogus","cache_control":{"type":"ephemeral"}}"#
        );
        assert_eq!(inv.carriers[1].bytes, first.range.len() as u64);
        assert_eq!(
            std::str::from_utf8(&first.replacement).unwrap(),
            r#"{"type":"text","text":"[image removed by cachekeeper to stay within provider limits]","cache_control":{"type":"ephemeral"}}"#
        );
    }

    #[test]
    fn wrong_shapes() {
        assert!(matches!(
            inventory(br#"{"messages":"nope"}"#),
            Err(RewriteError::Shape { .. })
        ));
        assert!(matches!(
            inventory(br#"{"messages":[{"content":[1,2]}"#),
            Err(RewriteError::NotJson(_))
        ));
        let (_, inv) = inventory(br#"{"messages":[{"content":[1,{"type":5}]}],"x":{}}"#).unwrap();
        assert_eq!(inv.images_seen, 0);
        let (m, inv) = inventory(br#"{"system":"s"}"#).unwrap();
        assert_eq!((m, inv.images_seen), (None, 0));
    }
}
