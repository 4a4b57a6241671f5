//! Beta-header rejections: does a provider's 4xx say that an `anthropic-beta` value the
//! request carried is not accepted (`docs/reasoning.md#beta-headers`)?
//!
//! Some features need an `anthropic-beta` value (the thinking-binding controls,
//! [`super::BINDING_BETA`]; the 1-hour cache TTL), and hosts that do not know a value reject
//! the whole request. Two wordings are known ([`WORDINGS`], sources in the docs):
//! - Anthropic's API and Vertex AI name the values, each in backticks:
//!   ``Unexpected value(s) `a-2025-01-01`, `b-2025-02-02` for the `anthropic-beta` header.
//!   Please consult our documentation at docs.anthropic.com or try again without the header.``
//! - Amazon Bedrock names none: `invalid beta flag` (also inside
//!   `ValidationException: invalid beta flag` and
//!   `The model returned the following errors: invalid beta flag`).
//!
//! A value is rejected when the body holds a wording and names the value (as a whole token,
//! case-insensitive) among those the request carried. A wording that names no value at all
//! blames the one value the proxy added when it added exactly one, else the one value the
//! request carried when it carried exactly one; otherwise nothing. A body that names values,
//! none of them carried, is about another request and teaches nothing.
//!
//! Pure: the caller (the proxy's retry) decides which rejected values it may learn (those it
//! added itself, and the client's own only when on `[reasoning] droppable_betas`), stores them
//! as [`crate::state::Field::Beta`] for (host, model), and retries once.

use serde_json::Value;

/// The request header the values travel in.
pub const HEADER: &str = "anthropic-beta";

/// The body member the values travel in instead, an array of strings, on a row whose
/// [`crate::provider::Provider::betas_in_body`] says so (Amazon Bedrock's InvokeModel).
pub const BODY_MEMBER: &str = "anthropic_beta";

/// The values of a body's [`BODY_MEMBER`] array, comma-joined as the header would carry them
/// (the one spelling the shaping pass and the retry work on); `None` when the member is
/// absent, not an array of strings, or empty. `json`: the member's value as written.
pub fn from_body_array(json: &str) -> Option<String> {
    let values: Vec<String> = serde_json::from_str(json).ok()?;
    let joined = values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    (!joined.is_empty()).then_some(joined)
}

/// [`from_body_array`] over a whole request body (identity-encoded JSON), for the retry's
/// reading of what was sent; `None` when the body is not a JSON object holding the array.
pub fn in_body(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let array = v.get(BODY_MEMBER)?;
    from_body_array(&array.to_string())
}

/// A comma-separated value as the [`BODY_MEMBER`] array's JSON (`["a","b"]`).
pub fn body_array(value: &str) -> String {
    let list: Vec<&str> = values(Some(value));
    serde_json::to_string(&list).unwrap_or_else(|_| "[]".to_owned())
}

/// Beta-rejection phrases (lowercase), with their sources in `docs/reasoning.md#beta-headers`:
/// Anthropic / Vertex AI (values named in backticks before it), Amazon Bedrock (none named).
pub const WORDINGS: &[&str] = &["for the `anthropic-beta` header", "invalid beta flag"];

/// Most bytes of an error body that are read ([`crate::dialect::MAX_ERROR_BODY_BYTES`]).
const MAX_ERROR_BYTES: usize = crate::dialect::MAX_ERROR_BODY_BYTES;

/// What a 4xx rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The rejected values, as the request carried them, in the header's order.
    pub values: Vec<String>,
    /// The provider's message holding the wording (at most
    /// [`MAX_WORDING_CHARS`](crate::state::MAX_WORDING_CHARS) chars), for logs and `verdicts`.
    pub wording: String,
}

/// The values of an `anthropic-beta` header (comma-separated, trimmed, empty ones skipped,
/// the first of duplicates kept).
pub fn values(header: Option<&str>) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for v in header.unwrap_or("").split(',').map(str::trim) {
        if !v.is_empty() && !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// `header` without the values `drop` holds: `None` when nothing is removed, `Some("")` when
/// no value is left (the header is then removed, see
/// [`crate::rewrite::RewriteOutcome::set_headers`]).
pub fn without(header: Option<&str>, drop: impl Fn(&str) -> bool) -> Option<String> {
    let all = values(header);
    let kept: Vec<&str> = all.iter().copied().filter(|v| !drop(v)).collect();
    (kept.len() != all.len()).then(|| kept.join(","))
}

/// The `anthropic-beta` value that went upstream: the last `set_headers` entry for it (the
/// passes' merged value; `""` removes the header), else the client's own.
pub fn forwarded<'a>(
    client: Option<&'a str>,
    set_headers: &'a [(String, String)],
) -> Option<&'a str> {
    match set_headers
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case(HEADER))
    {
        Some((_, v)) if v.trim().is_empty() => None,
        Some((_, v)) => Some(v.as_str()),
        None => client,
    }
}

/// Classify a response: which of `carried` (the values the request sent) a 4xx rejects.
/// `added` are the values the proxy itself added (a subset of `carried`). `None` when the
/// status is not 4xx, the body holds no [`WORDINGS`], or no carried value is to blame.
pub fn rejected(status: u16, body: &[u8], carried: &[&str], added: &[&str]) -> Option<Rejected> {
    if !(400..500).contains(&status) || carried.is_empty() {
        return None;
    }
    let head = &body[..body.len().min(MAX_ERROR_BYTES)];
    let raw = String::from_utf8_lossy(head);
    let hay = raw.to_lowercase();
    if !WORDINGS.iter().any(|w| hay.contains(w)) {
        return None;
    }
    let named: Vec<String> = carried
        .iter()
        .filter(|v| names_token(&hay, &v.to_lowercase()))
        .map(|v| (*v).to_owned())
        .collect();
    let values = if !named.is_empty() {
        named
    } else if names_any_value(&hay) {
        return None;
    } else {
        match (added, carried) {
            ([one], _) | ([], [one]) => vec![(*one).to_owned()],
            _ => return None,
        }
    };
    Some(Rejected {
        values,
        wording: crate::state::wording_excerpt(message(&raw).trim()),
    })
}

/// A character that can be part of a beta value (`interleaved-thinking-2025-05-14`).
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// `token` occurs in `hay` with no token character on either side.
fn names_token(hay: &str, token: &str) -> bool {
    !token.is_empty()
        && hay.match_indices(token).any(|(i, _)| {
            let before = hay[..i].chars().next_back();
            let after = hay[i + token.len()..].chars().next();
            !before.is_some_and(is_token_char) && !after.is_some_and(is_token_char)
        })
}

/// The body names some value in backticks other than the header's own name (Anthropic's
/// wording lists the rejected values so).
fn names_any_value(hay: &str) -> bool {
    hay.split('`')
        .skip(1)
        .step_by(2)
        .any(|t| !t.trim().is_empty() && t != HEADER && t.chars().all(is_token_char))
}

/// The provider's message: the first JSON string in the body that holds a wording (the
/// body itself when it is not JSON or none does).
fn message(raw: &str) -> String {
    fn find(v: &Value) -> Option<&str> {
        match v {
            Value::String(s) => {
                let l = s.to_lowercase();
                WORDINGS.iter().any(|w| l.contains(w)).then_some(s.as_str())
            }
            Value::Array(a) => a.iter().find_map(find),
            Value::Object(o) => o.values().find_map(find),
            _ => None,
        }
    }
    serde_json::from_str::<Value>(raw)
        .ok()
        .and_then(|v| find(&v).map(str::to_owned))
        .unwrap_or_else(|| raw.to_owned())
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
    use crate::reasoning::BINDING_BETA;

    const TTL: &str = "extended-cache-ttl-2025-04-11";

    /// Anthropic's answer to an unknown value (claude-code#53855, zed#42715).
    const ANTHROPIC_ONE: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Unexpected value(s) `thinking-binding-controls-2026-08-01` for the `anthropic-beta` header. Please consult our documentation at docs.anthropic.com or try again without the header."},"request_id":"req_011CV7jNDAQgbRyMrz1ajpyK"}"#;

    /// Vertex AI, several values at once (Wei-Shaw/sub2api#3358, QuantumNous/new-api#2975).
    const VERTEX_MANY: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Unexpected value(s) `prompt-caching-scope-2026-01-05`, `extended-cache-ttl-2025-04-11` for the `anthropic-beta` header. Please consult our documentation at docs.anthropic.com or try again without the header."}}"#;

    /// Amazon Bedrock (claude-code#49648; continuedev/continue#8297; cline#5568).
    const BEDROCK: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"invalid beta flag"}}"#;
    const BEDROCK_WRAPPED: &str =
        r#"{"message":"The model returned the following errors: invalid beta flag"}"#;
    const BEDROCK_VALIDATION: &str = r#"{"error":{"type":"","message":"InvokeModelWithResponseStream: operation error Bedrock Runtime: InvokeModelWithResponseStream, https response error StatusCode: 400, ValidationException: invalid beta flag"},"type":"error"}"#;

    fn vals(r: Option<Rejected>) -> Vec<String> {
        r.map(|r| r.values).unwrap_or_default()
    }

    #[test]
    fn anthropic_names_the_value() {
        let carried = ["interleaved-thinking-2025-05-14", BINDING_BETA];
        let r = rejected(400, ANTHROPIC_ONE.as_bytes(), &carried, &[BINDING_BETA]).unwrap();
        assert_eq!(r.values, [BINDING_BETA]);
        assert!(
            r.wording
                .starts_with("Unexpected value(s) `thinking-binding-controls-2026-08-01` for the `anthropic-beta` header."),
            "{}",
            r.wording
        );
        // Named although the proxy did not add it: the caller decides what it may learn.
        assert_eq!(
            vals(rejected(400, ANTHROPIC_ONE.as_bytes(), &carried, &[])),
            [BINDING_BETA]
        );
    }

    #[test]
    fn vertex_names_several_and_only_carried_ones_count() {
        let carried = [
            "prompt-caching-scope-2026-01-05",
            "claude-code-20250219",
            TTL,
        ];
        assert_eq!(
            vals(rejected(400, VERTEX_MANY.as_bytes(), &carried, &[TTL])),
            ["prompt-caching-scope-2026-01-05", TTL]
        );
        // Case-insensitive; a value that is a prefix of a named one is not named.
        assert_eq!(
            vals(rejected(
                400,
                VERTEX_MANY.as_bytes(),
                &["Extended-Cache-TTL-2025-04-11", "prompt-caching"],
                &[]
            )),
            ["Extended-Cache-TTL-2025-04-11"]
        );
    }

    #[test]
    fn bedrock_names_none_the_one_added_value_is_blamed() {
        let carried = ["interleaved-thinking-2025-05-14", BINDING_BETA];
        for body in [BEDROCK, BEDROCK_WRAPPED, BEDROCK_VALIDATION] {
            let r = rejected(400, body.as_bytes(), &carried, &[BINDING_BETA]).unwrap();
            assert_eq!(r.values, [BINDING_BETA], "{body}");
            assert!(r.wording.contains("invalid beta flag"), "{}", r.wording);
        }
        // Two added, or none added among two carried: ambiguous, nothing.
        assert_eq!(
            rejected(
                400,
                BEDROCK.as_bytes(),
                &[TTL, BINDING_BETA],
                &[TTL, BINDING_BETA]
            ),
            None
        );
        assert_eq!(rejected(400, BEDROCK.as_bytes(), &carried, &[]), None);
        // The client's one value, nothing added: that one.
        assert_eq!(vals(rejected(400, BEDROCK.as_bytes(), &[TTL], &[])), [TTL]);
        // Plain-text body.
        assert_eq!(
            vals(rejected(400, b"invalid beta flag", &[TTL], &[TTL])),
            [TTL]
        );
    }

    #[test]
    fn not_beta_rejections() {
        let carried = [BINDING_BETA];
        let added = [BINDING_BETA];
        // A 400 about something else.
        let other = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.thinking.signature: Field required"}}"#;
        assert_eq!(rejected(400, other.as_bytes(), &carried, &added), None);
        let version = r#"{"type":"error","error":{"type":"invalid_request_error","message":"anthropic-version: header is required"}}"#;
        assert_eq!(rejected(400, version.as_bytes(), &carried, &added), None);
        // A value the request never sent.
        assert_eq!(
            rejected(400, VERTEX_MANY.as_bytes(), &carried, &added),
            None
        );
        // Not a 4xx; no beta carried.
        assert_eq!(
            rejected(500, ANTHROPIC_ONE.as_bytes(), &carried, &added),
            None
        );
        assert_eq!(rejected(400, ANTHROPIC_ONE.as_bytes(), &[], &[]), None);
    }

    #[test]
    fn header_values() {
        assert_eq!(values(Some(" a, b ,,a,c")), ["a", "b", "c"]);
        assert!(values(None).is_empty());
        assert_eq!(
            without(Some("a, b,c"), |v| v == "b").as_deref(),
            Some("a,c")
        );
        assert_eq!(without(Some("b"), |v| v == "b").as_deref(), Some(""));
        assert_eq!(without(Some("a"), |v| v == "b"), None);
        assert_eq!(without(None, |_| true), None);
        let set = vec![("Anthropic-Beta".to_owned(), "a,x".to_owned())];
        assert_eq!(forwarded(Some("a"), &set), Some("a,x"));
        assert_eq!(forwarded(Some("a"), &[]), Some("a"));
        let removed = vec![("anthropic-beta".to_owned(), String::new())];
        assert_eq!(forwarded(Some("a"), &removed), None);
    }
}
