//! Replays of long screenshot sessions through `rewrite_request`, plus bad-input cases.
//!
//! The property that matters (issue 2): the bytes forwarded for earlier messages change only on
//! the turns where the retire count steps up, uploads are never touched, and small screenshots
//! are never retired below the 100-block ceiling.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cachekeeper::config::ImagesConfig;
use cachekeeper::dialect::Dialect;
use cachekeeper::dialect::ParseError;
use cachekeeper::rewrite::{rewrite_request, RewriteContext, RewriteOutcome};
use cachekeeper::texts::RETIRED_IMAGE;
use serde_json::{json, Value};

/// A tiny fake PNG: signature, a valid IHDR for `w`×`h`, then `pad` filler bytes that vary
/// with `seed` (so every screenshot is distinct).
fn png(w: u32, h: u32, seed: u32, pad: usize) -> String {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend_from_slice(&13u32.to_be_bytes());
    v.extend_from_slice(b"IHDR");
    v.extend_from_slice(&w.to_be_bytes());
    v.extend_from_slice(&h.to_be_bytes());
    v.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
    v.extend_from_slice(&seed.to_be_bytes());
    v.extend((0..pad).map(|i| (i * 7 % 256) as u8));
    STANDARD.encode(v)
}

const LARGE: (u32, u32) = (2400, 1350);
const SMALL: (u32, u32) = (1568, 882);

fn run(dialect: Dialect, images: &ImagesConfig, body: &[u8]) -> RewriteOutcome {
    rewrite_request(&RewriteContext::new(dialect, images), body).unwrap()
}

fn forwarded(dialect: Dialect, images: &ImagesConfig, body: &[u8]) -> (Vec<u8>, RewriteOutcome) {
    let out = run(dialect, images, body);
    (out.body.clone().unwrap_or_else(|| body.to_vec()), out)
}

/// The report's reasons minus "left image … as sent": the fake PNGs here have a valid header
/// and filler data, so a downscale the config asks for fails and says so; these tests are
/// about retirement.
fn retirements(out: &RewriteOutcome) -> Vec<&String> {
    out.report
        .reasons
        .iter()
        .filter(|r| !r.starts_with("left image "))
        .collect()
}

/// Serialize a body with `messages` last, so the forwarded bytes of turn k-1 minus the closing
/// `]}` must be a prefix of turn k's when no earlier message changed.
fn body_with(head: &str, messages: &[String]) -> Vec<u8> {
    format!("{{{head},\"messages\":[{}]}}", messages.join(",")).into_bytes()
}

fn anthropic_image(data: &str) -> String {
    json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
        .to_string()
}

/// Anthropic session: an upload at turn 1, then per turn an assistant tool_use and a user
/// tool_result carrying one screenshot.
fn anthropic_session(
    turns: usize,
    upload: (u32, u32),
    shot: (u32, u32),
) -> (String, Vec<Vec<String>>) {
    let upload_msg = format!(
        r#"{{"role":"user","content":[{{"type":"text","text":"Fix the layout in this mockup"}},{}]}}"#,
        anthropic_image(&png(upload.0, upload.1, 999, 64))
    );
    let mut messages = vec![upload_msg.clone()];
    let mut per_turn = Vec::new();
    for t in 1..=turns {
        messages.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"toolu_{t}","name":"screenshot","input":{{}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{t}","content":[{{"type":"text","text":"screen {t}"}},{}]}}]}}"#,
            anthropic_image(&png(shot.0, shot.1, t as u32, 48))
        ));
        per_turn.push(messages.clone());
    }
    (upload_msg, per_turn)
}

fn openai_image(data: &str) -> String {
    json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}})
        .to_string()
}

/// OpenAI Chat session: a system prompt, an upload at turn 1, then per turn an assistant
/// tool call and its screenshot — in the tool message on even turns, in a user message right
/// after the tool message on odd turns (how agents work around OpenAI's tool-image rule).
fn openai_session(
    turns: usize,
    upload: (u32, u32),
    shot: (u32, u32),
) -> (String, Vec<Vec<String>>) {
    let upload_msg = format!(
        r#"{{"role":"user","content":[{{"type":"text","text":"Fix the layout in this mockup"}},{}]}}"#,
        openai_image(&png(upload.0, upload.1, 999, 64))
    );
    let mut messages = vec![
        r#"{"role":"system","content":"You are a computer-use agent."}"#.to_owned(),
        upload_msg.clone(),
    ];
    let mut per_turn = Vec::new();
    for t in 1..=turns {
        messages.push(format!(
            r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{t}","type":"function","function":{{"name":"screenshot","arguments":"{{}}"}}}}]}}"#
        ));
        let img = openai_image(&png(shot.0, shot.1, t as u32, 48));
        if t % 2 == 0 {
            messages.push(format!(
                r#"{{"role":"tool","tool_call_id":"call_{t}","content":[{{"type":"text","text":"screen {t}"}},{img}]}}"#
            ));
        } else {
            messages.push(format!(
                r#"{{"role":"tool","tool_call_id":"call_{t}","content":"screen {t} follows"}}"#
            ));
            messages.push(format!(
                r#"{{"role":"user","content":[{{"type":"text","text":"screenshot"}},{img}]}}"#
            ));
        }
        per_turn.push(messages.clone());
    }
    (upload_msg, per_turn)
}

/// Replay `per_turn` requests; return the turns (1-based) where the retire count stepped up,
/// asserting the prefix property on every other turn and that the upload stays intact.
fn replay(dialect: Dialect, head: &str, upload_msg: &str, per_turn: &[Vec<String>]) -> Vec<usize> {
    let cfg = ImagesConfig::default();
    let mut steps = Vec::new();
    let mut prev: Option<(Vec<u8>, usize)> = None;
    for (i, messages) in per_turn.iter().enumerate() {
        let turn = i + 1;
        let body = body_with(head, messages);
        let (fwd, out) = forwarded(dialect, &cfg, &body);
        let text = String::from_utf8(fwd.clone()).unwrap();
        assert!(
            text.contains(upload_msg),
            "turn {turn}: the upload was touched"
        );
        let parsed: Value = serde_json::from_slice(&fwd).unwrap();
        let kept_images =
            text.matches("base64,").count() + text.matches("\"type\":\"base64\"").count();
        assert!(
            kept_images <= cfg.max_blocks,
            "turn {turn}: {kept_images} images forwarded"
        );
        assert_eq!(out.report.images.seen, turn + 1, "turn {turn}");
        assert_eq!(retirements(&out).len(), out.report.images.carriers_retired);
        let retired = out.report.images.carriers_retired;
        if let Some((prev_fwd, prev_retired)) = &prev {
            let prefix = &prev_fwd[..prev_fwd.len() - 2];
            assert_eq!(&prev_fwd[prev_fwd.len() - 2..], b"]}");
            if retired == *prev_retired {
                assert!(
                    fwd.starts_with(prefix),
                    "turn {turn}: earlier bytes changed without a step"
                );
            } else {
                assert!(
                    retired > *prev_retired,
                    "turn {turn}: retire count went down"
                );
                assert!(
                    !fwd.starts_with(prefix),
                    "turn {turn}: a step must rewrite the prefix"
                );
                steps.push(turn);
            }
        } else if retired > 0 {
            steps.push(turn);
        }
        // Retired carriers keep their ids.
        let ids = parsed.to_string().matches("toolu_").count()
            + parsed.to_string().matches("call_").count();
        assert!(ids >= 2 * turn, "turn {turn}: ids lost");
        prev = Some((fwd, retired));
    }
    steps
}

#[test]
fn anthropic_40_turns_large_screenshots_step_in_batches() {
    let (upload, per_turn) = anthropic_session(40, (2600, 1400), LARGE);
    let head = r#""model":"claude-test","max_tokens":1024"#;
    // 1 upload + n screenshots > 20 at n = 20: retired down to the low-water mark (10 images
    // with the upload, 11 retired); the kept 10 refill to 20 at n = 30, the next step is at 31
    // (22 retired). Batches of 8 stepped at 20, 28 and 36.
    assert_eq!(
        replay(Dialect::Anthropic, head, &upload, &per_turn),
        vec![20, 31]
    );
    let last = body_with(head, &per_turn[39]);
    let out = run(Dialect::Anthropic, &ImagesConfig::default(), &last);
    assert_eq!(
        (
            out.report.images.carriers_retired,
            out.report.images.retired
        ),
        (22, 22)
    );
    assert_eq!(
        retirements(&out)[0],
        "retired carrier messages[2].content[0] (tool_use_id toolu_1): 1 image block; reason: 41 blocks > ceiling 20"
    );
    assert_eq!(out.report.model.as_deref(), Some("claude-test"));
}

#[test]
fn openai_40_turns_large_screenshots_step_in_batches() {
    let (upload, per_turn) = openai_session(40, (2600, 1400), LARGE);
    let head = r#""model":"gpt-test","stream":true"#;
    // As on the Anthropic wire: down to the low-water mark at 20 and 31 (batches of 8: 20, 28,
    // 36).
    assert_eq!(
        replay(Dialect::Openai, head, &upload, &per_turn),
        vec![20, 31]
    );
}

#[test]
fn small_screenshots_are_never_retired() {
    let cfg = ImagesConfig::default();
    let (_, per_turn) = anthropic_session(40, SMALL, SMALL);
    for (i, messages) in per_turn.iter().enumerate() {
        let body = body_with(r#""model":"m""#, messages);
        let out = run(Dialect::Anthropic, &cfg, &body);
        assert_eq!(out.body, None, "anthropic turn {}", i + 1);
        assert_eq!(out.report.images.seen, i + 2);
    }
    let (_, per_turn) = openai_session(40, SMALL, SMALL);
    for (i, messages) in per_turn.iter().enumerate() {
        let body = body_with(r#""model":"m""#, messages);
        assert_eq!(
            run(Dialect::Openai, &cfg, &body).body,
            None,
            "openai turn {}",
            i + 1
        );
    }
}

#[test]
fn one_large_upload_keeps_the_strict_ceiling() {
    // `docs/images.md#worked-cases`: one upload at 2001 px plus 20 small screenshots → 11
    // retired (10 images left: the low-water mark; the reference policy retired 8), upload
    // untouched.
    let (upload, per_turn) = anthropic_session(20, (2001, 1000), SMALL);
    let body = body_with(r#""model":"m""#, &per_turn[19]);
    let (fwd, out) = forwarded(Dialect::Anthropic, &ImagesConfig::default(), &body);
    assert_eq!(out.report.images.carriers_retired, 11);
    assert!(String::from_utf8(fwd).unwrap().contains(&upload));
}

/// A tool_result block with `n` screenshots.
fn tool_result(id: &str, shots: &[String]) -> String {
    let mut content = vec![format!(r#"{{"type":"text","text":"{id} output"}}"#)];
    content.extend(shots.iter().map(|s| anthropic_image(s)));
    format!(
        r#"{{"type":"tool_result","tool_use_id":"{id}","content":[{}]}}"#,
        content.join(",")
    )
}

#[test]
fn three_image_tool_results_retire_as_units() {
    // 8 tool results × 3 large images = 24 blocks: the quantum shrinks to window - floor = 3.
    let mut messages = Vec::new();
    for t in 0..8u32 {
        let shots: Vec<String> = (0..3)
            .map(|k| png(LARGE.0, LARGE.1, t * 10 + k, 16))
            .collect();
        messages.push(format!(
            r#"{{"role":"user","content":[{}]}}"#,
            tool_result(&format!("toolu_{t}"), &shots)
        ));
    }
    let body = body_with(r#""model":"m""#, &messages);
    let (fwd, out) = forwarded(Dialect::Anthropic, &ImagesConfig::default(), &body);
    assert_eq!(
        (
            out.report.images.carriers_retired,
            out.report.images.retired
        ),
        (3, 9)
    );
    assert!(retirements(&out)[0].contains("3 image blocks; reason: 24 blocks > ceiling 20"));
    let v: Value = serde_json::from_slice(&fwd).unwrap();
    for t in 0..8 {
        let content = &v["messages"][t]["content"][0]["content"];
        let images = content
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "image")
            .count();
        assert_eq!(images, if t < 3 { 0 } else { 3 }, "message {t}");
        assert_eq!(content[0]["text"], format!("toolu_{t} output"));
        if t < 3 {
            for k in 1..=3 {
                assert_eq!(content[k], json!({"type": "text", "text": RETIRED_IMAGE}));
            }
        }
    }
}

#[test]
fn sibling_tool_results_retire_oldest_first() {
    // 7 user messages × 3 sibling tool_results (one large image each) = 21 carriers.
    // Down to the low-water mark (10): the oldest 11 are messages 0, 1 and 2 whole, and the
    // FIRST two siblings of message 3 (with batches of 8: messages 0 and 1, two of message 2).
    let mut messages = Vec::new();
    for m in 0..7u32 {
        let siblings: Vec<String> = (0..3)
            .map(|s| {
                tool_result(
                    &format!("toolu_{m}_{s}"),
                    &[png(LARGE.0, LARGE.1, m * 10 + s, 8)],
                )
            })
            .collect();
        messages.push(format!(
            r#"{{"role":"user","content":[{}]}}"#,
            siblings.join(",")
        ));
    }
    let body = body_with(r#""model":"m""#, &messages);
    let (fwd, out) = forwarded(Dialect::Anthropic, &ImagesConfig::default(), &body);
    assert_eq!(out.report.images.carriers_retired, 11);
    let v: Value = serde_json::from_slice(&fwd).unwrap();
    let retired =
        |m: usize, s: usize| v["messages"][m]["content"][s]["content"][1]["text"] == RETIRED_IMAGE;
    for m in 0..7 {
        for s in 0..3 {
            assert_eq!(
                retired(m, s),
                m < 3 || (m == 3 && s < 2),
                "message {m} sibling {s}"
            );
            assert_eq!(
                v["messages"][m]["content"][s]["tool_use_id"],
                format!("toolu_{m}_{s}")
            );
        }
    }
    assert_eq!(
        retirements(&out)[10].split(':').next(),
        Some("retired carrier messages[3].content[1] (tool_use_id toolu_3_1)")
    );
}

#[test]
fn untouched_bytes_are_byte_exact_and_cache_control_is_kept() {
    // Odd but valid formatting, unknown fields and escapes must survive verbatim.
    let mut messages = Vec::new();
    for t in 0..21u32 {
        let cc = if t == 0 {
            r#", "cache_control" : {"type":"ephemeral","ttl":"1h"}"#
        } else {
            ""
        };
        messages.push(format!(
            "{{ \"role\":\"user\", \"x-extra\": [1, 2.50, \"\\u00e9\"],\n \"content\": [ {{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_{t}\",\"is_error\":false,\"content\":[{{\"type\":\"image\",\"source\":{{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"{}\"}}{cc}}}]}} ] }}",
            png(LARGE.0, LARGE.1, t, 8)
        ));
    }
    let body = format!(
        "{{ \"model\" : \"m\",\n  \"messages\": [{}],\"tail\":{{\"k\":null}} }}",
        messages.join(",\n")
    );
    let (fwd, out) = forwarded(
        Dialect::Anthropic,
        &ImagesConfig::default(),
        body.as_bytes(),
    );
    // Down to the low-water mark: 11 of 21 (batches of 8 retired 8).
    assert_eq!(out.report.images.carriers_retired, 11);
    // Rebuild the expected bytes by hand: only the 11 oldest image blocks differ.
    let mut expected = body.clone();
    for t in 0..11u32 {
        let cc = if t == 0 {
            r#", "cache_control" : {"type":"ephemeral","ttl":"1h"}"#
        } else {
            ""
        };
        let block = format!(
            "{{\"type\":\"image\",\"source\":{{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"{}\"}}{cc}}}",
            png(LARGE.0, LARGE.1, t, 8)
        );
        let cc_out = if t == 0 {
            r#","cache_control":{"type":"ephemeral","ttl":"1h"}"#
        } else {
            ""
        };
        let text = format!("{{\"type\":\"text\",\"text\":\"{RETIRED_IMAGE}\"{cc_out}}}");
        assert_eq!(expected.matches(&block).count(), 1);
        expected = expected.replace(&block, &text);
    }
    assert_eq!(String::from_utf8(fwd).unwrap(), expected);
}

#[test]
fn escaped_slashes_in_base64_are_read() {
    // 30 small screenshots whose base64 has every '/' escaped as '\/': still probed as small.
    let mut messages = Vec::new();
    for t in 0..30u32 {
        let data = png(SMALL.0, SMALL.1, t, 300).replace('/', "\\/");
        assert!(data.contains("\\/"));
        messages.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{t}","content":[{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{data}"}}}}]}}]}}"#
        ));
    }
    let body = body_with(r#""model":"m""#, &messages);
    let out = run(Dialect::Anthropic, &ImagesConfig::default(), &body);
    assert_eq!((out.body, out.report.images.seen), (None, 30));
}

#[test]
fn bad_input_truncated_json() {
    let cfg = ImagesConfig::default();
    let (_, per_turn) = anthropic_session(3, LARGE, LARGE);
    let body = body_with(r#""model":"m""#, &per_turn[2]);
    for cut in [1, body.len() / 2, body.len() - 1] {
        for dialect in [Dialect::Anthropic, Dialect::Openai] {
            let r = rewrite_request(&RewriteContext::new(dialect, &cfg), &body[..cut]);
            assert!(matches!(r, Err(ParseError::NotJson(_))), "cut {cut}: {r:?}");
        }
    }
    let r = rewrite_request(&RewriteContext::new(Dialect::Anthropic, &cfg), b"not json");
    assert!(matches!(r, Err(ParseError::NotJson(_))));
}

#[test]
fn bad_input_messages_of_the_wrong_type() {
    let cfg = ImagesConfig::default();
    for dialect in [Dialect::Anthropic, Dialect::Openai] {
        for body in [
            r#"{"model":"m","messages":"hello"}"#,
            r#"{"messages":{"role":"user"}}"#,
            r#"{"messages":7}"#,
            "[]",
            "\"str\"",
        ] {
            let r = rewrite_request(&RewriteContext::new(dialect, &cfg), body.as_bytes());
            assert!(matches!(r, Err(ParseError::Shape { .. })), "{body}: {r:?}");
        }
        // null / absent messages: nothing to do.
        for body in [r#"{"model":"m","messages":null}"#, r#"{"model":"m"}"#] {
            let out =
                rewrite_request(&RewriteContext::new(dialect, &cfg), body.as_bytes()).unwrap();
            assert_eq!((out.body, out.report.model.as_deref()), (None, Some("m")));
        }
    }
}

#[test]
fn bad_input_corrupt_base64_counts_as_a_large_image() {
    // 20 small screenshots + 1 corrupt one: the corrupt one is unreadable ⇒ large ⇒ strict 20.
    let cfg = ImagesConfig::default();
    let mut messages = Vec::new();
    for t in 0..21u32 {
        let data = if t == 20 {
            "%%%not-base64%%%".to_owned()
        } else {
            png(SMALL.0, SMALL.1, t, 8)
        };
        messages.push(format!(
            r#"{{"role":"user","content":[{}]}}"#,
            tool_result(&format!("toolu_{t}"), &[data])
        ));
    }
    let body = body_with(r#""model":"m""#, &messages);
    let out = run(Dialect::Anthropic, &cfg, &body);
    // 21 > 20: down to the low-water mark 10 (batches of 8: 8).
    assert_eq!(
        (out.report.images.seen, out.report.images.carriers_retired),
        (21, 11)
    );
    assert!(out.body.is_some());
    // The same in OpenAI Chat.
    let mut messages = Vec::new();
    for t in 0..21u32 {
        let data = if t == 20 {
            "%%%".to_owned()
        } else {
            png(SMALL.0, SMALL.1, t, 8)
        };
        messages.push(format!(
            r#"{{"role":"tool","tool_call_id":"c{t}","content":[{}]}}"#,
            openai_image(&data)
        ));
    }
    let out = run(
        Dialect::Openai,
        &cfg,
        &body_with(r#""model":"m""#, &messages),
    );
    assert_eq!(
        (out.report.images.seen, out.report.images.carriers_retired),
        (21, 11)
    );
}

#[test]
fn bad_input_missing_source_is_a_block() {
    let cfg = ImagesConfig::default();
    let mut messages = Vec::new();
    for t in 0..21u32 {
        let image = if t % 2 == 0 {
            r#"{"type":"image"}"#.to_owned()
        } else {
            anthropic_image(&png(SMALL.0, SMALL.1, t, 8))
        };
        messages.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{t}","content":[{image}]}}]}}"#
        ));
    }
    let body = body_with(r#""model":"m""#, &messages);
    let (fwd, out) = forwarded(Dialect::Anthropic, &cfg, &body);
    // Down to the low-water mark (batches of 8: 8).
    assert_eq!(
        (out.report.images.seen, out.report.images.carriers_retired),
        (21, 11)
    );
    let v: Value = serde_json::from_slice(&fwd).unwrap();
    assert_eq!(
        v["messages"][0]["content"][0]["content"][0]["text"],
        RETIRED_IMAGE
    );
}

#[test]
fn uploads_alone_over_the_ceiling_keep_the_floor() {
    // `docs/images.md#worked-cases`: 21 uploads + 5 screenshots → exactly 3 screenshots kept.
    let cfg = ImagesConfig::default();
    let uploads: Vec<String> = (0..21)
        .map(|u| anthropic_image(&png(LARGE.0, LARGE.1, 500 + u, 8)))
        .collect();
    let mut messages = vec![format!(
        r#"{{"role":"user","content":[{}]}}"#,
        uploads.join(",")
    )];
    for t in 0..5u32 {
        messages.push(format!(
            r#"{{"role":"user","content":[{}]}}"#,
            tool_result(&format!("toolu_{t}"), &[png(LARGE.0, LARGE.1, t, 8)])
        ));
    }
    let body = body_with(r#""model":"m""#, &messages);
    let (fwd, out) = forwarded(Dialect::Anthropic, &cfg, &body);
    assert_eq!(out.report.images.carriers_retired, 2);
    let text = String::from_utf8(fwd).unwrap();
    assert!(text.contains(&messages[0]), "uploads untouched");
    assert!(retirements(&out).last().unwrap().contains("evict_floor"));
}

#[test]
fn golden_fixtures() {
    // fixtures/<dialect>/evict.request.json → evict.expected.json (set UPDATE_GOLDEN=1 to
    // regenerate after an intended change). The goldens stay byte-identical: they are checked
    // with the low-water mark at ceiling − 1, which gives the reference policy's batches of 8;
    // the default (half the ceiling) retires 11 of the same 21.
    let cfg = ImagesConfig {
        evict_low_water: Some(19),
        ..ImagesConfig::default()
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    for (dir, dialect) in [
        ("anthropic", Dialect::Anthropic),
        ("openai", Dialect::Openai),
    ] {
        let request = std::fs::read(root.join(dir).join("evict.request.json")).unwrap();
        let expected_path = root.join(dir).join("evict.expected.json");
        let (fwd, out) = forwarded(dialect, &cfg, &request);
        assert_eq!(out.report.images.carriers_retired, 8, "{dir}");
        let (_, default) = forwarded(dialect, &ImagesConfig::default(), &request);
        assert_eq!(default.report.images.carriers_retired, 11, "{dir}");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&expected_path, &fwd).unwrap();
        }
        let expected = std::fs::read(&expected_path).unwrap();
        assert!(
            fwd == expected,
            "{dir}: output differs from {}",
            expected_path.display()
        );
    }
}
