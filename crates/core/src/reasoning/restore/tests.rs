#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
//! Restore tests: captured turns from the golden response fixtures (the observers), echoed by
//! a client that dropped their carriers.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::*;
use crate::dialect::fingerprint::{
    echoed_turns, message_digest, request_digest, turn_fingerprint, Digest, Fingerprint,
};
use crate::dialect::gemini::restore as gemini;
use crate::dialect::testing::fixture;
use crate::dialect::turn::{Call, Carrier, PartRef};
use crate::dialect::Dialect::{self, Anthropic, Converse, Gemini, Openai, OpenaiResponses};
use crate::json::splice;
use crate::response::testing::{body, stream};

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
    // (Responses: a restored item shifts the later indexes.)
    let fps = |b: &[u8]| -> Vec<Fingerprint> {
        echoed_turns(dialect, b)
            .iter()
            .map(|t| t.fingerprint)
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
            Converse => {
                if let Some(Value::Array(blocks)) = obj.get_mut("content") {
                    blocks.retain(|b| b.get("reasoningContent").is_none());
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
    for empty in [json!(""), Value::Null, json!(" "), json!("\n")] {
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

// ---- Bedrock Converse ----

/// The turn of `converse_body.json` (and of the stream `converse_tool.bin`), echoed in
/// `converse_next_request.json` without its two `reasoningContent` blocks: both come back at
/// positions 0 and 1, before the `toolUse`, the same strings; kept ones are left alone.
#[test]
fn converse_reasoning_content_back_before_the_tool_use() {
    let captured = observed_body(Converse, "converse_body.json");
    let prev = request_digest(Converse, &fixture("converse_request.json")).unwrap();
    let lookup = known(prev, &captured);
    let full = json_of("converse_next_request.json");
    let model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
    let r = run(
        Converse,
        &lookup,
        model,
        &provider("bedrock"),
        &fixture("converse_next_request.json"),
    );
    assert_eq!(r.restored, Restored::default());
    let mut dropped = full.clone();
    dropped["messages"][1]["content"]
        .as_array_mut()
        .unwrap()
        .drain(0..2);
    // A cache point the client moved onto the message before the turn changes no fingerprint.
    dropped["messages"][0]["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"cachePoint": {"type": "default"}}));
    let body = pretty(&dropped);
    assert_eq!(
        echoed_turns(Converse, &body)[0].fingerprint,
        turn_fingerprint(&prev, &captured)
    );
    let r = run(Converse, &lookup, model, &provider("bedrock"), &body);
    let mut want = full.clone();
    want["messages"][0] = dropped["messages"][0].clone();
    assert_eq!(r.value(), want);
    assert_eq!(
        r.restored.counts,
        RestoreCounts {
            turns: 1,
            thinking: 1,
            redacted_thinking: 1,
            ..RestoreCounts::default()
        }
    );
    // The stream's captured turn is the same turn.
    assert_eq!(captured.carriers.len(), 2);
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
        item_ids: Vec::new(),
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
        item_ids: Vec::new(),
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
        item_ids: Vec::new(),
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

/// Issue 30: output items `[rs_1, msg_1, fc_1]` as the response carried them, and the user
/// item before them.
fn responses_turn() -> (Value, Vec<Value>, CapturedTurn) {
    let user = json!({"role": "user", "content": "Weather in Paris?"});
    let items = vec![
        json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB-rs_1"}),
        json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]}),
        json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
               "arguments": "{\"city\":\"Paris\"}", "status": "completed"}),
    ];
    let texts: Vec<String> = items.iter().map(Value::to_string).collect();
    let captured = crate::dialect::responses::response::items_turn(&texts);
    assert_eq!(captured.item_ids, ["rs_1", "msg_1", "fc_1"]);
    (user, items, captured)
}

fn responses_body(user: &Value, items: &[&Value]) -> Vec<u8> {
    let result = json!({"type": "function_call_output", "call_id": "call_1", "output": "sunny"});
    let mut input = vec![user.clone()];
    input.extend(items.iter().map(|i| (*i).clone()));
    input.push(result);
    pretty(&json!({"model": "gpt-5", "store": false, "input": input}))
}

#[test]
fn responses_run_goes_back_in_the_output_order() {
    let (user, items, captured) = responses_turn();
    let prev = message_digest(OpenaiResponses, &serde_json::to_vec(&user).unwrap());
    let lookup = known(prev, &captured);
    let (rs, msg, fc) = (&items[0], &items[1], &items[2]);
    let r = run(
        OpenaiResponses,
        &lookup,
        "gpt-5",
        &provider("openai"),
        &responses_body(&user, &[msg, rs, fc]),
    );
    let input = r.value()["input"].clone();
    assert_eq!(
        input.as_array().unwrap()[1..4],
        [rs.clone(), msg.clone(), fc.clone()]
    );
    assert_eq!(
        (r.restored.counts.turns, r.restored.counts.reasoning_item),
        (1, 0)
    );
    assert!(
        r.restored.reasons[0].starts_with("put its items back in the response's output order"),
        "{:?}",
        r.restored.reasons
    );
    // Each item's text as the client sent it.
    let out = String::from_utf8_lossy(&r.out).into_owned();
    let sent = String::from_utf8_lossy(&responses_body(&user, &[msg, rs, fc])).into_owned();
    let pretty_rs = serde_json::to_string_pretty(rs).unwrap();
    assert!(sent.contains(&pretty_rs.replace('\n', "\n    ")));
    assert!(out.contains(&pretty_rs.replace('\n', "\n    ")));

    // The reasoning item dropped and the other two swapped: restored into the output order.
    let body = responses_body(&user, &[fc, msg]);
    let ctx = RestoreContext {
        dialect: OpenaiResponses,
        lookup: &lookup,
        model: "gpt-5",
        provider: &provider("openai"),
    };
    let restored = restore(&ctx, &body);
    let out: Value = serde_json::from_slice(&splice(&body, restored.edits).unwrap()).unwrap();
    assert_eq!(
        out["input"].as_array().unwrap()[1..4],
        [rs.clone(), msg.clone(), fc.clone()]
    );
    assert_eq!(restored.counts.reasoning_item, 1);
    assert!(restored.reasons[0].starts_with("restored reasoning item x1, put its items back"));
}

#[test]
fn responses_run_with_an_item_not_recorded_keeps_the_clients_order() {
    let (user, items, captured) = responses_turn();
    let prev = message_digest(OpenaiResponses, &serde_json::to_vec(&user).unwrap());
    let lookup = known(prev, &captured);
    let (rs, msg, fc) = (&items[0], &items[1], &items[2]);
    let foreign = json!({"type": "message", "id": "msg_9", "role": "assistant", "content": "x"});
    let mut no_id = msg.clone();
    no_id.as_object_mut().unwrap().remove("id");
    for run_items in [
        vec![msg, &foreign, rs, fc],
        vec![&no_id, rs, fc],
        vec![msg, rs, fc, fc],
    ] {
        let body = responses_body(&user, &run_items);
        let r = run(
            OpenaiResponses,
            &lookup,
            "gpt-5",
            &provider("openai"),
            &body,
        );
        assert_eq!(r.restored, Restored::default());
    }
}

/// Issue 30: a tool-call turn that kept a `reasoning_details` entry but has a stub (no `data`)
/// where its encrypted entry was gets the captured entry back; the stub is left for the
/// shaping pass. A turn whose every entry is a stub gets the whole captured array.
#[test]
fn reasoning_details_entry_missing_beside_a_stub_comes_back() {
    let text = json!({"type": "reasoning.text", "text": "Look.", "format": "google-gemini-v1", "index": 0});
    let real = json!({"type": "reasoning.encrypted", "data": "EjQK-sig", "id": "c1",
                      "format": "google-gemini-v1", "index": 1});
    let stub = json!({"type": "reasoning.encrypted", "id": "c1", "format": "google-gemini-v1", "index": 1});
    let captured = CapturedTurn {
        calls: vec![Call {
            id: Some("c1".into()),
            name: "get_weather".into(),
            arguments: "{}".into(),
        }],
        carriers: vec![
            Carrier::ReasoningDetail(text.clone()),
            Carrier::ReasoningDetail(real.clone()),
        ],
        ..CapturedTurn::default()
    };
    let user = json!({"role": "user", "content": "Weather?"});
    let prev = message_digest(Openai, &serde_json::to_vec(&user).unwrap());
    let lookup = known(prev, &captured);
    let model = "google/gemini-3-pro-preview";
    let with = |details: Value| {
        let mut m = chat_echo(&captured);
        m["reasoning_details"] = details;
        pretty(&json!({"model": model, "messages": [user, m,
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]}))
    };
    let r = run(
        Openai,
        &lookup,
        model,
        &provider("openrouter"),
        &with(json!([text, stub])),
    );
    assert_eq!(
        r.value()["messages"][1]["reasoning_details"],
        json!([text, real, stub])
    );
    assert_eq!(r.restored.counts.reasoning_details, 1);
    let r = run(
        Openai,
        &lookup,
        model,
        &provider("openrouter"),
        &with(json!([stub])),
    );
    assert_eq!(
        r.value()["messages"][1]["reasoning_details"],
        json!([text, real])
    );
    // Everything kept (a stub beside it or not): nothing to restore.
    for details in [json!([text, real, stub]), json!([real, text])] {
        let r = run(
            Openai,
            &lookup,
            model,
            &provider("openrouter"),
            &with(details),
        );
        assert_eq!(r.restored, Restored::default());
    }
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

// ---- Property: random conversations, carriers dropped at random ----

use crate::testing::Rng;

/// Text with the characters JSON writers disagree on.
fn text(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "plain",
        " ",
        "naïve",
        "\"q\"",
        "\\",
        "\n",
        "\u{2028}",
        "\u{2029}",
        "日本",
        "\u{1F600}",
        "</script>",
        "\t",
        "\u{0007}",
        "/",
        "é",
    ];
    let n = 1 + rng.upto(5);
    (0..n)
        .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
        .collect()
}

/// A unique opaque value (signature, data, id).
fn opaque(rng: &mut Rng, n: &mut u64) -> String {
    *n += 1;
    format!("Eq{}+/{}=", *n, rng.below(1_000_000))
}

fn random_chat(rng: &mut Rng) -> Value {
    let mut n = 0;
    let mut messages = vec![
        json!({"role": "system", "content": text(rng)}),
        json!({"role": "user", "content": text(rng)}),
    ];
    for _ in 0..1 + rng.upto(3) {
        let calls = rng.upto(3);
        let mut m = json!({"role": "assistant", "content": if calls == 0 || rng.chance(30) { json!(text(rng)) } else { Value::Null }});
        if rng.chance(60) {
            // Never blank: a blank one is no carrier (shaping drops it too).
            m["reasoning_content"] = json!(format!("r{}", text(rng)));
        }
        if rng.chance(30) {
            m["reasoning"] = json!(format!("r{}", text(rng)));
        }
        if rng.chance(30) {
            m["reasoning_details"] = (0..1 + rng.upto(1))
                .map(|i| json!({"type": "reasoning.text", "text": text(rng), "signature": opaque(rng, &mut n), "index": i}))
                .collect();
        }
        if rng.chance(20) {
            m["extra_content"] = json!({"google": {"thought_signature": opaque(rng, &mut n)}});
        }
        let mut ids = Vec::new();
        if calls > 0 {
            m["tool_calls"] = (0..calls)
                .map(|i| {
                    let id = opaque(rng, &mut n);
                    ids.push(id.clone());
                    let mut c = json!({"id": id, "type": "function", "function": {"name": format!("f{i}"), "arguments": format!("{{\"x\":{}}}", rng.below(9))}});
                    if rng.chance(40) {
                        c["extra_content"] = json!({"google": {"thought_signature": opaque(rng, &mut n)}});
                    }
                    c
                })
                .collect();
        }
        messages.push(m);
        for id in ids {
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": text(rng)}));
        }
        if calls == 0 || rng.chance(30) {
            messages.push(json!({"role": "user", "content": text(rng)}));
        }
    }
    json!({"model": "m", "messages": messages})
}

fn random_anthropic(rng: &mut Rng) -> Value {
    let mut n = 0;
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": text(rng), "cache_control": {"type": "ephemeral"}}]}),
    ];
    for _ in 0..1 + rng.upto(3) {
        let mut blocks = Vec::new();
        for _ in 0..rng.upto(2) {
            let mut b = json!({"type": "thinking", "thinking": text(rng)});
            if rng.chance(80) {
                b["signature"] = json!(opaque(rng, &mut n));
            }
            blocks.push(b);
        }
        if rng.chance(30) {
            blocks.push(json!({"type": "redacted_thinking", "data": opaque(rng, &mut n)}));
        }
        let calls = rng.upto(2);
        if calls == 0 || rng.chance(50) {
            blocks.push(json!({"type": "text", "text": text(rng)}));
        }
        let mut ids = Vec::new();
        for i in 0..calls {
            let id = opaque(rng, &mut n);
            ids.push(id.clone());
            blocks.push(json!({"type": "tool_use", "id": id, "name": format!("t{i}"), "input": {"a": [1, text(rng)]}}));
        }
        messages.push(json!({"role": "assistant", "content": blocks}));
        let results: Vec<Value> = ids
            .iter()
            .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": text(rng)}))
            .collect();
        messages.push(if results.is_empty() {
            json!({"role": "user", "content": text(rng)})
        } else {
            json!({"role": "user", "content": results})
        });
    }
    json!({"model": "claude", "max_tokens": 10, "messages": messages})
}

fn random_gemini(rng: &mut Rng) -> Value {
    let mut n = 0;
    let mut contents = vec![json!({"role": "user", "parts": [{"text": text(rng)}]})];
    for _ in 0..1 + rng.upto(3) {
        let calls = rng.upto(3);
        let mut parts = Vec::new();
        if calls == 0 {
            for _ in 0..1 + rng.upto(1) {
                parts.push(json!({"text": text(rng)}));
            }
            if rng.chance(70) {
                let last = parts.len() - 1;
                parts[last]["thoughtSignature"] = json!(opaque(rng, &mut n));
            }
        } else {
            if rng.chance(30) {
                parts.push(json!({"text": text(rng)}));
            }
            for i in 0..calls {
                let mut p = json!({"functionCall": {"name": format!("g{}", opaque(rng, &mut n)), "args": {"i": i}}});
                if i == 0 && rng.chance(80) {
                    p["thoughtSignature"] = json!(opaque(rng, &mut n));
                }
                parts.push(p);
            }
        }
        contents.push(json!({"role": "model", "parts": parts}));
        contents.push(if calls == 0 {
            json!({"role": "user", "parts": [{"text": text(rng)}]})
        } else {
            json!({"role": "user", "parts": (0..calls).map(|i| json!({"functionResponse": {"name": "g", "response": {"i": i}}})).collect::<Vec<_>>()})
        });
    }
    json!({"contents": contents})
}

fn random_responses(rng: &mut Rng) -> Value {
    let mut n = 0;
    let mut input = vec![json!({"role": "user", "content": text(rng)})];
    for _ in 0..1 + rng.upto(3) {
        let calls = rng.upto(2);
        let mut run = Vec::new();
        let reasoning = |rng: &mut Rng, n: &mut u64| json!({"type": "reasoning", "id": format!("rs_{}", opaque(rng, n)), "summary": [{"type": "summary_text", "text": text(rng)}], "encrypted_content": opaque(rng, n)});
        if rng.chance(70) {
            run.push(reasoning(rng, &mut n));
        }
        if calls == 0 || rng.chance(40) {
            run.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text(rng)}]}));
            if calls > 0 && rng.chance(50) {
                run.push(reasoning(rng, &mut n));
            }
        }
        let mut ids = Vec::new();
        for i in 0..calls {
            let id = format!("call_{}", opaque(rng, &mut n));
            ids.push(id.clone());
            run.push(json!({"type": "function_call", "call_id": id, "name": format!("r{i}"), "arguments": "{}"}));
        }
        input.extend(run);
        for id in ids {
            input.push(json!({"type": "function_call_output", "call_id": id, "output": text(rng)}));
        }
        if calls == 0 || rng.chance(30) {
            input.push(json!({"role": "user", "content": text(rng)}));
        }
    }
    json!({"model": "gpt", "input": input})
}

/// Drop the carriers of turn `t` (entries `t.index..t.index + t.len`) from `v`; `how` picks
/// which (per dialect).
fn drop_turn(dialect: Dialect, v: &mut Value, t: &EchoedTurn, how: u64) {
    let key = list_key(dialect);
    let list = v[key].as_array_mut().unwrap();
    match dialect {
        OpenaiResponses => {
            let mut i = t.index;
            let mut end = t.index + t.len;
            while i < end {
                if list[i]["type"] == "reasoning" {
                    list.remove(i);
                    end -= 1;
                } else {
                    i += 1;
                }
            }
        }
        Openai => {
            let m = list[t.index].as_object_mut().unwrap();
            if how != 1 {
                for k in ["reasoning_content", "reasoning", "reasoning_details"] {
                    m.remove(k);
                }
            }
            if how != 2 {
                m.remove("extra_content");
                if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
                    for c in calls.iter_mut().filter_map(Value::as_object_mut) {
                        c.remove("extra_content");
                    }
                }
            }
        }
        Anthropic => {
            let m = &mut list[t.index];
            let blocks = m["content"].as_array_mut().unwrap();
            let before = blocks.len();
            blocks
                .retain(|b| !matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")));
            // A client that flattens a text-only turn to a string (one that had carriers:
            // else nothing is restored and the string stays).
            let dropped = blocks.len() < before;
            if how == 1 && dropped && blocks.len() == 1 && blocks[0]["type"] == "text" {
                m["content"] = blocks[0]["text"].clone();
            }
        }
        Gemini => {
            for p in list[t.index]["parts"].as_array_mut().unwrap() {
                p.as_object_mut().unwrap().remove("thoughtSignature");
            }
        }
        Converse => {
            let blocks = list[t.index]["content"].as_array_mut().unwrap();
            blocks.retain(|b| b.get("reasoningContent").is_none());
        }
    }
}

fn property(dialect: Dialect, seed: u64, generate: fn(&mut Rng) -> Value) {
    let mut rng = Rng(seed);
    let local = provider("local");
    let gemini = provider("gemini");
    for case in 0..150 {
        let full = generate(&mut rng);
        let full_bytes = serde_json::to_vec(&full).unwrap();
        let turns = echoed_turns(dialect, &full_bytes);
        let mut lookup = Lookup::new();
        let mut request = full.clone();
        let mut expected = full.clone();
        // Back to front: a dropped Responses item shifts the later indexes.
        for t in turns.iter().rev() {
            let how = rng.below(3);
            match rng.below(3) {
                0 => {
                    lookup.insert(t.fingerprint, t.turn.clone());
                }
                1 => {
                    lookup.insert(t.fingerprint, t.turn.clone());
                    drop_turn(dialect, &mut request, t, how);
                }
                _ => {
                    drop_turn(dialect, &mut request, t, how);
                    drop_turn(dialect, &mut expected, t, how);
                }
            }
        }
        let body = if rng.chance(50) {
            pretty(&request)
        } else {
            serde_json::to_vec(&request).unwrap()
        };
        let r = run(dialect, &lookup, "m", &local, &body);
        let got = r.value();
        if got != expected {
            let key = list_key(dialect);
            let (g, e) = (
                got[key].as_array().unwrap(),
                expected[key].as_array().unwrap(),
            );
            for (i, (a, b)) in g.iter().zip(e).enumerate() {
                assert_eq!(a, b, "case {case}: {key}[{i}]; sent {}", request[key][i]);
            }
            assert_eq!(got, expected, "case {case}");
        }
        // With the placeholder on (a Gemini 3 route): the same invariants (`run` checks them).
        run(dialect, &lookup, "gemini-3-pro-preview", &gemini, &body);
    }
}

#[test]
fn property_chat() {
    property(Openai, 0x5EED_0901, random_chat);
}

#[test]
fn property_anthropic() {
    property(Anthropic, 0x5EED_0902, random_anthropic);
}

#[test]
fn property_gemini() {
    property(Gemini, 0x5EED_0903, random_gemini);
}

#[test]
fn property_responses() {
    property(OpenaiResponses, 0x5EED_0904, random_responses);
}

#[test]
fn a_signature_the_client_sent_is_never_replaced() {
    // Gemini: the client's own (different) signature on call 0 stays; nothing is added.
    let captured = observed_stream(Gemini, "gemini_signature_later.sse");
    let prev = request_digest(Gemini, &fixture("gemini_request.json")).unwrap();
    let mut next = json_of("gemini_next_request.json");
    next["contents"][1]["parts"][1]["thoughtSignature"] = json!("client-own");
    let r = run(
        Gemini,
        &known(prev, &captured),
        "gemini-3-pro-preview",
        &provider("gemini"),
        &pretty(&next),
    );
    assert_eq!(r.restored, Restored::default());
    // The client left the streamed signature on its own trailing part: read as call 0's.
    let mut trailing = json_of("gemini_next_request.json");
    let parts = trailing["contents"][1]["parts"].as_array_mut().unwrap();
    let sig = parts[1]
        .as_object_mut()
        .unwrap()
        .remove("thoughtSignature")
        .unwrap();
    parts.push(json!({"text": "", "thoughtSignature": sig}));
    let r = run(
        Gemini,
        &known(prev, &captured),
        "gemini-3-pro-preview",
        &provider("gemini"),
        &pretty(&trailing),
    );
    assert_eq!(r.restored, Restored::default());
    // Chat: an empty signature is not one (replaced); a non-empty one stays.
    let captured = observed_stream(Openai, "gemini_openai_compat.sse");
    let user = json!({"role": "user", "content": "Weather in Paris and Rome?"});
    let prev = message_digest(Openai, &serde_json::to_vec(&user).unwrap());
    let mut req =
        json!({"model": "gemini-3-pro-preview", "messages": [user, chat_echo(&captured)]});
    req["messages"][1]["tool_calls"][0]["extra_content"] =
        json!({"google": {"thought_signature": ""}});
    let r = run(
        Openai,
        &known(prev, &captured),
        "gemini-3-pro-preview",
        &provider("gemini"),
        &pretty(&req),
    );
    assert_eq!(
        r.value()["messages"][1]["tool_calls"][0]["extra_content"]["google"]["thought_signature"],
        "CvcQAdHN2OekSig1"
    );
    assert_eq!(r.restored.counts.placeholder_signature, 0);
}

/// A lookup that answers every echoed turn of one body with that turn plus every kind of
/// carrier, with out-of-range positions and indexes, empty and malformed values.
struct Hostile(HashMap<Fingerprint, CapturedTurn>);

impl crate::reasoning::carriers::TurnLookup for Hostile {
    fn find(&self, _model: &str, fp: &Fingerprint) -> Option<CapturedTurn> {
        self.0.get(fp).cloned()
    }
}

fn hostile_carriers() -> Vec<Carrier> {
    vec![
        Carrier::AnthropicThinking {
            position: usize::MAX,
            thinking: String::new(),
            signature: Some(String::new()),
        },
        Carrier::AnthropicRedacted {
            position: 3,
            data: "d".into(),
        },
        Carrier::ReasoningContent(String::new()),
        Carrier::Reasoning("r\u{2028}".into()),
        Carrier::ReasoningDetail(json!(5)),
        Carrier::ReasoningDetail(json!({"type": "reasoning.text", "text": ""})),
        Carrier::MessageSignature(String::new()),
        Carrier::ToolCallSignature {
            call: 99,
            signature: "s".into(),
        },
        Carrier::ToolCallSignature {
            call: 0,
            signature: String::new(),
        },
        Carrier::GeminiSignature {
            on: PartRef::Call(99),
            signature: "g".into(),
        },
        Carrier::GeminiSignature {
            on: PartRef::Text,
            signature: "t".into(),
        },
        Carrier::GeminiSignature {
            on: PartRef::Call(1),
            signature: String::new(),
        },
        Carrier::ResponsesReasoning {
            position: usize::MAX,
            id: None,
            item: "not json".into(),
        },
        Carrier::ResponsesReasoning {
            position: 0,
            id: None,
            item: "[1]".into(),
        },
        Carrier::ResponsesReasoning {
            position: 7,
            id: Some("rs_x".into()),
            item: r#"  {"type":"reasoning","id":"rs_x","summary":[]}  "#.into(),
        },
    ]
}

#[test]
fn hostile_captured_turns_and_odd_shapes_never_break_the_body() {
    let bodies: Vec<(Dialect, Value)> = vec![
        (
            Openai,
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "text", "text": "x"}], "tool_calls": [5, {"function": 3}, {"id": "c", "extra_content": [1]}], "reasoning_details": null}, 7, {"role": "assistant", "content": null, "extra_content": {"google": 3}}]}),
        ),
        (
            Openai,
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}, {"role": "assistant", "content": "t", "tool_calls": []}]}),
        ),
        (
            Anthropic,
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "b"}, {"role": "assistant", "content": null}, {"role": "user", "content": "c"}, {"role": "assistant", "content": [1, "x", {"type": "tool_use", "id": "t", "name": "n", "input": {}}, {"type": "text", "text": "after"}]}, {"role": "user", "content": "d"}, {"role": "assistant", "content": []}, {"role": "user", "content": "e"}, {"role": "assistant", "content": 5}]}),
        ),
        (
            Gemini,
            json!({"contents": [{"role": "user", "parts": [{"text": "a"}]}, {"role": "model", "parts": [{"text": "t", "thought": true}, {"functionCall": 5}, {"functionCall": {"name": "f"}, "thoughtSignature": 3}, 9]}, {"role": "user", "parts": []}, {"role": "model", "parts": []}, {"role": "user"}, {"role": "model"}, {"role": "user", "parts": "x"}, {"role": "model", "parts": [{"text": ""}]}]}),
        ),
        (
            OpenaiResponses,
            json!({"input": ["hi", {"type": "function_call", "call_id": "c", "name": "f", "arguments": "nope"}, {"type": "function_call_output", "call_id": "c", "output": "o"}, {"role": "assistant", "content": "s"}, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "t"}, 5]}]}),
        ),
    ];
    let mut restored_any = [0usize; 4];
    for (dialect, v) in bodies {
        for body in [pretty(&v), serde_json::to_vec(&v).unwrap()] {
            let mut map = HashMap::new();
            for t in echoed_turns(dialect, &body) {
                let mut turn = t.turn.clone();
                turn.carriers = hostile_carriers();
                map.insert(t.fingerprint, turn);
            }
            let lookup = Hostile(map);
            for (model, p) in [("m", "local"), ("gemini-3-pro-preview", "gemini")] {
                let ctx = RestoreContext {
                    dialect,
                    lookup: &lookup,
                    model,
                    provider: &provider(p),
                };
                let restored = restore(&ctx, &body);
                restored_any[[Openai, Anthropic, Gemini, OpenaiResponses]
                    .iter()
                    .position(|d| *d == dialect)
                    .unwrap()] += restored.edits.len();
                let out = splice(&body, restored.edits.clone()).unwrap();
                serde_json::from_slice::<Value>(&out).unwrap_or_else(|e| {
                    panic!("{dialect:?} {e}: {}", String::from_utf8_lossy(&out))
                });
                let again = restore(&ctx, &out);
                assert!(
                    again.edits.is_empty(),
                    "{dialect:?} {p}: {:?}\n{}",
                    again.reasons,
                    String::from_utf8_lossy(&out)
                );
            }
        }
    }
    // Every dialect had something restored (the test exercises the writers).
    assert!(restored_any.iter().all(|n| *n > 0), "{restored_any:?}");
}
