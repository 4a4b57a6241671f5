//! Bedrock Converse responses (`docs/usage.md#bedrock-converse`).
//!
//! Non-streaming: `{"output": {"message": {"role", "content": [...]}}, "stopReason", "usage",
//! "metrics"}`, or an error body `{"message": …}` (its kind is the `x-amzn-ErrorType` header,
//! not read here). Source:
//! <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>.
//!
//! Streamed (ConverseStream, `application/vnd.amazon.eventstream`): each event message is one
//! JSON payload named by its `:event-type` header, fed here as an event of that name
//! (`crate::response::ResponseSink::on_aws_message`): `messageStart {role}`,
//! `contentBlockStart {contentBlockIndex, start: {toolUse: {toolUseId, name}}}`,
//! `contentBlockDelta {contentBlockIndex, delta: {text} | {toolUse: {input}} |
//! {reasoningContent: {text} | {signature} | {redactedContent}}}`, `contentBlockStop`,
//! `messageStop {stopReason}`, `metadata {usage, metrics}` (the last event: the stream's end
//! marker). Text and reasoning blocks have no `contentBlockStart`: their first delta opens
//! them. Exception messages are the sink's (the response's error). Source:
//! <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStreamOutput.html>.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::dialect::anthropic::response::canonical_text;
use crate::dialect::canonical::canonical;
use crate::dialect::observed::{note_error, parse_json, str_field, Observed, ResponseReader};
use crate::dialect::turn::{Call, CapturedTurn, Carrier};
use crate::dialect::usage;
use crate::wire::sse::SseEvent;
use crate::wire::tee::SinkError;

/// The `:event-type` of the stream's last event, which carries its usage.
const METADATA: &str = "metadata";

/// One content block being streamed, by its `contentBlockIndex`.
#[derive(Debug)]
enum Block {
    Text(String),
    Reasoning {
        text: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: Option<String>,
        name: String,
        /// The `toolUse.input` deltas: the arguments' JSON text.
        partial: String,
    },
}

/// The state of one Converse response.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    blocks: BTreeMap<usize, Block>,
    /// The turn of a non-streaming body.
    body_turn: Option<CapturedTurn>,
}

impl Stream {
    fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(ev.data, "converse event")?;
        match ev.event.unwrap_or("") {
            "contentBlockStart" => {
                let tool = v.get("start").and_then(|s| s.get("toolUse"));
                if let (Some(index), Some(tool)) = (index(&v), tool) {
                    self.blocks.insert(
                        index,
                        Block::ToolUse {
                            id: str_field(tool, "toolUseId").map(str::to_owned),
                            name: str_field(tool, "name").unwrap_or("").to_owned(),
                            partial: String::new(),
                        },
                    );
                }
            }
            "contentBlockDelta" => {
                if let (Some(index), Some(delta)) = (index(&v), v.get("delta")) {
                    self.delta(index, delta);
                }
            }
            METADATA => {
                if let Some(u) = v.get("usage").and_then(usage::converse) {
                    out.usage = u;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// One `contentBlockDelta`'s `delta` on block `index` (opening it when it is the first):
    /// a delta of another kind than the block's is ignored.
    fn delta(&mut self, index: usize, delta: &Value) {
        let text = str_field(delta, "text");
        let reasoning = delta.get("reasoningContent");
        let tool = delta.get("toolUse");
        let block = self.blocks.entry(index);
        if let Some(t) = text {
            if let Block::Text(s) = block.or_insert_with(|| Block::Text(String::new())) {
                s.push_str(t);
            }
        } else if let Some(r) = reasoning {
            if let Some(data) = str_field(r, "redactedContent") {
                if let Block::Redacted(s) = block.or_insert_with(|| Block::Redacted(String::new()))
                {
                    s.push_str(data);
                }
                return;
            }
            let opened = block.or_insert_with(|| Block::Reasoning {
                text: String::new(),
                signature: String::new(),
            });
            if let Block::Reasoning { text, signature } = opened {
                text.push_str(str_field(r, "text").unwrap_or(""));
                signature.push_str(str_field(r, "signature").unwrap_or(""));
            }
        } else if let Some(input) = tool.and_then(|t| str_field(t, "input")) {
            if let std::collections::btree_map::Entry::Occupied(mut o) = block {
                if let Block::ToolUse { partial, .. } = o.get_mut() {
                    partial.push_str(input);
                }
            }
        }
    }

    fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        let v = parse_json(body, "converse response body")?;
        let message = v.get("output").and_then(|o| o.get("message"));
        if message.is_none() && str_field(&v, "message").is_some() {
            // `{"message": …}`: an error; the body names no kind (`__type` when it does).
            note_error(out, str_field(&v, "__type"));
            return Ok(());
        }
        if let Some(u) = v.get("usage").and_then(usage::converse) {
            out.usage = u;
        }
        if let Some(m) = message {
            self.body_turn = Some(message_turn(m));
        }
        Ok(())
    }

    /// The turn seen (streamed blocks in index order, or the body's).
    fn turn(&mut self) -> CapturedTurn {
        if let Some(t) = self.body_turn.take() {
            return t;
        }
        let mut turn = CapturedTurn::default();
        for (&position, block) in &self.blocks {
            match block {
                Block::Text(t) => turn.text.push_str(t),
                Block::Reasoning { text, signature } => {
                    turn.carriers.push(Carrier::ConverseReasoning {
                        position,
                        text: text.clone(),
                        signature: (!signature.is_empty()).then(|| signature.clone()),
                    })
                }
                Block::Redacted(data) => turn.carriers.push(Carrier::ConverseRedacted {
                    position,
                    data: data.clone(),
                }),
                Block::ToolUse { id, name, partial } => turn.calls.push(Call {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: if partial.trim().is_empty() {
                        canonical(&Value::Object(serde_json::Map::new()))
                    } else {
                        canonical_text(partial)
                    },
                }),
            }
        }
        turn
    }
}

impl ResponseReader for Stream {
    fn is_end_marker(&self, ev: &SseEvent<'_>) -> bool {
        ev.event == Some(METADATA)
    }

    fn event(&mut self, ev: &SseEvent<'_>, out: &mut Observed) -> Result<(), SinkError> {
        Stream::event(self, ev, out)
    }

    fn body(&mut self, body: &[u8], out: &mut Observed) -> Result<(), SinkError> {
        Stream::body(self, body, out)
    }

    fn shed(&mut self) {
        self.blocks.clear();
    }

    fn turn(&mut self) -> CapturedTurn {
        Stream::turn(self)
    }

    fn reads_aws_events(&self) -> bool {
        true
    }
}

fn index(v: &Value) -> Option<usize> {
    v.get("contentBlockIndex")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
}

/// The turn of a Converse message object (a response's `output.message`, or an assistant
/// message a client echoes): its `content` blocks, each an object with one key; blocks of
/// other kinds (`image`, `document`, `cachePoint`, …) count for positions only.
pub(crate) fn message_turn(message: &Value) -> CapturedTurn {
    let mut turn = CapturedTurn::default();
    let Some(blocks) = message.get("content").and_then(Value::as_array) else {
        return turn;
    };
    for (position, block) in blocks.iter().enumerate() {
        if let Some(t) = str_field(block, "text") {
            turn.text.push_str(t);
        } else if let Some(tool) = block.get("toolUse") {
            turn.calls.push(Call {
                id: str_field(tool, "toolUseId").map(str::to_owned),
                name: str_field(tool, "name").unwrap_or("").to_owned(),
                arguments: canonical(tool.get("input").unwrap_or(&Value::Null)),
            });
        } else if let Some(r) = block.get("reasoningContent") {
            if let Some(rt) = r.get("reasoningText") {
                turn.carriers.push(Carrier::ConverseReasoning {
                    position,
                    text: str_field(rt, "text").unwrap_or("").to_owned(),
                    signature: str_field(rt, "signature")
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned),
                });
            } else if let Some(data) = str_field(r, "redactedContent") {
                turn.carriers.push(Carrier::ConverseRedacted {
                    position,
                    data: data.to_owned(),
                });
            }
        }
    }
    turn
}
