//! The assistant turn a response carries, as the observers capture it and as a client echoes
//! it in a later request (`docs/usage.md#carriers-per-assistant-turn`).
//!
//! One turn per response: choice / candidate 0 (a request with `n` > 1 or several candidates
//! has its other choices ignored: an agent continues from one of them, and the first is what
//! the SDKs' accumulators and agents take).

use serde_json::Value;

/// One assistant turn: its text, its tool calls, and the reasoning carriers that must come
/// back with it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CapturedTurn {
    /// The turn's visible text: text blocks / content / output_text parts / non-thought text
    /// parts, concatenated in order with no separator (thinking text is a carrier, not text).
    pub text: String,
    /// The tool calls, in order (Anthropic `tool_use` blocks, Chat `tool_calls`, Responses
    /// `function_call` items, Gemini `functionCall` parts).
    pub calls: Vec<Call>,
    /// The reasoning carriers, in the order they appear in the turn.
    pub carriers: Vec<Carrier>,
    /// OpenAI Responses: the `id` of every output item, in output order (`rs_…`, `msg_…`,
    /// `fc_…`), when every item has one; empty otherwise, and on the other wires. The restore
    /// pass puts an echoed run of these items back in this order
    /// (`docs/reasoning.md#carrier-restore`). Not stored when empty, so a record written
    /// before the field existed reads as empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub item_ids: Vec<String>,
}

impl CapturedTurn {
    /// Nothing captured at all (no text, no call, no carrier).
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty() && self.calls.is_empty() && self.carriers.is_empty()
    }
}

/// One tool call of a turn.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Call {
    /// The call's id: Anthropic `tool_use.id`, Chat `tool_calls[i].id`, Responses
    /// `function_call.call_id` (not the item's `id`), Gemini `functionCall.id` (`None` when
    /// absent, as on Gemini 2.x).
    pub id: Option<String>,
    /// The function name.
    pub name: String,
    /// The arguments as canonical JSON (object keys sorted, no whitespace; see
    /// [`super::canonical::canonical`]); arguments that are not valid JSON (a
    /// truncated stream, a model's garbage) are kept as sent.
    pub arguments: String,
}

/// Where a Gemini `thoughtSignature` goes back in the model content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PartRef {
    /// On the `functionCall` part of `calls[i]` of the turn.
    Call(usize),
    /// On the turn's last non-thought text part (a text-only turn's signature rides on its last
    /// part; when the turn has no text part, a part `{"text":"","thoughtSignature":…}` carries
    /// it, as the API streams it).
    Text,
}

/// A reasoning carrier, in a shape the restore side can put back into an echoed assistant turn.
/// Every opaque value (signature, `data`, `encrypted_content`) is kept exactly as received.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Carrier {
    /// Anthropic `thinking` block. Goes back as block `position` (its index in the response's
    /// `content`) of the assistant message: `{"type":"thinking","thinking":…,"signature":…}`,
    /// without `signature` when `None` (unsigned thinking: some Anthropic-wire hosts sign
    /// none). Streamed: the `thinking_delta`s concatenated and the `signature_delta`.
    AnthropicThinking {
        position: usize,
        thinking: String,
        signature: Option<String>,
    },
    /// Anthropic `redacted_thinking` block: `{"type":"redacted_thinking","data":…}` at block
    /// `position` of the assistant message.
    AnthropicRedacted { position: usize, data: String },
    /// OpenAI Chat `reasoning_content` (DeepSeek, Kimi, GLM, Qwen, MiMo, …): the assistant
    /// message's `reasoning_content` string (stream deltas concatenated).
    ReasoningContent(String),
    /// OpenAI Chat `reasoning` (OpenRouter, vLLM, Ollama, Cerebras): the assistant message's
    /// `reasoning` string (stream deltas concatenated).
    Reasoning(String),
    /// OpenAI Chat (OpenRouter) one `reasoning_details` entry, whole: goes back as the next
    /// element of the assistant message's `reasoning_details` array (entries in the order they
    /// first appeared). Streamed fragments with the same `index` are merged: `text` and
    /// `summary` concatenated, every other field the last non-null value.
    ReasoningDetail(Value),
    /// OpenAI Chat (Gemini's OpenAI-compatible endpoint): the message-level
    /// `extra_content.google.thought_signature`, back on the assistant message.
    MessageSignature(String),
    /// OpenAI Chat (Gemini's OpenAI-compatible endpoint):
    /// `tool_calls[call].extra_content.google.thought_signature`, back on that tool call
    /// (`call` indexes [`CapturedTurn::calls`]).
    ToolCallSignature { call: usize, signature: String },
    /// Gemini `thoughtSignature`: back on the part `on` names, as that part's
    /// `thoughtSignature`. A signature streamed on a later chunk, on a part without a
    /// `functionCall`, belongs to the turn's first call when that call has none (only the
    /// first call of a parallel batch carries one); otherwise to the text ([`PartRef::Text`]).
    GeminiSignature { on: PartRef, signature: String },
    /// Bedrock Converse `reasoningContent` block holding `reasoningText`: goes back as block
    /// `position` (its index in the response's `content`) of the assistant message,
    /// `{"reasoningContent":{"reasoningText":{"text":…,"signature":…}}}`, without `signature`
    /// when `None` (models that sign none). Streamed: the `reasoningContent.text` deltas
    /// concatenated and the `signature` delta.
    ConverseReasoning {
        position: usize,
        text: String,
        signature: Option<String>,
    },
    /// Bedrock Converse `reasoningContent` block holding `redactedContent` (base64, as
    /// received): `{"reasoningContent":{"redactedContent":…}}` at block `position`.
    ConverseRedacted { position: usize, data: String },
    /// OpenAI Responses `reasoning` item, whole (`id`, `summary`, `encrypted_content`, …), as
    /// the JSON text received (from `response.output_item.done`, or the response's `output`).
    /// Goes back as an input item at `position`: its index among the turn's output items,
    /// i.e. before the `message` / `function_call` items that followed it.
    ResponsesReasoning {
        position: usize,
        id: Option<String>,
        item: String,
    },
}
