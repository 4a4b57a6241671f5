//! Unknown-field verdicts: does a provider's 4xx say that a field this request sent is unknown?
//!
//! The error body is read as *entries*: each JSON object in it (the body itself, `error`, each
//! element of a `detail` list, ...) with its own strings and path arrays, plus the text of the
//! objects nested in it; a body that is not JSON is one entry. A field is learned from an
//! entry that has both (`docs/reasoning.md#unknown-field-errors`; how verdicts are
//! stored and namespaced: `docs/state.md`):
//! 1. an unknown-field wording of its own ([`WORDINGS`], or Gemini's
//!    `Unknown name "…": Cannot find field`), and no value-complaint wording
//!    ([`VALUE_WORDINGS`]: "Unsupported value: 'reasoning.effort' does not support …" is about a
//!    value, never a reason to stop sending the field), and
//! 2. a field the request actually sent, named in the entry: a reasoning carrier present on
//!    some assistant message (`reasoning_content`, `reasoning_details`, `extra_content`,
//!    `reasoning_opaque` / `reasoning_text`, and a bare `reasoning` only when named in a
//!    `messages` path) — learned as a message field —, or a top-level parameter on
//!    `droppable_params` (or a keep-thinking flag) that the request carries, named as itself
//!    (`reasoning`, not `reasoning.effort`) — learned as a top-level parameter. A request
//!    carries it at the top level, or among the model's own parameters of a wire that
//!    passes them through (Converse's `additionalModelRequestFields`, which Bedrock merges
//!    into the model's native body: the same verdict as for that body's top level).
//!
//! "Provider returned error" and wordings that name no field are not verdicts. Names are
//! matched as whole words (`[a-z0-9_]` boundaries) in the lowercased text, and in path arrays
//! joined with dots (Mistral's `"loc":["body","messages",31,"assistant","reasoning_content"]`
//! reads as `body.messages.31.assistant.reasoning_content`).
//!
//! Widening: naming `reasoning_content` drops all three carriers (RC, R, RD: a host that
//! rejects one rejects the others); naming `reasoning` or `reasoning_details` drops those two.
//! On a must-echo route a complaint naming `reasoning_content` is about its value, so it teaches
//! nothing.
//!
//! The wording kept with the verdict is the message of the first entry that taught a field, so
//! a multi-entry 422 (Mistral lists one `extra_forbidden` per field) keeps the words about a
//! field that was learned, not about one the request never sent.
//!
//! The caller (the proxy) keys the verdict by (upstream host, model with its case kept),
//! stores it ([`crate::state::Verdicts::learn`]), and retries once only when the verdict holds
//! a field not already learned.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::profiles::{ResolvedRoute, KEEP_THINKING_PARAMS};
use crate::dialect::{self, Dialect};
use crate::json::scan;
use crate::provider::Carrier;
use crate::state::{Field, FieldSet};

/// Unknown-field phrases (lowercase), with their sources in `docs/reasoning.md#wordings`.
pub const WORDINGS: &[&str] = &[
    "extra inputs are not permitted",
    "is unsupported",
    "unknown field",
    "no such field",
    "unrecognized field",
    "unrecognized request argument",
    "unknown parameter",
    "unexpected field",
    "additional propert",
    "unknown key",
    "extra_forbidden",
    "unrecognizedproperty",
    "extraneous key",
];

/// Phrases (lowercase) of a complaint about a field's *value*; an entry holding one teaches
/// nothing, whatever else it says. OpenAI: `"Unsupported value: 'reasoning.effort' does not
/// support 'minimal' with this model. Supported values are: …"`, code `unsupported_value`;
/// `"Invalid value: …"`, code `invalid_value`.
pub(crate) const VALUE_WORDINGS: &[&str] = &[
    "unsupported value",
    "unsupported_value",
    "invalid value",
    "invalid_value",
    "supported values",
];

/// Carrier fields that live on assistant messages, with the verdict name each maps to.
const MESSAGE_FIELDS: [(&str, &str); 5] = [
    ("reasoning_content", "reasoning_content"),
    ("reasoning_details", "reasoning_details"),
    ("extra_content", "extra_content"),
    ("reasoning_opaque", "reasoning_opaque"),
    ("reasoning_text", "reasoning_opaque"),
];

/// Most bytes of an error body that are read ([`crate::dialect::MAX_ERROR_BODY_BYTES`]).
const MAX_ERROR_BYTES: usize = crate::dialect::MAX_ERROR_BODY_BYTES;

/// A verdict: the fields to omit for (host, model) from now on, and the provider's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// Message fields (carriers) and top-level parameters (dotted when nested), widened.
    pub fields: FieldSet,
    /// The message of the entry that taught the first field (at most
    /// [`MAX_WORDING_CHARS`](crate::state::MAX_WORDING_CHARS) chars), for logs and `verdicts`.
    pub wording: String,
}

/// Classify a response. `sent_body` is the exact body that was sent upstream (after the passes).
pub fn detect(
    status: u16,
    response_body: &[u8],
    sent_body: &[u8],
    route: &ResolvedRoute,
    droppable_params: &[String],
) -> Option<Detected> {
    if !(400..500).contains(&status) {
        return None;
    }
    let head = &response_body[..response_body.len().min(MAX_ERROR_BYTES)];
    let raw = String::from_utf8_lossy(head);
    let entries: Vec<Entry> = entries(&raw)
        .into_iter()
        .filter(Entry::names_unknown)
        .collect();
    if entries.is_empty() {
        return None;
    }
    let sent = Sent::read(sent_body)?;
    let mut fields = FieldSet::new();
    let mut wording = None;
    for entry in &entries {
        let taught = entry.fields(&sent, route, droppable_params);
        if taught.is_empty() {
            continue;
        }
        wording.get_or_insert_with(|| entry.message.clone());
        fields.extend(taught);
    }
    let wording = wording?;
    Some(Detected {
        fields,
        wording: crate::state::wording_excerpt(wording.trim()),
    })
}

/// One statement of an error body.
struct Entry {
    /// Lowercased text of the entry's own strings and paths, one per line.
    own: String,
    /// `own` plus the text of the objects nested in it (except value complaints).
    hay: String,
    /// The provider's message: `msg` (after its `loc` path), `message`, `detail` or `error`
    /// when a string; else the whole body.
    message: String,
}

impl Entry {
    /// Has an unknown-field wording of its own and is not about a value.
    fn names_unknown(&self) -> bool {
        let gemini = self.own.contains("unknown name") && self.own.contains("cannot find field");
        (gemini || WORDINGS.iter().any(|w| self.own.contains(w))) && !is_value_complaint(&self.own)
    }

    /// The fields this entry names that the request sent, widened.
    fn fields(&self, sent: &Sent, route: &ResolvedRoute, droppable_params: &[String]) -> FieldSet {
        let hay = self.hay.as_str();
        let mut named: Vec<&str> = Vec::new();
        for (field, verdict) in MESSAGE_FIELDS {
            if sent.carriers.contains(field) && names_word(hay, field) {
                named.push(verdict);
            }
        }
        if sent.carriers.contains("reasoning") && names_in_messages_path(hay, "reasoning") {
            named.push("reasoning");
        }
        let mut fields = FieldSet::new();
        if named.contains(&"reasoning_content") {
            named.retain(|n| *n != "reasoning_content");
            if route.echo.is_none() {
                fields.extend(
                    ["reasoning_content", "reasoning", "reasoning_details"].map(Field::message),
                );
            }
        }
        if named.contains(&"reasoning") || named.contains(&"reasoning_details") {
            fields.extend(["reasoning", "reasoning_details"].map(Field::message));
        }
        fields.extend(named.iter().map(|n| Field::message(n)));

        let params = droppable_params
            .iter()
            .map(String::as_str)
            .chain(KEEP_THINKING_PARAMS)
            .filter(|p| !matches!(*p, "model" | "messages" | "contents" | "input" | "system"));
        for p in params {
            // At the top level, or (undotted) among the model's own parameters of a wire
            // that passes them through (Converse's `additionalModelRequestFields.p`).
            let sent_p = sent.params.contains(p)
                || (!p.contains('.')
                    && dialect::model_field_members()
                        .any(|m| sent.params.contains(&format!("{m}.{p}"))));
            if sent_p && names_param(hay, p) {
                fields.insert(Field::param(p));
            }
        }
        fields
    }
}

fn is_value_complaint(text: &str) -> bool {
    VALUE_WORDINGS.iter().any(|w| text.contains(w))
}

/// The entries of an error body, outermost first (see the module doc).
fn entries(raw: &str) -> Vec<Entry> {
    let whole = || Entry {
        own: raw.to_lowercase(),
        hay: raw.to_lowercase(),
        message: raw.trim().to_owned(),
    };
    let Ok(parsed) = serde_json::from_str::<Value>(raw) else {
        return vec![whole()];
    };
    let mut out = Vec::new();
    collect(&parsed, raw, &mut out);
    if out.is_empty() {
        out.push(Entry {
            message: match &parsed {
                Value::String(s) => s.clone(),
                _ => raw.trim().to_owned(),
            },
            ..whole()
        });
    }
    out
}

fn collect(v: &Value, raw: &str, out: &mut Vec<Entry>) {
    match v {
        Value::Object(o) => {
            let own = own_text(o);
            out.push(Entry {
                hay: format!("{own}{}", nested_text(o)),
                message: message_of(o).unwrap_or_else(|| raw.trim().to_owned()),
                own,
            });
            for x in o.values() {
                collect(x, raw, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                collect(x, raw, out);
            }
        }
        _ => {}
    }
}

/// An array of at least two strings / numbers, joined with dots (lowercased).
fn path_of(a: &[Value]) -> Option<String> {
    let is_path = a.len() >= 2
        && a.iter()
            .all(|x| matches!(x, Value::String(_) | Value::Number(_)));
    is_path.then(|| {
        a.iter()
            .map(|x| match x {
                Value::String(s) => s.to_lowercase(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(".")
    })
}

/// An object's own strings and paths, each on its own line (lowercased). A pydantic-style
/// `input` member (the value the client sent, echoed back) is not the provider's words and
/// is left out.
fn own_text(o: &Map<String, Value>) -> String {
    let mut out = String::new();
    for (k, v) in o {
        if k == "input" {
            continue;
        }
        match v {
            Value::String(s) => {
                out.push('\n');
                out.push_str(&s.to_lowercase());
            }
            // A path is read whole: its last element alone (`reasoning` of
            // `body.messages.1.assistant.reasoning`) would name a top-level parameter.
            Value::Array(a) => match path_of(a) {
                Some(p) => {
                    out.push('\n');
                    out.push_str(&p);
                }
                None => {
                    for x in a {
                        if let Value::String(s) = x {
                            out.push('\n');
                            out.push_str(&s.to_lowercase());
                        }
                    }
                }
            },
            _ => {}
        }
    }
    out
}

/// The text of the objects nested in `o`, leaving out those that complain about a value.
fn nested_text(o: &Map<String, Value>) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::Object(o) => {
                let own = own_text(o);
                if is_value_complaint(&own) {
                    return;
                }
                out.push_str(&own);
                for x in o.values() {
                    walk(x, out);
                }
            }
            Value::Array(a) => {
                for x in a {
                    walk(x, out);
                }
            }
            _ => {}
        }
    }
    let mut out = String::new();
    for x in o.values() {
        walk(x, &mut out);
    }
    out
}

/// An object's human message: `msg` after its `loc` path (`body.messages.1.…: Extra inputs
/// are not permitted`), else `message`, `detail` or `error` when a string.
fn message_of(o: &Map<String, Value>) -> Option<String> {
    if let Some(msg) = o.get("msg").and_then(Value::as_str) {
        let loc = o.get("loc").and_then(Value::as_array).map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(".")
        });
        return Some(match loc {
            Some(l) if !l.is_empty() => format!("{l}: {msg}"),
            _ => msg.to_owned(),
        });
    }
    ["message", "detail", "error"]
        .iter()
        .find_map(|k| o.get(*k).and_then(Value::as_str))
        .map(str::to_owned)
}

/// What the request sent: carrier fields on assistant messages and top-level parameters
/// (`parent.child` for members of top-level objects).
struct Sent {
    carriers: BTreeSet<&'static str>,
    params: BTreeSet<String>,
}

impl Sent {
    /// Read through the one body view ([`dialect::parse`]; the `messages` list is the same
    /// on both chat wires). `None` when the body is not a JSON object of that shape.
    fn read(body: &[u8]) -> Option<Sent> {
        let doc = dialect::parse(body, Dialect::Openai).ok()?;
        let text = doc.text;
        let mut params = BTreeSet::new();
        for m in &doc.top.members {
            params.insert(m.key.clone());
            if let Some(obj) = scan::object_at(text, m.value.start) {
                for c in &obj.members {
                    params.insert(format!("{}.{}", m.key, c.key));
                }
            }
        }
        let mut carriers = BTreeSet::new();
        for turn in doc
            .turns
            .iter()
            .filter(|t| t.role.as_deref() == Some("assistant"))
        {
            for key in Carrier::MESSAGE_KEYS {
                if turn.obj.get(key).is_some() {
                    carriers.insert(key);
                }
            }
            let calls = turn
                .obj
                .get("tool_calls")
                .and_then(|m| scan::array_at(text, m.value.start))
                .unwrap_or_default();
            if calls.iter().any(|call| {
                scan::object_at(text, call.start).is_some_and(|c| c.get("extra_content").is_some())
            }) {
                carriers.insert("extra_content");
            }
        }
        Some(Sent { carriers, params })
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Start offsets of `word` in `hay` with word boundaries on both sides.
fn word_hits(hay: &str, word: &str) -> Vec<usize> {
    let b = hay.as_bytes();
    hay.match_indices(word)
        .map(|(i, _)| i)
        .filter(|&i| {
            let before = i.checked_sub(1).and_then(|j| b.get(j)).copied();
            let after = b.get(i + word.len()).copied();
            !before.is_some_and(is_word) && !after.is_some_and(is_word)
        })
        .collect()
}

fn names_word(hay: &str, word: &str) -> bool {
    !word_hits(hay, word).is_empty()
}

/// Up to `n` bytes of `hay` before `i`, cut at a char boundary and at the last newline.
fn before(hay: &str, i: usize, n: usize) -> &str {
    let mut start = i.saturating_sub(n);
    while !hay.is_char_boundary(start) {
        start += 1;
    }
    let s = hay.get(start..i).unwrap_or("");
    s.rsplit('\n').next().unwrap_or("")
}

/// Up to `n` bytes of `hay` after `i`, cut at a char boundary and at the first newline.
fn after(hay: &str, i: usize, n: usize) -> &str {
    let mut end = (i + n).min(hay.len());
    while !hay.is_char_boundary(end) {
        end -= 1;
    }
    let s = hay.get(i..end).unwrap_or("");
    s.split('\n').next().unwrap_or("")
}

/// `word` named in a `messages` path: `messages` at most 80 chars before it on the same line
/// (OpenAI / Groq / Cerebras / Mistral paths), or Gemini's `"word" at 'messages…'`.
fn names_in_messages_path(hay: &str, word: &str) -> bool {
    word_hits(hay, word).into_iter().any(|i| {
        before(hay, i, 80).contains("messages")
            || after(hay, i + word.len(), 24).contains(" at 'messages")
    })
}

/// A top-level parameter named in the text: as a whole word (or, for a dotted name, the full
/// dotted path or a distinctive `snake_case` leaf), not as the head of a longer dotted path
/// (`reasoning.effort` names a member of `reasoning`, not `reasoning`), and not as a key
/// nested in a message (a `messages…` path running up to it without whitespace).
fn names_param(hay: &str, param: &str) -> bool {
    let mut candidates = vec![param];
    if let Some((_, leaf)) = param.rsplit_once('.') {
        if leaf.contains('_') {
            candidates.push(leaf);
        }
    }
    let b = hay.as_bytes();
    candidates.into_iter().any(|w| {
        word_hits(hay, w).into_iter().any(|i| {
            let end = i + w.len();
            let heads_a_path =
                b.get(end) == Some(&b'.') && b.get(end + 1).copied().is_some_and(is_word);
            let lead = before(hay, i, 40);
            let path = lead
                .rsplit(|c: char| c.is_whitespace())
                .next()
                .unwrap_or("");
            !heads_a_path && !path.contains("messages")
        })
    })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;
    use crate::reasoning::profiles::resolve;
    use serde_json::json;

    fn droppable() -> Vec<String> {
        crate::config::ReasoningConfig::default().droppable_params
    }

    fn sent_all() -> Vec<u8> {
        json!({"model": "m", "store": true, "reasoning_effort": "high", "stream_options": {"include_usage": true},
               "messages": [
            {"role": "user", "content": "hi", "metadata": 1},
            {"role": "assistant", "content": "ok", "reasoning_content": "t", "reasoning": "t",
             "reasoning_details": [{"type": "reasoning.text", "text": "t"}]}]})
        .to_string()
        .into_bytes()
    }

    fn fields(d: Option<Detected>) -> Vec<String> {
        d.map(|d| d.fields.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    fn det(host: &str, status: u16, body: &str, sent: &[u8]) -> Option<Detected> {
        let route = resolve(None, host, "/v1/chat/completions", Some("m"), None);
        detect(status, body.as_bytes(), sent, &route, &droppable())
    }

    const ALL3: [&str; 3] = [
        "message:reasoning",
        "message:reasoning_content",
        "message:reasoning_details",
    ];
    const R_RD: [&str; 2] = ["message:reasoning", "message:reasoning_details"];

    #[test]
    fn mistral_422_extra_forbidden() {
        let body = r#"{"object":"Error","detail":[{"type":"extra_forbidden","loc":["body","messages",1,"assistant","reasoning_content"],"msg":"Extra inputs are not permitted","input":"t"}],"type":"invalid_request_error","code":3001}"#;
        let d = det("api.mistral.ai", 422, body, &sent_all()).unwrap();
        assert_eq!(fields(Some(d.clone())), ALL3);
        assert_eq!(
            d.wording,
            "body.messages.1.assistant.reasoning_content: Extra inputs are not permitted"
        );
        let only_r = r#"{"detail":[{"type":"extra_forbidden","loc":["body","messages",1,"assistant","reasoning"],"msg":"Extra inputs are not permitted"}]}"#;
        assert_eq!(
            fields(det("api.mistral.ai", 422, only_r, &sent_all())),
            R_RD
        );
    }

    #[test]
    fn groq_and_cerebras() {
        let groq = r#"{"error":{"message":"'messages.1' : for 'role:assistant' the following must be satisfied[('messages.1' : property 'reasoning_content' is unsupported)]","type":"invalid_request_error"}}"#;
        assert_eq!(fields(det("api.groq.com", 400, groq, &sent_all())), ALL3);
        let groq_r = r#"{"error":{"message":"'messages.1' : for 'role:assistant' the following must be satisfied[('messages.1' : property 'reasoning' is unsupported, did you mean 'role'?)]","type":"invalid_request_error"}}"#;
        assert_eq!(fields(det("api.groq.com", 400, groq_r, &sent_all())), R_RD);
        let groq_store = r#"{"error":{"message":"property 'store' is unsupported, did you mean 'stop'?","type":"invalid_request_error"}}"#;
        assert_eq!(
            fields(det("api.groq.com", 400, groq_store, &sent_all())),
            ["param:store"]
        );
        let cerebras = r#"{"message":"messages.2.assistant.reasoning_content: property 'messages.2.assistant.reasoning_content' is unsupported","type":"invalid_request_error","param":"validation_error","code":"wrong_api_format"}"#;
        let d = det("api.cerebras.ai", 400, cerebras, &sent_all()).unwrap();
        assert_eq!(fields(Some(d.clone())), ALL3);
        assert!(d
            .wording
            .starts_with("messages.2.assistant.reasoning_content"));
        let cerebras_store = r#"{"message":"body.store: property 'body.store' is unsupported","type":"invalid_request_error"}"#;
        assert_eq!(
            fields(det("api.cerebras.ai", 422, cerebras_store, &sent_all())),
            ["param:store"]
        );
    }

    /// Issue 30: Cerebras' own error shape (no `error` wrapper) about a top-level thinking
    /// parameter teaches that parameter, and a top-level `reasoning` is not the message
    /// carrier of the same name (as on a host whose row lists no controls: a Cerebras model
    /// behind a gateway).
    #[test]
    fn cerebras_top_level_thinking_parameters() {
        let sent = json!({"model": "m", "enable_thinking": true, "reasoning": {"effort": "high"},
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "ok", "reasoning": "t"}]})
        .to_string()
        .into_bytes();
        let shape = |property: &str| {
            json!({"message": format!("body.{property}: property 'body.{property}' is unsupported"),
                   "type": "invalid_request_error", "param": "validation_error",
                   "code": "wrong_api_format"})
            .to_string()
        };
        let d = det("llm.example.com", 400, &shape("enable_thinking"), &sent).unwrap();
        assert_eq!(fields(Some(d.clone())), ["param:enable_thinking"]);
        assert_eq!(
            d.wording,
            "body.enable_thinking: property 'body.enable_thinking' is unsupported"
        );
        assert_eq!(
            fields(det("llm.example.com", 400, &shape("reasoning"), &sent)),
            ["param:reasoning"]
        );
    }

    #[test]
    fn openai_and_azure_parameters() {
        let openai = r#"{"error":{"message":"Unknown parameter: 'reasoning_effort'.","type":"invalid_request_error","param":"reasoning_effort","code":"unknown_parameter"}}"#;
        assert_eq!(
            fields(det("api.openai.com", 400, openai, &sent_all())),
            ["param:reasoning_effort"]
        );
        let azure = r#"{"error":{"message":"Unrecognized request argument supplied: reasoning_effort","type":"invalid_request_error","param":null,"code":null}}"#;
        assert_eq!(
            fields(det("x.openai.azure.com", 400, azure, &sent_all())),
            ["param:reasoning_effort"]
        );
        // Named but not sent: nothing.
        let sent = br#"{"model":"m","messages":[]}"#;
        assert_eq!(det("api.openai.com", 400, azure, sent), None);
        // Nested message field named: not a verdict about a top-level parameter.
        let nested = r#"{"error":{"message":"Unknown parameter: 'messages[1].tool_calls[0].index'.","code":"unknown_parameter"}}"#;
        assert_eq!(det("api.openai.com", 400, nested, &sent_all()), None);
        let nested_md = r#"{"error":{"message":"Unknown parameter: 'messages[0].metadata'."}}"#;
        let mut with_md: Value = serde_json::from_slice(&sent_all()).unwrap();
        with_md["metadata"] = json!({"a": 1});
        assert_eq!(
            det(
                "api.openai.com",
                400,
                nested_md,
                with_md.to_string().as_bytes()
            ),
            None
        );
        let top_md = r#"{"error":{"message":"Unknown parameter: 'metadata'."}}"#;
        assert_eq!(
            fields(det(
                "api.openai.com",
                400,
                top_md,
                with_md.to_string().as_bytes()
            )),
            ["param:metadata"]
        );
    }

    #[test]
    fn gemini_array_wrapped() {
        let body = r#"[{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"reasoning\" at 'messages[1]': Cannot find field.","status":"INVALID_ARGUMENT"}}]"#;
        let d = det("generativelanguage.googleapis.com", 400, body, &sent_all()).unwrap();
        assert_eq!(fields(Some(d.clone())), R_RD);
        assert!(d.wording.starts_with("Invalid JSON payload received."));
        // The top-level form names no messages path: not the carrier.
        let top = r#"[{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"reasoning\": Cannot find field.","status":"INVALID_ARGUMENT"}}]"#;
        assert_eq!(
            det("generativelanguage.googleapis.com", 400, top, &sent_all()),
            None
        );
        let rc = r#"[{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"reasoning_content\" at 'messages[1]': Cannot find field.","status":"INVALID_ARGUMENT"}}]"#;
        assert_eq!(
            fields(det(
                "generativelanguage.googleapis.com",
                400,
                rc,
                &sent_all()
            )),
            ALL3
        );
    }

    #[test]
    fn not_verdicts() {
        let sent = sent_all();
        for (host, status, body) in [
            (
                "api.deepseek.com",
                400,
                r#"{"error":{"message":"The `reasoning_content` in the thinking mode must be passed back to the API.","type":"invalid_request_error"}}"#,
            ),
            (
                "api.moonshot.ai",
                400,
                r#"{"error":{"message":"thinking is enabled but reasoning_content is missing in assistant tool call message at index 2"}}"#,
            ),
            (
                "openrouter.ai",
                400,
                r#"{"error":{"message":"Provider returned error","code":400}}"#,
            ),
            (
                "api.mistral.ai",
                422,
                r#"{"detail":[{"type":"extra_forbidden","loc":["body","messages",0,"user","name"],"msg":"Extra inputs are not permitted"}]}"#,
            ),
            (
                "api.groq.com",
                500,
                r#"{"error":{"message":"property 'reasoning_content' is unsupported"}}"#,
            ),
            ("api.openai.com", 400, "Extra inputs are not permitted"),
        ] {
            assert_eq!(det(host, status, body, &sent), None, "{body}");
        }
        // Not a JSON request: nothing can be named as sent.
        assert_eq!(
            det(
                "api.groq.com",
                400,
                r#"{"error":{"message":"property 'reasoning_content' is unsupported"}}"#,
                b"nope"
            ),
            None
        );
    }

    #[test]
    fn must_echo_rc_complaint_is_about_its_value() {
        let body =
            r#"{"error":{"message":"unknown field reasoning_content: not allowed to be empty"}}"#;
        let route = resolve(None, "api.deepseek.com", "/v1", Some("deepseek-v4"), None);
        assert_eq!(
            detect(400, body.as_bytes(), &sent_all(), &route, &droppable()),
            None
        );
        let route = resolve(None, "example.com", "/v1", Some("m"), None);
        assert!(detect(400, body.as_bytes(), &sent_all(), &route, &droppable()).is_some());
    }

    #[test]
    fn strict_proxy_wordings_and_keep_thinking_flags() {
        let sent = json!({"model": "m", "messages": [{"role": "assistant", "content": "a", "reasoning_details": []}],
                          "preserve_thinking": true, "thinking": {"type": "enabled", "clear_thinking": false}})
            .to_string();
        let proxy =
            r#"{"error":{"message":"unsafeParams: {unrecognizedProperty=reasoning_details}"}}"#;
        assert_eq!(
            fields(det("example.com", 400, proxy, sent.as_bytes())),
            R_RD
        );
        let flag =
            r#"{"error":{"message":"Unrecognized request argument supplied: preserve_thinking"}}"#;
        assert_eq!(
            fields(det("dashscope.aliyuncs.com", 400, flag, sent.as_bytes())),
            ["param:preserve_thinking"]
        );
        let nested = r#"{"detail":[{"type":"extra_forbidden","loc":["body","thinking","clear_thinking"],"msg":"Extra inputs are not permitted"}]}"#;
        assert_eq!(
            fields(det("api.z.ai", 422, nested, sent.as_bytes())),
            ["param:thinking.clear_thinking"]
        );
    }

    /// Mistral's 422 lists one `extra_forbidden` entry per field; the first names a field the
    /// request did not send, so the stored wording must be the learned entry's.
    /// Amazon Bedrock's InvokeModel, an Anthropic body with a key Claude on Bedrock does not
    /// take: a 400 `ValidationException`, `{"message": "Malformed input request: #: extraneous
    /// key [k] is not permitted, …"}` (BerriAI/litellm#9106, langgenius/dify#3326).
    #[test]
    fn bedrock_extraneous_key() {
        let body = r#"{"message":"Malformed input request: #: extraneous key [service_tier] is not permitted, please reformat your input and try again."}"#;
        let sent = br#"{"anthropic_version":"bedrock-2023-05-31","service_tier":"auto","max_tokens":9,"messages":[]}"#;
        let route = resolve(
            Some("bedrock"),
            "bedrock-runtime.us-east-1.amazonaws.com",
            "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke",
            Some("anthropic.claude-sonnet-4-5-20250929-v1:0"),
            None,
        );
        let d = detect(400, body.as_bytes(), sent, &route, &droppable()).unwrap();
        assert_eq!(
            d.fields,
            [Field::param("service_tier")].into_iter().collect()
        );
        assert!(
            d.wording.contains("extraneous key [service_tier]"),
            "{}",
            d.wording
        );
    }

    /// Converse: the model's refusal of a key of `additionalModelRequestFields` (wrapped in
    /// "The model returned the following errors: ", zed-industries/zed#31815) teaches the
    /// undotted parameter, as InvokeModel's top-level key does; a key sent nowhere teaches
    /// nothing.
    #[test]
    fn converse_extraneous_key_in_additional_model_request_fields() {
        let body = r#"{"message":"The model returned the following errors: Malformed input request: #: extraneous key [service_tier] is not permitted, please reformat your input and try again."}"#;
        let sent = br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}],"additionalModelRequestFields":{"service_tier":"auto"}}"#;
        let route = resolve(
            Some("bedrock"),
            "bedrock-runtime.us-east-1.amazonaws.com",
            "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/converse",
            Some("anthropic.claude-sonnet-4-5-20250929-v1:0"),
            None,
        );
        let d = detect(400, body.as_bytes(), sent, &route, &droppable()).unwrap();
        assert_eq!(
            d.fields,
            [Field::param("service_tier")].into_iter().collect()
        );
        let elsewhere = br#"{"messages":[],"inferenceConfig":{"service_tier":"auto"}}"#;
        assert_eq!(
            detect(400, body.as_bytes(), elsewhere, &route, &droppable()),
            None
        );
    }

    const MISTRAL_MULTI: &str = r#"{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","stream_options"],"msg":"Extra inputs are not permitted","input":{}},{"type":"extra_forbidden","loc":["body","messages",1,"assistant","reasoning_content"],"msg":"Extra inputs are not permitted","input":"..."}]},"type":"invalid_request_error","param":null,"code":null}"#;

    #[test]
    fn multi_field_422_keeps_the_wording_of_a_learned_entry() {
        let mut sent: Value = serde_json::from_slice(&sent_all()).unwrap();
        sent.as_object_mut().unwrap().remove("stream_options");
        let d = det(
            "api.mistral.ai",
            422,
            MISTRAL_MULTI,
            sent.to_string().as_bytes(),
        )
        .unwrap();
        assert_eq!(fields(Some(d.clone())), ALL3);
        assert_eq!(
            d.wording,
            "body.messages.1.assistant.reasoning_content: Extra inputs are not permitted"
        );
        // Sent but not droppable: still not learned, same wording.
        let d = detect(
            422,
            MISTRAL_MULTI.as_bytes(),
            &sent_all(),
            &resolve(
                None,
                "api.mistral.ai",
                "/v1/chat/completions",
                Some("m"),
                None,
            ),
            &["store".to_owned()],
        )
        .unwrap();
        assert_eq!(fields(Some(d.clone())), ALL3);
        assert!(
            d.wording.starts_with("body.messages.1.assistant"),
            "{}",
            d.wording
        );
        // Sent and droppable: both learned; the first entry taught one, so its words stay.
        let d = det("api.mistral.ai", 422, MISTRAL_MULTI, &sent_all()).unwrap();
        assert_eq!(
            fields(Some(d.clone())),
            [
                "param:stream_options",
                "message:reasoning",
                "message:reasoning_content",
                "message:reasoning_details"
            ]
        );
        assert_eq!(
            d.wording,
            "body.stream_options: Extra inputs are not permitted"
        );
    }

    /// A request carrying `reasoning` both as the top-level parameter and as a message carrier.
    fn sent_reasoning_twice() -> Vec<u8> {
        json!({"model": "m", "reasoning": {"effort": "minimal"}, "enable_thinking": true,
               "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok", "reasoning": "t"}]})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn top_level_reasoning_and_message_reasoning_are_told_apart() {
        let sent = sent_reasoning_twice();
        let top = r#"{"error":{"message":"Unknown parameter: 'reasoning'.","type":"invalid_request_error","param":"reasoning","code":"unknown_parameter"}}"#;
        assert_eq!(
            fields(det("api.openai.com", 400, top, &sent)),
            ["param:reasoning"]
        );
        let msg = r#"{"detail":[{"type":"extra_forbidden","loc":["body","messages",1,"assistant","reasoning"],"msg":"Extra inputs are not permitted","input":"t"}]}"#;
        assert_eq!(fields(det("api.mistral.ai", 422, msg, &sent)), R_RD);
        let flag = r#"{"error":{"message":"Unrecognized request argument supplied: enable_thinking","type":"invalid_request_error"}}"#;
        assert_eq!(
            fields(det("api.example.com", 400, flag, &sent)),
            ["param:enable_thinking"]
        );
        // A member of `reasoning` named as unknown is not `reasoning` itself.
        let member = r#"{"error":{"message":"Unknown parameter: 'reasoning.effort'.","code":"unknown_parameter"}}"#;
        assert_eq!(det("api.openai.com", 400, member, &sent), None);
    }

    #[test]
    fn a_complaint_about_a_value_teaches_nothing() {
        let sent = sent_reasoning_twice();
        // OpenAI's exact wording for an effort the model does not take.
        let openai = r#"{"error":{"message":"Unsupported value: 'reasoning.effort' does not support 'minimal' with this model. Supported values are: 'low', 'medium', and 'high'.","type":"invalid_request_error","param":"reasoning.effort","code":"unsupported_value"}}"#;
        assert_eq!(det("api.openai.com", 400, openai, &sent), None);
        // Even next to an unknown-field wording, a value complaint names nothing.
        let mixed = r#"{"error":{"message":"Unsupported value: 'reasoning' is unsupported with this model. Supported values are: 'low' and 'high'.","param":"reasoning","code":"unsupported_value"}}"#;
        assert_eq!(det("api.openai.com", 400, mixed, &sent), None);
        // One entry about a value, another about an unknown field: only the latter teaches.
        let entries = r#"{"detail":[{"type":"literal_error","loc":["body","reasoning"],"msg":"Invalid value: input should be 'low', 'medium' or 'high'","input":"minimal"},{"type":"extra_forbidden","loc":["body","enable_thinking"],"msg":"Extra inputs are not permitted","input":true}]}"#;
        let d = det("api.mistral.ai", 422, entries, &sent).unwrap();
        assert_eq!(fields(Some(d.clone())), ["param:enable_thinking"]);
        assert_eq!(
            d.wording,
            "body.enable_thinking: Extra inputs are not permitted"
        );
    }
}
