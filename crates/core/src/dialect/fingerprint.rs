//! Turn fingerprints: what a captured turn's carriers are keyed by, so that the same turn,
//! echoed by the agent in a later request, finds them (`docs/usage.md#turn-fingerprints`).
//!
//! - [`message_digest`]: SHA-256 of the message before the turn (the tool result or user
//!   message it answers) as the client sends it, in canonical JSON with the carrier fields and
//!   cache markers removed (clients move `cache_control` every turn; the carriers are what
//!   an agent may drop).
//! - [`turn_fingerprint`]: SHA-256 of that digest plus, for a turn with tool calls, every
//!   call's id, name and canonical arguments, in order; for a text-only turn, its text. Not the
//!   ids alone: local servers reuse ids like `call_0`, and agents repeat `screenshot {}`.
//! - [`echoed_turn`]: the turn read back from an assistant message (content, items) of a later
//!   request, carriers possibly missing: its fingerprint equals the captured one.
//!
//! Deterministic: the same bytes give the same digest on every run, machine and version of
//! serde (canonical JSON is written here, not left to a map's order). The scope (credential,
//! upstream host, model as the client named it) is added by the store, not here.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::dialect::canonical::{
    member_mut, members_mut, remove_member, set_member, write_node, Node,
};
use crate::dialect::conversation::Conversation;
use crate::dialect::turn::CapturedTurn;
use crate::dialect::Dialect;
use crate::json::scan;

/// Version tags, part of every hash: changing a rule here changes the tag.
const MESSAGE_TAG: &[u8] = b"cachekeeper.message.v1\0";
const TURN_TAG: &[u8] = b"cachekeeper.turn.v1\0";

/// SHA-256 digest of the message before a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

/// SHA-256 fingerprint of an assistant turn (its calls or text, plus the [`Digest`] of the
/// message before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

fn hex(bytes: &[u8; 32], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
}

impl fmt::Display for Digest {
    /// Lower-case hex, 64 characters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        hex(&self.0, f)
    }
}

impl fmt::Display for Fingerprint {
    /// Lower-case hex, 64 characters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        hex(&self.0, f)
    }
}

/// Keys that are cache markers, removed at any depth.
const MARKERS: &[&str] = &["cache_control", "prompt_cache_breakpoint"];

/// Carrier keys of a message / item / part, removed at the message's top level (OpenAI Chat),
/// on each tool call (Gemini's OpenAI endpoint) and on each part (Gemini).
const CARRIER_KEYS: &[&str] = &[
    "reasoning_content",
    "reasoning",
    "reasoning_details",
    "reasoning_opaque",
    "reasoning_text",
    "extra_content",
    "thoughtSignature",
    "thought_signature",
];

/// Content-list element types that are carriers, removed from lists (Anthropic thinking
/// blocks, Responses reasoning items).
const CARRIER_TYPES: &[&str] = &["thinking", "redacted_thinking", "reasoning"];

fn strip_markers(n: &mut Node<'_>) {
    match n {
        Node::Object(members) => {
            MARKERS.iter().for_each(|k| remove_member(members, k));
            members.iter_mut().for_each(|(_, v)| strip_markers(v));
        }
        Node::Array(items) => items.iter_mut().for_each(strip_markers),
        _ => {}
    }
}

fn strip_carrier_keys(n: &mut Node<'_>) {
    if let Node::Object(members) = n {
        CARRIER_KEYS.iter().for_each(|k| remove_member(members, k));
    }
}

/// `n` is an object whose one member is `key` (a Converse `{"cachePoint": …}` block).
fn is_only_member(n: &Node<'_>, key: &str) -> bool {
    matches!(n, Node::Object(members) if members.len() == 1 && members[0].0 == key)
}

/// The message in the form that is hashed: markers and carriers removed, and the equivalent
/// spellings a client may switch between made one (a string `content` is a list of one text
/// block; a Responses string input or `type: "message"` item is the easy input form
/// `{"role":"user","content":…}`).
fn normalize(conv: &Conversation, n: &mut Node<'_>) {
    strip_markers(n);
    strip_carrier_keys(n);
    if !matches!(n, Node::Object(_)) {
        if let (true, Node::Str(s)) = (conv.bare_input, &*n) {
            let content = Node::Str(s.clone());
            // Sorted: `content` before `role`.
            *n = Node::Object(vec![
                (Cow::Borrowed("content"), content),
                (Cow::Borrowed("role"), Node::Str(Cow::Borrowed("user"))),
            ]);
        }
        return;
    }
    if conv.string_content_is_text_block {
        if let Some(Node::Str(s)) = n.get("content") {
            let block = Node::Object(vec![
                (Cow::Borrowed("text"), Node::Str(s.clone())),
                (Cow::Borrowed("type"), Node::Str(Cow::Borrowed("text"))),
            ]);
            set_member(n, "content", Node::Array(vec![block]));
        }
    }
    if let Some(items) = &conv.items {
        if n.str_member("type") == Some(items.message) {
            if let Some(members) = members_mut(n) {
                remove_member(members, "type");
            }
        }
    }
    if let Some(Node::Array(items)) = member_mut(n, "content") {
        items.retain(|b| {
            !b.str_member("type")
                .is_some_and(|t| CARRIER_TYPES.contains(&t))
                && !conv.marker_block.is_some_and(|k| is_only_member(b, k))
        });
    }
    for list in ["tool_calls", "parts"] {
        if let Some(Node::Array(items)) = member_mut(n, list) {
            items.iter_mut().for_each(strip_carrier_keys);
        }
    }
}

/// The digest of the message before a turn (Anthropic / Chat: a `messages[i]` object;
/// Responses: an `input` item, or the string `input`; Gemini: a `contents[i]` object), as the
/// client sends it (before any rewrite by the proxy). Bytes that are not JSON are hashed as
/// they are (still deterministic; such a request is forwarded unchanged anyway).
///
/// Large messages (a tool result with a screenshot, [`MEMO_MIN_BYTES`] or more) are remembered
/// by an xxh3-128 hash of their exact bytes ([`MEMO_ENTRIES`] of them): an agent re-sends its
/// history every turn, and the canonical form of a megabyte of base64 costs tens of ms to
/// build and hash. The memo only saves the work: the digest is the same either way.
pub fn message_digest(dialect: Dialect, message_json: &[u8]) -> Digest {
    if message_json.len() < MEMO_MIN_BYTES {
        return compute_digest(dialect, message_json);
    }
    let mut raw = xxhash_rust::xxh3::Xxh3::new();
    raw.update(dialect.as_str().as_bytes());
    raw.update(&[0]);
    raw.update(message_json);
    let id = raw.digest128();
    if let Some(d) = MEMO.lock().ok().and_then(|m| m.get(&id).copied()) {
        return d;
    }
    let d = compute_digest(dialect, message_json);
    if let Ok(mut m) = MEMO.lock() {
        if m.len() >= MEMO_ENTRIES {
            m.clear();
        }
        m.insert(id, d);
    }
    d
}

/// Messages at least this long (bytes) have their digest remembered ([`message_digest`]).
pub(crate) const MEMO_MIN_BYTES: usize = 16 * 1024;

/// Most digests remembered (48 bytes each); the memo starts over when full.
pub(crate) const MEMO_ENTRIES: usize = 65_536;

static MEMO: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<u128, Digest>>> =
    std::sync::LazyLock::new(Default::default);

fn compute_digest(dialect: Dialect, message_json: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update(MESSAGE_TAG);
    match canonical_message(dialect, message_json) {
        Some(text) => {
            h.update(b"json\0");
            h.update(text.as_bytes());
        }
        None => {
            h.update(b"raw\0");
            h.update(message_json);
        }
    }
    Digest(h.finalize().into())
}

/// The normalized message ([`normalize`]) as canonical JSON text, `None` when serde_json does
/// not parse it. Read by the span scanner ([`Node::scanned`]: no `serde_json::Value` built),
/// else (nesting past [`MAX_SCAN_DEPTH`]) through a `Value`: the same text either way.
fn canonical_message(dialect: Dialect, message_json: &[u8]) -> Option<String> {
    let conv = dialect.format().conversation();
    let mut out = String::with_capacity(message_json.len());
    if let Some(mut n) = Node::scanned(message_json) {
        normalize(conv, &mut n);
        write_node(&n, &mut out);
        return Some(out);
    }
    let v: Value = serde_json::from_slice(message_json).ok()?;
    let mut n = Node::from_value(&v);
    normalize(conv, &mut n);
    write_node(&n, &mut out);
    Some(out)
}

/// The entries of a request's conversation ([`Conversation::key`]): its elements, or (a
/// conversation that may be bare, [`Conversation::bare_input`]) the value itself when it is
/// not a list. `None` when the body is not a JSON object, or the member is absent or not a
/// list (and may not be bare).
fn conversation_entries<'a>(
    conv: &Conversation,
    request_body: &'a [u8],
) -> Option<Vec<&'a RawValue>> {
    let top: HashMap<String, &RawValue> = serde_json::from_slice(request_body).ok()?;
    let list = *top.get(conv.key)?;
    match serde_json::from_str::<Vec<&RawValue>>(list.get()) {
        Ok(entries) => Some(entries),
        Err(_) if conv.bare_input && list.get() != "null" => Some(vec![list]),
        Err(_) => None,
    }
}

#[cfg_attr(not(test), allow(dead_code))] // tests; the server digests the last message it already holds
/// The digest of a request's last message (the one the response's turn answers): the last of
/// `messages` (Anthropic, Chat), of `contents` (Gemini), of `input` (Responses; a string
/// `input` is one user message). `None` when the body is not JSON or has no such message.
pub(crate) fn request_digest(dialect: Dialect, request_body: &[u8]) -> Option<Digest> {
    let entries = conversation_entries(dialect.format().conversation(), request_body)?;
    let last = entries.last()?;
    Some(message_digest(dialect, last.get().as_bytes()))
}

fn field(h: &mut Sha256, value: Option<&str>) {
    match value {
        None => h.update([0u8]),
        Some(s) => {
            h.update([1u8]);
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
    }
}

/// The fingerprint of `turn` answering the message whose digest is `prev`: its calls (id,
/// name, canonical arguments, each length-prefixed, in order) when it has any, else its text.
pub fn turn_fingerprint(prev: &Digest, turn: &CapturedTurn) -> Fingerprint {
    let mut h = Sha256::new();
    h.update(TURN_TAG);
    h.update(prev.0);
    if turn.calls.is_empty() {
        h.update(b"text\0");
        field(&mut h, Some(&turn.text));
    } else {
        h.update(b"calls\0");
        h.update((turn.calls.len() as u64).to_le_bytes());
        for c in &turn.calls {
            field(&mut h, c.id.as_deref());
            field(&mut h, Some(&c.name));
            field(&mut h, Some(&c.arguments));
        }
    }
    Fingerprint(h.finalize().into())
}

/// The turn of an assistant message a client echoes in a later request: Anthropic / Chat a
/// `messages[i]` object, Gemini a `contents[i]` object, Responses the turn's items (a JSON list
/// of the input items from the first item after the message before the turn up to the next
/// user / tool item; a single item object is read as a list of one). Carriers the client kept
/// are read too. `None` when not JSON. (Tests; the pipeline reads the turns of its one parse
/// with [`echoed_turns_in`].)
#[cfg(any(test, feature = "testing"))]
pub fn echoed_turn(dialect: Dialect, assistant_json: &[u8]) -> Option<CapturedTurn> {
    let format = dialect.format();
    if format.conversation().items.is_none() {
        return format.echoed_turn(&[std::str::from_utf8(assistant_json).ok()?]);
    }
    let items: Vec<&RawValue> = match serde_json::from_slice(assistant_json) {
        Ok(items) => items,
        Err(_) => vec![serde_json::from_slice(assistant_json).ok()?],
    };
    let items: Vec<&str> = items.iter().map(|i| i.get()).collect();
    format.echoed_turn(&items)
}

/// One assistant turn of a request, as the client echoes it, with its fingerprint.
#[derive(Debug, Clone, PartialEq)]
pub struct EchoedTurn {
    /// Index of the turn's (first) entry in `messages` / `contents` / `input`.
    pub index: usize,
    /// How many entries the turn spans (1; Responses: its run of output items).
    pub len: usize,
    /// The digest of the entry before it.
    pub prev: Digest,
    /// [`turn_fingerprint`] of (`prev`, `turn`).
    pub fingerprint: Fingerprint,
    /// The turn as echoed (carriers the client kept included).
    pub turn: CapturedTurn,
}

/// Whether an entry (its JSON text) is (part of) an assistant turn: Anthropic / Chat role
/// `assistant`, Gemini role `model`; Responses a `reasoning` or `function_call` item, or an
/// assistant `message`. Read with the span scanner (a large tool result is skipped over, not
/// decoded).
fn is_assistant(conv: &Conversation, entry: &str) -> bool {
    let Some(obj) = scan::object_at(entry, 0) else {
        return false;
    };
    let field = |k: &str| obj.get(k).and_then(|m| scan::string_at(entry, &m.value));
    let by_role = || field("role").as_deref() == Some(conv.assistant_role);
    let Some(items) = &conv.items else {
        return by_role();
    };
    match field("type").as_deref() {
        Some(t) if items.turn.contains(&t) => true,
        Some(t) if t == items.message => by_role(),
        None => by_role(),
        Some(_) => false,
    }
}

/// Every assistant turn a request echoes that follows another entry (the message it
/// answered), in order, with its fingerprint: what the restore side matches captured turns
/// against. Empty when the body is not JSON or has no list. (Tests; the pipeline reads its one
/// parse with [`echoed_turns_in`].)
#[cfg(test)]
pub(crate) fn echoed_turns(dialect: Dialect, request_body: &[u8]) -> Vec<EchoedTurn> {
    let entries =
        conversation_entries(dialect.format().conversation(), request_body).unwrap_or_default();
    let entries: Vec<&str> = entries.iter().map(|e| e.get()).collect();
    echoed_turns_in(dialect, &entries)
}

/// [`echoed_turns`] over a turn list already split into its entries' JSON texts (the
/// pipeline's one parse: `messages`, `contents` or `input` elements, in order).
pub(crate) fn echoed_turns_in(dialect: Dialect, entries: &[&str]) -> Vec<EchoedTurn> {
    let format = dialect.format();
    let conv = format.conversation();
    let mut out = Vec::new();
    let mut i = 1;
    while i < entries.len() {
        if !is_assistant(conv, entries[i]) {
            i += 1;
            continue;
        }
        let mut len = 1;
        if conv.items.is_some() {
            while entries.get(i + len).is_some_and(|e| is_assistant(conv, e)) {
                len += 1;
            }
        }
        if let Some(turn) = format.echoed_turn(&entries[i..i + len]) {
            let prev = message_digest(dialect, entries[i - 1].as_bytes());
            out.push(EchoedTurn {
                index: i,
                len,
                prev,
                fingerprint: turn_fingerprint(&prev, &turn),
                turn,
            });
        }
        i += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::canonical::canonical;
    use crate::dialect::testing::fixture;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn digest_ignores_moved_cache_control_and_key_order() {
        let a = br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok","cache_control":{"type":"ephemeral"}}]}"#;
        let b = br#"{"content":[{"tool_use_id":"t1","type":"tool_result","content":"ok"}],"role":"user"}"#;
        assert_eq!(
            message_digest(Dialect::Anthropic, a),
            message_digest(Dialect::Anthropic, b)
        );
        let c = br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ko"}]}"#;
        assert_ne!(
            message_digest(Dialect::Anthropic, a),
            message_digest(Dialect::Anthropic, c)
        );
    }

    #[test]
    fn string_content_equals_one_text_block() {
        let a = br#"{"role":"user","content":"hi"}"#;
        let b = br#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#;
        assert_eq!(
            message_digest(Dialect::Openai, a),
            message_digest(Dialect::Openai, b)
        );
        let s = br#""hi""#;
        let e = br#"{"type":"message","role":"user","content":"hi"}"#;
        assert_eq!(
            message_digest(Dialect::OpenaiResponses, s),
            message_digest(Dialect::OpenaiResponses, e)
        );
        assert_eq!(
            request_digest(Dialect::OpenaiResponses, br#"{"input":"hi"}"#),
            Some(message_digest(Dialect::OpenaiResponses, e))
        );
    }

    #[test]
    fn garbage_is_hashed_not_refused() {
        let d = message_digest(Dialect::Gemini, b"\xff\xfe not json");
        assert_eq!(d, message_digest(Dialect::Gemini, b"\xff\xfe not json"));
        assert_eq!(request_digest(Dialect::Gemini, b"\xff"), None);
        assert_eq!(
            request_digest(Dialect::Anthropic, br#"{"messages":[]}"#),
            None
        );
        assert_eq!(
            request_digest(Dialect::Anthropic, br#"{"messages":"x"}"#),
            None
        );
        assert_eq!(echoed_turn(Dialect::Openai, b"{"), None);
        assert!(echoed_turns(Dialect::Openai, b"{").is_empty());
        assert!(echoed_turns(Dialect::OpenaiResponses, br#"{"input":"hi"}"#).is_empty());
        // An assistant turn first answers nothing: not echoed as a turn.
        assert!(echoed_turns(
            Dialect::Anthropic,
            br#"{"messages":[{"role":"assistant","content":"x"},5]}"#
        )
        .is_empty());
        let t = echoed_turn(
            Dialect::Openai,
            br#"{"content":5,"tool_calls":[1,{"function":3}]}"#,
        )
        .unwrap();
        assert_eq!(t.calls.len(), 2);
    }

    #[test]
    fn fingerprint_is_stable_and_separates_prev_and_calls() {
        let prev = message_digest(Dialect::Openai, br#"{"role":"tool","content":"x"}"#);
        let other = message_digest(Dialect::Openai, br#"{"role":"tool","content":"y"}"#);
        let turn = echoed_turn(
            Dialect::Openai,
            json!({"role":"assistant","tool_calls":[{"id":"call_0","type":"function",
                "function":{"name":"screenshot","arguments":"{}"}}]})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let f = turn_fingerprint(&prev, &turn);
        assert_eq!(f, turn_fingerprint(&prev, &turn.clone()));
        assert_ne!(f, turn_fingerprint(&other, &turn));
        assert_eq!(f.to_string().len(), 64);
        let text_only = CapturedTurn {
            text: "screenshot".into(),
            ..CapturedTurn::default()
        };
        assert_ne!(f, turn_fingerprint(&prev, &text_only));
    }

    /// The digest as it was computed before the span-scanner read (a `serde_json::Value`, its
    /// normalized form, canonical text): digests are persisted in session records, so the new
    /// read must give the same bytes for every input.
    mod oracle {
        use super::super::{CARRIER_KEYS, CARRIER_TYPES, MARKERS, MESSAGE_TAG};
        use crate::dialect::Dialect;
        use serde_json::Value;
        use sha2::{Digest as _, Sha256};

        /// Canonical JSON text of `v`: object keys sorted (by their UTF-8 bytes), no whitespace,
        /// strings and numbers as serde_json writes them.
        pub(super) fn canonical(v: &Value) -> String {
            let mut out = String::new();
            write_canonical(v, &mut out);
            out
        }

        fn write_canonical(v: &Value, out: &mut String) {
            match v {
                Value::Object(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    out.push('{');
                    for (i, k) in keys.into_iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        write_canonical(&Value::String(k.clone()), out);
                        out.push(':');
                        if let Some(v) = map.get(k) {
                            write_canonical(v, out);
                        }
                    }
                    out.push('}');
                }
                Value::Array(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        write_canonical(item, out);
                    }
                    out.push(']');
                }
                // Scalars: serde_json's own text (strings escaped, numbers shortest round-trip).
                scalar => out.push_str(&scalar.to_string()),
            }
        }

        fn strip_markers(v: &mut Value) {
            match v {
                Value::Object(map) => {
                    MARKERS.iter().for_each(|k| {
                        map.remove(*k);
                    });
                    map.values_mut().for_each(strip_markers);
                }
                Value::Array(items) => items.iter_mut().for_each(strip_markers),
                _ => {}
            }
        }

        fn strip_carrier_keys(v: &mut Value) {
            if let Value::Object(map) = v {
                CARRIER_KEYS.iter().for_each(|k| {
                    map.remove(*k);
                });
            }
        }

        /// The message in the form that is hashed: markers and carriers removed, and the equivalent
        /// spellings a client may switch between made one (a string `content` is a list of one text
        /// block; a Responses string input or `type: "message"` item is the easy input form
        /// `{"role":"user","content":…}`).
        fn normalize(dialect: Dialect, v: &mut Value) {
            strip_markers(v);
            strip_carrier_keys(v);
            let Value::Object(map) = v else {
                if let (Dialect::OpenaiResponses, Value::String(s)) = (dialect, &*v) {
                    let content = Value::String(s.clone());
                    *v = serde_json::json!({"role": "user", "content": content});
                }
                return;
            };
            match dialect {
                Dialect::Anthropic | Dialect::Openai => {
                    if let Some(Value::String(s)) = map.get("content") {
                        let block = serde_json::json!([{"type": "text", "text": s}]);
                        map.insert("content".to_owned(), block);
                    }
                }
                Dialect::OpenaiResponses => {
                    if map.get("type").and_then(Value::as_str) == Some("message") {
                        map.remove("type");
                    }
                }
                Dialect::Gemini | Dialect::Converse => {}
            }
            if let Some(Value::Array(items)) = map.get_mut("content") {
                items.retain(|b| {
                    !b.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| CARRIER_TYPES.contains(&t))
                });
            }
            for list in ["tool_calls", "parts"] {
                if let Some(Value::Array(items)) = map.get_mut(list) {
                    items.iter_mut().for_each(strip_carrier_keys);
                }
            }
        }

        pub(super) fn compute_digest(dialect: Dialect, message_json: &[u8]) -> [u8; 32] {
            let mut h = Sha256::new();
            h.update(MESSAGE_TAG);
            match serde_json::from_slice::<Value>(message_json) {
                Ok(mut v) => {
                    normalize(dialect, &mut v);
                    h.update(b"json\0");
                    h.update(canonical(&v).as_bytes());
                }
                Err(_) => {
                    h.update(b"raw\0");
                    h.update(message_json);
                }
            }
            h.finalize().into()
        }
    }

    const DIALECTS: [Dialect; 4] = [
        Dialect::Anthropic,
        Dialect::Openai,
        Dialect::OpenaiResponses,
        Dialect::Gemini,
    ];

    /// `json`'s digest, new read and old, in every dialect (and the canonical text of a
    /// `Value`, where it parses).
    fn same_as_before(json: &[u8]) {
        for d in DIALECTS {
            assert_eq!(
                compute_digest(d, json).0,
                oracle::compute_digest(d, json),
                "{d:?} {}",
                String::from_utf8_lossy(json)
            );
        }
        if let Ok(v) = serde_json::from_slice::<Value>(json) {
            assert_eq!(canonical(&v), oracle::canonical(&v));
        }
    }

    /// Every message of the recorded requests, every one-byte change of some, and shapes at
    /// the edges (escapes, unicode, numbers, key order, duplicates, nesting, not JSON).
    #[test]
    fn the_digest_is_the_one_computed_before() {
        let mut messages: Vec<Vec<u8>> = Vec::new();
        for name in [
            "anthropic_request.json",
            "anthropic_next_request.json",
            "chat_request.json",
            "chat_next_request.json",
            "gemini_request.json",
            "gemini_next_request.json",
            "responses_request.json",
            "responses_next_request.json",
        ] {
            let body: Value = serde_json::from_slice(&fixture(name)).unwrap();
            for list in ["messages", "contents", "input"] {
                match body.get(list) {
                    Some(Value::Array(items)) => {
                        messages.extend(items.iter().map(|m| m.to_string().into_bytes()))
                    }
                    Some(other) => messages.push(other.to_string().into_bytes()),
                    None => {}
                }
            }
        }
        assert!(messages.len() > 15, "{}", messages.len());
        for m in &messages {
            same_as_before(m);
        }
        let deep = |n: usize, open: &str, close: &str| {
            format!(
                r#"{{"role":"user","content":{}1{}}}"#,
                open.repeat(n),
                close.repeat(n)
            )
        };
        let mut edges: Vec<Vec<u8>> = [
            r#"{"role":"user","content":"hi"}"#,
            r#" {"content" : "hi" ,"role":"user"} "#,
            r#"{"role":"user","content":"a","content":"b"}"#,
            r#"{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"content":"y"}"#,
            r#"{"role":"user","content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"x"},{"type":7},5,"s"]}"#,
            r#"{"role":"user","cont\u0065nt":"esc\u00e9\n\t\"\\\/\b\f\u0001\u001f\u007f\ud83d\ude00"}"#,
            "{\"role\":\"user\",\"content\":\"raw é 😀 \u{7f}\"}",
            r#"{"role":"user","content":"\ud800"}"#,
            r#"{"role":"user","content":"\udc00\ud800"}"#,
            r#"{"role":"user","\ud800":1}"#,
            r#"{"n":[0,-0,1,-1,1.0,1.50,1e2,1E+2,-1e-2,0.1,1e300,18446744073709551615,18446744073709551616,-9223372036854775808,-9223372036854775809,123456789012345678901234567890,5e-324,2.2250738585072014e-308]}"#,
            r#"{"n":1e400}"#,
            r#"{"n":-1e999}"#,
            r#"{"b":1,"a":2,"é":3,"e":4,"Z":5,"":6,"aa":7,"a\u0000":8}"#,
            r#"{"type":"message","role":"user","content":"hi","reasoning":"r","extra_content":{}}"#,
            r#"{"type":"message","type":"other","role":"assistant"}"#,
            r#"{"role":"assistant","tool_calls":[{"id":"c","extra_content":{"google":{}},"function":{"name":"f"}},7],"reasoning_content":"x"}"#,
            r#"{"role":"model","parts":[{"text":"a","thoughtSignature":"s","cache_control":1},{"thought_signature":"t"}]}"#,
            r#""a string input""#,
            r#""""#,
            r#"[{"cache_control":1,"a":[{"prompt_cache_breakpoint":true}]}]"#,
            "7",
            "-0",
            "null",
            "true",
            "",
            " ",
            "{",
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":1} x"#,
            "{\"a\":\"\u{1}\"}",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        for n in [99, 100, 101, 102, 126, 127, 128, 129, 200, 5000] {
            edges.push(deep(n, "[", "]").into_bytes());
            edges.push(deep(n, r#"{"a":"#, "}").into_bytes());
        }
        edges.push(b"{\"role\":\"user\",\"content\":\"\xff\"}".to_vec());
        edges.push(b"{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}".to_vec());
        for e in &edges {
            same_as_before(e);
        }
        let samples = [
            &br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok \u00e9","cache_control":{"type":"ephemeral"}},{"type":"text","text":"n\"ext"}]}"#[..],
            br#"{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1.5e3}"}}]}"#,
            br#"{"type":"message","role":"user","content":[{"type":"input_text","text":"x"},{"type":"reasoning","id":"rs"}],"n":[-0,1.0,12]}"#,
        ];
        let mut checked = 0;
        for base in samples {
            for m in crate::dialect::testing::one_byte_mutations(base) {
                same_as_before(&m);
                checked += 1;
            }
        }
        assert!(checked > 5_000, "{checked}");
    }

    /// JSON text built from the spellings a client may use: any key order, duplicates,
    /// whitespace, escapes, numbers in every form, the keys the normalization reads.
    fn json_text() -> impl Strategy<Value = String> {
        let string = prop::sample::select(vec![
            r#""""#,
            r#""hi""#,
            r#""text""#,
            r#""thinking""#,
            r#""redacted_thinking""#,
            r#""reasoning""#,
            r#""message""#,
            r#""user""#,
            r#""é😀""#,
            r#""\u00e9""#,
            r#""a\nb\t\"q\"\\""#,
            r#""\/\b\f\r\u0000\u001F""#,
            r#""\ud83d\ude00""#,
            r#""\ud800""#,
            r#""th\u0069nking""#,
            "\"\u{7f}\"",
        ]);
        let number = prop::sample::select(vec![
            "0",
            "-0",
            "1",
            "-1",
            "42",
            "1.0",
            "1.50",
            "-0.0",
            "1e2",
            "1E+2",
            "-1e-2",
            "0.1",
            "1e300",
            "1e400",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "123456789012345678901234567890",
        ]);
        let literal = prop::sample::select(vec!["true", "false", "null"]);
        let leaf = prop_oneof![
            string.prop_map(str::to_owned),
            number.prop_map(str::to_owned),
            literal.prop_map(str::to_owned),
        ];
        let key = prop::sample::select(vec![
            "role",
            "content",
            "type",
            "text",
            "cache_control",
            "prompt_cache_breakpoint",
            "reasoning_content",
            "reasoning",
            "reasoning_details",
            "extra_content",
            "thoughtSignature",
            "thought_signature",
            "tool_calls",
            "parts",
            "a",
            "b",
            "é",
            "",
            r"cont\u0065nt",
            r"typ\u0065",
            "A",
            "aa",
        ]);
        let ws = prop::sample::select(vec!["", "", "", " ", "\n", "\t", " \r\n "]);
        leaf.prop_recursive(5, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec((key.clone(), ws.clone(), inner.clone()), 0..6).prop_map(
                    |members| {
                        let body: Vec<String> = members
                            .into_iter()
                            .map(|(k, w, v)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
                            .collect();
                        format!("{{{}}}", body.join(","))
                    }
                ),
                prop::collection::vec((ws.clone(), inner), 0..5).prop_map(|items| {
                    let body: Vec<String> =
                        items.into_iter().map(|(w, v)| format!("{w}{v}")).collect();
                    format!("[{}]", body.join(","))
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 2_000,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x5EED_D16E),
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        /// Generated messages digest as before, whole and as a message object's `content`.
        #[test]
        fn generated_messages_digest_as_before(v in json_text()) {
            same_as_before(v.as_bytes());
            let wrapped = format!(r#"{{"role":"user","content":{v},"type":"message"}}"#);
            same_as_before(wrapped.as_bytes());
        }
    }

    /// SHA-256 of `cachekeeper.message.v1\0json\0` and the canonical text
    /// `{"content":[{"text":"Say hello","type":"text"}],"role":"user"}` (checked by hand).
    const PINNED_ANTHROPIC: &str =
        "64c6c93ce5db48c48e355be5d2a96f0d7a00301c3a1dff87d8f2f7dfda85762d";
    /// The same over `{"content":"Say hello","role":"user"}`.
    const PINNED_RESPONSES: &str =
        "cbb7c9215565586ab015542c8c8e93b51868ad1efafc19b7c17d48367e0e67cb";

    /// Digests persisted before this read (session records) are found again: two pinned
    /// (computed by the `Value` read).
    #[test]
    fn pinned_digests_do_not_move() {
        let d = message_digest(
            Dialect::Anthropic,
            br#"{"role":"user","content":"Say hello"}"#,
        );
        let r = message_digest(Dialect::OpenaiResponses, br#""Say hello""#);
        assert_eq!(
            d.0,
            oracle::compute_digest(
                Dialect::Anthropic,
                br#"{"role":"user","content":"Say hello"}"#
            )
        );
        assert_eq!(d.to_string(), PINNED_ANTHROPIC);
        assert_eq!(r.to_string(), PINNED_RESPONSES);
    }
}
