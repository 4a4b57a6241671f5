//! Reasoning shaping on real request shapes, per profile, and the pure part of the unknown-field
//! sequence of `docs/reasoning.md#detection-and-widening` (detect → learned set → shape again → a
//! second rejection teaches nothing new).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::collections::BTreeMap;

use cachekeeper::config::ReasoningConfig;
use cachekeeper::dialect::Dialect;
use cachekeeper::reasoning::{
    detect, resolve, shape_request, Carrier, ResolvedRoute, ShapeContext, ShapeOutcome,
    BINDING_BETA,
};
use cachekeeper::state::{Field, FieldSet};
use serde_json::{json, Value};

const CHAT: &str = include_str!("../fixtures/reasoning/chat_tool_loop.json");
const ANTHROPIC: &str = include_str!("../fixtures/reasoning/anthropic_thinking_tool_loop.json");

fn droppable() -> Vec<String> {
    ReasoningConfig::default().droppable_params
}

fn chat_body(model: &str) -> Vec<u8> {
    CHAT.replace("MODEL", model).into_bytes()
}

fn shape(
    dialect: Dialect,
    route: &ResolvedRoute,
    omit: &FieldSet,
    fcb: Option<usize>,
    beta: Option<&str>,
    body: &[u8],
) -> ShapeOutcome {
    let d = droppable();
    let ctx = ShapeContext {
        dialect,
        route,
        omit,
        droppable_params: &d,
        droppable_betas: &[],
        first_changed_byte: fcb,
        anthropic_beta: beta,
        rejected: &(),
    };
    let out = shape_request(&ctx, body).expect("shapes");
    assert_eq!(
        shape_request(&ctx, body).expect("shapes"),
        out,
        "deterministic"
    );
    if let Some(new) = &out.body {
        serde_json::from_slice::<Value>(new).expect("valid JSON");
        // Idempotent: shaping the shaped body changes nothing more.
        let again = shape_request(&ctx, new).expect("shapes");
        assert_eq!(again.body, None, "second pass changed {:?}", again.reasons);
    }
    out
}

/// [`shape`] of an OpenAI Chat Completions `body` (no image edits, no `anthropic-beta`).
fn chat(route: &ResolvedRoute, omit: &FieldSet, body: &[u8]) -> ShapeOutcome {
    shape(Dialect::Openai, route, omit, None, None, body)
}

fn sent(out: &ShapeOutcome, input: &[u8]) -> Vec<u8> {
    out.body.clone().unwrap_or_else(|| input.to_vec())
}

fn value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("JSON")
}

/// The reasoning keys (and whether tool call 0 kept `extra_content`) of message `i`.
fn carriers_of(v: &Value, i: usize) -> (Vec<String>, bool) {
    let m = &v["messages"][i];
    let mut keys: Vec<String> = m
        .as_object()
        .map(|o| {
            o.keys()
                .filter(|k| k.starts_with("reasoning"))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    let sig = m["tool_calls"][0].get("extra_content").is_some();
    (keys, sig)
}

fn names(cs: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = cs.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

#[test]
#[allow(clippy::too_many_lines, reason = "one scenario, read in order")]
fn chat_turn_with_all_carriers_per_profile() {
    // (provider key or None, host, model, carriers kept on the RC+R+RD turn, pad on the bare
    // tool turn, reasoning-only turn keeps/moves its text into)
    let rc = "reasoning_content";
    let r = "reasoning";
    let rd = "reasoning_details";
    type Case<'a> = (
        Option<&'a str>,
        &'a str,
        &'a str,
        &'a [&'a str],
        bool,
        &'a [&'a str],
    );
    let cases: &[Case<'_>] = &[
        (None, "api.mistral.ai", "deepseek-r1", &[], false, &[]),
        (Some("groq"), "api.groq.com", "qwen3", &[], false, &[]),
        // Cerebras reads `reasoning` only (issue 7: it was strict and dropped the text).
        (
            Some("cerebras"),
            "api.cerebras.ai",
            "gpt-oss",
            &[r],
            false,
            &[r],
        ),
        (Some("sambanova"), "api.sambanova.ai", "m", &[], false, &[]),
        (
            None,
            "api.hunyuan.cloud.tencent.com",
            "hunyuan-t1",
            &[],
            false,
            &[],
        ),
        (
            Some("fireworks"),
            "api.fireworks.ai",
            "kimi-k2",
            &[rc],
            false,
            &[rc],
        ),
        (
            Some("openrouter"),
            "openrouter.ai",
            "z-ai/glm-5",
            &[rc, r, rd],
            false,
            &[r],
        ),
        (
            Some("novita"),
            "api.novita.ai",
            "m",
            &[rc, rd],
            false,
            &[rc],
        ),
        (
            Some("minimax"),
            "api.minimax.io",
            "MiniMax-M2",
            &[rc, rd],
            false,
            &[rc],
        ),
        (Some("ollama"), "ollama.com", "qwen3", &[rc, r], false, &[r]),
        (Some("local"), "127.0.0.1", "qwen3", &[rc, r], false, &[r]),
        (None, "localhost:8080", "qwen3", &[rc, r], false, &[r]),
        (Some("zai"), "api.z.ai", "glm-5", &[], false, &[]),
        (
            Some("openai"),
            "api.openai.com",
            "gpt-5",
            &[rc],
            false,
            &[rc],
        ),
        (
            Some("gemini"),
            "generativelanguage.googleapis.com",
            "gemini-3-pro",
            &[rc],
            false,
            &[rc],
        ),
        (
            Some("dashscope"),
            "dashscope.aliyuncs.com",
            "qwen3.7-plus",
            &[rc],
            false,
            &[rc],
        ),
        (
            Some("deepseek"),
            "api.deepseek.com",
            "deepseek-v4",
            &[rc],
            true,
            &[rc],
        ),
        (
            Some("kimi"),
            "api.moonshot.ai",
            "kimi-k2.5",
            &[rc],
            true,
            &[rc],
        ),
        (
            Some("mimo"),
            "api.xiaomimimo.com",
            "mimo-v2.5",
            &[rc],
            true,
            &[rc],
        ),
        (
            Some("anthropic"),
            "api.anthropic.com",
            "claude-opus-4-5",
            &[rc],
            false,
            &[rc],
        ),
        (None, "api.githubcopilot.com", "gpt-5", &[rc], false, &[rc]),
        (None, "example.com", "some-model", &[rc], false, &[rc]),
    ];
    let omit = FieldSet::new();
    for (provider, host, model, kept, pad, last) in cases {
        let route = resolve(*provider, host, "/v1/chat/completions", Some(model), None);
        let body = chat_body(model);
        let out = chat(&route, &omit, &body);
        let v = value(&sent(&out, &body));
        let before = value(&body);
        let what = format!("{provider:?} {host} {model}");
        // Turn 2: RC + R + RD + Gemini signature.
        let (keys, sig) = carriers_of(&v, 2);
        assert_eq!(keys, names(kept), "{what}");
        assert_eq!(sig, model.contains("gemini"), "{what}: extra_content");
        // Turn 4: a bare tool-call turn; padded only on must-echo routes.
        let (keys, _) = carriers_of(&v, 4);
        if *pad {
            assert_eq!(keys, names(&[rc]), "{what}");
            assert_eq!(v["messages"][4]["reasoning_content"], " ", "{what}");
        } else {
            assert!(keys.is_empty(), "{what}: {keys:?}");
        }
        // Turn 6: only `reasoning`; kept where R is read, moved to RC where only RC is.
        let (keys, _) = carriers_of(&v, 6);
        assert_eq!(keys, names(last), "{what}");
        for k in &keys {
            assert_eq!(
                v["messages"][6][k], "Subtraction instead of addition.",
                "{what}"
            );
        }
        // Everything else is untouched.
        for i in [0, 1, 3, 5, 7] {
            assert_eq!(
                v["messages"][i], before["messages"][i],
                "{what}: message {i}"
            );
        }
        for key in ["model", "tools", "stream_options", "reasoning_effort"] {
            assert_eq!(v[key], before[key], "{what}: {key}");
        }
    }
}

#[test]
fn untouched_messages_stay_byte_identical() {
    let route = resolve(
        None,
        "api.mistral.ai",
        "/v1/chat/completions",
        Some("m"),
        None,
    );
    let body = chat_body("m");
    let out = chat(&route, &FieldSet::new(), &body);
    let new = String::from_utf8(out.body.expect("strips")).expect("utf8");
    let old = String::from_utf8(body).expect("utf8");
    // The text before the first assistant turn and after the last carrier is the same bytes.
    let first_turn = old.find("\"role\": \"assistant\"").expect("turn");
    assert_eq!(new[..first_turn], old[..first_turn]);
    let tail = old
        .find("{\"role\": \"user\", \"content\": \"Go ahead.\"}")
        .expect("tail");
    assert!(new.ends_with(&old[tail..]));
}

#[test]
fn deepseek_with_tools_pads_every_assistant_turn() {
    let route = resolve(
        None,
        "api.deepseek.com",
        "/v1/chat/completions",
        Some("deepseek-v4"),
        None,
    );
    let mut v = value(&chat_body("deepseek-v4"));
    v["messages"][6] = json!({"role": "assistant", "content": "No reasoning here."});
    let body = v.to_string().into_bytes();
    let out = chat(&route, &FieldSet::new(), &body);
    let v = value(&sent(&out, &body));
    assert_eq!(v["messages"][4]["reasoning_content"], " ");
    assert_eq!(v["messages"][6]["reasoning_content"], " ");
    assert_eq!(out.counts.pads, 2);
}

/// A toy verdict store: (host, model) → learned fields.
#[derive(Default)]
struct Verdicts(BTreeMap<(String, String), FieldSet>);

impl Verdicts {
    fn omit(&self, host: &str, model: &str) -> FieldSet {
        self.0
            .get(&(host.to_owned(), model.to_owned()))
            .cloned()
            .unwrap_or_default()
    }
    /// Store the new fields; true when something new was learned (= retry once).
    fn learn(&mut self, host: &str, model: &str, fields: &FieldSet) -> bool {
        let entry = self
            .0
            .entry((host.to_owned(), model.to_owned()))
            .or_default();
        let before = entry.len();
        entry.extend(fields.iter().cloned());
        entry.len() > before
    }
}

#[test]
fn hermes_sequence_learns_once_per_model_and_never_loops() {
    let host = "openrouter.ai";
    let model = "z-ai/glm-5.3-flash:US";
    let sibling = "z-ai/glm-5.3";
    let mut store = Verdicts::default();
    let d = droppable();
    let route = resolve(None, host, "/api/v1/chat/completions", Some(model), None);
    let body = chat_body(model);

    let out = chat(&route, &store.omit(host, model), &body);
    let first = sent(&out, &body);
    assert_eq!(
        carriers_of(&value(&first), 2).0,
        names(&["reasoning", "reasoning_content", "reasoning_details"])
    );

    // 1. "Provider returned error" is not a rejection.
    let err = br#"{"error":{"message":"Provider returned error","code":400}}"#;
    assert_eq!(detect(400, err, &first, &route, &d), None);

    // 2. A body naming messages[1].reasoning_details: learn {reasoning, reasoning_details}.
    let err = br#"{"error":{"message":"Extra inputs are not permitted, field: 'messages[1].reasoning_details'","code":400}}"#;
    let verdict = detect(400, err, &first, &route, &d).expect("verdict");
    assert_eq!(
        verdict.fields,
        FieldSet::from([
            Field::message("reasoning"),
            Field::message("reasoning_details")
        ])
    );
    assert!(store.learn(host, model, &verdict.fields), "new: retry once");
    let out = chat(&route, &store.omit(host, model), &body);
    let retry = sent(&out, &body);
    let v = value(&retry);
    assert_eq!(
        carriers_of(&v, 2).0,
        names(&["reasoning_content"]),
        "RC survives the retry"
    );
    // The reasoning-only turn keeps its text, moved into RC.
    assert_eq!(
        v["messages"][6]["reasoning_content"],
        "Subtraction instead of addition."
    );

    // 3. The same rejection again teaches nothing new: no second retry.
    match detect(400, err, &retry, &route, &d) {
        None => {}
        Some(again) => assert!(!store.learn(host, model, &again.fields)),
    }

    // 4. A fresh request on the same key omits the fields up front.
    let out = chat(&route, &store.omit(host, model), &body);
    assert_eq!(sent(&out, &body), retry);

    // 5. A sibling model on the same host still gets RD.
    let sib = resolve(None, host, "/api/v1/chat/completions", Some(sibling), None);
    let sb = chat_body(sibling);
    let out = chat(&sib, &store.omit(host, sibling), &sb);
    assert!(carriers_of(&value(&sent(&out, &sb)), 2)
        .0
        .contains(&"reasoning_details".to_owned()));
}

#[test]
fn unknown_rc_and_params_sequences() {
    let d = droppable();
    let mut store = Verdicts::default();
    // OpenAI Chat gets RC by default; a rejection naming it drops all three carriers.
    let host = "api.openai.com";
    let model = "gpt-5";
    let route = resolve(None, host, "/v1/chat/completions", Some(model), None);
    let body = chat_body(model);
    let first = sent(&chat(&route, &store.omit(host, model), &body), &body);
    let err = br#"{"error":{"message":"Unknown parameter: 'messages[2].reasoning_content'.","type":"invalid_request_error","param":"messages[2].reasoning_content","code":"unknown_parameter"}}"#;
    let verdict = detect(400, err, &first, &route, &d).expect("verdict");
    assert!(store.learn(host, model, &verdict.fields));
    let out = chat(&route, &store.omit(host, model), &body);
    let retry = sent(&out, &body);
    let v = value(&retry);
    for i in [2, 4, 6] {
        assert!(carriers_of(&v, i).0.is_empty(), "message {i}");
    }
    assert_eq!(
        detect(400, err, &retry, &route, &d),
        None,
        "nothing left to learn"
    );

    // Then the host rejects reasoning_effort: learned as a parameter, dropped up front.
    let err = br#"{"error":{"message":"Unrecognized request argument supplied: reasoning_effort","type":"invalid_request_error"}}"#;
    let verdict = detect(400, err, &retry, &route, &d).expect("verdict");
    assert_eq!(
        verdict.fields,
        FieldSet::from([Field::param("reasoning_effort")])
    );
    assert!(store.learn(host, model, &verdict.fields));
    let out = chat(&route, &store.omit(host, model), &body);
    let v = value(&sent(&out, &body));
    assert!(v.get("reasoning_effort").is_none());
    assert_eq!(v["stream_options"], json!({"include_usage": true}));
    assert_eq!(out.counts.params_dropped, 1);

    // Mistral-like strict host with a client-forced carrier set: 422 extra_forbidden.
    let forced = vec!["reasoning".to_owned()];
    let route = resolve(
        Some("mistral"),
        "api.mistral.ai",
        "/v1/chat/completions",
        Some("m"),
        Some(&forced),
    );
    let body = chat_body("m");
    let first = sent(&chat(&route, &FieldSet::new(), &body), &body);
    let err = br#"{"object":"Error","detail":[{"type":"extra_forbidden","loc":["body","messages",2,"assistant","reasoning"],"msg":"Extra inputs are not permitted"}],"type":"invalid_request_error","code":3001}"#;
    let verdict = detect(422, err, &first, &route, &d).expect("verdict");
    let mut omit = FieldSet::new();
    omit.extend(verdict.fields);
    let out = chat(&route, &omit, &body);
    let retry = sent(&out, &body);
    assert!(!route.carriers.is_empty() && route.carriers.contains(&Carrier::Reasoning));
    assert!(carriers_of(&value(&retry), 2).0.is_empty());
    assert_eq!(detect(422, err, &retry, &route, &d), None);
}

#[test]
fn must_echo_routes_never_learn_rc() {
    let d = droppable();
    let route = resolve(
        None,
        "api.deepseek.com",
        "/v1/chat/completions",
        Some("deepseek-v4"),
        None,
    );
    let body = chat_body("deepseek-v4");
    let first = sent(&chat(&route, &FieldSet::new(), &body), &body);
    for err in [
        &br#"{"error":{"message":"The `reasoning_content` in the thinking mode must be passed back to the API.","type":"invalid_request_error"}}"#[..],
        br#"{"error":{"message":"unknown field reasoning_content"}}"#,
    ] {
        assert_eq!(detect(400, err, &first, &route, &d), None);
    }
    // Even a stray RC verdict in the store cannot strip it there.
    let omit = FieldSet::from([Field::message("reasoning_content")]);
    let out = chat(&route, &omit, &body);
    let v = value(&sent(&out, &body));
    assert_eq!(
        v["messages"][2]["reasoning_content"],
        "Read the file first."
    );
    assert_eq!(v["messages"][4]["reasoning_content"], " ");
}

#[test]
fn anthropic_native_passes_signed_thinking_byte_exact() {
    let route = resolve(
        None,
        "api.anthropic.com",
        "/v1/messages",
        Some("claude-opus-4-5"),
        None,
    );
    let body = ANTHROPIC.as_bytes();
    let out = shape(
        Dialect::Anthropic,
        &route,
        &FieldSet::new(),
        None,
        None,
        body,
    );
    let new = String::from_utf8(out.body.clone().expect("cache_control moved")).expect("utf8");
    // Every signed block's signature and data are still there, byte for byte.
    for needle in [
        r#"{"type": "thinking", "thinking": "Read the file first.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}"#,
        r#"{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}"#,
        r#"{"type": "thinking", "thinking": "Now the test.", "signature": "EqQBCgIYAhIMb3hGgxBdj"}"#,
    ] {
        assert!(new.contains(needle), "{needle}");
    }
    let v = value(new.as_bytes());
    assert_eq!(
        v["messages"][3]["content"][2]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(out.counts.cache_control_moved, 1);
    assert!(out.set_headers.is_empty());
    // Everything before the moved marker is byte-identical.
    let block = ANTHROPIC.find("Now the test.").expect("block");
    let marker = block
        + ANTHROPIC[block..]
            .find(r#", "cache_control""#)
            .expect("marker");
    assert_eq!(new[..marker], ANTHROPIC[..marker]);
}

#[test]
fn anthropic_binding_when_eviction_changed_the_prefix() {
    let route = resolve(
        None,
        "api.anthropic.com",
        "/v1/messages",
        Some("claude-fable-5-1"),
        None,
    );
    let body = ANTHROPIC.as_bytes();
    // An earlier pass changed the first tool result (before the second assistant turn).
    let fcb = ANTHROPIC.find("fn add").expect("tool result");
    let out = shape(
        Dialect::Anthropic,
        &route,
        &FieldSet::new(),
        Some(fcb),
        Some("interleaved-thinking-2025-05-14"),
        body,
    );
    let v = value(&sent(&out, body));
    assert_eq!(
        v["thinking"]["block_binding"],
        json!({"prefix_mismatch_behavior": "drop_block"})
    );
    assert_eq!(
        out.set_headers,
        vec![(
            "anthropic-beta".to_owned(),
            format!("interleaved-thinking-2025-05-14,{BINDING_BETA}")
        )]
    );
    // A change after the last signed block leaves the thinking config alone.
    let late = ANTHROPIC.find("assert_eq!").expect("last tool result");
    let out = shape(
        Dialect::Anthropic,
        &route,
        &FieldSet::new(),
        Some(late),
        None,
        body,
    );
    assert!(value(&sent(&out, body))["thinking"]
        .get("block_binding")
        .is_none());
    assert!(out.set_headers.is_empty());
}

#[test]
fn anthropic_third_party_strips_and_replay_routes_keep() {
    let body = ANTHROPIC.as_bytes();
    let minimax = resolve(
        None,
        "api.minimax.io",
        "/anthropic/v1/messages",
        Some("MiniMax-M2"),
        None,
    );
    let out = shape(
        Dialect::Anthropic,
        &minimax,
        &FieldSet::new(),
        None,
        None,
        body,
    );
    let v = value(&sent(&out, body));
    for i in [1, 3] {
        let blocks = v["messages"][i]["content"].as_array().expect("blocks");
        assert!(
            blocks.iter().all(|b| b["type"] == "tool_use"),
            "message {i}"
        );
    }
    assert_eq!(
        v["messages"][3]["content"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(out.counts.thinking_stripped, 3);
    for (host, model) in [
        ("api.moonshot.ai", "kimi-k2.6"),
        ("api.deepseek.com", "deepseek-v4"),
        ("api.z.ai", "glm-5"),
    ] {
        let route = resolve(None, host, "/anthropic/v1/messages", Some(model), None);
        let out = shape(
            Dialect::Anthropic,
            &route,
            &FieldSet::new(),
            Some(10),
            None,
            body,
        );
        let v = value(&sent(&out, body));
        assert_eq!(out.counts.thinking_stripped, 0, "{host}");
        assert_eq!(
            v["messages"][3]["content"].as_array().map(Vec::len),
            Some(3),
            "{host}"
        );
        assert!(v["thinking"].get("block_binding").is_none(), "{host}");
    }
}

#[test]
fn cerebras_gets_reasoning_content_as_reasoning() {
    // Found by testing: Cerebras answers 400 `wrong_api_format` to an assistant message with
    // `reasoning_content` but accepts `reasoning`; its row used to drop the text. A turn that
    // carries only `reasoning_content` now goes out as `reasoning`, same text, and nothing
    // else in the body moves.
    let body = json!({
        "model": "gpt-oss-120b",
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": null, "reasoning_content": "Add two and two.",
             "tool_calls": [{"id": "call_0", "type": "function",
                             "function": {"name": "calc", "arguments": "{\"e\":\"2+2\"}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "4"},
            {"role": "assistant", "content": "4", "reasoning": "Already in the right field."},
            {"role": "user", "content": "Thanks"}
        ]
    })
    .to_string()
    .into_bytes();
    for (provider, host) in [(None, "api.cerebras.ai"), (Some("cerebras"), "127.0.0.1")] {
        let route = resolve(
            provider,
            host,
            "/v1/chat/completions",
            Some("gpt-oss-120b"),
            None,
        );
        assert!(!route.is_strict(), "{host}");
        let out = chat(&route, &FieldSet::new(), &body);
        let v = value(&sent(&out, &body));
        let before = value(&body);
        let turn = &v["messages"][1];
        assert_eq!(turn["reasoning"], "Add two and two.", "{host}");
        assert!(turn.get("reasoning_content").is_none(), "{host}");
        assert_eq!(turn["tool_calls"], before["messages"][1]["tool_calls"]);
        assert_eq!(
            v["messages"][3], before["messages"][3],
            "already right: untouched"
        );
        for i in [0, 2, 4] {
            assert_eq!(v["messages"][i], before["messages"][i]);
        }
        assert_eq!(out.counts.carriers_filled, 1, "{:?}", out.reasons);
        assert_eq!(out.counts.carriers_dropped, 1, "{:?}", out.reasons);
    }
}
