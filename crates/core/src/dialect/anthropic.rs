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

pub(crate) mod restore;

use super::restore::{CapturedTurn, EchoedTurn, List, TurnEdit};
use crate::json::Edit;
use std::ops::Range;

use super::doc::{CarrierInfo, Doc, Payload, Placement, Site, TextStyle, Walk};
use super::format::{Endpoint, ImageRules, MarkerStyle, PromptLayout, ReasoningCarriers};
use super::{kind, str_at};
use crate::json::scan::{self, Index, Object};

/// What an image block holds, with spans into `text`: base64 with its media type, or an
/// opaque source counted by its length as sent (a `url` / `file` source, none, or an odd one).
fn payload<'a>(text: &'a str, ix: Option<&Index>, block: &Object) -> Payload<'a> {
    let Some(source) = block.get("source") else {
        return Payload::Opaque { bytes: 0 };
    };
    let Some(src) = scan::object_in(text, ix, source.value.start) else {
        // Not an object: a string counts its length, anything else 0.
        let bytes = scan::string_at(text, &source.value).map_or(0, |s| s.len() as u64);
        return Payload::Opaque { bytes };
    };
    let Some(data) = src.get("data") else {
        return Payload::Opaque { bytes: 0 };
    };
    match str_at(text, &data.value) {
        Some(at) => Payload::Base64 {
            data: at,
            media_type: src.get("media_type").and_then(|m| str_at(text, &m.value)),
            spelling: super::doc::TypeSpelling::Mime,
        },
        None => Payload::Opaque {
            bytes: data.value.len() as u64,
        },
    }
}

/// The image site of the block `obj` at `span`.
fn site<'a>(
    text: &'a str,
    ix: Option<&Index>,
    obj: &Object,
    span: std::ops::Range<usize>,
    path: String,
) -> Site<'a> {
    Site {
        path,
        carrier: None,
        block: span,
        payload: payload(text, ix, obj),
        keep: obj
            .get("cache_control")
            .map(|cc| ("cache_control", scan::slice(text, &cc.value))),
        placement: Placement::InList,
        needs_sniff: false,
    }
}

/// Every image of an Anthropic Messages body, with spans.
///
/// Uploads: `image` blocks directly in a message's `content`. Agent images: `image` blocks in
/// a `tool_result`'s `content` (each such tool result is one carrier).
pub(crate) fn walk<'a>(doc: &Doc<'a>) -> Walk<'a> {
    let text = doc.text;
    let ix = doc.ix();
    let mut walk = Walk::new(doc.model.clone(), TextStyle::Text);
    for turn in &doc.turns {
        let mi = turn.index;
        let Some(content) = &turn.content else {
            continue;
        };
        for (bi, block) in content.blocks.iter().enumerate() {
            let Some(obj) = &block.obj else { continue };
            match block.kind.as_deref() {
                Some("image") => {
                    let path = format!("messages[{mi}].content[{bi}]");
                    walk.sites
                        .push(site(text, ix, obj, block.span.clone(), path));
                }
                Some("tool_result") => {
                    let carrier = walk.carriers.len();
                    let mut images = 0usize;
                    let inner = obj
                        .get("content")
                        .and_then(|c| scan::array_in(text, ix, c.value.start));
                    for (ii, span) in inner.into_iter().flatten().enumerate() {
                        let Some(io) = scan::object_in(text, ix, span.start) else {
                            continue;
                        };
                        if kind(text, &io).as_deref() != Some("image") {
                            continue;
                        }
                        images += 1;
                        let path = format!("messages[{mi}].content[{bi}].content[{ii}]");
                        let mut s = site(text, ix, &io, span, path);
                        s.carrier = Some(carrier);
                        walk.sites.push(s);
                    }
                    if images > 0 {
                        walk.carriers.push(CarrierInfo {
                            path: format!("messages[{mi}].content[{bi}]"),
                            label: obj
                                .get("tool_use_id")
                                .and_then(|m| scan::string_at(text, &m.value))
                                .map(|id| format!("tool_use_id {id}")),
                        });
                    }
                }
                _ => {}
            }
        }
    }
    walk
}

/// Where Claude's models sit in a Vertex AI path
/// (https://docs.cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/use-claude).
pub(crate) const VERTEX_MODELS: &str = "/publishers/anthropic/models/";
/// An Amazon Bedrock runtime path (the path after the route's prefix),
/// `/model/{modelId}/{operation}`: the model id as sent (percent-encoded when it is an ARN)
/// and the operation (`invoke`, `invoke-with-response-stream`, `converse`, `converse-stream`,
/// …). Source: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModel.html.
pub(crate) fn bedrock_model_path(path: &str) -> Option<(&str, &str)> {
    let (id, operation) = path.strip_prefix("/model/")?.split_once('/')?;
    (!id.is_empty() && !operation.contains('/')).then_some((id, operation))
}

/// Bedrock's InvokeModel operations, whose body is the model's own format: Anthropic
/// Messages for Claude (`anthropic_version: "bedrock-2023-05-31"`).
const BEDROCK_INVOKE: [&str; 2] = ["invoke", "invoke-with-response-stream"];

/// The model segment of Vertex AI's Claude token-counting path
/// (`…/publishers/anthropic/models/count-tokens:rawPredict`): an endpoint, not a model.
pub(crate) const VERTEX_COUNT_TOKENS: &str = "count-tokens";

/// Anthropic Messages as a [`WireFormat`](super::format::WireFormat).
pub(crate) struct Anthropic;

impl super::format::WireFormat for Anthropic {
    fn dialect(&self) -> super::Dialect {
        super::Dialect::Anthropic
    }

    // ---- request side: the view of a request body, prompt positions, paths, restore edits ----

    fn prompt_layout(&self) -> PromptLayout {
        PromptLayout {
            tools: "tools",
            tools_list: None,
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

    fn default_image_rules(&self) -> ImageRules {
        ImageRules::Anthropic
    }

    fn reasoning_carriers(&self) -> ReasoningCarriers {
        ReasoningCarriers::SignedBlocks
    }

    fn cache_markers(&self) -> MarkerStyle {
        MarkerStyle::CacheControl
    }

    fn system_billing_line(&self) -> bool {
        true
    }

    fn stream_usage_option(&self) -> bool {
        false
    }

    fn previous_response_key(&self) -> Option<&'static str> {
        None
    }

    fn model_fields(&self) -> Option<&'static str> {
        None
    }

    /// A path ending in `/messages` (gateways mount it under other bases too; Claude in
    /// Microsoft Foundry's `/anthropic/v1/messages`), except OpenAI's Assistants API
    /// `…/threads/{thread_id}/messages`, which is never Anthropic; `…/messages/count_tokens`
    /// counts tokens. Also Claude's InvokeModel on Amazon Bedrock (`/model/{modelId}/invoke`,
    /// `/invoke-with-response-stream`) and Claude on Vertex AI
    /// (`…/publishers/anthropic/models/{model}:rawPredict` / `:streamRawPredict`, token
    /// counting at `…/models/count-tokens:rawPredict`).
    fn classify_path(&self, path: &str) -> Option<Endpoint> {
        if let Some(at) = path.find(VERTEX_MODELS) {
            let (model, method) = path[at + VERTEX_MODELS.len()..].rsplit_once(':')?;
            return match method {
                "rawPredict" | "streamRawPredict" if model == VERTEX_COUNT_TOKENS => {
                    Some(Endpoint::CountTokens)
                }
                "rawPredict" | "streamRawPredict" if !model.contains('/') => {
                    Some(Endpoint::Generate)
                }
                _ => None,
            };
        }
        if let Some((id, operation)) = bedrock_model_path(path) {
            // Claude's InvokeModel (a model id, inference profile or ARN naming Anthropic's
            // models); other models' InvokeModel bodies are theirs, not Anthropic's.
            let id = id.to_ascii_lowercase();
            let claude = id.contains("anthropic") || id.contains("claude");
            return (claude && BEDROCK_INVOKE.contains(&operation)).then_some(Endpoint::Generate);
        }
        if path.ends_with("/messages/count_tokens") {
            return Some(Endpoint::CountTokens);
        }
        if path == "/messages" || path.ends_with("/messages") {
            // `…/threads/{id}/messages`: the segment two before `messages` is `threads`.
            let mut segments = path.rsplit('/').skip(2);
            if segments.next() == Some("threads") {
                return None;
            }
            return Some(Endpoint::Generate);
        }
        None
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
            string_content_is_text_block: true,
            bare_input: false,
            marker_block: None,
        }
    }

    fn echoed_turn(&self, entries: &[&str]) -> Option<super::turn::CapturedTurn> {
        super::conversation::one_message(entries, response::message_turn)
    }

    fn error_body(&self, status: u16, message: &str, _code: &str) -> String {
        errors::body(status, message)
    }

    fn error_kind_header(&self, _: u16) -> Option<(&'static str, &'static str)> {
        None
    }

    fn stream_error_event(&self, message: &str, _: &str, _: Option<u64>) -> Option<String> {
        Some(errors::stream_error_event(message))
    }

    fn rejected_signature(&self, status: u16, error_body: &[u8]) -> Option<String> {
        errors::invalid_signature(status, error_body)
    }

    fn example_path(&self) -> &'static str {
        "/v1/messages"
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
