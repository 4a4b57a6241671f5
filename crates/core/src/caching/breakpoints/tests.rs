use super::*;
use crate::dialect::Dialect;
use crate::json::splice;
use crate::testing::Rng;
use serde_json::{json, Value};

/// Every slot markable (a Claude model).
const ALL_TARGETS: BreakpointTargets = BreakpointTargets { tools: true };

fn run(body: &str, ttl: Option<CacheTtl>) -> (Placed, String) {
    let doc = crate::dialect::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
    let p = place(&doc, ttl, &[], ALL_TARGETS);
    let new = String::from_utf8(splice(body.as_bytes(), p.edits.clone()).unwrap()).unwrap();
    (p, new)
}

/// A recorded Claude Code body with its own markers taken out (what a client that sets none
/// would send).
fn unmarked(name: &str) -> String {
    let body = std::fs::read_to_string(format!(
        "{}/tests/fixtures/agents/claude_code/{name}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../..")
    ))
    .unwrap();
    let out = body
        .replace(
            r#","cache_control":{"type":"ephemeral","scope":"global"}"#,
            "",
        )
        .replace(r#","cache_control":{"type":"ephemeral"}"#, "");
    assert!(!out.contains("cache_control"), "{name}");
    out
}

/// Every `cache_control` in `v`, as (JSON pointer, value), in document order of tools →
/// system → messages (serde_json's maps are sorted, so walk the known places in order).
fn markers(v: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut look = |at: String, b: &Value| {
        if let Some(cc) = b.get("cache_control") {
            out.push((at, cc.clone()));
        }
    };
    for (i, t) in v["tools"].as_array().into_iter().flatten().enumerate() {
        look(format!("tools[{i}]"), t);
    }
    for (i, b) in v["system"].as_array().into_iter().flatten().enumerate() {
        look(format!("system[{i}]"), b);
    }
    for (i, m) in v["messages"].as_array().into_iter().flatten().enumerate() {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            look(format!("messages[{i}].content[{j}]"), b);
            for (k, inner) in b["content"].as_array().into_iter().flatten().enumerate() {
                look(format!("messages[{i}].content[{j}].content[{k}]"), inner);
            }
        }
    }
    out
}

/// `v` with every `cache_control` removed and a string `system` written as one text block.
fn without_markers(v: &Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("cache_control");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = v.clone();
    if let Some(s) = v.get("system").and_then(Value::as_str).map(str::to_owned) {
        if !s.trim().is_empty() {
            v["system"] = json!([{"type": "text", "text": s}]);
        }
    }
    strip(&mut v);
    v
}

const EPHEMERAL: &str = r#"{"type":"ephemeral"}"#;

#[test]
fn golden_claude_code_tool_round() {
    let body = unmarked("direct-5-tools-turn3.json");
    let (p, new) = run(&body, None);
    assert_eq!(p.added, 4);
    assert_eq!(
        p.reasons,
        [
            "cache_breakpoints: 4 cache_control marker(s) added (5m; the client set none) at \
          tools[23], system[2], messages[3].content[0], messages[5].content[0]"
        ]
    );
    let v: Value = serde_json::from_str(&new).unwrap();
    let at: Vec<String> = markers(&v).into_iter().map(|(a, _)| a).collect();
    assert_eq!(
        at,
        [
            "tools[23]",
            "system[2]",
            "messages[3].content[0]",
            "messages[5].content[0]"
        ]
    );
    // Exactly the four insertions, each at the end of its block.
    let expect = {
        let mut e = body.clone();
        let ins = format!(r#","cache_control":{EPHEMERAL}"#);
        let mut cuts: Vec<usize> = p.edits.iter().map(|e| e.range.start).collect();
        cuts.sort_unstable();
        for at in cuts.into_iter().rev() {
            e.insert_str(at, &ins);
        }
        e
    };
    assert_eq!(new, expect);
    assert_eq!(
        without_markers(&v),
        serde_json::from_str::<Value>(&body).unwrap()
    );
    assert!(
        new.contains(r#""tool_use_id":"toolu_strict_0005","cache_control":{"type":"ephemeral"}}"#)
    );
}

#[test]
fn golden_claude_code_first_turn() {
    // One user message (two text blocks, the first a <system-reminder>), then Claude Code's
    // `"role": "system"` message (a string, not a user turn): the user message gets the marker
    // on its last block; there is no user message before it.
    let body = unmarked("direct-1-hello.json");
    let (p, new) = run(&body, None);
    let v: Value = serde_json::from_str(&new).unwrap();
    let at: Vec<String> = markers(&v).into_iter().map(|(a, _)| a).collect();
    assert_eq!(at, ["tools[23]", "system[2]", "messages[0].content[1]"]);
    assert_eq!(p.added, 3);
    assert_eq!(
        v["messages"][1]["content"],
        body_value(&body)["messages"][1]["content"]
    );
}

fn body_value(body: &str) -> Value {
    serde_json::from_str(body).unwrap()
}

/// Turn N+1's markers move nothing of turn N's prefix but the marker it drops: once that
/// marker is taken out of turn N's forwarded body, the two forwarded bodies agree byte for byte
/// up to the end of turn N's newest message, and after the `messages` list (system, tools and
/// the other parameters, which these bodies put after it).
#[test]
fn the_next_turn_keeps_this_turns_prefix() {
    for (a, b) in [
        ("direct-5-tools-turn1.json", "direct-5-tools-turn2.json"),
        ("direct-5-tools-turn2.json", "direct-5-tools-turn3.json"),
    ] {
        let body_a = unmarked(a);
        let (pa, out_a) = run(&body_a, None);
        let (_, out_b) = run(&unmarked(b), None);
        // Turn N+1 marks turn N's newest user message and its own: the marker turn N put on
        // the user message before its newest one is the one dropped.
        let doc_a = crate::dialect::parse(body_a.as_bytes(), Dialect::Anthropic).unwrap();
        let users = doc_a
            .turns
            .iter()
            .filter(|t| t.role.as_deref() == Some("user"))
            .count();
        let dropped = (users >= 2).then(|| pa.edits[pa.edits.len() - 2].clone());
        let kept: Vec<Edit> = pa
            .edits
            .iter()
            .filter(|e| dropped.as_ref() != Some(*e))
            .cloned()
            .collect();
        let a_kept = String::from_utf8(splice(body_a.as_bytes(), kept).unwrap()).unwrap();
        let doc_a = crate::dialect::parse(a_kept.as_bytes(), Dialect::Anthropic).unwrap();
        let doc_b = crate::dialect::parse(out_b.as_bytes(), Dialect::Anthropic).unwrap();
        let end = doc_a.turns.last().unwrap().obj.end;
        assert_eq!(&a_kept[..end], &out_b[..end], "{a} → {b}");
        let tail = |d: &Doc<'_>| d.top.get("messages").unwrap().value.end;
        assert_eq!(&a_kept[tail(&doc_a)..], &out_b[tail(&doc_b)..], "{a} → {b}");
        assert_eq!(dropped.is_some(), out_a != a_kept, "{a}");
    }
}

#[test]
fn idempotent_and_deterministic_on_every_fixture() {
    let dir = concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
        "/tests/fixtures/agents/claude_code"
    );
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let body = unmarked(&name);
        let (p, once) = run(&body, Some(CacheTtl::OneHour));
        assert!(p.added >= 2 && p.added <= MAX_BREAKPOINTS, "{name}");
        let (again, twice) = run(&once, Some(CacheTtl::OneHour));
        assert!(again.stood_down, "{name}");
        assert_eq!(twice, once, "{name}: applying twice equals once");
        assert_eq!(
            run(&body, Some(CacheTtl::OneHour)).1,
            once,
            "{name}: deterministic"
        );
        // As recorded (Claude Code sets its own markers): untouched, with the reason.
        let recorded = std::fs::read_to_string(&path).unwrap();
        let (p, out) = run(&recorded, None);
        assert!(p.stood_down && p.edits.is_empty(), "{name}");
        assert_eq!(out, recorded);
        assert!(
            p.reasons[0].starts_with("cache_breakpoints: the client set its own cache_control (")
        );
    }
}

#[test]
fn stands_down_on_any_client_marker() {
    let cc = json!({"type": "ephemeral"});
    let cases = [
        (
            json!({"model": "m", "cache_control": cc, "messages": [{"role": "user", "content": "hi"}]}),
            "top level",
        ),
        (
            json!({"model": "m", "tools": [{"name": "a", "cache_control": cc}, {"name": "b"}], "messages": []}),
            "tools[0]",
        ),
        (
            json!({"model": "m", "system": [{"type": "text", "text": "s", "cache_control": cc}], "messages": []}),
            "system[0]",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": cc}]}, {"role": "user", "content": [{"type": "text", "text": "b"}]}]}),
            "messages[0].content[0]",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "r", "cache_control": cc}]}]}]}),
            "messages[0].content[0].content[0]",
        ),
    ];
    for (body, at) in cases {
        let body = body.to_string();
        let (p, out) = run(&body, None);
        assert!(p.stood_down, "{body}");
        assert_eq!(p.added, 0);
        assert_eq!(out, body);
        assert_eq!(
            p.reasons,
            [format!(
                "cache_breakpoints: the client set its own cache_control ({at}); none added"
            )]
        );
    }
}

#[test]
fn a_string_system_becomes_one_text_block() {
    let body = r#"{"model":"m","system":"You are \"terse\".","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;
    let (p, out) = run(body, None);
    assert_eq!(p.added, 2);
    assert_eq!(
        out,
        r#"{"model":"m","system":[{"type":"text","text":"You are \"terse\".","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#
    );
    // An empty string system is not marked (and stays a string).
    let body = r#"{"model":"m","system":" ","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;
    let (p, out) = run(body, None);
    assert_eq!(p.added, 1);
    assert!(out.starts_with(r#"{"model":"m","system":" ","#));
}

#[test]
fn a_string_user_message_is_never_turned_into_blocks() {
    // Newest user message is a string: its slot goes to the assistant message right before it.
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": "second"}]})
    .to_string();
    let (p, out) = run(&body, None);
    let v: Value = serde_json::from_str(&out).unwrap();
    let at: Vec<String> = markers(&v).into_iter().map(|(a, _)| a).collect();
    // messages[0] is a string with nothing before it: its slot stays empty.
    assert_eq!(at, ["messages[1].content[1]"]);
    assert_eq!(p.added, 1);
    assert_eq!(v["messages"][0]["content"], "first");
    assert_eq!(v["messages"][2]["content"], "second");
    // A string assistant message before it: nothing to mark.
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}]})
    .to_string();
    let (p, out) = run(&body, None);
    assert_eq!(p.added, 0);
    assert!(p.reasons.is_empty());
    assert_eq!(out, body);
}

#[test]
fn never_on_thinking_or_empty_text() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "go"}, {"type": "text", "text": ""}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "x"},
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "redacted_thinking", "data": "d"}]},
        {"role": "user", "content": "next"}]})
    .to_string();
    let (p, out) = run(&body, None);
    let v: Value = serde_json::from_str(&out).unwrap();
    let at: Vec<String> = markers(&v).into_iter().map(|(a, _)| a).collect();
    assert_eq!(at, ["messages[0].content[0]", "messages[1].content[0]"]);
    assert_eq!(p.added, 2);
    // A user message of only empty text and an unknown block type: its slot stays empty.
    let body = json!({"model": "m", "system": [{"type": "text", "text": "s"}, {"type": "text", "text": "  "}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": ""}, {"type": "container_upload", "file_id": "f"}]}]})
    .to_string();
    let (p, out) = run(&body, None);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        markers(&v).into_iter().map(|(a, _)| a).collect::<Vec<_>>(),
        ["system[0]"]
    );
    assert_eq!(p.added, 1);
}

#[test]
fn one_ttl_per_route_so_1h_never_follows_5m() {
    let body = unmarked("direct-5-tools-turn3.json");
    for (ttl, want) in [
        (None, json!({"type": "ephemeral"})),
        (Some(CacheTtl::FiveMinutes), json!({"type": "ephemeral"})),
        (
            Some(CacheTtl::OneHour),
            json!({"type": "ephemeral", "ttl": "1h"}),
        ),
    ] {
        let (p, out) = run(&body, ttl);
        let v: Value = serde_json::from_str(&out).unwrap();
        let found = markers(&v);
        assert_eq!(found.len(), 4);
        // In tools → system → messages order, no 1h marker after a 5m one.
        let hours: Vec<bool> = found
            .iter()
            .map(|(_, cc)| cc.get("ttl").and_then(Value::as_str) == Some("1h"))
            .collect();
        assert!(
            hours.windows(2).all(|w| w[0] || !w[1]),
            "a 1h marker after a 5m one: {found:?}"
        );
        assert!(found.iter().all(|(_, cc)| *cc == want), "{found:?}");
        assert!(p.reasons[0].contains(if ttl == Some(CacheTtl::OneHour) {
            "(1h;"
        } else {
            "(5m;"
        }));
    }
}

#[test]
fn skipped_system_blocks_are_never_marked() {
    let body = unmarked("direct-1-hello.json");
    let doc = crate::dialect::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
    let system = doc.top.get("system").unwrap();
    let blocks = scan::array_at(doc.text, system.value.start).unwrap();
    // Skip the last block: the one before it is marked instead.
    let p = place(&doc, None, &blocks[blocks.len() - 1..], ALL_TARGETS);
    let out = String::from_utf8(splice(body.as_bytes(), p.edits).unwrap()).unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(markers(&v)
        .iter()
        .any(|(a, _)| *a == format!("system[{}]", blocks.len() - 2)));
    // A lone skipped block: no system marker.
    let lone = r#"{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1.0.abc; cc_entrypoint=cli;"}],"messages":[]}"#;
    let doc = crate::dialect::parse(lone.as_bytes(), Dialect::Anthropic).unwrap();
    let system = doc.top.get("system").unwrap();
    let blocks = scan::array_at(doc.text, system.value.start).unwrap();
    assert_eq!(place(&doc, None, &blocks, ALL_TARGETS).added, 0);
}

#[test]
fn other_dialects_get_nothing() {
    let body =
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;
    let doc = crate::dialect::parse(body.as_bytes(), Dialect::Openai).unwrap();
    assert_eq!(place(&doc, None, &[], ALL_TARGETS), Placed::default());
}

fn random_block(rng: &mut Rng, role: &str, i: usize) -> Value {
    match (role, rng.below(8)) {
        (_, 0) => json!({"type": "text", "text": ""}),
        (_, 1) => json!({"type": "text", "text": " \n"}),
        ("assistant", 2) => {
            json!({"type": "thinking", "thinking": "t", "signature": format!("s{i}")})
        }
        ("assistant", 3) => json!({"type": "redacted_thinking", "data": "d"}),
        ("assistant", 4) => {
            json!({"type": "tool_use", "id": format!("t{i}"), "name": "f", "input": {"k": i}})
        }
        ("user", 2 | 3) => {
            json!({"type": "tool_result", "tool_use_id": format!("t{i}"), "content": [
            {"type": "text", "text": "r"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]})
        }
        ("user", 4) => {
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
        }
        (_, 5) => json!({"type": "mystery"}),
        _ => json!({"type": "text", "text": format!("text {i} \"q\" é")}),
    }
}

fn random_body(rng: &mut Rng) -> Value {
    let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10});
    if rng.chance(60) {
        let n = 1 + rng.below(4) as usize;
        body["tools"] = (0..n)
            .map(|i| json!({"name": format!("tool{i}"), "input_schema": {"type": "object"}}))
            .collect();
    }
    match rng.below(4) {
        0 => {}
        1 => body["system"] = json!("You are helpful."),
        2 => body["system"] = json!(""),
        _ => {
            let n = rng.below(4) as usize;
            body["system"] = (0..n)
                .map(|i| json!({"type": "text", "text": if rng.chance(20) { String::new() } else { format!("sys {i}") }}))
                .collect();
        }
    }
    let n = rng.below(9) as usize;
    let mut messages = Vec::new();
    for i in 0..n {
        let role = if rng.chance(80) {
            ["user", "assistant"][i % 2]
        } else {
            "user"
        };
        let content = if rng.chance(30) {
            json!(format!("message {i}"))
        } else {
            let k = rng.below(4) as usize;
            (0..k)
                .map(|j| random_block(rng, role, i * 10 + j))
                .collect()
        };
        messages.push(json!({"role": role, "content": content}));
    }
    body["messages"] = json!(messages);
    if rng.chance(10) {
        body["system"] =
            json!([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]);
    }
    body
}

/// On random bodies: valid JSON out; nothing but markers added (and a string system as one
/// block); ≤ 4 markers, never on thinking or blank text; applying twice equals once; the
/// same input gives the same bytes.
#[test]
fn property_valid_bounded_idempotent() {
    let mut rng = Rng(0x5EED_CAC4);
    let mut placed = 0;
    for _ in 0..400 {
        let body = random_body(&mut rng).to_string();
        let had_markers = body.contains("cache_control");
        let (p, once) = run(
            &body,
            if rng.chance(50) {
                Some(CacheTtl::OneHour)
            } else {
                None
            },
        );
        let v: Value = serde_json::from_str(&once).expect("valid JSON");
        let found = markers(&v);
        if had_markers {
            assert!(p.stood_down && once == body, "{body}");
            continue;
        }
        assert_eq!(found.len(), p.added, "{body}\n{once}");
        assert!(p.added <= MAX_BREAKPOINTS);
        for (at, _) in &found {
            let ptr = at
                .replace("].content[", "/content/")
                .replace("messages[", "/messages/")
                .replace("system[", "/system/")
                .replace("tools[", "/tools/")
                .replace(']', "");
            let block = v.pointer(&ptr).unwrap();
            let kind = block["type"].as_str();
            assert!(
                !matches!(kind, Some("thinking" | "redacted_thinking")),
                "{at}: {once}"
            );
            if kind == Some("text") {
                assert!(!block["text"].as_str().unwrap().trim().is_empty(), "{at}");
            }
        }
        let original: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(without_markers(&v), without_markers(&original), "{body}");
        // String user content stays a string.
        for (a, b) in v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .zip(original["messages"].as_array().unwrap())
        {
            assert_eq!(a["content"].is_string(), b["content"].is_string());
        }
        let (again, twice) = run(&once, None);
        assert_eq!(twice, once, "twice = once");
        assert_eq!(again.added, 0);
        placed += usize::from(p.added > 0);
    }
    assert!(placed > 200, "only {placed} bodies got markers");
}

// ---- Bedrock Converse: cachePoint blocks ----

/// Place on a Converse body with `targets`; the placement and the spliced body.
fn run_converse(body: &str, ttl: Option<CacheTtl>, targets: BreakpointTargets) -> (Placed, Value) {
    let doc = crate::dialect::parse(body.as_bytes(), Dialect::Converse).unwrap();
    let p = place(&doc, ttl, &[], targets);
    let out = splice(body.as_bytes(), p.edits.clone()).unwrap();
    (p, serde_json::from_slice(&out).unwrap())
}

fn converse_body() -> String {
    json!({
        "system": [{"text": "You drive a desktop."}, {"text": "  "}],
        "toolConfig": {"tools": [{"toolSpec": {"name": "a"}}, {"toolSpec": {"name": "shot"}}]},
        "messages": [
            {"role": "user", "content": [{"text": "first"}]},
            {"role": "assistant", "content": [{"reasoningContent": {"reasoningText": {"text": "t", "signature": "s"}}}, {"toolUse": {"toolUseId": "t1", "name": "shot", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "ok"}]}}]},
            {"role": "assistant", "content": [{"text": "done"}]},
            {"role": "user", "content": [{"text": "again"}, {"image": {"format": "png", "source": {"bytes": "AAAA"}}}]}
        ]
    })
    .to_string()
}

const POINT: &str = r#"{"cachePoint":{"type":"default"}}"#;

#[test]
fn converse_points_go_after_the_same_blocks_anthropic_marks() {
    let (p, v) = run_converse(&converse_body(), None, ALL_TARGETS);
    assert_eq!(p.added, 4);
    let point: Value = serde_json::from_str(POINT).unwrap();
    assert_eq!(v["toolConfig"]["tools"][2], point);
    assert_eq!(v["system"][1], point, "after the last non-blank text");
    assert_eq!(v["system"][2], json!({"text": "  "}));
    assert_eq!(v["messages"][2]["content"][1], point);
    assert_eq!(v["messages"][4]["content"][2], point);
    assert_eq!(v["messages"][0]["content"].as_array().unwrap().len(), 1);
    assert!(
        p.reasons[0].contains("4 cachePoint block(s) added (5m"),
        "{:?}",
        p.reasons
    );
    // Idempotent: a body with points (ours) is left alone.
    let again = serde_json::to_string(&v).unwrap();
    let (p2, v2) = run_converse(&again, None, ALL_TARGETS);
    assert_eq!((p2.added, p2.stood_down), (0, true));
    assert_eq!(v2, v);
}

#[test]
fn converse_one_hour_points_and_no_tool_point_for_nova() {
    let (p, v) = run_converse(
        &converse_body(),
        Some(CacheTtl::OneHour),
        BreakpointTargets { tools: false },
    );
    assert_eq!(p.added, 3);
    assert_eq!(v["toolConfig"]["tools"].as_array().unwrap().len(), 2);
    let hour = json!({"cachePoint": {"type": "default", "ttl": "1h"}});
    assert_eq!(v["system"][1], hour);
    assert_eq!(v["messages"][4]["content"][2], hour);
}

#[test]
fn converse_client_points_stand_the_pass_down() {
    for body in [
        json!({"system": [{"text": "s"}, {"cachePoint": {"type": "default"}}], "messages": [{"role": "user", "content": [{"text": "a"}]}]}),
        json!({"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}, {"cachePoint": {"type": "default"}}]}, "messages": [{"role": "user", "content": [{"text": "a"}]}]}),
        json!({"messages": [{"role": "user", "content": [{"text": "a"}, {"cachePoint": {"type": "default"}}]}, {"role": "user", "content": [{"text": "b"}]}]}),
    ] {
        let (p, _) = run_converse(&body.to_string(), None, ALL_TARGETS);
        assert!(p.stood_down && p.added == 0, "{body}");
        assert!(p.reasons[0].contains("the client set its own cachePoint"));
    }
    // Nothing follows a blank text or a reasoning block.
    let body = json!({"messages": [{"role": "user", "content": [{"text": " "}]}]});
    assert_eq!(
        run_converse(&body.to_string(), None, ALL_TARGETS).0.added,
        0
    );
}
