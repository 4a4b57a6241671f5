#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Restore tests: captured turns from the golden response fixtures (the observers), echoed by
//! a client that dropped their carriers.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::*;
use crate::dialect::Dialect::{self, Anthropic, Gemini, Openai, OpenaiResponses};
use crate::json::splice;
use crate::response::fingerprint::{
    message_digest, request_digest, turn_fingerprint, Digest, Fingerprint,
};
use crate::response::testing::{body, fixture, stream};
use crate::response::turn::{Call, Carrier, PartRef};

type Lookup = HashMap<Fingerprint, CapturedTurn>;

fn provider(name: &str) -> ResolvedProvider {
    ResolvedProvider::resolve(Some(name), "upstream.example", None)
}

fn observed_stream(dialect: Dialect, name: &str) -> CapturedTurn {
    stream(dialect, name).turn.expect("a complete turn")
}

fn observed_body(dialect: Dialect, name: &str) -> CapturedTurn {
    body(dialect, name).turn.expect("a complete turn")
}

fn known(prev: Digest, turn: &CapturedTurn) -> Lookup {
    HashMap::from([(turn_fingerprint(&prev, turn), turn.clone())])
}

fn json_of(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

fn pretty(v: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(v).unwrap()
}

struct Run {
    restored: Restored,
    out: Vec<u8>,
}

impl Run {
    fn value(&self) -> Value {
        serde_json::from_slice(&self.out).unwrap()
    }
}

/// Restore `body`, splice, and check what holds for every run: deterministic, valid JSON,
/// idempotent, the same fingerprints, nothing but carriers changed.
fn run(
    dialect: Dialect,
    lookup: &Lookup,
    model: &str,
    provider: &ResolvedProvider,
    body: &[u8],
) -> Run {
    let ctx = RestoreContext {
        dialect,
        lookup,
        model,
        provider,
    };
    let restored = restore(&ctx, body);
    assert_eq!(restore(&ctx, body), restored, "deterministic");
    let out = splice(body, restored.edits.clone()).unwrap();
    let after: Value = serde_json::from_slice(&out).expect("valid JSON after splicing");
    let again = restore(&ctx, &out);
    assert!(
        again.edits.is_empty(),
        "idempotent: {:?}\n{}",
        again.reasons,
        String::from_utf8_lossy(&out)
    );
    let before: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(
        strip(dialect, before),
        strip(dialect, after),
        "only carriers changed"
    );
    let fps = |b: &[u8]| -> Vec<(usize, Fingerprint)> {
        echoed_turns(dialect, b)
            .iter()
            .map(|t| (t.index, t.fingerprint))
            .collect()
    };
    assert_eq!(fps(body), fps(&out), "fingerprints kept");
    assert_eq!(restored.counts.turns, restored.reasons.len());
    Run { restored, out }
}

/// The body without any carrier (and with the spellings restore may switch between made one).
fn strip(dialect: Dialect, mut v: Value) -> Value {
    let key = list_key(dialect);
    let Some(list) = v.get_mut(key).and_then(Value::as_array_mut) else {
        return v;
    };
    if dialect == OpenaiResponses {
        list.retain(|i| i.get("type").and_then(Value::as_str) != Some("reasoning"));
        return v;
    }
    for m in list.iter_mut() {
        let Some(obj) = m.as_object_mut() else {
            continue;
        };
        match dialect {
            Anthropic => {
                if let Some(Value::String(s)) = obj.get("content") {
                    let blocks = if s.is_empty() {
                        json!([])
                    } else {
                        json!([{"type": "text", "text": s}])
                    };
                    obj.insert("content".into(), blocks);
                }
                if let Some(Value::Array(blocks)) = obj.get_mut("content") {
                    blocks.retain(|b| {
                        !matches!(
                            b.get("type").and_then(Value::as_str),
                            Some("thinking" | "redacted_thinking")
                        )
                    });
                }
            }
            Openai => {
                for k in ["reasoning_content", "reasoning", "reasoning_details"] {
                    obj.remove(k);
                }
                strip_extra(obj);
                if let Some(Value::Array(calls)) = obj.get_mut("tool_calls") {
                    calls
                        .iter_mut()
                        .filter_map(Value::as_object_mut)
                        .for_each(strip_extra);
                }
            }
            Gemini => {
                if let Some(Value::Array(parts)) = obj.get_mut("parts") {
                    for p in parts.iter_mut().filter_map(Value::as_object_mut) {
                        p.remove("thoughtSignature");
                        p.remove("thought_signature");
                    }
                    parts.retain(|p| p != &json!({"text": ""}));
                }
            }
            OpenaiResponses => {}
        }
    }
    v
}

fn strip_extra(obj: &mut serde_json::Map<String, Value>) {
    if let Some(Value::Object(extra)) = obj.get_mut("extra_content") {
        // A null `google` the client sent is replaced by the signature's object.
        if extra.get("google") == Some(&Value::Null) {
            extra.remove("google");
        }
        if let Some(Value::Object(g)) = extra.get_mut("google") {
            g.remove("thought_signature");
            if g.is_empty() {
                extra.remove("google");
            }
        }
        if extra.is_empty() {
            obj.remove("extra_content");
        }
    }
}

/// A client's echo of a captured Chat turn from its typed fields (the carriers dropped).
fn chat_echo(t: &CapturedTurn) -> Value {
    let mut m = json!({"role": "assistant", "content": if t.text.is_empty() { Value::Null } else { json!(t.text) }});
    if !t.calls.is_empty() {
        m["tool_calls"] = t
            .calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    m
}

fn gemini_call(name: &str, args: Value) -> Value {
    json!({"functionCall": {"name": name, "args": args}})
}

// ---- OpenAI Chat ----

#[test]
fn deepseek_reasoning_content_comes_back_on_the_tool_call_turn() {
    let captured = observed_stream(Openai, "deepseek_reasoning.sse");
    let prev = request_digest(Openai, &fixture("chat_request.json")).unwrap();
    let lookup = known(prev, &captured);
    let next = fixture("chat_next_request.json");
    // The fingerprint the observer computed is the one the echo gives.
    let echoed = echoed_turns(Openai, &next);
    assert_eq!(echoed[0].fingerprint, turn_fingerprint(&prev, &captured));
    let r = run(
        Openai,
        &lookup,
        "deepseek-v4-flash",
        &provider("deepseek"),
        &next,
    );
    assert_eq!(
        r.value()["messages"][2]["reasoning_content"],
        "User wants the weather; call get_weather for Paris."
    );
    assert_eq!(
        r.restored.counts,
        RestoreCounts {
            turns: 1,
            reasoning_content: 1,
            ..RestoreCounts::default()
        }
    );
    assert_eq!(r.restored.reasons.len(), 1);
    assert!(r.restored.reasons[0]
        .starts_with("restored reasoning_content x1 on messages[2] (captured turn "));
    assert!(!r.restored.reasons[0].contains("Paris"));
    // One insertion; every other byte as sent.
    assert_eq!(r.restored.edits.len(), 1);
    let e = &r.restored.edits[0];
    assert!(e.range.is_empty());
    assert_eq!(&r.out[..e.range.start], &next[..e.range.start]);
    assert_eq!(
        &r.out[e.range.start + e.replacement.len()..],
        &next[e.range.start..]
    );
    assert_eq!(
        String::from_utf8_lossy(&e.replacement),
        r#","reasoning_content":"User wants the weather; call get_weather for Paris.""#
    );
}

#[test]
fn a_turn_sent_with_its_carrier_or_unknown_is_left_alone() {
    let captured = observed_stream(Openai, "deepseek_reasoning.sse");
    let prev = request_digest(Openai, &fixture("chat_request.json")).unwrap();
    let mut next = json_of("chat_next_request.json");
    next["messages"][2]["reasoning_content"] = json!("my own");
    let r = run(
        Openai,
        &known(prev, &captured),
        "m",
        &provider("deepseek"),
        &pretty(&next),
    );
    assert!(r.restored.edits.is_empty());
    assert_eq!(r.restored, Restored::default());
    // Nothing known: nothing changes.
    let r = run(
        Openai,
        &Lookup::new(),
        "m",
        &provider("deepseek"),
        &fixture("chat_next_request.json"),
    );
    assert_eq!(r.restored, Restored::default());
    // Not JSON, no list, a list of garbage: nothing.
    for b in [
        &b"{"[..],
        b"[]",
        br#"{"messages":5}"#,
        br#"{"messages":[1,"x",{"role":"assistant"}]}"#,
    ] {
        let ctx = RestoreContext {
            dialect: Openai,
            lookup: &Lookup::new(),
            model: "m",
            provider: &provider("deepseek"),
        };
        assert_eq!(restore(&ctx, b), Restored::default());
    }
}

#[test]
fn an_empty_reasoning_content_is_replaced_not_duplicated() {
    let captured = observed_stream(Openai, "deepseek_reasoning.sse");
    let prev = request_digest(Openai, &fixture("chat_request.json")).unwrap();
    for empty in [json!(""), Value::Null] {
        let mut next = json_of("chat_next_request.json");
        next["messages"][2]["reasoning_content"] = empty;
        let r = run(
            Openai,
            &known(prev, &captured),
            "m",
            &provider("deepseek"),
            &pretty(&next),
        );
        assert_eq!(r.restored.counts.reasoning_content, 1);
        let text = String::from_utf8(r.out.clone()).unwrap();
        assert_eq!(text.matches("reasoning_content").count(), 1);
        assert_eq!(
            r.value()["messages"][2]["reasoning_content"],
            "User wants the weather; call get_weather for Paris."
        );
    }
}

#[test]
fn openrouter_reasoning_and_details_in_order() {
    let captured = observed_stream(Openai, "openrouter_reasoning.sse");
    let user = json!({"role": "user", "content": "Weather in Paris?"});
    let prev = message_digest(Openai, &serde_json::to_vec(&user).unwrap());
    let req = json!({"model": "anthropic/claude-sonnet-4.5", "messages": [user, chat_echo(&captured), {"role": "user", "content": "thanks"}]});
    let r = run(
        Openai,
        &known(prev, &captured),
        "anthropic/claude-sonnet-4.5",
        &provider("openrouter"),
        &pretty(&req),
    );
    let m = &r.value()["messages"][1];
    assert_eq!(m["reasoning"], "Look up the weather.");
    assert_eq!(
        m["reasoning_details"],
        json!([
            {"type": "reasoning.text", "text": "Look up the weather.",
             "signature": "EqQBCgIYAhIMsig", "format": "anthropic-claude-v1", "index": 0},
            {"type": "reasoning.encrypted", "data": "EmwKAhgBEgy3va3pzix",
             "id": null, "format": "anthropic-claude-v1", "index": 1}
        ])
    );
    assert_eq!(
        (
            r.restored.counts.reasoning,
            r.restored.counts.reasoning_details
        ),
        (1, 1)
    );
    assert!(r.restored.reasons[0].contains("reasoning x1, reasoning_details x1"));
}

#[test]
fn gemini_openai_endpoint_signature_on_the_first_call_and_merged() {
    let captured = observed_stream(Openai, "gemini_openai_compat.sse");
    let user = json!({"role": "user", "content": "Weather in Paris and Rome?"});
    let prev = message_digest(Openai, &serde_json::to_vec(&user).unwrap());
    let lookup = known(prev, &captured);
    let gemini = provider("gemini");
    let req = json!({"model": "gemini-3-pro-preview", "messages": [user, chat_echo(&captured)]});
    let r = run(
        Openai,
        &lookup,
        "gemini-3-pro-preview",
        &gemini,
        &pretty(&req),
    );
    let calls = &r.value()["messages"][1]["tool_calls"];
    assert_eq!(
        calls[0]["extra_content"],
        json!({"google": {"thought_signature": "CvcQAdHN2OekSig1"}})
    );
    // Only the first call of the parallel batch carries one; no placeholder on the second.
    assert!(calls[1].get("extra_content").is_none());
    assert_eq!(
        r.restored.counts,
        RestoreCounts {
            turns: 1,
            thought_signature: 1,
            ..RestoreCounts::default()
        }
    );
    // The client kept an extra_content without the signature: merged into it.
    for kept in [
        json!({"google": {"other": 1}}),
        json!({"x": true}),
        json!({"google": null}),
    ] {
        let mut req = req.clone();
        req["messages"][1]["tool_calls"][0]["extra_content"] = kept.clone();
        let r = run(
            Openai,
            &lookup,
            "gemini-3-pro-preview",
            &gemini,
            &pretty(&req),
        );
        let ec = &r.value()["messages"][1]["tool_calls"][0]["extra_content"];
        assert_eq!(
            ec["google"]["thought_signature"], "CvcQAdHN2OekSig1",
            "{kept}"
        );
        if kept.get("x").is_some() {
            assert_eq!(ec["x"], true);
        }
        if kept["google"].get("other").is_some() {
            assert_eq!(ec["google"]["other"], 1);
        }
    }
    // The client kept its own signature: left alone.
    let mut own = req.clone();
    own["messages"][1]["tool_calls"][0]["extra_content"] =
        json!({"google": {"thought_signature": "mine"}});
    assert!(run(
        Openai,
        &lookup,
        "gemini-3-pro-preview",
        &gemini,
        &pretty(&own)
    )
    .restored
    .edits
    .is_empty());
}

#[test]
fn gemini_openai_endpoint_placeholder_for_an_unknown_call() {
    let req = json!({"model": "gemini-3-pro-preview", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c2", "content": "2"}]});
    let gemini = provider("gemini");
    let r = run(
        Openai,
        &Lookup::new(),
        "gemini-3-pro-preview",
        &gemini,
        &pretty(&req),
    );
    let calls = &r.value()["messages"][1]["tool_calls"];
    assert_eq!(
        calls[0]["extra_content"]["google"]["thought_signature"],
        gemini::PLACEHOLDER_SIGNATURE
    );
    assert!(calls[1].get("extra_content").is_none());
    assert_eq!(r.restored.counts.placeholder_signature, 1);
    assert_eq!(r.restored.counts.turns, 1);
    assert!(r.restored.reasons[0].starts_with("placeholder thought signature"));
    // Not Gemini 3, or not a Gemini route: nothing.
    for (model, p) in [
        ("gemini-2.5-flash", "gemini"),
        ("gemini-3-pro-preview", "openrouter"),
    ] {
        let r = run(Openai, &Lookup::new(), model, &provider(p), &pretty(&req));
        assert!(r.restored.edits.is_empty(), "{model} {p}");
    }
}

// ---- Anthropic ----

#[test]
fn anthropic_signed_thinking_back_before_the_tool_use() {
    let captured = observed_stream(Anthropic, "anthropic_thinking_tool.sse");
    let prev = request_digest(Anthropic, &fixture("anthropic_request.json")).unwrap();
    let lookup = known(prev, &captured);
    let full = json_of("anthropic_next_request.json");
    // Sent with its thinking block: byte-identical.
    let r = run(
        Anthropic,
        &lookup,
        "claude-sonnet-4-5",
        &provider("anthropic"),
        &fixture("anthropic_next_request.json"),
    );
    assert_eq!(r.restored, Restored::default());
    // Dropped: back at position 0, the same strings.
    let mut dropped = full.clone();
    dropped["messages"][1]["content"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let body = pretty(&dropped);
    assert_eq!(
        echoed_turns(Anthropic, &body)[0].fingerprint,
        turn_fingerprint(&prev, &captured)
    );
    let r = run(
        Anthropic,
        &lookup,
        "claude-sonnet-4-5",
        &provider("anthropic"),
        &body,
    );
    assert_eq!(r.value(), full);
    assert_eq!(
        r.restored.counts,
        RestoreCounts {
            turns: 1,
            thinking: 1,
            ..RestoreCounts::default()
        }
    );
    assert!(r.restored.reasons[0].starts_with("restored thinking block x1 on messages[1]"));
}

#[test]
fn anthropic_thinking_and_redacted_in_their_order() {
    let captured = observed_body(Anthropic, "anthropic_redacted.json");
    let response = json_of("anthropic_redacted.json");
    let user = json!({"role": "user", "content": "Read a.txt"});
    let prev = message_digest(Anthropic, &serde_json::to_vec(&user).unwrap());
    let mut echo = json!({"role": "assistant", "content": response["content"].clone()});
    echo["content"].as_array_mut().unwrap().drain(0..2);
    let req = json!({"model": "claude-opus-4-1", "messages": [user, echo,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "hi"}]}]});
    let r = run(
        Anthropic,
        &known(prev, &captured),
        "claude-opus-4-1",
        &provider("anthropic"),
        &pretty(&req),
    );
    assert_eq!(r.value()["messages"][1]["content"], response["content"]);
    assert_eq!(
        (
            r.restored.counts.thinking,
            r.restored.counts.redacted_thinking
        ),
        (1, 1)
    );
}

#[test]
fn anthropic_string_content_becomes_blocks() {
    let captured = observed_stream(Anthropic, "anthropic_unsigned_cumulative.sse");
    let user = json!({"role": "user", "content": "Capital of France?"});
    let prev = message_digest(Anthropic, &serde_json::to_vec(&user).unwrap());
    let req = json!({"model": "claude-x", "messages": [user, {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "Thanks"}]});
    let body = pretty(&req);
    assert_eq!(
        echoed_turns(Anthropic, &body)[0].fingerprint,
        turn_fingerprint(&prev, &captured)
    );
    let r = run(
        Anthropic,
        &known(prev, &captured),
        "claude-x",
        &provider("local"),
        &body,
    );
    assert_eq!(
        r.value()["messages"][1]["content"],
        json!([{"type": "thinking", "thinking": "Short answer."}, {"type": "text", "text": "Paris."}])
    );
}

#[test]
fn anthropic_text_with_escapes_non_ascii_and_u2028_round_trips() {
    let thinking =
        "naïve \"quoted\" \\ back\nslash \u{2028} line sep \u{2029} 日本語 \u{1F600} \t\u{0001}";
    let signature = "Eq+/=\u{00e9}sig";
    let turn = CapturedTurn {
        text: String::new(),
        calls: vec![Call {
            id: Some("toolu_1".into()),
            name: "read".into(),
            arguments: "{}".into(),
        }],
        carriers: vec![Carrier::AnthropicThinking {
            position: 0,
            thinking: thinking.into(),
            signature: Some(signature.into()),
        }],
    };
    let user = json!({"role": "user", "content": "go"});
    let prev = message_digest(Anthropic, &serde_json::to_vec(&user).unwrap());
    let req = json!({"messages": [user, {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]}]});
    let r = run(
        Anthropic,
        &known(prev, &turn),
        "m",
        &provider("anthropic"),
        &pretty(&req),
    );
    let block = &r.value()["messages"][1]["content"][0];
    assert_eq!(block["thinking"].as_str(), Some(thinking));
    assert_eq!(block["signature"].as_str(), Some(signature));
    // The restored message reads back as the captured carriers.
    let echoed = echoed_turns(Anthropic, &r.out);
    assert_eq!(echoed[0].turn.carriers, turn.carriers);
}

// ---- Gemini ----

#[test]
fn gemini_signature_back_on_its_call_part() {
    let captured = observed_stream(Gemini, "gemini_signature_later.sse");
    let prev = request_digest(Gemini, &fixture("gemini_request.json")).unwrap();
    let lookup = known(prev, &captured);
    let full = json_of("gemini_next_request.json");
    let gemini = provider("gemini");
    let r = run(
        Gemini,
        &lookup,
        "gemini-3-pro-preview",
        &gemini,
        &fixture("gemini_next_request.json"),
    );
    assert_eq!(r.restored, Restored::default());
    let mut dropped = full.clone();
    dropped["contents"][1]["parts"][1]
        .as_object_mut()
        .unwrap()
        .remove("thoughtSignature");
    let body = pretty(&dropped);
    assert_eq!(
        echoed_turns(Gemini, &body)[0].fingerprint,
        turn_fingerprint(&prev, &captured)
    );
    let r = run(Gemini, &lookup, "gemini-3-pro-preview", &gemini, &body);
    assert_eq!(r.value(), full);
    assert_eq!(
        r.restored.counts,
        RestoreCounts {
            turns: 1,
            thought_signature: 1,
            ..RestoreCounts::default()
        }
    );
}

#[test]
fn gemini_parallel_batch_signature_on_the_first_call_only() {
    let captured = observed_body(Gemini, "gemini_parallel.json");
    let user = json!({"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]});
    let prev = message_digest(Gemini, &serde_json::to_vec(&user).unwrap());
    let model = json!({"role": "model", "parts": [
        gemini_call("get_weather", json!({"city": "Paris"})),
        gemini_call("get_weather", json!({"city": "Rome"}))]});
    let req = json!({"contents": [user, model, {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather", "response": {"t": 18}}},
        {"functionResponse": {"name": "get_weather", "response": {"t": 25}}}]}]});
    for m in ["gemini-2.5-flash", "gemini-3-flash-preview"] {
        let r = run(
            Gemini,
            &known(prev, &captured),
            m,
            &provider("gemini"),
            &pretty(&req),
        );
        let parts = &r.value()["contents"][1]["parts"];
        assert_eq!(parts[0]["thoughtSignature"], "CvcQAdHN2Oek");
        assert!(parts[1].get("thoughtSignature").is_none());
        assert_eq!(r.restored.counts.thought_signature, 1);
        assert_eq!(r.restored.counts.placeholder_signature, 0);
    }
    // Unknown (another provider produced it): a placeholder on the first call, Gemini 3 only.
    let r = run(
        Gemini,
        &Lookup::new(),
        "models/gemini-3-flash-preview",
        &provider("gemini"),
        &pretty(&req),
    );
    let parts = &r.value()["contents"][1]["parts"];
    assert_eq!(parts[0]["thoughtSignature"], gemini::PLACEHOLDER_SIGNATURE);
    assert!(parts[1].get("thoughtSignature").is_none());
    assert_eq!(r.restored.counts.placeholder_signature, 1);
    let r = run(
        Gemini,
        &Lookup::new(),
        "gemini-2.5-flash",
        &provider("gemini"),
        &pretty(&req),
    );
    assert!(r.restored.edits.is_empty());
}

#[test]
fn gemini_text_signature_on_the_last_text_part_or_an_empty_part() {
    let captured = observed_body(Gemini, "gemini_body.json");
    let user = json!({"role": "user", "parts": [{"text": "Hi"}]});
    let prev = message_digest(Gemini, &serde_json::to_vec(&user).unwrap());
    let req = json!({"contents": [user, {"role": "model", "parts": [{"text": "Hello! "}, {"text": "How can I help?"}]}, {"role": "user", "parts": [{"text": "More"}]}]});
    let r = run(
        Gemini,
        &known(prev, &captured),
        "gemini-2.5-flash",
        &provider("gemini"),
        &pretty(&req),
    );
    let parts = &r.value()["contents"][1]["parts"];
    assert!(parts[0].get("thoughtSignature").is_none());
    assert_eq!(parts[1]["thoughtSignature"], "Cp8BAdHtim9sig");
    // A turn with calls whose trailing signature came on its own part: an empty text part.
    let turn = CapturedTurn {
        text: String::new(),
        calls: vec![Call {
            id: None,
            name: "f".into(),
            arguments: "{}".into(),
        }],
        carriers: vec![
            Carrier::GeminiSignature {
                on: PartRef::Call(0),
                signature: "A".into(),
            },
            Carrier::GeminiSignature {
                on: PartRef::Text,
                signature: "B".into(),
            },
        ],
    };
    let req =
        json!({"contents": [user, {"role": "model", "parts": [gemini_call("f", json!({}))]}]});
    let r = run(
        Gemini,
        &known(prev, &turn),
        "gemini-3-pro",
        &provider("gemini"),
        &pretty(&req),
    );
    assert_eq!(
        r.value()["contents"][1]["parts"],
        json!([{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "A"}, {"text": "", "thoughtSignature": "B"}])
    );
    assert_eq!(echoed_turns(Gemini, &r.out)[0].turn.carriers, turn.carriers);
}

#[test]
fn gemini_placeholders_on_every_unsigned_step_never_twice() {
    let user = json!({"role": "user", "parts": [{"text": "go"}]});
    let step = |name: &str| json!({"role": "model", "parts": [gemini_call(name, json!({})), gemini_call("second", json!({}))]});
    let result = |name: &str| json!({"role": "user", "parts": [{"functionResponse": {"name": name, "response": {}}}]});
    let known_step = json!({"role": "model", "parts": [gemini_call("known", json!({}))]});
    let req = json!({"contents": [user, step("a"), result("a"), known_step, result("known"), step("b"), result("b")]});
    // The middle step was captured with its signature.
    let prev = message_digest(Gemini, &serde_json::to_vec(&result("a")).unwrap());
    let turn = CapturedTurn {
        text: String::new(),
        calls: vec![Call {
            id: None,
            name: "known".into(),
            arguments: "{}".into(),
        }],
        carriers: vec![Carrier::GeminiSignature {
            on: PartRef::Call(0),
            signature: "K".into(),
        }],
    };
    let r = run(
        Gemini,
        &known(prev, &turn),
        "gemini-3-pro-preview",
        &provider("gemini"),
        &pretty(&req),
    );
    let c = &r.value()["contents"];
    assert_eq!(
        c[1]["parts"][0]["thoughtSignature"],
        gemini::PLACEHOLDER_SIGNATURE
    );
    assert!(c[1]["parts"][1].get("thoughtSignature").is_none());
    assert_eq!(c[3]["parts"][0]["thoughtSignature"], "K");
    assert_eq!(
        c[5]["parts"][0]["thoughtSignature"],
        gemini::PLACEHOLDER_SIGNATURE
    );
    assert_eq!(
        r.restored.counts,
        RestoreCounts {
            turns: 3,
            thought_signature: 1,
            placeholder_signature: 2,
            ..RestoreCounts::default()
        }
    );
}

// ---- Responses ----

#[test]
fn responses_reasoning_item_back_verbatim_before_its_call() {
    let captured = observed_stream(OpenaiResponses, "responses_reasoning_tool.sse");
    let prev = request_digest(OpenaiResponses, &fixture("responses_request.json")).unwrap();
    let lookup = known(prev, &captured);
    let r = run(
        OpenaiResponses,
        &lookup,
        "gpt-5.6",
        &provider("openai"),
        &fixture("responses_next_request.json"),
    );
    assert_eq!(r.restored, Restored::default());
    let full = json_of("responses_next_request.json");
    let mut dropped = full.clone();
    dropped["input"].as_array_mut().unwrap().remove(1);
    let body = pretty(&dropped);
    assert_eq!(
        echoed_turns(OpenaiResponses, &body)[0].fingerprint,
        turn_fingerprint(&prev, &captured)
    );
    let r = run(
        OpenaiResponses,
        &lookup,
        "gpt-5.6",
        &provider("openai"),
        &body,
    );
    let Carrier::ResponsesReasoning { item, .. } = &captured.carriers[0] else {
        panic!()
    };
    assert_eq!(
        r.value()["input"][1],
        serde_json::from_str::<Value>(item).unwrap()
    );
    assert_eq!(r.value(), {
        let mut v = full.clone();
        v["input"][1] = serde_json::from_str(item).unwrap();
        v
    });
    // The item text is inserted as received.
    assert!(String::from_utf8_lossy(&r.restored.edits[0].replacement).starts_with(item.trim()));
    assert_eq!(r.restored.counts.reasoning_item, 1);
}

// ---- Counts ----

#[test]
fn kinds_name_every_counter() {
    let c = RestoreCounts {
        turns: 9,
        reasoning_content: 1,
        reasoning: 2,
        reasoning_details: 3,
        thought_signature: 4,
        thinking: 5,
        redacted_thinking: 6,
        reasoning_item: 7,
        placeholder_signature: 8,
    };
    let names: Vec<(&str, usize)> = c.kinds().to_vec();
    assert_eq!(
        names,
        vec![
            ("restored_reasoning_content", 1),
            ("restored_reasoning", 2),
            ("restored_reasoning_details", 3),
            ("restored_thought_signature", 4),
            ("restored_thinking", 5),
            ("restored_redacted_thinking", 6),
            ("restored_reasoning_item", 7),
            ("restored_placeholder_signature", 8),
        ]
    );
}
