//! The reasoning shaping pass (`docs/dev/architecture.md#request-passes`): keep / strip / pad the
//! reasoning carriers of every outbound assistant turn per the route's carrier set minus the
//! learned verdicts, drop learned-unknown top-level parameters, add keep-thinking flags, and on the
//! Anthropic wire replay or strip signed thinking per the route.
//!
//! Pure and deterministic. A policy over the body's one view ([`crate::dialect::doc::Doc`]:
//! its top-level object and turns): it returns edits of the original bytes, which the
//! pipeline splices together with the image passes' edits ([`crate::json::splice`]). An
//! assistant turn that already matches stays byte-identical, and a body with nothing to change
//! gives no edit.
//!
//! OpenAI Chat, per assistant message (`docs/reasoning.md#shaping-an-assistant-turn`, made minimal:
//! a carrier that is already right is never rewritten, and reasoning is copied between carriers
//! only when the carrier that holds it is not sent):
//! - `reasoning_content` (RC), when the route reads it: a non-blank value is kept; otherwise
//!   the text of a non-blank `reasoning` is moved into it when `reasoning` is not sent (or the
//!   turn needs the must-echo pad); otherwise the must-echo pad `" "` (never `""`) on a turn
//!   that needs it (a tool-call turn; for DeepSeek, when the request carries `tools`, every
//!   assistant turn); otherwise an empty / null / blank RC is dropped.
//! - `reasoning` (R), when read: kept when non-blank, filled from RC when RC is not sent,
//!   else dropped.
//! - `reasoning_details`, `extra_content` (message and `tool_calls[i]`), `reasoning_opaque` /
//!   `reasoning_text`: kept as sent when read, dropped otherwise (Copilot: `reasoning_text` is
//!   sent only next to its `reasoning_opaque`). Where `reasoning_details` is read, its entries
//!   that carry nothing ([`crate::dialect::openai::details::carries_nothing`]) are removed, and the array with
//!   them when no other entry is left.
//! - A strict route (no carrier) never gets one, not even the pad. On a must-echo route RC is
//!   never omitted, even if `omit` names it (a complaint about RC there is about its value).
//!
//! Anthropic Messages (`docs/reasoning.md#signed-thinking-on-the-anthropic-wire`):
//! - `Native`, `Kimi`, `DeepSeek`, `Zai`: `thinking` / `redacted_thinking` blocks pass
//!   byte-exact on every turn (never rewritten by model age).
//! - `StripThirdParty`: every thinking block is removed; a turn left empty gets
//!   [`EMPTY_TURN_TEXT`].
//! - `cache_control` is never left on a thinking block (Anthropic rejects it there; a
//!   marker is not part of the signature or of the prefix binding). It moves to the
//!   last non-thinking block of the same message that has none, so the agent's breakpoint
//!   keeps caching (at least) the same prefix; when there is no such block it is dropped.
//! - When earlier passes changed bytes of the binding prefix (`system`, `tools`, or a message at or
//!   before a signed thinking block) on a route with binding controls, the request gets
//!   `thinking.block_binding.prefix_mismatch_behavior: "drop_block"` and the [`BINDING_BETA`]
//!   `anthropic-beta` token, so the provider drops the invalidated blocks instead of failing
//!   (`docs/reasoning.md#prefix-binding`). Only when thinking is enabled and the client has not set
//!   `block_binding` itself, and never once the host rejected [`BINDING_BETA`] for the model
//!   (`Field::Beta` in `omit`, `docs/reasoning.md#beta-headers`).
//!
//! OpenAI Chat, on a route whose row lists the top-level reasoning controls its host takes
//! ([`ResolvedRoute::reasoning_controls`]; `docs/reasoning.md#top-level-reasoning-controls`):
//! every other one of [`REASONING_CONTROLS`] the request carries is removed up front (Cerebras
//! rejects `enable_thinking` and a top-level `reasoning` object with a 400), each with its reason.
//!
//! Every dialect: top-level parameters in `omit` that are droppable (`droppable_params` plus
//! [`KEEP_THINKING_PARAMS`]) are removed; a dotted name (`thinking.keep`) removes a nested key.
//! A value of the client's `anthropic-beta` header that is learned as rejected (`Field::Beta`
//! in `omit`) and on `droppable_betas` is removed from the header (the header itself when no
//! value is left); removing the client's [`BINDING_BETA`] also removes its
//! `thinking.block_binding`, which the provider rejects without the beta.
//!
//! Modules: `chat` (the OpenAI Chat carriers of each assistant turn), `anthropic` (signed
//! thinking, markers on thinking blocks, the prefix binding), `params` (top-level parameters,
//! reasoning controls, keep-thinking flags, `anthropic-beta` values); this module holds the
//! pass's entry points, its context and outcome, and the [`Shaper`] they all extend.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

mod anthropic;
mod chat;
mod params;

use super::profiles::{
    Carrier, EchoFamily, KeepThinking, ResolvedRoute, ThinkingRoute, BINDING_BETA,
    KEEP_THINKING_PARAMS,
};
use crate::dialect::doc::{Block, Content, Doc};
use crate::dialect::format::ReasoningCarriers;
use crate::dialect::{Dialect, ParseError};
use crate::json::scan::{self, Object};
use crate::json::Edit;
use crate::provider::REASONING_CONTROLS;
use crate::state::rejected::{SignatureId, SignatureLookup};
use crate::state::{Field, FieldSet};
use crate::texts::{ECHO_PAD, EMPTY_TURN_TEXT};

/// Top-level keys never removed, whatever `droppable_params` says: they are the request.
const PROTECTED_PARAMS: [&str; 5] = ["model", "messages", "contents", "input", "system"];

/// Inputs of [`shape`] besides the body.
#[derive(Clone, Copy)]
pub struct ShapeContext<'a> {
    /// The body's wire format.
    pub dialect: Dialect,
    /// From [`super::resolve`] for this route and the request's model.
    pub route: &'a ResolvedRoute,
    /// Fields learned as unknown for (upstream host, model): message fields (carriers:
    /// `reasoning_content`, `reasoning`, `reasoning_details`, `extra_content`,
    /// `reasoning_opaque`) and top-level parameters (dotted when nested).
    pub omit: &'a FieldSet,
    /// `[reasoning] droppable_params`.
    pub droppable_params: &'a [String],
    /// `[reasoning] droppable_betas`: the client's own `anthropic-beta` values that may be
    /// removed once learned as rejected (default none).
    pub droppable_betas: &'a [String],
    /// Lowest byte offset of the original body that the image passes' edits touch; `None`
    /// when they made none.
    pub first_changed_byte: Option<usize>,
    /// The request's `anthropic-beta` header as it stands before shaping (the client's, or
    /// what earlier passes set), if any.
    pub anthropic_beta: Option<&'a str>,
    /// Anthropic thinking signatures the provider rejected for the request's credential scope
    /// ([`crate::state::rejected`]): those blocks are stripped.
    pub rejected: &'a dyn SignatureLookup,
}

/// What [`shape`] did, as counts (for `x-cachekeeper-rewrites` and the log line).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShapeCounts {
    /// Carrier fields removed from assistant messages / tool calls.
    pub carriers_dropped: usize,
    /// Carrier fields set from another carrier's text.
    pub carriers_filled: usize,
    /// Must-echo pads written.
    pub pads: usize,
    /// Thinking blocks removed (third-party Anthropic-wire hosts).
    pub thinking_stripped: usize,
    /// Signed thinking blocks removed because the provider rejected their signature before
    /// ([`crate::state::rejected`]).
    pub thinking_rejected: usize,
    /// `cache_control` markers taken off thinking blocks.
    pub cache_control_moved: usize,
    /// Top-level parameters removed because they were learned as unknown.
    pub params_dropped: usize,
    /// Keep-thinking flags added.
    pub flags_added: usize,
    /// `thinking.block_binding` drop-on-prefix-mismatch set.
    pub binding_set: bool,
}

/// What [`shape`] decided: edits of the original body (spliced by the pipeline together with
/// the image passes' edits), headers, reasons and counts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Shaped {
    /// Edits of the original body; empty when nothing changes.
    pub edits: Vec<Edit>,
    /// Headers to set on the upstream request (replacing any value the request had), e.g.
    /// `anthropic-beta` merged with [`BINDING_BETA`]; an empty value removes the header.
    pub set_headers: Vec<(String, String)>,
    /// One human-readable line per change.
    pub reasons: Vec<String>,
    pub counts: ShapeCounts,
}

/// What [`shape_request`] made of a body.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShapeOutcome {
    /// `None`: nothing changed, forward the input bytes.
    pub body: Option<Vec<u8>>,
    /// Headers to set on the upstream request.
    pub set_headers: Vec<(String, String)>,
    /// One human-readable line per change.
    pub reasons: Vec<String>,
    pub counts: ShapeCounts,
}

/// Shaping alone on `body` (its own parse and splice), for tests and tools; the pipeline
/// runs [`shape`] over its one parse instead.
///
/// Errors: the body is not JSON or not of `ctx.dialect`'s shape ([`ParseError`]).
pub fn shape_request(ctx: &ShapeContext<'_>, body: &[u8]) -> Result<ShapeOutcome, ParseError> {
    let doc = crate::dialect::parse(body, ctx.dialect)?;
    let s = shape(ctx, &doc);
    let new = crate::json::splice(body, s.edits).map_err(|e| ParseError::Shape {
        dialect: ctx.dialect.as_str(),
        detail: e.to_string(),
    })?;
    Ok(ShapeOutcome {
        body: (new != body).then_some(new),
        set_headers: s.set_headers,
        reasons: s.reasons,
        counts: s.counts,
    })
}

/// Run the shaping pass over `doc` (the body's one parse; `ctx.dialect` is its dialect).
pub(crate) fn shape(ctx: &ShapeContext<'_>, doc: &Doc<'_>) -> Shaped {
    let top = &doc.top;
    let mut s = Shaper {
        text: doc.text,
        doc,
        ctx,
        edits: Vec::new(),
        reasons: Vec::new(),
        counts: ShapeCounts::default(),
        set_headers: Vec::new(),
        beta: if ctx.route.betas_in_body {
            body_betas(doc)
        } else {
            ctx.anthropic_beta.map(str::to_owned)
        },
        beta_changed: false,
        drop_client_binding: false,
    };
    s.drop_betas();
    let removed_top = s.drop_params(top);
    match ctx.dialect.format().reasoning_carriers() {
        ReasoningCarriers::MessageFields => {
            s.shape_chat(top);
            s.keep_thinking(top, &removed_top);
        }
        ReasoningCarriers::SignedBlocks => {
            let signed = s.shape_anthropic();
            s.binding(top, &signed, &removed_top);
        }
        ReasoningCarriers::Untouched => {}
    }
    if s.beta_changed {
        let value = s.beta.take().unwrap_or_default();
        if ctx.route.betas_in_body {
            // A member dropped whole (learned unknown) is not written again.
            if !removed_top.contains(super::betas::BODY_MEMBER) {
                s.set_body_betas(top, &value);
            }
        } else {
            s.set_headers.push((super::betas::HEADER.to_owned(), value));
        }
    }
    Shaped {
        edits: s.edits,
        set_headers: s.set_headers,
        reasons: s.reasons,
        counts: s.counts,
    }
}

struct Shaper<'t, 'c> {
    text: &'t str,
    doc: &'c Doc<'t>,
    ctx: &'c ShapeContext<'c>,
    edits: Vec<Edit>,
    reasons: Vec<String>,
    counts: ShapeCounts,
    set_headers: Vec<(String, String)>,
    /// The `anthropic-beta` value being built (the request's, then without dropped values,
    /// then with [`BINDING_BETA`]); `""` when every value was dropped.
    beta: Option<String>,
    /// `beta` differs from the request's.
    beta_changed: bool,
    /// The client's [`BINDING_BETA`] was removed: its `thinking.block_binding` goes too (the
    /// provider rejects `block_binding` without the beta).
    drop_client_binding: bool,
}

/// The [`SignatureId`] of a signed Anthropic block: a `thinking` block's non-empty
/// `signature`, a `redacted_thinking` block's `data`. `None` for unsigned thinking.
pub(crate) fn signature_id(text: &str, obj: &Object, kind: Option<&str>) -> Option<SignatureId> {
    let (kind, field) = match kind? {
        "thinking" => ("thinking", "signature"),
        "redacted_thinking" => ("redacted_thinking", "data"),
        _ => return None,
    };
    let value = scan::string_at(text, &obj.get(field)?.value)?;
    (!value.is_empty()).then(|| SignatureId::of(kind, &value))
}

fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

fn json_string(s: &str) -> Vec<u8> {
    serde_json::to_string(s)
        .unwrap_or_else(|_| "\" \"".to_owned())
        .into_bytes()
}

impl Shaper<'_, '_> {
    fn remove(&mut self, ranges: Vec<Range<usize>>) {
        self.edits.extend(ranges.into_iter().map(|range| Edit {
            range,
            replacement: Vec::new(),
        }));
    }

    fn insert(&mut self, obj: &Object, member: &str) {
        let (at, comma) = obj.append_point();
        let mut bytes = Vec::with_capacity(member.len() + 1);
        if comma {
            bytes.push(b',');
        }
        bytes.extend_from_slice(member.as_bytes());
        self.edits.push(Edit {
            range: at..at,
            replacement: bytes,
        });
    }
}

/// The body's `anthropic_beta` array as a comma-separated value
/// ([`super::betas::from_body_array`]), for a route whose betas travel in the body.
fn body_betas(doc: &Doc<'_>) -> Option<String> {
    let m = doc.top.get(super::betas::BODY_MEMBER)?;
    super::betas::from_body_array(doc.text.get(m.value.clone())?)
}

/// `existing` (a comma-separated `anthropic-beta` value) with `token` added; `None` when it is
/// already there.
pub fn merge_beta(existing: Option<&str>, token: &str) -> Option<String> {
    let existing = existing.map(str::trim).unwrap_or("");
    if existing.split(',').any(|t| t.trim() == token) {
        return None;
    }
    if existing.is_empty() {
        Some(token.to_owned())
    } else {
        Some(format!("{existing},{token}"))
    }
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
    use serde_json::{json, Value};

    fn droppable() -> Vec<String> {
        crate::config::ReasoningConfig::default().droppable_params
    }

    fn run(
        dialect: Dialect,
        route: &ResolvedRoute,
        omit: &[&str],
        fcb: Option<usize>,
        beta: Option<&str>,
        body: &str,
    ) -> ShapeOutcome {
        let omit = FieldSet::from_flat(omit.iter().copied());
        let d = droppable();
        let ctx = ShapeContext {
            dialect,
            route,
            omit: &omit,
            droppable_params: &d,
            droppable_betas: &[],
            first_changed_byte: fcb,
            anthropic_beta: beta,
            rejected: &(),
        };
        let out = shape_request(&ctx, body.as_bytes()).unwrap();
        let again = shape_request(&ctx, body.as_bytes()).unwrap();
        assert_eq!(out, again, "deterministic");
        if let Some(b) = &out.body {
            serde_json::from_slice::<Value>(b).expect("valid JSON out");
        }
        out
    }

    fn chat(host: &str, model: &str, omit: &[&str], body: &Value) -> (Option<Value>, ShapeOutcome) {
        let route = resolve(None, host, "/v1/chat/completions", Some(model), None);
        let out = run(Dialect::Openai, &route, omit, None, None, &body.to_string());
        (
            out.body
                .as_ref()
                .map(|b| serde_json::from_slice(b).unwrap()),
            out,
        )
    }

    fn turn_all() -> Value {
        json!({"role": "assistant", "content": "ok", "reasoning_content": "think",
               "reasoning": "think", "reasoning_details": [{"type": "reasoning.text", "text": "think"}]})
    }

    fn keys(v: &Value, i: usize) -> Vec<String> {
        let mut k: Vec<String> = v["messages"][i]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("reasoning"))
            .cloned()
            .collect();
        k.sort();
        k
    }

    #[test]
    fn strict_route_strips_everything_even_pad() {
        let body = json!({"model": "deepseek-r1", "messages": [
            {"role": "user", "content": "hi"}, turn_all(),
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
              "function": {"name": "f", "arguments": "{}"}}]}]});
        let (v, out) = chat("api.mistral.ai", "deepseek-r1", &[], &body);
        let v = v.unwrap();
        assert!(keys(&v, 1).is_empty());
        assert!(keys(&v, 2).is_empty());
        assert_eq!(out.counts.carriers_dropped, 3);
        assert_eq!(out.counts.pads, 0);
    }

    #[test]
    fn deepseek_pads_tool_turns_and_all_turns_with_tools() {
        let call =
            json!([{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
        let body = json!({"model": "deepseek-v4", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": call},
            {"role": "tool", "tool_call_id": "c", "content": "x"},
            {"role": "assistant", "content": "done"},
            {"role": "assistant", "content": null, "tool_calls": call, "reasoning_content": ""},
            {"role": "assistant", "content": null, "tool_calls": call, "reasoning_content": "real"}]});
        let (v, out) = chat("api.deepseek.com", "deepseek-v4", &[], &body);
        let v = v.unwrap();
        assert_eq!(v["messages"][1]["reasoning_content"], " ");
        assert!(
            v["messages"][3].get("reasoning_content").is_none(),
            "no tools: no pad"
        );
        assert_eq!(v["messages"][4]["reasoning_content"], " ");
        assert_eq!(v["messages"][5]["reasoning_content"], "real");
        assert_eq!(out.counts.pads, 2);
        let mut with_tools = body.clone();
        with_tools["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
        let (v, _) = chat("api.deepseek.com", "deepseek-v4", &[], &with_tools);
        assert_eq!(v.unwrap()["messages"][3]["reasoning_content"], " ");
        // Kimi pads tool turns only.
        let (v, _) = chat("api.moonshot.ai", "kimi-k2.5", &[], &with_tools);
        let v = v.unwrap();
        assert_eq!(v["messages"][1]["reasoning_content"], " ");
        assert!(v["messages"][3].get("reasoning_content").is_none());
    }

    #[test]
    fn must_echo_never_omits_rc_and_prefers_real_text() {
        let body = json!({"model": "deepseek-v4", "messages": [
            {"role": "assistant", "content": null, "reasoning": "why",
             "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]});
        let (v, out) = chat(
            "api.deepseek.com",
            "deepseek-v4",
            &["reasoning_content"],
            &body,
        );
        let v = v.unwrap();
        assert_eq!(v["messages"][0]["reasoning_content"], "why");
        assert!(v["messages"][0].get("reasoning").is_none());
        assert_eq!(out.counts.carriers_filled, 1);
    }

    #[test]
    fn matching_turn_is_byte_identical_and_unchanged_body_is_none() {
        let body = r#"{"model":"deepseek-v4","messages":[{"role":"user","content":"hi"},
            {"role":"assistant","reasoning_content":"x","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}"#;
        let route = resolve(None, "api.deepseek.com", "/v1", Some("deepseek-v4"), None);
        let out = run(Dialect::Openai, &route, &[], None, None, body);
        assert_eq!(out.body, None);
        assert!(out.reasons.is_empty());
        // A change in one turn leaves the others byte-identical.
        let body2 = body.replace(
            "]}]}",
            "]},{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_details\":[1]}]}",
        );
        let out = run(Dialect::Openai, &route, &[], None, None, &body2);
        let new = String::from_utf8(out.body.unwrap()).unwrap();
        assert_eq!(
            new,
            format!(
                "{}]}},{{\"role\":\"assistant\",\"content\":\"a\"}}]}}",
                &body[..body.len() - 4]
            )
        );
    }

    #[test]
    fn gemini_extra_content_only_for_gemini_models() {
        let body = json!({"model": "m", "messages": [
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"},
                 "extra_content": {"google": {"thought_signature": "sig"}}}]}]});
        let (v, _) = chat(
            "generativelanguage.googleapis.com",
            "gemini-3-pro",
            &[],
            &body,
        );
        assert!(v.is_none());
        let (v, out) = chat("api.openai.com", "gpt-5", &[], &body);
        assert!(v.unwrap()["messages"][0]["tool_calls"][0]
            .get("extra_content")
            .is_none());
        assert_eq!(out.counts.carriers_dropped, 1);
    }

    /// Issue 30: Cerebras rejects `enable_thinking` and a top-level `reasoning` object; its row
    /// lists the controls it takes, so the others go up front, each with its reason, also when
    /// one of them was learned as unknown too (one removal, never two overlapping edits).
    #[test]
    fn controls_a_strict_host_does_not_take_are_dropped_up_front() {
        let body = r#"{"model":"qwen-3","enable_thinking":true,"reasoning":{"effort":"high"},"messages":[],"reasoning_effort":"high","clear_thinking":false}"#;
        let route = resolve(None, "api.cerebras.ai", "/v1", Some("qwen-3"), None);
        for omit in [&[][..], &["enable_thinking"][..]] {
            let out = run(Dialect::Openai, &route, omit, None, None, body);
            assert_eq!(
                String::from_utf8(out.body.unwrap()).unwrap(),
                r#"{"model":"qwen-3","messages":[],"reasoning_effort":"high","clear_thinking":false}"#
            );
            assert_eq!(out.counts.params_dropped, 2, "{omit:?}");
            assert_eq!(out.reasons.len(), 2, "{:?}", out.reasons);
            assert!(out.reasons.iter().any(|r| r
                == "reasoning: dropped parameter reasoning (profile cerebras takes no top-level \
                    reasoning; its reasoning controls: reasoning_effort, reasoning_format, \
                    disable_reasoning, clear_thinking)"));
        }
        // Groq lists its own; a row with no list (OpenRouter) and other wires keep them all.
        let groq = resolve(None, "api.groq.com", "/v1", Some("m"), None);
        let out = run(Dialect::Openai, &groq, &[], None, None, body);
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"model":"qwen-3","messages":[],"reasoning_effort":"high"}"#
        );
        let openrouter = resolve(None, "openrouter.ai", "/v1", Some("m"), None);
        assert_eq!(
            run(Dialect::Openai, &openrouter, &[], None, None, body).body,
            None
        );
        let out = run(Dialect::OpenaiResponses, &route, &[], None, None, body);
        assert_eq!(out.body, None);
    }

    /// Issue 30: `reasoning_details` entries that carry nothing go where the route reads
    /// `reasoning_details`; the array goes when no other entry is left.
    #[test]
    fn reasoning_details_entries_without_data_are_dropped() {
        let text = json!({"type": "reasoning.text", "text": "t", "index": 0});
        let real = json!({"type": "reasoning.encrypted", "data": "EjQK", "id": "c1", "index": 1});
        let stub = json!({"type": "reasoning.encrypted", "id": "c1", "index": 2});
        let empty = json!({"type": "reasoning.summary", "summary": ""});
        let with = |details: Value| {
            json!({"model": "google/gemini-3-pro-preview", "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "reasoning_details": details,
                 "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "f", "arguments": "{}"}}]}]})
        };
        let model = "google/gemini-3-pro-preview";
        let (v, out) = chat(
            "openrouter.ai",
            model,
            &[],
            &with(json!([stub, text, real, empty])),
        );
        let v = v.unwrap();
        assert_eq!(v["messages"][1]["reasoning_details"], json!([text, real]));
        assert_eq!(out.counts.carriers_dropped, 2);
        assert_eq!(
            out.reasons,
            [
                "reasoning: messages[1]: dropped 2 reasoning_details entries at [0, 3] \
              (no data, text or summary)"
            ]
        );
        let (v, out) = chat("openrouter.ai", model, &[], &with(json!([stub])));
        assert_eq!(keys(&v.unwrap(), 1), Vec::<String>::new());
        assert_eq!(
            out.reasons,
            ["reasoning: messages[1]: dropped reasoning_details (no entry carries data, text or summary)"]
        );
        // Entries that carry something stay byte-identical.
        let (v, _) = chat("openrouter.ai", model, &[], &with(json!([text, real])));
        assert_eq!(v, None);
    }

    #[test]
    fn learned_params_are_dropped_in_any_dialect() {
        let body = r#"{"model":"m","store":true,"messages":[],"reasoning_effort":"high","zzz":1}"#;
        for dialect in [
            Dialect::Openai,
            Dialect::Anthropic,
            Dialect::OpenaiResponses,
            Dialect::Gemini,
            Dialect::Converse,
        ] {
            let route = resolve(None, "example.com", "/v1", Some("m"), None);
            let out = run(
                dialect,
                &route,
                &["reasoning_effort", "store", "zzz", "messages"],
                None,
                None,
                body,
            );
            assert_eq!(
                String::from_utf8(out.body.unwrap()).unwrap(),
                r#"{"model":"m","messages":[],"zzz":1}"#
            );
            assert_eq!(out.counts.params_dropped, 2);
        }
    }

    /// Converse: a learned parameter is dropped from `additionalModelRequestFields` too (the
    /// model's own parameters), its other keys kept.
    #[test]
    fn converse_drops_learned_params_from_the_model_fields() {
        let route = resolve(
            Some("bedrock"),
            "bedrock-runtime.us-east-1.amazonaws.com",
            "/",
            Some("m"),
            None,
        );
        let body = r#"{"messages":[],"additionalModelRequestFields":{"service_tier":"auto","thinking":{"type":"enabled"}}}"#;
        let out = run(
            Dialect::Converse,
            &route,
            &["service_tier"],
            None,
            None,
            body,
        );
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"messages":[],"additionalModelRequestFields":{"thinking":{"type":"enabled"}}}"#
        );
        assert_eq!(
            out.reasons,
            ["reasoning: dropped parameter additionalModelRequestFields.service_tier (learned unknown for bedrock-runtime.us-east-1.amazonaws.com)"]
        );
    }

    #[test]
    fn keep_thinking_flags() {
        let route = resolve(
            Some("dashscope"),
            "dashscope.aliyuncs.com",
            "/compatible-mode/v1",
            Some("qwen3.7-plus"),
            None,
        );
        let out = run(
            Dialect::Openai,
            &route,
            &[],
            None,
            None,
            r#"{"model":"q","enable_thinking":true,"messages":[]}"#,
        );
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"model":"q","enable_thinking":true,"messages":[],"preserve_thinking":true}"#
        );
        let out = run(
            Dialect::Openai,
            &route,
            &[],
            None,
            None,
            r#"{"model":"q","enable_thinking":false,"messages":[]}"#,
        );
        assert_eq!(out.body, None);
        let out = run(
            Dialect::Openai,
            &route,
            &["preserve_thinking"],
            None,
            None,
            r#"{"model":"q","enable_thinking":true,"messages":[],"preserve_thinking":true}"#,
        );
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"model":"q","enable_thinking":true,"messages":[]}"#
        );
        // GLM: only when RC is replayed (carriers override) and thinking is enabled.
        let body = r#"{"model":"glm-5","thinking":{"type":"enabled"},"messages":[]}"#;
        let zai = resolve(None, "api.z.ai", "/api/paas/v4", Some("glm-5"), None);
        assert_eq!(run(Dialect::Openai, &zai, &[], None, None, body).body, None);
        let rc = vec!["reasoning_content".to_owned()];
        let zai = resolve(None, "api.z.ai", "/api/paas/v4", Some("glm-5"), Some(&rc));
        let out = run(Dialect::Openai, &zai, &[], None, None, body);
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"model":"glm-5","thinking":{"type":"enabled","clear_thinking":false},"messages":[]}"#
        );
        let out = run(
            Dialect::Openai,
            &zai,
            &["thinking.clear_thinking"],
            None,
            None,
            body,
        );
        assert_eq!(out.body, None);
    }

    #[test]
    fn kimi_keep_never_with_reasoning_effort() {
        let mut route = resolve(None, "api.moonshot.ai", "/v1", Some("kimi-k2.6"), None);
        assert_eq!(route.keep_thinking, None, "ships off");
        route.keep_thinking = Some(KeepThinking::KimiKeepAll);
        let out = run(
            Dialect::Openai,
            &route,
            &[],
            None,
            None,
            r#"{"thinking":{"type":"enabled"},"messages":[]}"#,
        );
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"thinking":{"type":"enabled","keep":"all"},"messages":[]}"#
        );
        let out = run(
            Dialect::Openai,
            &route,
            &[],
            None,
            None,
            r#"{"thinking":{"type":"enabled"},"reasoning_effort":"high","messages":[]}"#,
        );
        assert_eq!(out.body, None);
    }

    const SIGNED: &str = r#"{"model":"claude-opus-4-5","thinking":{"type":"adaptive"},"system":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"EqQB","cache_control":{"type":"ephemeral"}},{"type":"redacted_thinking","data":"Em"},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"}]}]}"#;

    #[test]
    fn native_keeps_thinking_and_moves_cache_control() {
        let route = resolve(
            None,
            "api.anthropic.com",
            "/v1/messages",
            Some("claude-opus-4-5"),
            None,
        );
        let out = run(Dialect::Anthropic, &route, &[], None, None, SIGNED);
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        let c = &v["messages"][1]["content"];
        assert_eq!(
            c[0],
            json!({"type":"thinking","thinking":"t","signature":"EqQB"})
        );
        assert_eq!(c[1], json!({"type":"redacted_thinking","data":"Em"}));
        assert_eq!(c[2]["cache_control"], json!({"type":"ephemeral"}));
        assert_eq!(out.counts.cache_control_moved, 1);
        assert!(out.set_headers.is_empty());
        let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
        assert_eq!(
            run(Dialect::Anthropic, &route, &[], None, None, &plain).body,
            None
        );
    }

    #[test]
    fn third_party_strips_thinking() {
        let route = resolve(
            None,
            "api.minimax.io",
            "/anthropic/v1/messages",
            Some("MiniMax-M2"),
            None,
        );
        let out = run(Dialect::Anthropic, &route, &[], None, None, SIGNED);
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        let c = &v["messages"][1]["content"];
        assert_eq!(c.as_array().unwrap().len(), 1);
        assert_eq!(c[0]["type"], "tool_use");
        assert_eq!(c[0]["cache_control"], json!({"type":"ephemeral"}));
        assert_eq!(out.counts.thinking_stripped, 2);
        let only = r#"{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"}]}]}"#;
        let out = run(Dialect::Anthropic, &route, &[], None, None, only);
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        assert_eq!(
            v["messages"][0]["content"],
            json!([{"type":"text","text":EMPTY_TURN_TEXT}])
        );
        for (host, model) in [
            ("api.moonshot.ai", "kimi-k2"),
            ("api.deepseek.com", "deepseek-v4"),
            ("api.z.ai", "glm-5"),
        ] {
            let route = resolve(None, host, "/anthropic/v1/messages", Some(model), None);
            let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
            assert_eq!(
                run(Dialect::Anthropic, &route, &[], None, None, &plain).body,
                None,
                "{host}"
            );
        }
    }

    #[test]
    fn binding_when_prefix_changed_before_signed_block() {
        let route = resolve(
            None,
            "api.anthropic.com",
            "/v1/messages",
            Some("claude-fable-5-1"),
            None,
        );
        let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
        let in_first_user = plain.find("\"hi\"").unwrap();
        let out = run(
            Dialect::Anthropic,
            &route,
            &[],
            Some(in_first_user),
            Some("foo-1, bar-2"),
            &plain,
        );
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        assert_eq!(
            v["thinking"],
            json!({"type":"adaptive","block_binding":{"prefix_mismatch_behavior":"drop_block"}})
        );
        assert_eq!(
            out.set_headers,
            vec![(
                "anthropic-beta".to_owned(),
                format!("foo-1, bar-2,{BINDING_BETA}")
            )]
        );
        assert!(out.counts.binding_set);
        // A change after the last signed block, or outside the prefix: nothing.
        let after = plain.find("tool_result").unwrap();
        assert_eq!(
            run(Dialect::Anthropic, &route, &[], Some(after), None, &plain).body,
            None
        );
        let model = plain.find("claude").unwrap();
        assert_eq!(
            run(Dialect::Anthropic, &route, &[], Some(model), None, &plain).body,
            None
        );
        // `system` is always part of the prefix.
        let sys = plain.find("\"s\"").unwrap();
        let out = run(
            Dialect::Anthropic,
            &route,
            &[],
            Some(sys),
            Some(BINDING_BETA),
            &plain,
        );
        assert!(out.body.is_some());
        assert!(out.set_headers.is_empty(), "header already has the token");
        // Not on a gateway, not when the client set block_binding, not with thinking off.
        let gw = resolve(
            None,
            "llm.corp.example",
            "/v1/messages",
            Some("claude-opus-4-5"),
            None,
        );
        assert_eq!(
            run(
                Dialect::Anthropic,
                &gw,
                &[],
                Some(in_first_user),
                None,
                &plain
            )
            .body,
            None
        );
        let off = plain.replace(r#"{"type":"adaptive"}"#, r#"{"type":"disabled"}"#);
        assert_eq!(
            run(
                Dialect::Anthropic,
                &route,
                &[],
                Some(off.find("\"hi\"").unwrap()),
                None,
                &off
            )
            .body,
            None
        );
    }

    /// Shaping with `omit` holding `Field::Beta` values and `droppable_betas`.
    fn run_betas(
        route: &ResolvedRoute,
        betas: &[&str],
        droppable_betas: &[String],
        fcb: Option<usize>,
        header: Option<&str>,
        body: &str,
    ) -> ShapeOutcome {
        let omit: FieldSet = betas.iter().map(|b| Field::Beta((*b).to_owned())).collect();
        let ctx = ShapeContext {
            dialect: Dialect::Anthropic,
            route,
            omit: &omit,
            droppable_params: &[],
            droppable_betas,
            first_changed_byte: fcb,
            anthropic_beta: header,
            rejected: &(),
        };
        shape_request(&ctx, body.as_bytes()).unwrap()
    }

    /// Amazon Bedrock's InvokeModel carries betas in the body's `anthropic_beta` array: a value
    /// learned as rejected (and on `droppable_betas`) leaves the array, the member goes when
    /// none is left, and the `anthropic-beta` header is never touched there.
    #[test]
    fn bedrock_betas_in_the_body_array() {
        let route = resolve(
            None,
            "bedrock-runtime.us-east-1.amazonaws.com",
            "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke",
            Some("anthropic.claude-sonnet-4-5-20250929-v1:0"),
            None,
        );
        assert!(route.betas_in_body);
        let listed = vec!["foo-1".to_owned()];
        let two = r#"{"anthropic_version":"bedrock-2023-05-31","anthropic_beta":["foo-1","bar-2"],"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let out = run_betas(&route, &["foo-1"], &listed, None, Some("foo-1"), two);
        assert!(out.set_headers.is_empty(), "{:?}", out.set_headers);
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            two.replace(r#"["foo-1","bar-2"]"#, r#"["bar-2"]"#)
        );
        assert!(
            out.reasons[0].contains("removed `foo-1` from the body's anthropic_beta array"),
            "{:?}",
            out.reasons
        );
        let one = r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"anthropic_beta":[ "foo-1" ],"messages":[]}"#;
        let out = run_betas(&route, &["foo-1"], &listed, None, None, one);
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"messages":[]}"#
        );
        // Not learned, or not droppable, or only in the header: nothing changes.
        for (learned, droppable, body) in [
            (&[][..], &listed[..], two),
            (&["foo-1"][..], &[][..], two),
            (
                &["foo-1"][..],
                &listed[..],
                r#"{"max_tokens":5,"messages":[]}"#,
            ),
        ] {
            let out = run_betas(&route, learned, droppable, None, Some("foo-1"), body);
            assert_eq!((out.body, out.set_headers.len()), (None, 0));
        }
    }

    #[test]
    fn no_binding_once_its_beta_was_rejected() {
        let route = resolve(
            None,
            "api.anthropic.com",
            "/v1/messages",
            Some("claude-fable-5-1"),
            None,
        );
        let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
        let fcb = Some(plain.find("\"hi\"").unwrap());
        let out = run_betas(&route, &[BINDING_BETA], &[], fcb, Some("foo-1"), &plain);
        assert_eq!(out.body, None, "no block_binding");
        assert!(out.set_headers.is_empty(), "no beta added");
        assert!(!out.counts.binding_set);
        assert!(
            out.reasons[0].contains("thinking.block_binding not set"),
            "{:?}",
            out.reasons
        );
        // Another beta learned: binding as before.
        let out = run_betas(&route, &["other-1"], &[], fcb, None, &plain);
        assert!(out.counts.binding_set);
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), BINDING_BETA.to_owned())]
        );
    }

    #[test]
    fn a_client_beta_is_removed_only_when_learned_and_droppable() {
        let route = resolve(None, "api.anthropic.com", "/v1/messages", Some("m"), None);
        let body = r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let listed = vec!["foo-1".to_owned()];
        let out = run_betas(
            &route,
            &["foo-1"],
            &listed,
            None,
            Some("foo-1, bar-2"),
            body,
        );
        assert_eq!(out.body, None);
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), "bar-2".to_owned())]
        );
        assert!(
            out.reasons[0].contains("removed `foo-1`"),
            "{:?}",
            out.reasons
        );
        // The only value: the header goes (an empty value removes it).
        let out = run_betas(&route, &["foo-1"], &listed, None, Some("foo-1"), body);
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), String::new())]
        );
        // Learned but not listed, or listed but not learned: kept.
        for (learned, droppable) in [(&["foo-1"][..], &[][..]), (&[][..], &listed[..])] {
            let out = run_betas(&route, learned, droppable, None, Some("foo-1"), body);
            assert!(out.set_headers.is_empty());
            assert!(out.reasons.is_empty());
        }
        // Dropped and binding added in one header.
        let fable = resolve(
            None,
            "api.anthropic.com",
            "/v1/messages",
            Some("claude-fable-5-1"),
            None,
        );
        let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
        let fcb = Some(plain.find("\"hi\"").unwrap());
        let out = run_betas(
            &fable,
            &["foo-1"],
            &listed,
            fcb,
            Some("foo-1,bar-2"),
            &plain,
        );
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), format!("bar-2,{BINDING_BETA}"))]
        );
        // The client's own binding beta, listed and learned: its block_binding goes with it.
        let own = plain.replace(
            r#"{"type":"adaptive"}"#,
            r#"{"type":"adaptive","block_binding":{"prefix_mismatch_behavior":"drop_block"}}"#,
        );
        let listed = vec![BINDING_BETA.to_owned()];
        let out = run_betas(
            &fable,
            &[BINDING_BETA],
            &listed,
            fcb,
            Some(BINDING_BETA),
            &own,
        );
        assert_eq!(out.body.as_deref(), Some(plain.as_bytes()));
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), String::new())]
        );
        assert!(
            out.reasons
                .iter()
                .any(|r| r.contains("dropped parameter thinking.block_binding")),
            "{:?}",
            out.reasons
        );
    }

    #[test]
    fn merge_beta_cases() {
        assert_eq!(merge_beta(None, "x").as_deref(), Some("x"));
        assert_eq!(merge_beta(Some(" "), "x").as_deref(), Some("x"));
        assert_eq!(merge_beta(Some("a,x"), "x"), None);
        assert_eq!(merge_beta(Some("a"), "x").as_deref(), Some("a,x"));
    }

    #[test]
    fn not_json_is_an_error() {
        let route = resolve(None, "example.com", "/v1", None, None);
        let omit = FieldSet::new();
        let ctx = ShapeContext {
            dialect: Dialect::Openai,
            route: &route,
            omit: &omit,
            droppable_params: &[],
            droppable_betas: &[],
            first_changed_byte: None,
            anthropic_beta: None,
            rejected: &(),
        };
        assert!(shape_request(&ctx, b"{\"messages\":").is_err());
        assert!(shape_request(&ctx, b"[1]").is_err());
    }
}
