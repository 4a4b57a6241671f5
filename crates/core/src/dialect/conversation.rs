//! Where a request holds its conversation and how it spells an echoed turn: the layout the
//! fingerprints (`crate::dialect::fingerprint`) read a request by, one constant per wire
//! format ([`super::format::WireFormat::conversation`]).
//!
//! Sources: `docs/wire-formats.md` (each dialect's request shape) and
//! `docs/usage.md#turn-fingerprints` (what a digest normalizes).

/// One wire format's conversation layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversation {
    /// The request's top-level member holding the conversation: `messages` (Anthropic
    /// Messages, OpenAI Chat), `contents` (Gemini), `input` (OpenAI Responses).
    pub key: &'static str,
    /// The `role` of an assistant entry: `assistant`, Gemini `model`.
    pub assistant_role: &'static str,
    /// The entries are typed items and an assistant turn is a run of them (OpenAI Responses);
    /// `None`: an entry is one message, its `type` not read.
    pub items: Option<ItemTypes>,
    /// A string `content` is the same message as a list of one text block
    /// `{"type":"text","text":…}` (Anthropic Messages, OpenAI Chat).
    pub string_content_is_text_block: bool,
    /// The conversation may be a bare value instead of a list: itself one user message, a
    /// string spelling `{"role":"user","content":…}` (OpenAI Responses' string `input`).
    pub bare_input: bool,
    /// The key of a content block that is a cache marker and nothing else (Converse's
    /// `{"cachePoint": …}`): such blocks are left out of a digest, as `cache_control` members
    /// are, since clients move them every turn.
    pub marker_block: Option<&'static str>,
}

/// The item types of a conversation of typed items (OpenAI Responses `input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemTypes {
    /// The `type` of a message item. Optional on the wire (the easy input form omits it), so a
    /// digest removes it; an item of this type, or with none, is read by its `role`.
    pub message: &'static str,
    /// Item types that are part of an assistant turn whatever their role (`reasoning`,
    /// `function_call`). Any other type is not.
    pub turn: &'static [&'static str],
}

/// The turn of a conversation whose assistant turn is one message (`entries[0]`), read by
/// `read` from its JSON; `None` when it is not JSON (or there is no entry).
pub(crate) fn one_message(
    entries: &[&str],
    read: fn(&serde_json::Value) -> super::turn::CapturedTurn,
) -> Option<super::turn::CapturedTurn> {
    let v: serde_json::Value = serde_json::from_str(entries.first()?).ok()?;
    Some(read(&v))
}
