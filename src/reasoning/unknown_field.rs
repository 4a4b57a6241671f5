//! Unknown-field verdicts: does a provider's 4xx say that a field this request sent is unknown?
//!
//! A verdict needs both (`docs/reasoning.md#unknown-field-errors`):
//! 1. an unknown-field wording in the body ([`WORDINGS`], or Gemini's
//!    `Unknown name "…": Cannot find field`), and
//! 2. a field the request actually sent, named in the body: a reasoning carrier present on some
//!    assistant message (`reasoning_content`, `reasoning_details`, `extra_content`,
//!    `reasoning_opaque` / `reasoning_text`, and a bare `reasoning` only when named in a
//!    `messages` path, because `reasoning` is also a top-level parameter), or a top-level
//!    parameter on `droppable_params` (or a keep-thinking flag) that the request carries.
//!
//! "Provider returned error" and wordings that name no field are not verdicts. Names are
//! matched as whole words (`[a-z0-9_]` boundaries) in the lowercased body, in its decoded
//! strings, and in its path arrays joined with dots (Mistral's
//! `"loc":["body","messages",31,"assistant","reasoning_content"]` reads as
//! `body.messages.31.assistant.reasoning_content`).
//!
//! Widening: naming `reasoning_content` drops all three carriers (RC, R, RD: a host that
//! rejects one rejects the others); naming `reasoning` or `reasoning_details` drops those two.
//! On a must-echo route a complaint naming `reasoning_content` is about its value, so it teaches
//! nothing.
//!
//! The caller (the server) keys the verdict by (upstream host, model with its case kept),
//! stores it, and retries once only when the verdict holds a field not already learned.

use std::collections::BTreeSet;

use serde::de::IgnoredAny;
use serde_json::Value;

use super::profiles::{ResolvedRoute, KEEP_THINKING_PARAMS};
use super::scan;

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
];

/// Carrier fields that live on assistant messages, with the verdict name each maps to.
const MESSAGE_FIELDS: [(&str, &str); 5] = [
    ("reasoning_content", "reasoning_content"),
    ("reasoning_details", "reasoning_details"),
    ("extra_content", "extra_content"),
    ("reasoning_opaque", "reasoning_opaque"),
    ("reasoning_text", "reasoning_opaque"),
];

/// Most bytes of an error body that are read.
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// Longest `wording` returned, in chars.
const MAX_WORDING_CHARS: usize = 300;

/// A verdict: the fields to omit for (host, model) from now on, and the provider's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// Carrier field names and top-level parameter names (dotted when nested), widened.
    pub fields: BTreeSet<String>,
    /// The provider's error message (at most 300 chars), for logs and `verdicts`.
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
    let parsed = serde_json::from_str::<Value>(&raw).ok();
    let hay = haystack(&raw, parsed.as_ref());
    let gemini = hay.contains("unknown name") && hay.contains("cannot find field");
    if !gemini && !WORDINGS.iter().any(|w| hay.contains(w)) {
        return None;
    }
    let sent = Sent::read(sent_body)?;

    let mut named: BTreeSet<&str> = BTreeSet::new();
    for (field, verdict) in MESSAGE_FIELDS {
        if sent.carriers.contains(field) && names_word(&hay, field) {
            named.insert(verdict);
        }
    }
    if sent.carriers.contains("reasoning") && names_in_messages_path(&hay, "reasoning") {
        named.insert("reasoning");
    }

    let mut fields: BTreeSet<String> = BTreeSet::new();
    if named.remove("reasoning_content") && route.echo.is_none() {
        fields.extend(["reasoning_content", "reasoning", "reasoning_details"].map(str::to_owned));
    }
    if named.contains("reasoning") || named.contains("reasoning_details") {
        fields.extend(["reasoning", "reasoning_details"].map(str::to_owned));
    }
    fields.extend(named.iter().map(|s| (*s).to_owned()));

    let params = droppable_params
        .iter()
        .map(String::as_str)
        .chain(KEEP_THINKING_PARAMS)
        .filter(|p| !matches!(*p, "model" | "messages" | "contents" | "input" | "system"));
    for p in params {
        if sent.params.contains(p) && names_param(&hay, p) {
            fields.insert(p.to_owned());
        }
    }
    if fields.is_empty() {
        return None;
    }
    Some(Detected {
        fields,
        wording: wording(&raw, parsed.as_ref()),
    })
}

/// What the request sent: carrier fields on assistant messages and top-level parameters
/// (`parent.child` for members of top-level objects).
struct Sent {
    carriers: BTreeSet<&'static str>,
    params: BTreeSet<String>,
}

impl Sent {
    fn read(body: &[u8]) -> Option<Sent> {
        serde_json::from_slice::<IgnoredAny>(body).ok()?;
        let text = std::str::from_utf8(body).ok()?;
        let top = scan::object_at(text, 0)?;
        let mut params = BTreeSet::new();
        for m in &top.members {
            params.insert(m.key.clone());
            if let Some(obj) = scan::object_at(text, m.value.start) {
                for c in &obj.members {
                    params.insert(format!("{}.{}", m.key, c.key));
                }
            }
        }
        let mut carriers = BTreeSet::new();
        let messages = top
            .get("messages")
            .and_then(|m| scan::array_at(text, m.value.start))
            .unwrap_or_default();
        for el in messages {
            let Some(msg) = scan::object_at(text, el.start) else {
                continue;
            };
            let role = msg
                .get("role")
                .and_then(|m| scan::string_at(text, &m.value));
            if role.as_deref() != Some("assistant") {
                continue;
            }
            for key in [
                "reasoning_content",
                "reasoning",
                "reasoning_details",
                "extra_content",
                "reasoning_opaque",
                "reasoning_text",
            ] {
                if msg.get(key).is_some() {
                    carriers.insert(key);
                }
            }
            let calls = msg
                .get("tool_calls")
                .and_then(|m| scan::array_at(text, m.value.start))
                .unwrap_or_default();
            for call in calls {
                if scan::object_at(text, call.start)
                    .is_some_and(|c| c.get("extra_content").is_some())
                {
                    carriers.insert("extra_content");
                }
            }
        }
        Some(Sent { carriers, params })
    }
}

/// The lowercased body, then every decoded string and every path array (all strings and
/// numbers) joined with dots, one per line.
fn haystack(raw: &str, parsed: Option<&Value>) -> String {
    let mut out = raw.to_lowercase();
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push('\n');
                out.push_str(&s.to_lowercase());
            }
            Value::Array(a) => {
                let path = a.len() >= 2
                    && a.iter()
                        .all(|x| matches!(x, Value::String(_) | Value::Number(_)));
                if path {
                    out.push('\n');
                    let parts: Vec<String> = a
                        .iter()
                        .map(|x| match x {
                            Value::String(s) => s.to_lowercase(),
                            other => other.to_string(),
                        })
                        .collect();
                    out.push_str(&parts.join("."));
                }
                for x in a {
                    walk(x, out);
                }
            }
            Value::Object(o) => {
                for x in o.values() {
                    walk(x, out);
                }
            }
            _ => {}
        }
    }
    if let Some(v) = parsed {
        walk(v, &mut out);
    }
    out
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

/// A top-level parameter named in the body: as a whole word (or, for a dotted name, the full
/// dotted path or a distinctive `snake_case` leaf), and not as a key nested in a message (a
/// `messages…` path running up to it without whitespace).
fn names_param(hay: &str, param: &str) -> bool {
    let mut candidates = vec![param];
    if let Some((_, leaf)) = param.rsplit_once('.') {
        if leaf.contains('_') {
            candidates.push(leaf);
        }
    }
    candidates.into_iter().any(|w| {
        word_hits(hay, w).into_iter().any(|i| {
            let lead = before(hay, i, 40);
            let path = lead
                .rsplit(|c: char| c.is_whitespace())
                .next()
                .unwrap_or("");
            !path.contains("messages")
        })
    })
}

/// The provider's message: `error.message`, `message`, `detail[0].msg` (with its `loc`), or
/// the first element of an array-wrapped body; else the body's start.
fn wording(raw: &str, parsed: Option<&Value>) -> String {
    fn from(v: &Value) -> Option<String> {
        if let Some(first) = v.as_array().and_then(|a| a.first()) {
            return from(first);
        }
        if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
            return Some(m.to_owned());
        }
        if let Some(d) = v.pointer("/detail/0") {
            let msg = d.get("msg").and_then(Value::as_str).unwrap_or("");
            let loc = d
                .get("loc")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                        .collect::<Vec<_>>()
                        .join(".")
                })
                .unwrap_or_default();
            return Some(format!("{loc}: {msg}"));
        }
        if let Some(m) = v.get("message").and_then(Value::as_str) {
            return Some(m.to_owned());
        }
        if let Some(m) = v.get("detail").and_then(Value::as_str) {
            return Some(m.to_owned());
        }
        None
    }
    let text = parsed
        .and_then(from)
        .unwrap_or_else(|| raw.trim().to_owned());
    text.chars().take(MAX_WORDING_CHARS).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
        d.map(|d| d.fields.into_iter().collect())
            .unwrap_or_default()
    }

    fn det(host: &str, status: u16, body: &str, sent: &[u8]) -> Option<Detected> {
        let route = resolve(None, host, "/v1/chat/completions", Some("m"), None);
        detect(status, body.as_bytes(), sent, &route, &droppable())
    }

    const ALL3: [&str; 3] = ["reasoning", "reasoning_content", "reasoning_details"];

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
            ["reasoning", "reasoning_details"]
        );
    }

    #[test]
    fn groq_and_cerebras() {
        let groq = r#"{"error":{"message":"'messages.1' : for 'role:assistant' the following must be satisfied[('messages.1' : property 'reasoning_content' is unsupported)]","type":"invalid_request_error"}}"#;
        assert_eq!(fields(det("api.groq.com", 400, groq, &sent_all())), ALL3);
        let groq_r = r#"{"error":{"message":"'messages.1' : for 'role:assistant' the following must be satisfied[('messages.1' : property 'reasoning' is unsupported, did you mean 'role'?)]","type":"invalid_request_error"}}"#;
        assert_eq!(
            fields(det("api.groq.com", 400, groq_r, &sent_all())),
            ["reasoning", "reasoning_details"]
        );
        let groq_store = r#"{"error":{"message":"property 'store' is unsupported, did you mean 'stop'?","type":"invalid_request_error"}}"#;
        assert_eq!(
            fields(det("api.groq.com", 400, groq_store, &sent_all())),
            ["store"]
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
            ["store"]
        );
    }

    #[test]
    fn openai_and_azure_parameters() {
        let openai = r#"{"error":{"message":"Unknown parameter: 'reasoning_effort'.","type":"invalid_request_error","param":"reasoning_effort","code":"unknown_parameter"}}"#;
        assert_eq!(
            fields(det("api.openai.com", 400, openai, &sent_all())),
            ["reasoning_effort"]
        );
        let azure = r#"{"error":{"message":"Unrecognized request argument supplied: reasoning_effort","type":"invalid_request_error","param":null,"code":null}}"#;
        assert_eq!(
            fields(det("x.openai.azure.com", 400, azure, &sent_all())),
            ["reasoning_effort"]
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
            ["metadata"]
        );
    }

    #[test]
    fn gemini_array_wrapped() {
        let body = r#"[{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"reasoning\" at 'messages[1]': Cannot find field.","status":"INVALID_ARGUMENT"}}]"#;
        let d = det("generativelanguage.googleapis.com", 400, body, &sent_all()).unwrap();
        assert_eq!(fields(Some(d.clone())), ["reasoning", "reasoning_details"]);
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
            ["reasoning", "reasoning_details"]
        );
        let flag =
            r#"{"error":{"message":"Unrecognized request argument supplied: preserve_thinking"}}"#;
        assert_eq!(
            fields(det("dashscope.aliyuncs.com", 400, flag, sent.as_bytes())),
            ["preserve_thinking"]
        );
        let nested = r#"{"detail":[{"type":"extra_forbidden","loc":["body","thinking","clear_thinking"],"msg":"Extra inputs are not permitted"}]}"#;
        assert_eq!(
            fields(det("api.z.ai", 422, nested, sent.as_bytes())),
            ["thinking.clear_thinking"]
        );
    }
}
