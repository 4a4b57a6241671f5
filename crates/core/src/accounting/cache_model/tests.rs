//! Hand-computed sessions. Block sizes are chosen so every block is a whole number of tokens
//! (4 bytes each): a text block `{"text":"…","type":"text"}` is 25 bytes + its text, a
//! message's first block also carries `{"role":"user"}` (15 bytes) or `{"role":"assistant"}`
//! (20 bytes); `cache_control` markers are not counted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use serde_json::{json, Value};

use super::*;
use crate::dialect::Dialect::{Anthropic, Openai};

const S: i64 = 1000;
const MIN: i64 = 60 * S;

/// Explicit, 5-minute TTL, 1-hour long TTL, no minimum length.
fn explicit() -> Rule {
    Rule {
        activation: CacheActivation::Explicit,
        ttl_ms: Some(300_000),
        long_ttl_ms: Some(3_600_000),
        min_tokens: 0,
        lookback: ANTHROPIC_LOOKBACK_BLOCKS,
    }
}

fn automatic() -> Rule {
    Rule {
        activation: CacheActivation::Automatic,
        ..explicit()
    }
}

fn marker(ttl: Option<&str>) -> Value {
    match ttl {
        Some(t) => json!({"type": "ephemeral", "ttl": t}),
        None => json!({"type": "ephemeral"}),
    }
}

/// A text block of `bytes` bytes as counted (25 + text), marked or not.
fn text(bytes: usize, mark: Option<Option<&str>>) -> Value {
    let mut b = json!({"type": "text", "text": "a".repeat(bytes - 25)});
    if let Some(ttl) = mark {
        b["cache_control"] = marker(ttl);
    }
    b
}

/// A one-block message of `tokens` tokens.
fn msg(role: &str, tokens: usize, mark: Option<Option<&str>>) -> Value {
    let head = if role == "user" { 15 } else { 20 };
    json!({"role": role, "content": [text(tokens * 4 - head, mark)]})
}

/// Turn `n` (1-based) of a session: a 1000-token system prompt marked at its end, u1 (500
/// tokens), then per later turn an assistant reply (200) and a user message (300); the newest
/// user message is marked (`marks`), the earlier ones are not.
fn session_body(n: usize, marks: bool, system_ttl: Option<&str>) -> Vec<u8> {
    let m = |last: bool| (marks && last).then_some(None);
    let mut messages = vec![msg("user", 500, m(n == 1))];
    for k in 2..=n {
        messages.push(msg("assistant", 200, None));
        messages.push(msg("user", 300, m(k == n)));
    }
    let system = text(4000, marks.then_some(system_ttl));
    serde_json::to_vec(&json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [system],
        "messages": messages,
    }))
    .unwrap()
}

fn run(rule: Rule, turns: &[(Vec<u8>, i64)]) -> Vec<TurnCache> {
    simulate(
        rule,
        turns.iter().map(|(b, t)| (Anthropic, b.as_slice(), *t)),
    )
    .unwrap()
}

fn figures(t: &TurnCache) -> (u64, u64, u64, u64) {
    (t.input, t.read, t.write, t.uncached)
}

#[test]
fn estimates() {
    assert_eq!(text_tokens(0), 0);
    assert_eq!(text_tokens(1), 1);
    assert_eq!(text_tokens(4000), 1000);
    // 800 × 560 / 750 = 597.3 → 598; the "~600-token" screenshot.
    assert_eq!(image_tokens(Some((800, 560))), 598);
    assert_eq!(image_tokens(Some((750, 1))), 1);
    assert_eq!(image_tokens(None), UNKNOWN_IMAGE_TOKENS);
}

#[test]
fn three_turn_anthropic_session_with_breakpoints() {
    let turns: Vec<_> = (1..=3)
        .map(|n| (session_body(n, true, None), (n as i64) * MIN))
        .collect();
    let out = run(explicit(), &turns);
    // Turn 1: system (1000) and u1 (500) written at their breakpoints.
    assert_eq!(figures(&out[0]), (1500, 0, 1500, 0));
    // Turn 2: u1's entry is found looking back from u2's breakpoint: read 1500; a1 + u2
    // written (500).
    assert_eq!(figures(&out[1]), (2000, 1500, 500, 0));
    // Turn 3: u2's entry read (2000), a2 + u3 written (500).
    assert_eq!(figures(&out[2]), (2500, 2000, 500, 0));
    assert!(out.iter().all(|t| t.expired == 0 && t.changed_at.is_none()));
}

#[test]
fn the_same_session_without_breakpoints_caches_nothing() {
    let turns: Vec<_> = (1..=3)
        .map(|n| (session_body(n, false, None), (n as i64) * MIN))
        .collect();
    let out = run(explicit(), &turns);
    assert_eq!(figures(&out[0]), (1500, 0, 0, 1500));
    assert_eq!(figures(&out[1]), (2000, 0, 0, 2000));
    assert_eq!(figures(&out[2]), (2500, 0, 0, 2500));
}

#[test]
fn automatic_caching_reads_any_boundary_and_writes_the_whole_prompt() {
    // No markers: an automatic provider caches anyway.
    let turns: Vec<_> = (1..=3)
        .map(|n| (session_body(n, false, None), (n as i64) * MIN))
        .collect();
    let out = run(automatic(), &turns);
    assert_eq!(figures(&out[0]), (1500, 0, 1500, 0));
    assert_eq!(figures(&out[1]), (2000, 1500, 500, 0));
    assert_eq!(figures(&out[2]), (2500, 2000, 500, 0));

    // The same on the OpenAI Chat wire: the system prompt is message 0.
    let body = |n: usize| {
        let mut messages = vec![json!({"role": "system", "content": "s".repeat(3983)})];
        messages.push(json!({"role": "user", "content": "u".repeat(1980)}));
        if n == 2 {
            messages.push(json!({"role": "assistant", "content": "a".repeat(1975)}));
            messages.push(json!({"role": "user", "content": "v".repeat(1980)}));
        }
        serde_json::to_vec(&json!({"model": "gpt-5", "messages": messages})).unwrap()
    };
    // `{"role":"system"}` (17) + the quoted string (3985) = 4002 bytes → 1001 tokens;
    // `{"role":"user"}` (15) + 1982 = 1997 → 500; assistant 20 + 1977 → 500.
    let (b1, b2) = (body(1), body(2));
    let out = simulate(automatic(), [(Openai, &b1[..], 0), (Openai, &b2[..], MIN)]).unwrap();
    assert_eq!(figures(&out[0]), (1501, 0, 1501, 0));
    assert_eq!(figures(&out[1]), (2501, 1501, 1000, 0));
}

#[test]
fn an_idle_gap_past_the_ttl_is_an_expiry_driven_write() {
    // Turn 2 at 1 min refreshes the entries to 6 min; turn 3 at 7 min finds them expired.
    let turns = vec![
        (session_body(1, true, None), 0),
        (session_body(2, true, None), MIN),
        (session_body(3, true, None), 7 * MIN),
    ];
    let out = run(explicit(), &turns);
    assert_eq!(figures(&out[1]), (2000, 1500, 500, 0));
    // Everything written again: the system prompt (1000) and the rest up to u3 (1500).
    assert_eq!(figures(&out[2]), (2500, 0, 2500, 0));
    assert_eq!(out[2].expired, 2000);
    assert_eq!(out[2].changed_at, None);
}

#[test]
fn reads_refresh_entries() {
    // 4.5 minutes apart twice: 9 minutes after the first write, still read each time.
    let turns = vec![
        (session_body(1, true, None), 0),
        (session_body(2, true, None), 270 * S),
        (session_body(3, true, None), 540 * S),
    ];
    let out = run(explicit(), &turns);
    assert_eq!(figures(&out[2]), (2500, 2000, 500, 0));
    // The same rule at 6-minute steps loses it every time.
    let turns = vec![
        (session_body(1, true, None), 0),
        (session_body(2, true, None), 6 * MIN),
    ];
    let out = run(explicit(), &turns);
    assert_eq!(figures(&out[1]), (2000, 0, 2000, 0));
    assert_eq!(out[1].expired, 1500);
}

#[test]
fn a_one_hour_breakpoint_outlives_the_idle_gap() {
    let turns = vec![
        (session_body(1, true, Some("1h")), 0),
        (session_body(2, true, Some("1h")), 10 * MIN),
    ];
    let out = run(explicit(), &turns);
    assert_eq!(out[0].write_long, 1000);
    // The system prompt (1h) is read; u1's 5-minute entry expired: u1 + a1 + u2 written.
    assert_eq!(figures(&out[1]), (2000, 1000, 1000, 0));
    assert_eq!(out[1].write_long, 0);
    assert_eq!(out[1].expired, 500);
}

#[test]
fn the_lookback_is_twenty_blocks() {
    // Turn 1: one marked 100-token user message (block 0). Turn 2 appends a message of `k`
    // one-token-aligned blocks, the last marked: block `k` is the breakpoint.
    let body = |k: usize| {
        let mut blocks: Vec<Value> = (0..k).map(|_| text(40, None)).collect();
        if let Some(last) = blocks.last_mut() {
            last["cache_control"] = marker(None);
        }
        let mut messages = vec![msg("user", 100, (k == 0).then_some(None))];
        if k > 0 {
            messages.push(json!({"role": "assistant", "content": blocks}));
        }
        serde_json::to_vec(&json!({"messages": messages})).unwrap()
    };
    // Breakpoint at block 19: blocks 0..=19 are looked at, block 0's entry is read.
    let out = run(explicit(), &[(body(0), 0), (body(19), MIN)]);
    assert_eq!(out[1].read, 100);
    // Breakpoint at block 20: the window is 1..=20 and misses it.
    let out = run(explicit(), &[(body(0), 0), (body(20), MIN)]);
    assert_eq!(out[1].read, 0);
    assert_eq!(out[1].write, out[1].input);
}

#[test]
fn short_prefixes_are_not_cached() {
    let rule = Rule {
        min_tokens: DEFAULT_MIN_TOKENS,
        ..explicit()
    };
    // Turn 1: system 1000 < 1024 is not written, 1500 is. Turn 2 reads 1500.
    let turns: Vec<_> = (1..=2)
        .map(|n| (session_body(n, true, None), (n as i64) * MIN))
        .collect();
    let out = run(rule, &turns);
    assert_eq!(figures(&out[0]), (1500, 0, 1500, 0));
    assert_eq!(figures(&out[1]), (2000, 1500, 500, 0));
    // A lone 500-token prompt caches nothing.
    let small = serde_json::to_vec(&json!({"messages": [msg("user", 500, Some(None))]})).unwrap();
    let out = run(rule, &[(small, 0)]);
    assert_eq!(figures(&out[0]), (500, 0, 0, 500));
}

#[test]
fn cache_order_not_key_order_and_markers_ignored() {
    let a = json!({"system": [text(4000, None)], "messages": [msg("user", 500, Some(None))]});
    // Same content, other key order, the marker moved to the system prompt.
    let b: Value = serde_json::from_str(
        &format!(
            "{{\"messages\":[{{\"content\":[{{\"text\":\"{}\",\"type\":\"text\"}}],\"role\":\"user\"}}],\"system\":[{}]}}",
            "a".repeat(1960),
            serde_json::to_string(&text(4000, Some(None))).unwrap()
        ),
    )
    .unwrap();
    let ba = blocks(Anthropic, &serde_json::to_vec(&a).unwrap()).unwrap();
    let bb = blocks(Anthropic, &serde_json::to_vec(&b).unwrap()).unwrap();
    let digests = |v: &[Block]| v.iter().map(|b| (b.prefix, b.tokens)).collect::<Vec<_>>();
    assert_eq!(digests(&ba), digests(&bb));
    assert_eq!(ba[0].section, Section::System);
    assert_eq!(ba[1].section, Section::Message(0));
    assert_eq!((ba[0].breakpoint, ba[1].breakpoint), (None, Some(false)));
    assert_eq!((bb[0].breakpoint, bb[1].breakpoint), (Some(false), None));
}

#[test]
fn an_edit_is_located_and_costs_a_write() {
    let t2 = session_body(2, true, None);
    let mut edited: Value = serde_json::from_slice(&session_body(3, true, None)).unwrap();
    edited["messages"][1]["content"][0]["text"] = json!("b".repeat(755));
    let edited = serde_json::to_vec(&edited).unwrap();
    let out = run(
        explicit(),
        &[
            (session_body(1, true, None), 0),
            (t2, MIN),
            (edited, 2 * MIN),
        ],
    );
    assert_eq!(out[2].changed_at.as_deref(), Some("messages[1]"));
    // Turn 1's entry at u1 (system + u1, 1500) is still live and read; from messages[1] on
    // everything is written (a1 is 20 + 25 + 755 = 800 bytes = 200 tokens, as before).
    assert_eq!(figures(&out[2]), (2500, 1500, 1000, 0));
}

#[test]
fn images_are_counted_from_their_headers() {
    use base64::Engine as _;
    let png = crate::images::probe::fake::png(800, 560, 16);
    let data = base64::engine::general_purpose::STANDARD.encode(png);
    let body = json!({"messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
          "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                        "data": data}}]}]},
    ]});
    let bytes = serde_json::to_vec(&body).unwrap();
    let out = run(explicit(), &[(bytes, 0)]);
    assert_eq!(out[0].images, 1);
    // 598 for the image; the text around it is a few dozen bytes, not the base64.
    assert!(
        out[0].input > 598 && out[0].input < 598 + 40,
        "{:?}",
        out[0]
    );

    // A remote image counts as unknown.
    let body = json!({"model": "gpt-5", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]});
    let out = simulate(
        automatic(),
        [(Openai, &serde_json::to_vec(&body).unwrap()[..], 0)],
    )
    .unwrap();
    assert_eq!(out[0].images, 1);
    assert!(out[0].input >= UNKNOWN_IMAGE_TOKENS);
}

#[test]
fn a_top_level_cache_control_marks_the_last_block() {
    let mut b1: Value = serde_json::from_slice(&session_body(1, false, None)).unwrap();
    b1["cache_control"] = marker(None);
    let mut b2: Value = serde_json::from_slice(&session_body(2, false, None)).unwrap();
    b2["cache_control"] = marker(None);
    let out = run(
        explicit(),
        &[
            (serde_json::to_vec(&b1).unwrap(), 0),
            (serde_json::to_vec(&b2).unwrap(), MIN),
        ],
    );
    assert_eq!(figures(&out[0]), (1500, 0, 1500, 0));
    assert_eq!(figures(&out[1]), (2000, 1500, 500, 0));
}

#[test]
fn not_json_is_an_error_and_leaves_the_cache() {
    let mut model = CacheModel::new(explicit());
    assert!(model.turn(Anthropic, b"{", 0).is_err());
    assert!(model.turn(Anthropic, b"[1]", 0).is_err());
    let out = model
        .turn(Anthropic, &session_body(1, true, None), 0)
        .unwrap();
    assert_eq!(out.write, 1500);
}

#[test]
fn rules_from_the_provider_table() {
    let anthropic = crate::provider::by_name("anthropic").unwrap();
    let r = Rule::from_cache_rule(&anthropic.cache[0]);
    assert_eq!(r.activation, CacheActivation::Explicit);
    assert_eq!((r.ttl_ms, r.long_ttl_ms), (Some(300_000), Some(3_600_000)));
    assert_eq!(r.lookback, 20);
    let deepseek = crate::provider::by_name("deepseek").unwrap();
    let r = Rule::from_cache_rule(&deepseek.cache[0]);
    assert_eq!((r.activation, r.ttl_ms), (CacheActivation::Automatic, None));
}

/// Bedrock Converse: a `cachePoint` block marks the block before it, and is no block of its
/// own; a Converse image is an image (its base64 hashed, not counted as text).
#[test]
fn converse_cache_points_mark_the_block_before() {
    let point = json!({"cachePoint": {"type": "default"}});
    let body = |n: usize| {
        let mut messages =
            vec![json!({"role": "user", "content": [{"text": "a".repeat(2000)}, point.clone()]})];
        for _ in 2..=n {
            messages.push(json!({"role": "assistant", "content": [{"text": "b".repeat(800)}]}));
            messages.push(
                json!({"role": "user", "content": [{"text": "c".repeat(1200)}, point.clone()]}),
            );
        }
        serde_json::to_vec(
            &json!({"system": [{"text": "s".repeat(4000)}, point.clone()], "messages": messages}),
        )
        .unwrap()
    };
    let turns: Vec<(Vec<u8>, i64)> = (1..=2).map(|n| (body(n), n as i64 * MIN)).collect();
    let out = simulate(
        explicit(),
        turns
            .iter()
            .map(|(b, t)| (crate::dialect::Dialect::Converse, b.as_slice(), *t)),
    )
    .unwrap();
    assert_eq!(out[0].read, 0);
    assert_eq!(
        out[0].write, out[0].input,
        "both points wrote their prefixes"
    );
    assert_eq!(out[1].read, out[0].input, "turn 2 reads turn 1's prefix");
    let with_image = json!({"messages": [{"role": "user", "content": [
        {"image": {"format": "png", "source": {"bytes": "A".repeat(40_000)}}}]}]});
    let bytes = serde_json::to_vec(&with_image).unwrap();
    let t = simulate(
        explicit(),
        [(crate::dialect::Dialect::Converse, bytes.as_slice(), 0)],
    )
    .unwrap();
    assert!(
        t[0].input < 40_000 / 4,
        "the image is not read as text: {}",
        t[0].input
    );
}
