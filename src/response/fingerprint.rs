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

use std::fmt;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::turn::CapturedTurn;
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
pub(crate) struct Fingerprint(pub [u8; 32]);

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

/// Canonical JSON text of `v`: object keys sorted (by their UTF-8 bytes), no whitespace,
/// strings and numbers as serde_json writes them.
pub(crate) fn canonical(v: &Value) -> String {
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
        Dialect::Gemini => {}
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

/// The digest of the message before a turn (Anthropic / Chat: a `messages[i]` object;
/// Responses: an `input` item, or the string `input`; Gemini: a `contents[i]` object), as the
/// client sends it (before any rewrite by the proxy). Bytes that are not JSON are hashed as
/// they are (still deterministic; such a request is forwarded unchanged anyway).
///
/// Large messages (a tool result with a screenshot, [`MEMO_MIN_BYTES`] or more) are remembered
/// by an xxh3-128 hash of their exact bytes ([`MEMO_ENTRIES`] of them): an agent re-sends its
/// history every turn, and the canonical form of a megabyte of base64 costs tens of ms to
/// build and hash. The memo only saves the work: the digest is the same either way.
pub(crate) fn message_digest(dialect: Dialect, message_json: &[u8]) -> Digest {
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
    Digest(h.finalize().into())
}

#[derive(Deserialize)]
struct RequestLists<'a> {
    #[serde(borrow, default)]
    messages: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    contents: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[cfg_attr(not(test), allow(dead_code))] // tests; the server digests the last message it already holds
/// The digest of a request's last message (the one the response's turn answers): the last of
/// `messages` (Anthropic, Chat), of `contents` (Gemini), of `input` (Responses; a string
/// `input` is one user message). `None` when the body is not JSON or has no such message.
pub(crate) fn request_digest(dialect: Dialect, request_body: &[u8]) -> Option<Digest> {
    let lists: RequestLists<'_> = serde_json::from_slice(request_body).ok()?;
    let last = match dialect {
        Dialect::Anthropic | Dialect::Openai => lists.messages?.last().copied()?,
        Dialect::Gemini => lists.contents?.last().copied()?,
        Dialect::OpenaiResponses => {
            let input = lists.input?;
            match serde_json::from_str::<Vec<&RawValue>>(input.get()) {
                Ok(items) => items.last().copied()?,
                Err(_) => input,
            }
        }
    };
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
pub(crate) fn turn_fingerprint(prev: &Digest, turn: &CapturedTurn) -> Fingerprint {
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
/// are read too. `None` when not JSON.
pub(crate) fn echoed_turn(dialect: Dialect, assistant_json: &[u8]) -> Option<CapturedTurn> {
    if dialect == Dialect::OpenaiResponses {
        let items: Vec<String> = match serde_json::from_slice::<Vec<&RawValue>>(assistant_json) {
            Ok(items) => items.iter().map(|i| i.get().to_owned()).collect(),
            Err(_) => {
                let one: &RawValue = serde_json::from_slice(assistant_json).ok()?;
                vec![one.get().to_owned()]
            }
        };
        return Some(super::responses::items_turn(&items));
    }
    let v: Value = serde_json::from_slice(assistant_json).ok()?;
    Some(match dialect {
        Dialect::Anthropic => super::anthropic::message_turn(&v),
        Dialect::Openai => super::chat::message_turn(&v),
        Dialect::Gemini => super::gemini::content_turn(&v),
        Dialect::OpenaiResponses => return None,
    })
}

/// One assistant turn of a request, as the client echoes it, with its fingerprint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EchoedTurn {
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
fn is_assistant(dialect: Dialect, entry: &str) -> bool {
    let Some(obj) = scan::object_at(entry, 0) else {
        return false;
    };
    let field = |k: &str| obj.get(k).and_then(|m| scan::string_at(entry, &m.value));
    let role = field("role");
    match dialect {
        Dialect::Anthropic | Dialect::Openai => role.as_deref() == Some("assistant"),
        Dialect::Gemini => role.as_deref() == Some("model"),
        Dialect::OpenaiResponses => match field("type").as_deref() {
            Some("reasoning" | "function_call") => true,
            Some("message") | None => role.as_deref() == Some("assistant"),
            Some(_) => false,
        },
    }
}

/// Every assistant turn a request echoes that follows another entry (the message it
/// answered), in order, with its fingerprint: what the restore side matches captured turns
/// against. Empty when the body is not JSON or has no list. (Tests; the pipeline reads its one
/// parse with [`echoed_turns_in`].)
#[cfg(test)]
pub(crate) fn echoed_turns(dialect: Dialect, request_body: &[u8]) -> Vec<EchoedTurn> {
    let Ok(lists) = serde_json::from_slice::<RequestLists<'_>>(request_body) else {
        return Vec::new();
    };
    let entries: Vec<&RawValue> = match dialect {
        Dialect::Anthropic | Dialect::Openai => lists.messages.unwrap_or_default(),
        Dialect::Gemini => lists.contents.unwrap_or_default(),
        Dialect::OpenaiResponses => lists
            .input
            .and_then(|i| serde_json::from_str(i.get()).ok())
            .unwrap_or_default(),
    };
    let entries: Vec<&str> = entries.iter().map(|e| e.get()).collect();
    echoed_turns_in(dialect, &entries)
}

/// [`echoed_turns`] over a turn list already split into its entries' JSON texts (the
/// pipeline's one parse: `messages`, `contents` or `input` elements, in order).
pub(crate) fn echoed_turns_in(dialect: Dialect, entries: &[&str]) -> Vec<EchoedTurn> {
    let mut out = Vec::new();
    let mut i = 1;
    while i < entries.len() {
        if !is_assistant(dialect, entries[i]) {
            i += 1;
            continue;
        }
        let mut len = 1;
        if dialect == Dialect::OpenaiResponses {
            while entries
                .get(i + len)
                .is_some_and(|e| is_assistant(dialect, e))
            {
                len += 1;
            }
        }
        let turn = if dialect == Dialect::OpenaiResponses {
            let items: Vec<String> = entries[i..i + len]
                .iter()
                .map(|e| (*e).to_owned())
                .collect();
            Some(super::responses::items_turn(&items))
        } else {
            echoed_turn(dialect, entries[i].as_bytes())
        };
        if let Some(turn) = turn {
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
    use serde_json::json;

    #[test]
    fn canonical_sorts_keys_at_every_depth() {
        let v: Value =
            serde_json::from_str(r#"{"b":1,"a":{"d":[{"z":1,"y":"é\n"}],"c":null}}"#).unwrap();
        assert_eq!(
            canonical(&v),
            r#"{"a":{"c":null,"d":[{"y":"é\n","z":1}]},"b":1}"#
        );
    }

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
}
