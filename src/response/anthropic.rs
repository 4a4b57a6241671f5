//! Anthropic Messages responses (`docs/usage.md#anthropic-messages`).
//!
//! Streamed: `message_start` (model, input-side usage), `content_block_start` /
//! `content_block_delta` (`text_delta`, `thinking_delta`, `signature_delta`,
//! `input_json_delta`), `message_delta` (cumulative usage: the last value of each field wins),
//! `error`; `ping`, `content_block_stop`, `message_stop` and unknown types are ignored.
//! Non-streaming: the message object (`model`, `content`, `usage`) or an error body
//! (`{"type":"error","error":{"type":…}}`).

use std::collections::BTreeMap;

use serde_json::Value;

use super::fingerprint::canonical;
use super::turn::{Call, CapturedTurn, Carrier};
use super::usage::AnthropicUsage;
use super::{note_error, note_model, parse_json, str_field, Observed};
use crate::wire::sse::SseEvent;
use crate::wire::tee::SinkError;

/// One content block being streamed, by its `index`.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: Option<String>,
        name: String,
        /// `content_block_start`'s `input` (normally `{}`), used when no `input_json_delta`
        /// came.
        input: Value,
        partial: String,
    },
    /// A block type that is neither text, a carrier nor a client tool call (e.g.
    /// `server_tool_use`, `web_search_tool_result`).
    Other,
}

/// The state of one Anthropic response.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    usage: AnthropicUsage,
    blocks: BTreeMap<usize, Block>,
    /// The turn of a non-streaming body.
    body_turn: Option<CapturedTurn>,
}

impl Stream {
    pub(super) fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(ev.data, "anthropic event")?;
        let kind = str_field(&v, "type").or(ev.event).unwrap_or("");
        match kind {
            "message_start" => {
                let msg = v.get("message").unwrap_or(&Value::Null);
                note_model(out, str_field(msg, "model"));
                if let Some(u) = msg.get("usage") {
                    self.usage.merge(u);
                }
            }
            "content_block_start" => {
                if let (Some(index), Some(block)) = (index(&v), v.get("content_block")) {
                    self.blocks.insert(index, start(block));
                }
            }
            "content_block_delta" => {
                if let (Some(index), Some(delta)) = (index(&v), v.get("delta")) {
                    if let Some(block) = self.blocks.get_mut(&index) {
                        apply(block, delta);
                    }
                }
            }
            "message_delta" => {
                if let Some(u) = v.get("usage") {
                    self.usage.merge(u);
                }
            }
            "error" => note_error(out, v.get("error").and_then(|e| str_field(e, "type"))),
            _ => return Ok(()),
        }
        out.usage = self.usage.usage();
        Ok(())
    }

    pub(super) fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(body, "anthropic response body")?;
        if str_field(&v, "type") == Some("error") {
            note_error(out, v.get("error").and_then(|e| str_field(e, "type")));
            return Ok(());
        }
        note_model(out, str_field(&v, "model"));
        if let Some(u) = v.get("usage") {
            self.usage.merge(u);
            out.usage = self.usage.usage();
        }
        if v.get("content").is_some() {
            self.body_turn = Some(message_turn(&v));
        }
        Ok(())
    }

    /// Drop what the turn holds (past the size cap); usage is kept.
    pub(super) fn shed(&mut self) {
        self.blocks.clear();
    }

    /// The turn seen (streamed blocks in index order, or the body's).
    pub(super) fn turn(&mut self) -> CapturedTurn {
        if let Some(t) = self.body_turn.take() {
            return t;
        }
        let mut turn = CapturedTurn::default();
        for (&position, block) in &self.blocks {
            match block {
                Block::Text(t) => turn.text.push_str(t),
                Block::Thinking {
                    thinking,
                    signature,
                } => turn.carriers.push(Carrier::AnthropicThinking {
                    position,
                    thinking: thinking.clone(),
                    signature: (!signature.is_empty()).then(|| signature.clone()),
                }),
                Block::Redacted(data) => turn.carriers.push(Carrier::AnthropicRedacted {
                    position,
                    data: data.clone(),
                }),
                Block::ToolUse {
                    id,
                    name,
                    input,
                    partial,
                } => {
                    let arguments = if partial.trim().is_empty() {
                        canonical(input)
                    } else {
                        canonical_text(partial)
                    };
                    turn.calls.push(Call {
                        id: id.clone(),
                        name: name.clone(),
                        arguments,
                    });
                }
                Block::Other => {}
            }
        }
        turn
    }
}

fn index(v: &Value) -> Option<usize> {
    v.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
}

fn owned(v: &Value, key: &str) -> String {
    str_field(v, key).unwrap_or("").to_owned()
}

/// The block a `content_block_start` opens.
fn start(block: &Value) -> Block {
    match str_field(block, "type") {
        Some("text") => Block::Text(owned(block, "text")),
        Some("thinking") => Block::Thinking {
            thinking: owned(block, "thinking"),
            signature: owned(block, "signature"),
        },
        Some("redacted_thinking") => Block::Redacted(owned(block, "data")),
        Some("tool_use") => Block::ToolUse {
            id: str_field(block, "id").map(str::to_owned),
            name: owned(block, "name"),
            input: block.get("input").cloned().unwrap_or(Value::Null),
            partial: String::new(),
        },
        _ => Block::Other,
    }
}

/// One `content_block_delta` on its block (a delta of another block's type is ignored).
fn apply(block: &mut Block, delta: &Value) {
    let piece = |key| str_field(delta, key).unwrap_or("");
    match (block, str_field(delta, "type")) {
        (Block::Text(t), Some("text_delta")) => t.push_str(piece("text")),
        (Block::Thinking { thinking, .. }, Some("thinking_delta")) => {
            thinking.push_str(piece("thinking"))
        }
        (Block::Thinking { signature, .. }, Some("signature_delta")) => {
            signature.push_str(piece("signature"))
        }
        (Block::ToolUse { partial, .. }, Some("input_json_delta")) => {
            partial.push_str(piece("partial_json"))
        }
        _ => {}
    }
}

/// Arguments as sent in text: canonical JSON when they parse, else as sent.
pub(crate) fn canonical_text(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => canonical(&v),
        Err(_) => text.to_owned(),
    }
}

/// The turn of an assistant message object (a non-streaming response body, or an assistant
/// message a client echoes): `content` as a string (text) or a list of blocks; blocks of
/// other types count for positions only.
pub(crate) fn message_turn(message: &Value) -> CapturedTurn {
    let mut turn = CapturedTurn::default();
    match message.get("content") {
        Some(Value::String(s)) => turn.text.push_str(s),
        Some(Value::Array(blocks)) => {
            for (position, block) in blocks.iter().enumerate() {
                match str_field(block, "type") {
                    Some("text") => turn.text.push_str(str_field(block, "text").unwrap_or("")),
                    Some("thinking") => turn.carriers.push(Carrier::AnthropicThinking {
                        position,
                        thinking: owned(block, "thinking"),
                        signature: str_field(block, "signature")
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned),
                    }),
                    Some("redacted_thinking") => turn.carriers.push(Carrier::AnthropicRedacted {
                        position,
                        data: owned(block, "data"),
                    }),
                    Some("tool_use") => turn.calls.push(Call {
                        id: str_field(block, "id").map(str::to_owned),
                        name: owned(block, "name"),
                        arguments: canonical(block.get("input").unwrap_or(&Value::Null)),
                    }),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    turn
}
