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

pub(crate) mod details;
pub(crate) mod restore;

use super::restore::{CapturedTurn, EchoedTurn, List, TurnEdit};
use crate::json::Edit;
use std::ops::Range;

use super::doc::{split_data_url, Doc, Payload, Placement, Site, TextStyle, Walk};
use super::format::{Endpoint, ImageRules, MarkerStyle, PromptLayout, ReasoningCarriers};
use super::str_at;
use crate::json::scan::{self, Index, Object};

/// Most text (summed `text` lengths of the text parts, as sent, in bytes) a user message may
/// hold and still count as the agent's image turn under `agent_images_in_user_turns`. 200 is
/// enough for a caption like "Screenshot after clicking Save (1568x882)", and short enough that
/// a real question from the user makes the message an upload.
pub(crate) const SHORT_TEXT_CHARS: usize = 200;

/// The image site of a content part (`image_url` / `input_image`, as OpenAI Chat and the
/// Responses API share it) at `span`.
pub(crate) fn image_site<'a>(
    text: &'a str,
    ix: Option<&Index>,
    part: &Object,
    span: Range<usize>,
    path: String,
) -> Site<'a> {
    Site {
        path,
        carrier: None,
        block: span,
        payload: url_payload(text, ix, part.get("image_url").map(|m| &m.value)),
        keep: part
            .get("prompt_cache_breakpoint")
            .map(|b| ("prompt_cache_breakpoint", scan::slice(text, &b.value))),
        placement: Placement::InList,
        needs_sniff: false,
    }
}

/// Length of a part's `text`, bytes as sent (between the quotes for a string).
pub(crate) fn text_len(text: &str, part: &Object) -> usize {
    part.get("text").map_or(0, |t| {
        str_at(text, &t.value).map_or(t.value.len(), |at| at.text.len())
    })
}

/// What an `image_url` / `input_image` URL value (at `value`) holds: a data URL with spans,
/// or an opaque URL / value of this many bytes as sent. An object's first `url` is read.
pub(crate) fn url_payload<'a>(
    text: &'a str,
    ix: Option<&Index>,
    value: Option<&Range<usize>>,
) -> Payload<'a> {
    let Some(value) = value else {
        return Payload::Opaque { bytes: 0 };
    };
    let url = if scan::slice(text, value).starts_with('{') {
        match scan::object_in(text, ix, value.start)
            .and_then(|o| o.first("url").map(|u| u.value.clone()))
        {
            Some(u) => u,
            None => return Payload::Opaque { bytes: 0 },
        }
    } else {
        value.clone()
    };
    let raw = scan::slice(text, &url);
    match str_at(text, &url) {
        Some(at) if split_data_url(at.text).is_some() => Payload::DataUrl(at),
        Some(at) => Payload::Opaque {
            bytes: at.text.len() as u64,
        },
        None if raw.starts_with('"') || raw.starts_with('{') => Payload::Opaque {
            bytes: raw.len() as u64,
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

/// Every image part of an OpenAI Chat body, with spans.
pub(crate) fn walk<'a>(doc: &Doc<'a>, agent_images_in_user_turns: bool) -> Walk<'a> {
    let text = doc.text;
    let ix = doc.ix();
    let mut walk = Walk::new(doc.model.clone(), TextStyle::Text);
    let mut after_tool = false;
    for turn in &doc.turns {
        let mi = turn.index;
        let is_tool = turn.role.as_deref() == Some("tool");
        let is_user = turn.role.as_deref() == Some("user");
        let was_after_tool = after_tool;
        after_tool = is_tool;
        let Some(content) = &turn.content else {
            continue;
        };
        let mut images = Vec::new();
        let mut only_images_and_text = true;
        let mut text_len_sum = 0usize;
        for (pi, block) in content.blocks.iter().enumerate() {
            let Some(part) = &block.obj else {
                only_images_and_text = false;
                continue;
            };
            match block.kind.as_deref() {
                Some("image_url" | "input_image") => {
                    let path = format!("messages[{mi}].content[{pi}]");
                    images.push(image_site(text, ix, part, block.span.clone(), path));
                }
                Some("text") => text_len_sum += text_len(text, part),
                _ => only_images_and_text = false,
            }
        }
        if images.is_empty() {
            continue;
        }
        let label = agent_label(
            is_tool,
            || {
                turn.obj
                    .get("tool_call_id")
                    .and_then(|m| scan::string_at(text, &m.value))
                    .map_or_else(
                        || "tool message".to_owned(),
                        |id| format!("tool_call_id {id}"),
                    )
            },
            is_user && agent_images_in_user_turns && was_after_tool,
            only_images_and_text,
            text_len_sum,
        );
        let carrier = label.map(|label| walk.push_carrier(format!("messages[{mi}]"), Some(label)));
        walk.extend_sites(images, carrier);
    }
    walk
}

/// OpenAI Chat Completions as a [`WireFormat`](super::format::WireFormat).
pub(crate) struct OpenaiChat;

impl super::format::WireFormat for OpenaiChat {
    fn dialect(&self) -> super::Dialect {
        super::Dialect::Openai
    }

    // ---- request side: the view of a request body, prompt positions, paths, restore edits ----

    fn prompt_layout(&self) -> PromptLayout {
        PromptLayout {
            tools: "tools",
            tools_list: None,
            system: &[],
            turns: "messages",
            parts: "content",
            system_parts: None,
            string_turns: false,
            default_role: None,
            parsed_turns: true,
        }
    }

    fn last_message(&self, doc: &Doc<'_>) -> Option<Range<usize>> {
        super::last_turn(doc)
    }

    fn image_sites<'a>(&self, doc: &Doc<'a>, agent_images_in_user_turns: bool) -> Walk<'a> {
        walk(doc, agent_images_in_user_turns)
    }

    fn default_image_rules(&self) -> ImageRules {
        ImageRules::Openai
    }

    fn reasoning_carriers(&self) -> ReasoningCarriers {
        ReasoningCarriers::MessageFields
    }

    fn cache_markers(&self) -> MarkerStyle {
        MarkerStyle::Unmarked
    }

    fn system_billing_line(&self) -> bool {
        false
    }

    fn stream_usage_option(&self) -> bool {
        true
    }

    fn previous_response_key(&self) -> Option<&'static str> {
        None
    }

    fn model_fields(&self) -> Option<&'static str> {
        None
    }

    /// A path ending in `/chat/completions`.
    fn classify_path(&self, path: &str) -> Option<Endpoint> {
        path.ends_with("/chat/completions")
            .then_some(Endpoint::Generate)
    }

    fn path_hint(&self, _path: &str) -> bool {
        false
    }

    fn restore_turn(
        &self,
        list: &List<'_>,
        turn: &EchoedTurn,
        captured: &CapturedTurn,
    ) -> TurnEdit {
        restore::restore_turn(list, turn, captured)
    }

    fn first_call_signed(&self, captured: &CapturedTurn) -> bool {
        restore::first_call_signed(captured)
    }

    fn placeholder_signature(
        &self,
        list: &List<'_>,
        entry: &Object,
        value: &serde_json::Value,
    ) -> Option<Edit> {
        restore::placeholder(list, entry, value)
    }

    // ---- response side: echoed turns, the response reader, error shapes ----

    fn conversation(&self) -> &'static super::conversation::Conversation {
        &super::conversation::Conversation {
            key: "messages",
            assistant_role: "assistant",
            items: None,
            string_content_is_text_block: true,
            bare_input: false,
            marker_block: None,
        }
    }

    fn echoed_turn(&self, entries: &[&str]) -> Option<super::turn::CapturedTurn> {
        super::conversation::one_message(entries, response::message_turn)
    }

    fn error_body(&self, status: u16, message: &str, code: &str) -> String {
        errors::body(status, message, code)
    }

    fn error_kind_header(&self, _: u16) -> Option<(&'static str, &'static str)> {
        None
    }

    fn stream_error_event(&self, message: &str, code: &str, _: Option<u64>) -> Option<String> {
        Some(errors::stream_error_event(message, code))
    }

    fn rejected_signature(&self, _: u16, _: &[u8]) -> Option<String> {
        None
    }

    fn example_path(&self) -> &'static str {
        "/v1/chat/completions"
    }

    fn image_placeholder_style(&self) -> super::doc::TextStyle {
        super::doc::TextStyle::Text
    }

    fn response_reader(&self) -> Box<dyn super::observed::ResponseReader> {
        Box::<response::Stream>::default()
    }
}

// The response side's submodules (issue 28).
pub(crate) mod errors;
pub(crate) mod response;
