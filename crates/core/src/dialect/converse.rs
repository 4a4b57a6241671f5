//! Amazon Bedrock Converse (`POST /model/{modelId}/converse`, `/converse-stream`): one request
//! shape for every model Bedrock serves (`docs/wire-formats.md#amazon-bedrock-converse`).
//!
//! - Content blocks are single-key objects, no `type` member: `{"text":…}`, `{"image":…}`,
//!   `{"document":…}`, `{"toolUse":…}`, `{"toolResult":…}`, `{"reasoningContent":…}`,
//!   `{"cachePoint":…}`, … in `messages[].content`; `system` is a list of such blocks; tools are
//!   `toolConfig.tools`.
//! - Uploads: `{"image": {"format": "png", "source": {"bytes": "<base64>"}}}` blocks directly in
//!   a message's `content`. Carriers: `{"toolResult": {"toolUseId", "content": [...]}}` blocks
//!   whose `content` holds image blocks (retired as one unit, keeping `toolUseId` and texts).
//!   The declared type is `format`, a bare name ([`TypeSpelling::FormatName`]). An image whose
//!   source is `s3Location` is not in the body: nothing to evict or shrink, so it is no site.
//! - Replacement texts are `{"text":…}` blocks, valid in both places.
//! - Reasoning: `reasoningContent` blocks of assistant turns (`reasoningText {text,
//!   signature}`, `redactedContent`), restored by [`restore`] when an echo dropped them.
//! - Prompt-cache breakpoints are `{"cachePoint": {"type": "default"}}` blocks
//!   ([`MarkerStyle::CachePoint`]).

pub(crate) mod errors;
pub(crate) mod response;
pub(crate) mod restore;

use std::ops::Range;

use super::doc::{Doc, Payload, Placement, Site, TextStyle, TypeSpelling, Walk};
use super::format::{Endpoint, ImageRules, MarkerStyle, PromptLayout, ReasoningCarriers};
use super::restore::{CapturedTurn, EchoedTurn, List, TurnEdit};
use super::str_at;
use crate::json::scan::{self, Index, Object};
use crate::json::Edit;

/// Converse's operations (the last segment of `/model/{modelId}/{operation}`). Source:
/// <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>,
/// <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html>.
const OPERATIONS: [&str; 2] = ["converse", "converse-stream"];

/// The single key of an image content block.
const IMAGE: &str = "image";
/// The single key of a tool result content block.
const TOOL_RESULT: &str = "toolResult";

/// The image of an `{"image": {...}}` block `obj`: base64 `source.bytes` with its `format`;
/// `None` when the block is no image or its source is not in the body (`s3Location`, none).
fn image_payload<'a>(text: &'a str, ix: Option<&Index>, obj: &Object) -> Option<Payload<'a>> {
    let image = scan::object_in(text, ix, obj.get(IMAGE)?.value.start)?;
    let source = scan::object_in(text, ix, image.get("source")?.value.start)?;
    let bytes = source.get("bytes")?;
    let Some(data) = str_at(text, &bytes.value) else {
        return Some(Payload::Opaque {
            bytes: bytes.value.len() as u64,
        });
    };
    Some(Payload::Base64 {
        data,
        media_type: image.get("format").and_then(|f| str_at(text, &f.value)),
        spelling: TypeSpelling::FormatName,
    })
}

/// The image site of the block at `span` (`obj` parsed), if it is an image in the body.
fn site<'a>(
    text: &'a str,
    ix: Option<&Index>,
    obj: &Object,
    span: Range<usize>,
    path: String,
) -> Option<Site<'a>> {
    Some(Site {
        path,
        carrier: None,
        block: span,
        payload: image_payload(text, ix, obj)?,
        keep: None,
        placement: Placement::InList,
        needs_sniff: false,
    })
}

/// Every image of a Converse body, with spans (see the module doc).
pub(crate) fn walk<'a>(doc: &Doc<'a>) -> Walk<'a> {
    let text = doc.text;
    let ix = doc.ix();
    let mut walk = Walk::new(doc.model.clone(), TextStyle::Bare);
    for turn in &doc.turns {
        let mi = turn.index;
        let Some(content) = &turn.content else {
            continue;
        };
        for (bi, block) in content.blocks.iter().enumerate() {
            let Some(obj) = &block.obj else { continue };
            let path = format!("messages[{mi}].content[{bi}]");
            if obj.get(IMAGE).is_some() {
                walk.sites
                    .extend(site(text, ix, obj, block.span.clone(), path));
                continue;
            }
            let Some(result) = obj
                .get(TOOL_RESULT)
                .and_then(|m| scan::object_in(text, ix, m.value.start))
            else {
                continue;
            };
            let inner = result
                .get("content")
                .and_then(|c| scan::array_in(text, ix, c.value.start))
                .unwrap_or_default();
            let images: Vec<Site<'a>> = inner
                .into_iter()
                .enumerate()
                .filter_map(|(ii, span)| {
                    let io = scan::object_in(text, ix, span.start)?;
                    let p = format!("{path}.toolResult.content[{ii}]");
                    site(text, ix, &io, span, p)
                })
                .collect();
            if images.is_empty() {
                continue;
            }
            let label = result
                .get("toolUseId")
                .and_then(|m| scan::string_at(text, &m.value))
                .map(|id| format!("toolUseId {id}"));
            let carrier = walk.push_carrier(path, label);
            walk.extend_sites(images, Some(carrier));
        }
    }
    walk
}

/// Amazon Bedrock Converse as a [`WireFormat`](super::format::WireFormat).
pub(crate) struct Converse;

impl super::format::WireFormat for Converse {
    fn dialect(&self) -> super::Dialect {
        super::Dialect::Converse
    }

    // ---- request side: the view of a request body, prompt positions, paths, restore edits ----

    fn prompt_layout(&self) -> PromptLayout {
        PromptLayout {
            tools: "toolConfig",
            tools_list: Some("tools"),
            system: &["system"],
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

    fn image_sites<'a>(&self, doc: &Doc<'a>, _agent_images_in_user_turns: bool) -> Walk<'a> {
        walk(doc)
    }

    /// The Converse API's own (four formats, 8000 px a side, 3.75 MB an image), for every
    /// model; a Claude model is held to Anthropic's too (`crate::provider::CONVERSE_IMAGES`).
    fn default_image_rules(&self) -> ImageRules {
        ImageRules::Converse
    }

    fn reasoning_carriers(&self) -> ReasoningCarriers {
        ReasoningCarriers::Untouched
    }

    fn cache_markers(&self) -> MarkerStyle {
        MarkerStyle::CachePoint
    }

    fn system_billing_line(&self) -> bool {
        false
    }

    fn stream_usage_option(&self) -> bool {
        false
    }

    fn previous_response_key(&self) -> Option<&'static str> {
        None
    }

    fn model_fields(&self) -> Option<&'static str> {
        Some("additionalModelRequestFields")
    }

    /// `/model/{modelId}/converse` and `/model/{modelId}/converse-stream`, any model (a model
    /// id, an inference profile id or a percent-encoded ARN).
    fn classify_path(&self, path: &str) -> Option<Endpoint> {
        let (_, operation) = super::anthropic::bedrock_model_path(path)?;
        OPERATIONS
            .contains(&operation)
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
            key: "messages",
            assistant_role: "assistant",
            items: None,
            string_content_is_text_block: false,
            bare_input: false,
            marker_block: Some("cachePoint"),
        }
    }

    fn echoed_turn(&self, entries: &[&str]) -> Option<CapturedTurn> {
        super::conversation::one_message(entries, response::message_turn)
    }

    fn error_body(&self, _status: u16, message: &str, _code: &str) -> String {
        errors::body(message)
    }

    fn error_kind_header(&self, status: u16) -> Option<(&'static str, &'static str)> {
        Some((errors::ERROR_TYPE_HEADER, errors::error_type(status)))
    }

    /// None: an event stream has no SSE event; a stream the proxy cuts is aborted.
    fn stream_error_event(&self, _: &str, _: &str, _: Option<u64>) -> Option<String> {
        None
    }

    fn rejected_signature(&self, _: u16, _: &[u8]) -> Option<String> {
        None
    }

    fn example_path(&self) -> &'static str {
        "/model/model/converse"
    }

    fn image_placeholder_style(&self) -> TextStyle {
        TextStyle::Bare
    }

    fn response_reader(&self) -> Box<dyn super::observed::ResponseReader> {
        Box::<response::Stream>::default()
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests;
