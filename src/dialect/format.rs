//! The one trait per wire format: everything cachekeeper knows about one dialect's wire, asked
//! through [`WireFormat`] by the policy modules (images, reasoning shaping, caching, accounting,
//! the proxy), none of which matches on [`Dialect`].
//!
//! One impl per dialect, one file each: [`super::anthropic`] (Anthropic Messages),
//! [`super::openai`] (OpenAI Chat Completions), [`super::responses`] (OpenAI Responses),
//! [`super::gemini`] (Gemini `generateContent`). [`Dialect::format`] is the one table from a
//! dialect to its impl. Adding a wire format: `docs/dev/new-wire-format.md`.

use super::conversation::Conversation;
use super::turn::CapturedTurn;
use super::Dialect;

/// One wire format: its request view, prefix positions, restore edits and path
/// classification (the request side), its echoed-turn reading, response observer and error
/// shapes (the response side). Implementations are unit structs, one per [`Dialect`].
pub(crate) trait WireFormat: Sync + 'static {
    /// The dialect this impl describes.
    fn dialect(&self) -> Dialect;

    // ---- request side ----

    // ---- end of the request side ----
    //
    // (The two sides are kept apart so they can grow independently.)
    //
    // ---- response side ----

    /// Where a request holds its conversation and how it spells an echoed turn (read by the
    /// turn fingerprints, `crate::response::fingerprint`).
    fn conversation(&self) -> &'static Conversation;

    /// The assistant turn a request echoes, read from its entries' JSON texts: one message
    /// (Anthropic, Chat, Gemini; `entries[0]`), or the run of input items (Responses).
    /// Carriers the client kept are read too. `None` when an entry that must be JSON is not.
    fn echoed_turn(&self, entries: &[&str]) -> Option<CapturedTurn>;

    /// The body of an error the proxy answers itself (HTTP `status`, `message` starting with
    /// `cachekeeper:`, `code` the error's short label), as JSON text in this format's error
    /// shape (`docs/wire-formats.md#error-bodies`).
    fn error_body(&self, status: u16, message: &str, code: &str) -> String;

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

    // ---- end of the response side ----
}

impl Dialect {
    /// This dialect's [`WireFormat`]: the one place a dialect is mapped to its impl.
    pub(crate) fn format(self) -> &'static dyn WireFormat {
        match self {
            Dialect::Anthropic => &super::anthropic::Anthropic,
            Dialect::Openai => &super::openai::OpenaiChat,
            Dialect::OpenaiResponses => &super::responses::OpenaiResponses,
            Dialect::Gemini => &super::gemini::Gemini,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_maps_to_its_own_impl() {
        for d in [
            Dialect::Anthropic,
            Dialect::Openai,
            Dialect::OpenaiResponses,
            Dialect::Gemini,
        ] {
            assert_eq!(d.format().dialect(), d);
        }
    }
}
