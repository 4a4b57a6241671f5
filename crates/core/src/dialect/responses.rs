//! OpenAI Responses (`/responses`): where images live (`docs/wire-formats.md#openai-responses`).
//!
//! - `input` is a string (no images) or a list of items.
//! - Agent images (carriers): `input_image` parts in a `function_call_output` item's `output`
//!   list (one carrier per item), and — when `agent_images_in_user_turns` is on — in a `user`
//!   message item right after a `function_call_output` item that holds only images and short
//!   text (the same rule as OpenAI Chat, see [`super::openai::SHORT_TEXT_CHARS`]).
//! - Every other `input_image` is an upload. `image_url` data URLs are read; remote URLs and
//!   `file_id` images are counted, never fetched.
//! - Replacement texts are `{"type":"input_text","text":…}` (valid in both places).

pub(crate) mod restore;

use super::restore::{CapturedTurn, EchoedTurn, List, TurnEdit};
use crate::json::Edit;
use std::ops::Range;

use super::doc::{Doc, TextStyle, Walk};
use super::format::{Endpoint, ImageRules, MarkerStyle, PromptLayout, ReasoningCarriers};
use super::kind;
use super::openai::{agent_label, image_site, text_len};
use crate::json::scan::{self, Object};

/// Every `input_image` of an OpenAI Responses body, with spans.
pub(crate) fn walk<'a>(doc: &Doc<'a>, agent_images_in_user_turns: bool) -> Walk<'a> {
    let text = doc.text;
    let ix = doc.ix();
    let mut walk = Walk::new(doc.model.clone(), TextStyle::InputText);
    let Some(items) = doc
        .top
        .get("input")
        .and_then(|m| scan::array_in(text, ix, m.value.start))
    else {
        return walk;
    };
    let mut after_output = false;
    for (ii, span) in items.iter().enumerate() {
        let Some(item) = scan::object_in(text, ix, span.start) else {
            after_output = false;
            continue;
        };
        let is_output = kind(text, &item).as_deref() == Some("function_call_output");
        let was_after_output = after_output;
        after_output = is_output;
        let field = if is_output { "output" } else { "content" };
        let Some(parts) = item
            .get(field)
            .and_then(|m| scan::array_in(text, ix, m.value.start))
        else {
            continue;
        };
        let mut images = Vec::new();
        let mut only_images_and_text = true;
        let mut text_len_sum = 0usize;
        for (pi, pspan) in parts.into_iter().enumerate() {
            let Some(part) = scan::object_in(text, ix, pspan.start) else {
                only_images_and_text = false;
                continue;
            };
            match kind(text, &part).as_deref() {
                Some("input_image") => {
                    let path = format!("input[{ii}].{field}[{pi}]");
                    images.push(image_site(text, ix, &part, pspan, path));
                }
                Some("input_text") => text_len_sum += text_len(text, &part),
                _ => only_images_and_text = false,
            }
        }
        if images.is_empty() {
            continue;
        }
        let is_user = item
            .get("role")
            .and_then(|m| scan::string_at(text, &m.value))
            .as_deref()
            == Some("user");
        let label = agent_label(
            is_output,
            || {
                item.get("call_id")
                    .and_then(|m| scan::string_at(text, &m.value))
                    .map_or_else(
                        || "function_call_output".to_owned(),
                        |id| format!("call_id {id}"),
                    )
            },
            is_user && agent_images_in_user_turns && was_after_output,
            only_images_and_text,
            text_len_sum,
        );
        let carrier = label.map(|label| walk.push_carrier(format!("input[{ii}]"), Some(label)));
        walk.extend_sites(images, carrier);
    }
    walk
}

/// OpenAI Responses as a [`WireFormat`](super::format::WireFormat).
pub(crate) struct OpenaiResponses;

impl super::format::WireFormat for OpenaiResponses {
    fn dialect(&self) -> super::Dialect {
        super::Dialect::OpenaiResponses
    }

    // ---- request side: the view of a request body, prompt positions, paths, restore edits ----

    fn prompt_layout(&self) -> PromptLayout {
        PromptLayout {
            tools: "tools",
            tools_list: None,
            system: &["instructions"],
            turns: "input",
            parts: "content",
            system_parts: None,
            string_turns: true,
            default_role: None,
            parsed_turns: false,
        }
    }

    /// The last item of `input`; a string `input` is itself that message.
    fn last_message(&self, doc: &Doc<'_>) -> Option<Range<usize>> {
        let input = &doc.top.get("input")?.value;
        if doc.text.as_bytes().get(input.start) == Some(&b'"') {
            return Some(input.clone());
        }
        scan::array_in(doc.text, doc.ix(), input.start)?.pop()
    }

    fn image_sites<'a>(&self, doc: &Doc<'a>, agent_images_in_user_turns: bool) -> Walk<'a> {
        walk(doc, agent_images_in_user_turns)
    }

    fn default_image_rules(&self) -> ImageRules {
        ImageRules::Openai
    }

    fn reasoning_carriers(&self) -> ReasoningCarriers {
        ReasoningCarriers::Untouched
    }

    fn cache_markers(&self) -> MarkerStyle {
        MarkerStyle::Unmarked
    }

    fn system_billing_line(&self) -> bool {
        false
    }

    fn stream_usage_option(&self) -> bool {
        false
    }

    fn previous_response_key(&self) -> Option<&'static str> {
        Some("previous_response_id")
    }

    fn model_fields(&self) -> Option<&'static str> {
        None
    }

    /// A path ending in `/responses`.
    fn classify_path(&self, path: &str) -> Option<Endpoint> {
        path.ends_with("/responses").then_some(Endpoint::Generate)
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

    fn first_call_signed(&self, _captured: &CapturedTurn) -> bool {
        false
    }

    fn placeholder_signature(
        &self,
        _list: &List<'_>,
        _entry: &Object,
        _value: &serde_json::Value,
    ) -> Option<Edit> {
        None
    }

    // ---- response side: echoed turns, the response reader, error shapes ----

    fn conversation(&self) -> &'static super::conversation::Conversation {
        &super::conversation::Conversation {
            key: "input",
            assistant_role: "assistant",
            items: Some(super::conversation::ItemTypes {
                message: "message",
                turn: &["reasoning", "function_call"],
            }),
            string_content_is_text_block: false,
            bare_input: true,
            marker_block: None,
        }
    }

    fn echoed_turn(&self, entries: &[&str]) -> Option<super::turn::CapturedTurn> {
        Some(response::items_turn(entries))
    }

    fn error_body(&self, status: u16, message: &str, code: &str) -> String {
        super::openai::errors::body(status, message, code)
    }

    fn error_kind_header(&self, _: u16) -> Option<(&'static str, &'static str)> {
        None
    }

    fn stream_error_event(
        &self,
        message: &str,
        code: &str,
        last_sequence: Option<u64>,
    ) -> Option<String> {
        Some(errors::stream_error_event(message, code, last_sequence))
    }

    fn rejected_signature(&self, _: u16, _: &[u8]) -> Option<String> {
        None
    }

    fn example_path(&self) -> &'static str {
        "/v1/responses"
    }

    fn image_placeholder_style(&self) -> super::doc::TextStyle {
        super::doc::TextStyle::InputText
    }

    fn response_reader(&self) -> Box<dyn super::observed::ResponseReader> {
        Box::<response::Stream>::default()
    }
}

// The response side's submodules (issue 28).
pub(crate) mod errors;
pub(crate) mod response;

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;
    use crate::dialect::doc::Payload;

    #[test]
    fn outputs_are_carriers_messages_uploads() {
        let body = br#"{"model":"gpt-5","input":[
          {"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"data:image/png;base64,AAAA","detail":"high"}]},
          {"type":"function_call","call_id":"c1","name":"shot","arguments":"{}"},
          {"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"ok"},{"type":"input_image","image_url":"data:image/png;base64,BBBB"}]},
          {"type":"function_call_output","call_id":"c2","output":"plain"},
          {"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]},
          {"type":"message","role":"user","content":[{"type":"input_image","file_id":"file_1"}]},
          7
        ]}"#;
        let doc = crate::dialect::parse(body, crate::dialect::Dialect::OpenaiResponses).unwrap();
        let w = walk(&doc, true);
        assert_eq!(w.model.as_deref(), Some("gpt-5"));
        assert_eq!(w.sites.len(), 4);
        assert_eq!(w.sites[0].carrier, None);
        assert_eq!(w.sites[1].carrier, Some(0));
        assert_eq!(w.sites[1].path, "input[2].output[1]");
        assert_eq!(w.carriers[0].label.as_deref(), Some("call_id c1"));
        // A user message right after a function_call_output (c2) holding only an image.
        assert_eq!(w.sites[2].carrier, Some(1));
        assert_eq!(w.sites[2].payload, Payload::Opaque { bytes: 15 });
        assert_eq!(w.sites[3].carrier, None);
        assert_eq!(w.sites[3].payload, Payload::Opaque { bytes: 0 });
        let w = walk(&doc, false);
        assert_eq!(w.sites[2].carrier, None);
        let doc = crate::dialect::parse(
            br#"{"input":"hi"}"#,
            crate::dialect::Dialect::OpenaiResponses,
        )
        .unwrap();
        assert_eq!(walk(&doc, true).sites.len(), 0);
    }
}
