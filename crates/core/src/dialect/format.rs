//! The one trait per wire format: everything cachekeeper knows about one dialect's wire, asked
//! through [`WireFormat`] by the policy modules (images, reasoning shaping, caching, accounting,
//! the proxy), none of which matches on [`Dialect`].
//!
//! One impl per dialect, one file each: [`super::anthropic`] (Anthropic Messages),
//! [`super::openai`] (OpenAI Chat Completions), [`super::responses`] (OpenAI Responses),
//! [`super::gemini`] (Gemini `generateContent`), [`super::converse`] (Amazon Bedrock
//! Converse). [`Dialect::format`] is the one table from a
//! dialect to its impl. Adding a wire format: `docs/dev/new-wire-format.md`.

use std::ops::Range;

use serde_json::Value;

use super::conversation::Conversation;
use super::doc::{Doc, Walk};
use super::restore::{CapturedTurn, EchoedTurn, List, TurnEdit};
use super::Dialect;
use crate::json::scan::Object;
use crate::json::Edit;

/// One wire format: its request view, prefix positions, restore edits and path
/// classification (the request side), its echoed-turn reading, response observer and error
/// shapes (the response side). Implementations are unit structs, one per [`Dialect`].
pub trait WireFormat: Sync + 'static {
    /// The dialect this impl describes.
    fn dialect(&self) -> Dialect;

    // ---- request side: the view of a request body, prompt positions, paths, restore edits ----

    /// Where the prompt's parts live in a request body, in the provider's cache order after
    /// `tools`: the system prompt's member, the turn list's, a turn's parts. Read by the
    /// prompt-cache positions (`crate::accounting::prefix`), the cache model's block list
    /// and the restore pass's list.
    fn prompt_layout(&self) -> PromptLayout;

    /// The byte range of the message a response to this request answers: the last element
    /// of the turn list (a string turn list is itself that message). `None` when the list is
    /// absent or empty.
    fn last_message(&self, doc: &Doc<'_>) -> Option<Range<usize>>;

    /// Every image of `doc`, with spans: the view the image passes work on.
    /// `agent_images_in_user_turns`: the `[images]` setting (`docs/reference/config.md`), read by
    /// the wires whose agents put tool images in user turns (OpenAI Chat, Responses).
    fn image_sites<'a>(&self, doc: &Doc<'a>, agent_images_in_user_turns: bool) -> Walk<'a>;

    /// The image limits to assume when neither the provider row nor the model family say;
    /// [`ImageRules::Converse`]: the wire's own, which come first.
    fn default_image_rules(&self) -> ImageRules;

    /// Where this wire carries reasoning in a request, which decides what the reasoning
    /// shaping pass (`crate::reasoning::shape`) works on.
    fn reasoning_carriers(&self) -> ReasoningCarriers;

    /// How a request of this wire marks its prompt-cache breakpoints, if it does: what the
    /// automatic-breakpoint pass (`crate::caching::breakpoints`) writes, and whether it runs.
    fn cache_markers(&self) -> MarkerStyle;

    /// Whether the system prompt may open with Claude Code's billing line
    /// (`crate::caching::volatile`), a per-request block the prefix positions digest
    /// apart. Claude Code speaks Anthropic Messages only.
    fn system_billing_line(&self) -> bool;

    /// Whether a stream's usage is asked for with `stream_options.include_usage`
    /// (OpenAI Chat Completions; the other wires always send it): the `usage_in_streams`
    /// edit (`crate::rewrite`).
    fn stream_usage_option(&self) -> bool;

    /// The top-level member naming the server-side state a request continues (OpenAI
    /// Responses' `previous_response_id`), if the wire has one.
    fn previous_response_key(&self) -> Option<&'static str>;

    /// The top-level member whose keys are the model's own request parameters, passed
    /// through to the model's native body (Converse's `additionalModelRequestFields`), if the
    /// wire has one: a learned-unknown parameter is named there as it is at the top level
    /// of the native body, and dropped from there (`crate::reasoning::unknown_field`,
    /// `docs/reasoning.md#unknown-field-errors`).
    fn model_fields(&self) -> Option<&'static str>;

    /// Which endpoint of this wire a request path is (the path after a route's prefix, with
    /// its trailing `/` trimmed), or `None` when it is none of this wire's parsed paths.
    fn classify_path(&self, path: &str) -> Option<Endpoint>;

    /// Whether `path`, which no wire's [`Self::classify_path`] claims, is still recognisably
    /// this wire's API (Gemini's `/v1beta/` and `/v1alpha/` version segments): the dialect
    /// the proxy's own errors take on an unrouted path.
    fn path_hint(&self, path: &str) -> bool;

    /// The edits that put back on the echoed assistant turn `turn` (entries of `list`) the
    /// reasoning carriers of `captured` (the turn the response carried) that the echo lacks,
    /// where this wire keeps them; empty when the echo kept its own
    /// (`docs/reasoning.md#carrier-restore`).
    fn restore_turn(&self, list: &List<'_>, turn: &EchoedTurn, captured: &CapturedTurn)
        -> TurnEdit;

    /// Whether `captured` holds its first function call's thought signature (Gemini, and
    /// Gemini's OpenAI-compatible endpoint), so no placeholder goes on that call.
    fn first_call_signed(&self, captured: &CapturedTurn) -> bool;

    /// The placeholder thought signature for the list entry `entry` (`value`: the same entry
    /// parsed), when this wire carries one and the entry is a model turn with function calls
    /// whose first call has no signature; `None` otherwise.
    fn placeholder_signature(&self, list: &List<'_>, entry: &Object, value: &Value)
        -> Option<Edit>;

    // ---- response side: echoed turns, the response reader, error shapes ----

    /// Where a request holds its conversation and how it spells an echoed turn (read by the
    /// turn fingerprints, `crate::dialect::fingerprint`).
    fn conversation(&self) -> &'static Conversation;

    /// The assistant turn a request echoes, read from its entries' JSON texts: one message
    /// (Anthropic, Chat, Gemini; `entries[0]`), or the run of input items (Responses).
    /// Carriers the client kept are read too. `None` when an entry that must be JSON is not.
    fn echoed_turn(&self, entries: &[&str]) -> Option<CapturedTurn>;

    /// The body of an error the proxy answers itself (HTTP `status`, `message` starting with
    /// `cachekeeper:`, `code` the error's short label), as JSON text in this format's error
    /// shape (`docs/wire-formats.md#error-bodies`).
    fn error_body(&self, status: u16, message: &str, code: &str) -> String;

    /// The header that names the kind of an error the proxy answers itself with HTTP
    /// `status`, as `(name, value)`, when this format carries the kind outside the body
    /// (Bedrock's `x-amzn-ErrorType`, which the AWS SDKs read to pick the exception); `None`
    /// when the body says it all.
    fn error_kind_header(&self, status: u16) -> Option<(&'static str, &'static str)>;

    /// The SSE event that ends a stream the proxy cuts (upstream broke, shutdown) in this
    /// format's stream error shape, `code` the reason's label and `last_sequence` the last
    /// `sequence_number` the stream carried (Responses); `None` when the format has no error
    /// event (Gemini: the stream is aborted instead).
    fn stream_error_event(
        &self,
        message: &str,
        code: &str,
        last_sequence: Option<u64>,
    ) -> Option<String>;

    /// The provider's message when an error response (`status`, `error_body`) is its
    /// rejection of a signed reasoning block the request echoed (Anthropic's "Invalid
    /// `signature` in `thinking` block" 400); `None` otherwise, and for formats whose
    /// carriers are not checked that way.
    fn rejected_signature(&self, status: u16, error_body: &[u8]) -> Option<String>;

    /// A request path of this format (`/v1/messages`, …): what `cachekeeper replay` sends a
    /// recorded turn to when the record names none.
    fn example_path(&self) -> &'static str;

    /// How a text block that replaces an image is written (`cachekeeper replay`'s
    /// keep-newest comparison).
    fn image_placeholder_style(&self) -> super::doc::TextStyle;

    /// A fresh reader of one response in this format (its stream events or JSON body): what
    /// the response observer (`crate::response::observer`) drives.
    fn response_reader(&self) -> Box<dyn super::observed::ResponseReader>;
}

/// How a wire marks prompt-cache breakpoints in a request ([`WireFormat::cache_markers`];
/// `docs/caching.md#automatic-breakpoints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerStyle {
    /// A `cache_control` member on the block that ends the cached prefix (Anthropic
    /// Messages).
    CacheControl,
    /// A `{"cachePoint": {"type": "default"}}` block right after the block that ends the
    /// cached prefix, in `system`, `messages[].content` or `toolConfig.tools` (Bedrock
    /// Converse).
    CachePoint,
    /// None the proxy places: the wire's providers cache by themselves (OpenAI Chat,
    /// Responses, Gemini).
    Unmarked,
}

/// Where a request keeps its prompt's parts ([`WireFormat::prompt_layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptLayout {
    /// The top-level member holding the tool definitions, first in cache order (`tools`;
    /// Converse's `toolConfig`).
    pub tools: &'static str,
    /// The member of an object [`Self::tools`] holding the list of definitions (Converse's
    /// `toolConfig.tools`); `None` when the member is the list itself.
    pub tools_list: Option<&'static str>,
    /// The top-level members that may hold the system prompt (spellings of one member);
    /// empty when system prompts are turns of the list (OpenAI Chat's `system` / `developer`
    /// messages).
    pub system: &'static [&'static str],
    /// The top-level member holding the turn list.
    pub turns: &'static str,
    /// The member of a turn holding its content parts (`content`, Gemini's `parts`).
    pub parts: &'static str,
    /// The member of an object system prompt holding its parts, when the system prompt is
    /// one such object (Gemini's `systemInstruction: {"parts": [...]}`).
    pub system_parts: Option<&'static str>,
    /// A string in place of the turn list is one user message (OpenAI Responses' `input`).
    pub string_turns: bool,
    /// The role of a turn without a `role` member (Gemini: the user's).
    pub default_role: Option<&'static str>,
    /// The turn list is parsed into [`Doc::turns`] (a `messages` list of objects with
    /// `role` and `content`; its wrong shape is a parse error).
    pub parsed_turns: bool,
}

/// Which published image limits a wire's requests are held to when nothing more specific
/// is known ([`WireFormat::default_image_rules`]); the limits themselves live in
/// `crate::images::profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageRules {
    /// Anthropic's.
    Anthropic,
    /// OpenAI's.
    Openai,
    /// Gemini's.
    Gemini,
    /// The Bedrock Converse API's own, which hold every model on the wire (a Claude model is
    /// held to Anthropic's too, the tighter of each).
    Converse,
}

/// Where a wire carries reasoning in a request ([`WireFormat::reasoning_carriers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningCarriers {
    /// Reasoning text fields on assistant messages and top-level reasoning controls
    /// (OpenAI Chat Completions and the hosts that extend it).
    MessageFields,
    /// Signed `thinking` blocks in assistant content (Anthropic Messages).
    SignedBlocks,
    /// None the shaping pass edits (OpenAI Responses, Gemini).
    Untouched,
}

/// What a generation path is, for the passes ([`WireFormat::classify_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// Produces a model response (`/v1/messages`, `/chat/completions`, `/responses`,
    /// `:generateContent`, `:streamGenerateContent`).
    Generate,
    /// Counts tokens for a body (`/v1/messages/count_tokens`, `:countTokens`): gets the same
    /// rewrites so the count matches what would be sent.
    CountTokens,
}

impl Dialect {
    /// This dialect's [`WireFormat`]: the one place a dialect is mapped to its impl.
    pub fn format(self) -> &'static dyn WireFormat {
        match self {
            Dialect::Anthropic => &super::anthropic::Anthropic,
            Dialect::Openai => &super::openai::OpenaiChat,
            Dialect::OpenaiResponses => &super::responses::OpenaiResponses,
            Dialect::Gemini => &super::gemini::Gemini,
            Dialect::Converse => &super::converse::Converse,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_dialect_maps_to_its_own_impl() {
        for d in super::super::ALL {
            assert_eq!(d.format().dialect(), d);
        }
    }
}
