//! OpenAI Chat Completions (`/chat/completions`): where images live.
//!
//! - Image parts: `{"type":"image_url","image_url":{"url":…}}` (or `image_url` as a bare
//!   string, as some clients send; `input_image` parts are read the same way). Bytes = length
//!   of the URL / data-URL string as sent. (See `docs/wire-formats.md#openai-chat-completions`.)
//! - Carriers: `role: "tool"` messages with image parts, and — when
//!   `agent_images_in_user_turns` is on — a `user` message right after a `tool` message whose
//!   parts are only images and at most [`SHORT_TEXT_CHARS`] of text (OpenAI rejects images in
//!   tool messages, so agents put screenshots there). A message carrier is retired as one unit:
//!   it keeps its `tool_call_id` and text parts; each image part becomes a text part with
//!   [`crate::texts::RETIRED_IMAGE`].
//! - Every other image part is reserved (an upload): counted, never rewritten.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{parse_body, raw_is, raw_str, str_at, string_value, Items, List};
use crate::dialect::doc::{split_data_url, Payload, Placement, Site, TextStyle, Walk};
use crate::dialect::ParseError;
use crate::json_edit::span_of;

const DIALECT: &str = "openai";

/// Most text (summed `text` lengths of the text parts, as sent, in bytes) a user message may
/// hold and still count as the agent's image turn under `agent_images_in_user_turns`. 200 is
/// enough for a caption like "Screenshot after clicking Save (1568x882)", and short enough that
/// a real question from the user makes the message an upload.
pub const SHORT_TEXT_CHARS: usize = 200;

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
    role: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_call_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<Items<'a>>,
}

/// A content part, as OpenAI Chat and the Responses API share it (`text` / `input_text`,
/// `image_url` / `input_image`).
#[derive(serde::Deserialize)]
pub(crate) struct Part<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(crate) kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) image_url: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) prompt_cache_breakpoint: Option<&'a RawValue>,
}

impl<'a> Part<'a> {
    /// The image site of this part (`image_url` / `input_image`), `raw` being the part itself;
    /// `None` when `raw` does not point into `text`.
    pub(crate) fn image_site(
        &self,
        text: &'a str,
        raw: &'a RawValue,
        path: String,
    ) -> Option<Site<'a>> {
        Some(Site {
            path,
            carrier: None,
            block: span_of(text, raw.get())?,
            payload: url_payload(text, self.image_url),
            keep: self
                .prompt_cache_breakpoint
                .map(|b| ("prompt_cache_breakpoint", b.get())),
            placement: Placement::InList,
            needs_sniff: false,
        })
    }

    /// Length of the part's `text`, bytes as sent.
    pub(crate) fn text_len(&self) -> usize {
        self.text
            .map_or(0, |t| raw_str(t).map_or(t.get().len(), str::len))
    }
}

/// `image_url` as an object: its first `url` (raw), or nothing readable.
struct UrlObject<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for UrlObject<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UrlObjectVisitor(PhantomData))
    }
}

struct UrlObjectVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for UrlObjectVisitor<'a> {
    type Value = UrlObject<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an image_url object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut url = None;
        while let Some(key) = map.next_key::<KeyIsUrl>()? {
            if key.0 && url.is_none() {
                url = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(UrlObject(url))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        super::drain_seq(seq)?;
        Ok(UrlObject(None))
    }
    scalars_as!(UrlObject(None));
}

/// A map key: whether it is `url`.
struct KeyIsUrl(bool);

impl<'de> Deserialize<'de> for KeyIsUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyIsUrl;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<KeyIsUrl, E> {
                Ok(KeyIsUrl(s == "url"))
            }
        }
        d.deserialize_str(V)
    }
}

/// What an `image_url` / `input_image` URL value holds: a data URL with spans, or an opaque
/// URL / value of this many bytes as sent.
pub(crate) fn url_payload<'a>(text: &'a str, raw: Option<&'a RawValue>) -> Payload<'a> {
    let Some(raw) = raw else {
        return Payload::Opaque { bytes: 0 };
    };
    let url = if raw.get().starts_with('{') {
        match serde_json::from_str::<UrlObject<'_>>(raw.get()) {
            Ok(UrlObject(Some(u))) => u,
            _ => return Payload::Opaque { bytes: 0 },
        }
    } else {
        raw
    };
    match str_at(text, url) {
        Some(at) if split_data_url(at.text).is_some() => Payload::DataUrl(at),
        Some(at) => Payload::Opaque {
            bytes: at.text.len() as u64,
        },
        None if url.get().starts_with('"') || url.get().starts_with('{') => Payload::Opaque {
            bytes: url.get().len() as u64,
        },
        None => Payload::Opaque { bytes: 0 },
    }
}

/// Decide whether a message's images are the agent's: a `tool` message always; a `user`
/// message right after a tool message when `agent_images_in_user_turns` is on and it holds only
/// images and at most [`SHORT_TEXT_CHARS`] of text. Returns the carrier label.
pub(crate) fn agent_label(
    is_tool: bool,
    tool_label: impl FnOnce() -> String,
    user_after_tool: bool,
    only_images_and_text: bool,
    text_len: usize,
) -> Option<String> {
    if is_tool {
        Some(tool_label())
    } else if user_after_tool && only_images_and_text && text_len <= SHORT_TEXT_CHARS {
        Some("user turn after tool messages".to_owned())
    } else {
        None
    }
}

/// Walk an OpenAI Chat body: its `model` and every image part, with spans.
pub fn walk(body: &[u8], agent_images_in_user_turns: bool) -> Result<Walk<'_>, ParseError> {
    let (text, parsed): (&str, Body<'_>) = parse_body(body, DIALECT)?;
    let mut walk = Walk::new(string_value(parsed.model), TextStyle::Text);
    let mut after_tool = false;
    for (mi, message) in parsed.messages.unwrap_or_default().iter().enumerate() {
        let is_tool = raw_is(message.role, "tool");
        let is_user = raw_is(message.role, "user");
        let was_after_tool = after_tool;
        after_tool = is_tool;
        let Some(List(Some(parts))) = &message.content else {
            continue;
        };
        let mut images = Vec::new();
        let mut only_images_and_text = true;
        let mut text_len = 0usize;
        for (pi, raw) in parts.iter().enumerate() {
            let Ok(part) = serde_json::from_str::<Part<'_>>(raw.get()) else {
                only_images_and_text = false;
                continue;
            };
            if raw_is(part.kind, "image_url") || raw_is(part.kind, "input_image") {
                let site = part
                    .image_site(text, raw, format!("messages[{mi}].content[{pi}]"))
                    .ok_or_else(|| ParseError::Shape {
                        dialect: DIALECT,
                        detail: "internal: a part does not point into the body".to_owned(),
                    })?;
                images.push(site);
            } else if raw_is(part.kind, "text") {
                text_len += part.text_len();
            } else {
                only_images_and_text = false;
            }
        }
        if images.is_empty() {
            continue;
        }
        let label = agent_label(
            is_tool,
            || {
                string_value(message.tool_call_id).map_or_else(
                    || "tool message".to_owned(),
                    |id| format!("tool_call_id {id}"),
                )
            },
            is_user && agent_images_in_user_turns && was_after_tool,
            only_images_and_text,
            text_len,
        );
        let carrier = label.map(|label| walk.push_carrier(format!("messages[{mi}]"), Some(label)));
        walk.extend_sites(images, carrier);
    }
    Ok(walk)
}
