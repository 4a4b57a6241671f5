//! Golden tests: recorded response shapes of each dialect, streamed and not, through the
//! observers (fixtures in `tests/fixtures/responses/`).

use serde_json::{json, Value};

use super::testing::{body, run_stream, stream};
use super::*;
use crate::dialect::fingerprint::{echoed_turn, message_digest, request_digest, turn_fingerprint};
use crate::dialect::testing::fixture;
use crate::dialect::turn::{Call, CapturedTurn, Carrier, PartRef};
use crate::dialect::usage::Usage;
use crate::dialect::Dialect::{self, Anthropic, Gemini, Openai, OpenaiResponses};
use crate::wire::stream::Break;

fn usage(
    uncached: Option<u64>,
    read: Option<u64>,
    write: Option<u64>,
    output: Option<u64>,
) -> Usage {
    Usage {
        uncached_input_tokens: uncached,
        cache_read_tokens: read,
        cache_write_tokens: write,
        output_tokens: output,
        ..Usage::default()
    }
}

fn call(id: Option<&str>, name: &str, arguments: &str) -> Call {
    Call {
        id: id.map(str::to_owned),
        name: name.to_owned(),
        arguments: arguments.to_owned(),
    }
}

fn turn(o: &Observed) -> &CapturedTurn {
    o.turn.as_ref().expect("a complete turn")
}

// ---- Anthropic ----

#[test]
fn anthropic_stream_usage_split_and_signed_thinking() {
    let o = stream(Anthropic, "anthropic_thinking_tool.sse");
    assert_eq!(
        o.usage,
        Usage {
            uncached_input_tokens: Some(12),
            cache_read_tokens: Some(100_000),
            cache_write_tokens: Some(1248),
            cache_write_5m_tokens: Some(148),
            cache_write_1h_tokens: Some(1100),
            output_tokens: Some(87),
        }
    );
    assert_eq!(
        o.response_model.as_deref(),
        Some("claude-sonnet-4-5-20250929")
    );
    assert_eq!(o.error, None);
    assert_eq!(o.reasoning_seen, 1);
    let t = turn(&o);
    assert_eq!(t.text, "Taking a screenshot.");
    assert_eq!(
        t.calls,
        vec![call(
            Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6"),
            "computer",
            r#"{"action":"screenshot","display":1}"#
        )]
    );
    assert_eq!(
        t.carriers,
        vec![Carrier::AnthropicThinking {
            position: 0,
            thinking: "The user wants a screenshot; take one first.".into(),
            signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds".into()),
        }]
    );
}

#[test]
fn anthropic_message_delta_repeats_are_last_wins_not_summed() {
    let o = stream(Anthropic, "anthropic_unsigned_cumulative.sse");
    // message_start said 0 / 0 / 0; two message_deltas repeat the input figures.
    assert_eq!(o.usage, usage(Some(310), Some(2048), Some(0), Some(25)));
    let t = turn(&o);
    assert_eq!(t.text, "Paris.");
    assert_eq!(
        t.carriers,
        vec![Carrier::AnthropicThinking {
            position: 0,
            thinking: "Short answer.".into(),
            signature: None,
        }]
    );
}

#[test]
fn anthropic_error_event_keeps_usage_drops_turn() {
    let o = stream(Anthropic, "anthropic_overloaded.sse");
    assert_eq!(o.error.as_deref(), Some("overloaded_error"));
    assert_eq!(o.usage.cache_read_tokens, Some(100_000));
    assert_eq!(o.usage.output_tokens, Some(1));
    assert_eq!(o.turn, None);
}

#[test]
fn anthropic_body_with_redacted_thinking() {
    let o = body(Anthropic, "anthropic_redacted.json");
    assert_eq!(
        o.usage,
        Usage {
            uncached_input_tokens: Some(50),
            cache_read_tokens: Some(100_000),
            cache_write_tokens: Some(248),
            cache_write_5m_tokens: Some(148),
            cache_write_1h_tokens: Some(100),
            output_tokens: Some(503),
        }
    );
    assert_eq!(
        o.response_model.as_deref(),
        Some("claude-opus-4-1-20250805")
    );
    assert_eq!(o.reasoning_seen, 2);
    let t = turn(&o);
    assert_eq!(t.text, "I'll read it.");
    assert_eq!(
        t.calls,
        vec![call(
            Some("toolu_01A09q90qw90lq917835lq9"),
            "read_file",
            r#"{"limit":10,"path":"a.txt"}"#
        )]
    );
    assert_eq!(
        t.carriers,
        vec![
            Carrier::AnthropicThinking {
                position: 0,
                thinking: "Let me check the file first.".into(),
                signature: Some("EqQBCgIYAhIMxyz".into()),
            },
            Carrier::AnthropicRedacted {
                position: 1,
                data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".into(),
            },
        ]
    );
}

#[test]
fn anthropic_count_tokens_and_error_bodies_are_not_usage() {
    let mut s = observer(Anthropic);
    s.on_json(br#"{"input_tokens":2095}"#).unwrap();
    s.on_end(End::Complete);
    assert!(!s.observed().usage.is_reported());
    assert_eq!(s.observed().turn, None);
    let mut s = observer(Anthropic);
    s.on_json(br#"{"type":"error","error":{"type":"invalid_request_error","message":"x"}}"#)
        .unwrap();
    s.on_end(End::Complete);
    assert_eq!(s.observed().error.as_deref(), Some("invalid_request_error"));
    assert!(!s.observed().usage.is_reported());
}

// ---- OpenAI Chat ----

#[test]
fn chat_stream_usage_chunk_with_cache_writes() {
    let o = stream(Openai, "chat_tool_usage.sse");
    // 2006 prompt − 1536 read − 256 written.
    assert_eq!(o.usage, usage(Some(214), Some(1536), Some(256), Some(300)));
    assert_eq!(o.response_model.as_deref(), Some("gpt-5.6-2026-07-01"));
    let t = turn(&o);
    assert_eq!(t.text, "");
    assert_eq!(
        t.calls,
        vec![
            call(
                Some("call_DdmO9pD3xa9XTPNJ32zg2hcA"),
                "read_file",
                r#"{"path":"a.txt"}"#
            ),
            call(Some("call_2"), "screenshot", "{}"),
        ]
    );
    assert!(t.carriers.is_empty());
    assert_eq!(o.reasoning_seen, 0);
}

#[test]
fn chat_stream_without_usage_is_not_reported() {
    let o = stream(Openai, "chat_no_include_usage.sse");
    assert_eq!(o.usage, Usage::default());
    assert!(!o.usage.is_reported());
    assert_eq!(turn(&o).text, "Hello there.");
    let o = stream(Openai, "chat_usage_null.sse");
    assert_eq!(o.usage, Usage::default());
    assert_eq!(turn(&o).text, "Partial");
}

#[test]
fn deepseek_stream_hit_miss_and_reasoning_content() {
    let o = stream(Openai, "deepseek_reasoning.sse");
    assert_eq!(o.usage, usage(Some(20), Some(1280), None, Some(45)));
    let t = turn(&o);
    assert_eq!(
        t.carriers,
        vec![Carrier::ReasoningContent(
            "User wants the weather; call get_weather for Paris.".into()
        )]
    );
    assert_eq!(
        t.calls,
        vec![call(
            Some("call_00_y2YkQ9"),
            "get_weather",
            r#"{"city":"Paris"}"#
        )]
    );
}

#[test]
fn openrouter_stream_reasoning_details_merged_by_index() {
    let o = stream(Openai, "openrouter_reasoning.sse");
    assert_eq!(o.usage, usage(Some(94), Some(10318), Some(100), Some(60)));
    assert_eq!(
        o.response_model.as_deref(),
        Some("anthropic/claude-sonnet-4.5")
    );
    assert_eq!(o.reasoning_seen, 3);
    let t = turn(&o);
    assert_eq!(t.text, "It is sunny in Paris.");
    assert_eq!(
        t.carriers,
        vec![
            Carrier::Reasoning("Look up the weather.".into()),
            Carrier::ReasoningDetail(
                json!({"type": "reasoning.text", "text": "Look up the weather.",
                "signature": "EqQBCgIYAhIMsig", "format": "anthropic-claude-v1", "index": 0})
            ),
            Carrier::ReasoningDetail(
                json!({"type": "reasoning.encrypted", "data": "EmwKAhgBEgy3va3pzix",
                "id": null, "format": "anthropic-claude-v1", "index": 1})
            ),
        ]
    );
}

#[test]
fn gemini_openai_endpoint_tool_call_signature() {
    let o = stream(Openai, "gemini_openai_compat.sse");
    assert_eq!(o.usage, usage(Some(95), Some(0), None, Some(40)));
    let t = turn(&o);
    assert_eq!(
        t.calls,
        vec![
            call(
                Some("function-call-1"),
                "get_weather",
                r#"{"city":"Paris"}"#
            ),
            call(Some("function-call-2"), "get_weather", r#"{"city":"Rome"}"#),
        ]
    );
    assert_eq!(
        t.carriers,
        vec![Carrier::ToolCallSignature {
            call: 0,
            signature: "CvcQAdHN2OekSig1".into()
        }]
    );
}

#[test]
fn chat_bodies_openai_and_deepseek() {
    let o = body(Openai, "chat_body.json");
    assert_eq!(o.usage, usage(Some(86), Some(1920), None, Some(300)));
    assert_eq!(
        turn(&o).calls,
        vec![call(
            Some("call_DdmO9pD3xa9XTPNJ32zg2hcA"),
            "read_file",
            r#"{"path":"a.txt"}"#
        )]
    );
    let o = body(Openai, "deepseek_body.json");
    assert_eq!(o.usage, usage(Some(64), Some(0), None, Some(12)));
    let t = turn(&o);
    assert_eq!(t.text, "Paris is the capital of France.");
    assert_eq!(
        t.carriers,
        vec![Carrier::ReasoningContent("Simple fact.".into())]
    );
}

#[test]
fn chat_error_chunk_and_kimi_choice_usage() {
    let raw = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n\
data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n";
    let (o, err) = run_stream(Openai, raw, End::Complete);
    assert_eq!(err, None);
    assert_eq!(o.error.as_deref(), Some("server_error"));
    assert_eq!(o.turn, None);
    // Kimi puts the usage on the choice.
    let raw = b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\",\
\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":64}}}]}\n\n";
    let (o, _) = run_stream(Openai, raw, End::Complete);
    assert_eq!(o.usage, usage(Some(36), Some(64), None, Some(5)));
}

// ---- OpenAI Responses ----

#[test]
fn responses_stream_completed_usage_and_reasoning_item_whole() {
    let o = stream(OpenaiResponses, "responses_reasoning_tool.sse");
    // 5321 input − 4864 read − 384 written.
    assert_eq!(o.usage, usage(Some(73), Some(4864), Some(384), Some(181)));
    assert_eq!(o.response_model.as_deref(), Some("gpt-5.6-2026-07-01"));
    let t = turn(&o);
    assert_eq!(
        t.calls,
        vec![call(
            Some("call_Wl3YV1pGQ2"),
            "read_file",
            r#"{"path":"proxy.toml"}"#
        )]
    );
    let [Carrier::ResponsesReasoning { position, id, item }] = t.carriers.as_slice() else {
        panic!("{:?}", t.carriers)
    };
    assert_eq!(
        (*position, id.as_deref()),
        (0, Some("rs_68af4030592c81938ec0a5fbab4a3e9f"))
    );
    // Whole, from output_item.done (the added copy had an empty summary and no
    // encrypted_content), byte for byte as received.
    let item: Value = serde_json::from_str(item).unwrap();
    assert_eq!(item["encrypted_content"], "gAAAAABor0Awn2x6kXcM1");
    assert_eq!(
        item["summary"][0]["text"],
        "**Checking the config**\n\nRead it first."
    );
    assert!(
        String::from_utf8_lossy(&fixture("responses_reasoning_tool.sse"))
            .contains(&format!("\"item\":{}", t.carriers_item(0)))
    );
}

impl CapturedTurn {
    fn carriers_item(&self, i: usize) -> &str {
        match &self.carriers[i] {
            Carrier::ResponsesReasoning { item, .. } => item,
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn responses_body_text_turn() {
    let o = body(OpenaiResponses, "responses_body.json");
    assert_eq!(o.usage, usage(Some(812), Some(0), None, Some(95)));
    let t = turn(&o);
    assert_eq!(t.text, "The file sets listen = 127.0.0.1:8787.");
    assert!(t.calls.is_empty());
    assert_eq!(o.reasoning_seen, 1);
}

#[test]
fn responses_failed_and_error_events() {
    let raw = b"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\
\"error\":{\"code\":\"server_error\",\"message\":\"x\"},\"usage\":null,\"output\":[]}}\n\n";
    let (o, err) = run_stream(OpenaiResponses, raw, End::Complete);
    assert_eq!(err, None);
    assert_eq!(o.error.as_deref(), Some("server_error"));
    assert!(!o.usage.is_reported());
    let raw = b"event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"m\",\"param\":null}\n\n";
    let (o, _) = run_stream(OpenaiResponses, raw, End::Complete);
    assert_eq!(o.error.as_deref(), Some("rate_limit_exceeded"));
}

// ---- Gemini ----

#[test]
fn gemini_stream_last_usage_and_signature_on_a_later_chunk() {
    let o = stream(Gemini, "gemini_signature_later.sse");
    // promptTokenCount 4210 includes the 4096 cached; output = 18 candidates + 28 thoughts.
    assert_eq!(o.usage, usage(Some(114), Some(4096), None, Some(46)));
    assert_eq!(o.response_model.as_deref(), Some("gemini-3-pro-preview"));
    let t = turn(&o);
    assert_eq!(t.text, "Let me read the file.");
    assert_eq!(
        t.calls,
        vec![call(
            Some("a1b2c3d4"),
            "read_file",
            r#"{"limit":10,"path":"a.txt"}"#
        )]
    );
    assert_eq!(
        t.carriers,
        vec![Carrier::GeminiSignature {
            on: PartRef::Call(0),
            signature: "CiQB0e2Kb7xQ2sig==".into()
        }]
    );
}

#[test]
fn gemini_json_array_parallel_calls_first_signed() {
    let o = body(Gemini, "gemini_parallel.json");
    // No cachedContentTokenCount: read not reported, nothing subtracted.
    assert_eq!(o.usage, usage(Some(96), None, None, Some(76)));
    let t = turn(&o);
    assert_eq!(
        t.calls,
        vec![
            call(None, "get_weather", r#"{"city":"Paris"}"#),
            call(None, "get_weather", r#"{"city":"Rome"}"#),
        ]
    );
    assert_eq!(
        t.carriers,
        vec![Carrier::GeminiSignature {
            on: PartRef::Call(0),
            signature: "CvcQAdHN2Oek".into()
        }]
    );
}

#[test]
fn gemini_body_text_signature_without_cache_count() {
    let o = body(Gemini, "gemini_body.json");
    assert_eq!(o.usage, usage(Some(8), None, None, Some(32)));
    assert_eq!(o.response_model.as_deref(), Some("gemini-2.5-flash"));
    let t = turn(&o);
    assert_eq!(t.text, "Hello! How can I help?");
    assert_eq!(
        t.carriers,
        vec![Carrier::GeminiSignature {
            on: PartRef::Text,
            signature: "Cp8BAdHtim9sig".into()
        }]
    );
    let mut s = observer(Gemini);
    s.on_json(br#"{"totalTokens":31}"#).unwrap();
    s.on_end(End::Complete);
    assert!(
        !s.observed().usage.is_reported(),
        "countTokens is not usage"
    );
}

// ---- Fingerprints: a captured turn equals the same turn echoed in the next request ----

fn json_of(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

/// `captured` answers `first`; in `next`, `before` is the message the turn answered and
/// `echoed` the turn as the client echoes it.
fn assert_same_fingerprint(
    dialect: Dialect,
    first: &str,
    captured: &CapturedTurn,
    before: &Value,
    echoed: &Value,
) {
    let prev = request_digest(dialect, &fixture(first)).unwrap();
    assert_eq!(
        prev,
        message_digest(dialect, &bytes(before)),
        "{first}: digest"
    );
    let echoed = echoed_turn(dialect, &bytes(echoed)).unwrap();
    let next = fixture(&first.replace("request", "next_request"));
    let turns = crate::dialect::fingerprint::echoed_turns(dialect, &next);
    assert_eq!(turns.len(), 1, "{first}");
    assert_eq!(turns[0].prev, prev);
    // (Item JSON text is kept as the request spells it, so compare what is hashed.)
    assert_eq!(
        (&turns[0].turn.calls, &turns[0].turn.text),
        (&echoed.calls, &echoed.text)
    );
    assert_eq!(turns[0].turn.carriers.len(), echoed.carriers.len());
    assert_eq!(turns[0].fingerprint, turn_fingerprint(&prev, captured));
    assert_eq!(echoed.calls, captured.calls);
    assert_eq!(echoed.text, captured.text);
    assert_eq!(
        turn_fingerprint(&prev, captured),
        turn_fingerprint(&prev, &echoed),
        "{first}: fingerprint"
    );
}

#[test]
fn fingerprint_anthropic_echo_with_moved_cache_control() {
    let o = stream(Anthropic, "anthropic_thinking_tool.sse");
    let next = json_of("anthropic_next_request.json");
    let m = &next["messages"];
    assert_same_fingerprint(Anthropic, "anthropic_request.json", turn(&o), &m[0], &m[1]);
    let echoed = echoed_turn(Anthropic, &bytes(&m[1])).unwrap();
    assert_eq!(echoed.carriers, turn(&o).carriers);
}

#[test]
fn fingerprint_chat_echo_without_reasoning_content() {
    let o = stream(Openai, "deepseek_reasoning.sse");
    let next = json_of("chat_next_request.json");
    let m = &next["messages"];
    assert_same_fingerprint(Openai, "chat_request.json", turn(&o), &m[1], &m[2]);
    // The agent dropped reasoning_content: that is what the restore side puts back.
    assert!(echoed_turn(Openai, &bytes(&m[2]))
        .unwrap()
        .carriers
        .is_empty());
    // A carrier kept or not does not change the fingerprint.
    let mut with_rc = m[2].clone();
    with_rc["reasoning_content"] = json!("User wants the weather; call get_weather for Paris.");
    let prev = request_digest(Openai, &fixture("chat_request.json")).unwrap();
    assert_eq!(
        turn_fingerprint(&prev, &echoed_turn(Openai, &bytes(&with_rc)).unwrap()),
        turn_fingerprint(&prev, turn(&o))
    );
}

#[test]
fn fingerprint_responses_echo_items() {
    let o = stream(OpenaiResponses, "responses_reasoning_tool.sse");
    let next = json_of("responses_next_request.json");
    let input = next["input"].as_array().unwrap();
    let items = Value::Array(input[1..3].to_vec());
    assert_same_fingerprint(
        OpenaiResponses,
        "responses_request.json",
        turn(&o),
        &input[0],
        &items,
    );
}

#[test]
fn fingerprint_gemini_echo_signature_on_the_call() {
    let o = stream(Gemini, "gemini_signature_later.sse");
    let next = json_of("gemini_next_request.json");
    let c = &next["contents"];
    assert_same_fingerprint(Gemini, "gemini_request.json", turn(&o), &c[0], &c[1]);
    // The client put the later-streamed signature on its call: the same carrier.
    assert_eq!(
        echoed_turn(Gemini, &bytes(&c[1])).unwrap().carriers,
        turn(&o).carriers
    );
}

#[test]
fn fingerprint_text_turns_and_non_stream_equal_stream() {
    let streamed = stream(Openai, "chat_no_include_usage.sse");
    let prev = message_digest(Openai, br#"{"role":"user","content":"hi"}"#);
    let echoed = echoed_turn(Openai, br#"{"role":"assistant","content":"Hello there."}"#).unwrap();
    assert_eq!(
        turn_fingerprint(&prev, turn(&streamed)),
        turn_fingerprint(&prev, &echoed)
    );
    let other = echoed_turn(Openai, br#"{"role":"assistant","content":"Hello."}"#).unwrap();
    assert_ne!(
        turn_fingerprint(&prev, turn(&streamed)),
        turn_fingerprint(&prev, &other)
    );
}

// ---- Garbage, truncation ----

#[test]
fn garbage_never_panics() {
    let cases: &[&[u8]] = &[
        b"not json",
        b"\xff\xfe\x00garbage",
        b"{\"text\":\"\xff\"}",
        b"[1,2,3]",
        b"null",
        b"{\"type\":\"message_start\",\"message\":5}",
        b"{\"type\":\"content_block_start\",\"index\":-1,\"content_block\":[]}",
        b"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":5}}",
        b"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\"many\"}}",
        b"{\"choices\":\"x\",\"usage\":[1]}",
        b"{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":\"a\",\"function\":7}],\"reasoning_details\":[1,{\"index\":0,\"text\":2}]}}]}",
        b"{\"choices\":[{\"delta\":{\"reasoning_details\":[{\"index\":0,\"text\":\"a\"},{\"index\":0,\"text\":null}]}}]}",
        b"{\"type\":\"response.output_item.done\",\"item\":5}",
        b"{\"type\":\"response.completed\",\"response\":[]}",
        b"{\"candidates\":[{\"content\":{\"parts\":\"x\"}}],\"usageMetadata\":\"y\"}",
        b"{\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":5,\"thoughtSignature\":7},{\"text\":[]}]}}]}",
        b"{\"error\":\"flat\"}",
        b"[DONE]",
        b"",
    ];
    for dialect in [Anthropic, Openai, OpenaiResponses, Gemini] {
        for data in cases {
            let mut s = observer(dialect);
            let _ = s.on_event(&SseEvent {
                event: Some("message_start"),
                data,
            });
            let _ = s.on_event(&SseEvent { event: None, data });
            s.on_end(End::Complete);
            s.on_end(End::ClientGone);
            let mut s = observer(dialect);
            let _ = s.on_json(data);
            s.on_end(End::Complete);
            let _ = s.observed();
        }
    }
}

#[test]
fn not_json_stops_observing_and_drops_the_turn() {
    let mut raw = fixture("anthropic_thinking_tool.sse");
    let cut = raw.len() - 40;
    raw.truncate(cut);
    raw.extend_from_slice(b"\n\nevent: message_stop\ndata: {\"type\":\xff\n\n");
    let (o, err) = run_stream(Anthropic, &raw, End::Complete);
    assert!(err.is_some());
    assert_eq!(o.turn, None);
    assert_eq!(
        o.usage.cache_read_tokens,
        Some(100_000),
        "usage so far is kept"
    );
    let mut s = observer(Openai);
    assert!(s.on_json(b"{\"choices\":").is_err());
    s.on_end(End::Complete);
    assert_eq!(s.observed().turn, None);
}

#[test]
fn a_broken_stream_keeps_usage_but_no_turn() {
    let (o, err) = run_stream(
        Anthropic,
        &fixture("anthropic_thinking_tool.sse"),
        End::Broken(Break::UpstreamBroken),
    );
    assert_eq!(err, None);
    assert_eq!(o.usage.output_tokens, Some(87));
    assert_eq!(o.reasoning_seen, 1);
    assert_eq!(o.turn, None);
}

// ---- Through the real tee: framer, chunking, gzip ----

fn through_tee(
    dialect: Dialect,
    framing: crate::wire::tee::Framing,
    encoding: Option<&str>,
    bytes: &[u8],
    chunk: usize,
) -> Observed {
    use crate::wire::stream::BodyObserver;
    let mut tee = crate::wire::tee::Tee::new(framing, encoding, observer(dialect));
    for c in bytes.chunks(chunk) {
        tee.on_data(&bytes::Bytes::copy_from_slice(c));
    }
    tee.on_end(End::Complete);
    assert_eq!(tee.stopped(), None);
    tee.into_sink().observed().clone()
}

#[test]
fn every_fixture_observes_the_same_through_the_tee() {
    use crate::wire::tee::Framing;
    use std::io::Write;
    let gzip = |raw: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(raw).unwrap();
        e.finish().unwrap()
    };
    let streams: &[(Dialect, &str)] = &[
        (Anthropic, "anthropic_thinking_tool.sse"),
        (Anthropic, "anthropic_unsigned_cumulative.sse"),
        (Anthropic, "anthropic_overloaded.sse"),
        (Openai, "chat_tool_usage.sse"),
        (Openai, "chat_no_include_usage.sse"),
        (Openai, "chat_usage_null.sse"),
        (Openai, "deepseek_reasoning.sse"),
        (Openai, "openrouter_reasoning.sse"),
        (Openai, "gemini_openai_compat.sse"),
        (OpenaiResponses, "responses_reasoning_tool.sse"),
        (Gemini, "gemini_signature_later.sse"),
    ];
    for &(dialect, name) in streams {
        let want = stream(dialect, name);
        let raw = fixture(name);
        for chunk in [1, 7, 4096] {
            let got = through_tee(dialect, Framing::EventStream, None, &raw, chunk);
            assert_eq!(got, want, "{name} in chunks of {chunk}");
        }
        let got = through_tee(dialect, Framing::EventStream, Some("gzip"), &gzip(&raw), 5);
        assert_eq!(got, want, "{name} gzip-encoded");
    }
    let bodies: &[(Dialect, &str)] = &[
        (Anthropic, "anthropic_redacted.json"),
        (Openai, "chat_body.json"),
        (Openai, "deepseek_body.json"),
        (OpenaiResponses, "responses_body.json"),
        (Gemini, "gemini_body.json"),
        (Gemini, "gemini_parallel.json"),
    ];
    for &(dialect, name) in bodies {
        let want = body(dialect, name);
        let raw = fixture(name);
        assert_eq!(
            through_tee(dialect, Framing::Json, None, &raw, 13),
            want,
            "{name}"
        );
        let got = through_tee(dialect, Framing::Json, Some("gzip"), &gzip(&raw), 13);
        assert_eq!(got, want, "{name} gzip-encoded");
    }
}

#[test]
fn a_turn_past_the_size_cap_is_dropped_usage_kept() {
    let mut s = observer(Anthropic);
    let feed = |s: &mut ResponseSink, data: &[u8]| {
        s.on_event(&SseEvent { event: None, data }).unwrap();
    };
    let start = fixture("anthropic_thinking_tool.sse");
    let events = crate::dialect::testing::split_sse(&start);
    feed(&mut s, &events[0].1); // message_start
    feed(
        &mut s,
        br#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    let big = format!(
        r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{}"}}}}"#,
        "a".repeat(1024 * 1024)
    );
    for _ in 0..(MAX_TURN_SOURCE_BYTES / (1024 * 1024) + 1) {
        feed(&mut s, big.as_bytes());
    }
    feed(
        &mut s,
        br#"{"type":"message_delta","delta":{},"usage":{"output_tokens":9000}}"#,
    );
    s.on_end(End::Complete);
    let o = s.observed();
    assert_eq!(o.turn, None);
    assert_eq!(o.usage.output_tokens, Some(9000));
    assert_eq!(o.usage.cache_read_tokens, Some(100_000));
}

/// A stream of compact deltas (an escaped one, a multi-byte character) split anywhere
/// between chunks, through the tee and the framer: the same turn in every split.
#[test]
fn compact_deltas_split_across_chunks_read_the_same() {
    use crate::wire::stream::{BodyObserver, End};
    use crate::wire::tee::{Framing, Tee};
    let stream = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":3,"output_tokens":1}}}"#,
        "\n\nevent: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        "\n\nevent: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Gr\u00fc\u00df "}}"#,
        "\r\n\r\nevent: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Gott \"x\"\n"}}"#,
        "\n\nevent: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"— ok"}}"#,
        "\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
        "\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    )
    .as_bytes();
    for chunk in [1, 2, 3, 5, 64, stream.len()] {
        let mut tee = Tee::new(Framing::EventStream, None, observer(Anthropic));
        for c in stream.chunks(chunk) {
            tee.on_data(&bytes::Bytes::copy_from_slice(c));
        }
        tee.on_end(End::Complete);
        assert_eq!(tee.stopped(), None);
        let o = tee.sink().observed();
        let turn = o.turn.as_ref().expect("a complete turn");
        assert_eq!(turn.text, "Grüß Gott \"x\"\n— ok", "chunks of {chunk}");
        assert_eq!(o.usage.output_tokens, Some(9), "chunks of {chunk}");
    }
}
