//! The Converse wire's request view (paths, image sites, last message) and its response
//! reader on the golden fixtures (`tests/fixtures/responses/converse_*`: a JSON body, and
//! event-stream frames written by the e2e mock's frame writer, `tests/e2e/cloud_mock.py`).

use super::*;
use crate::dialect::format::WireFormat as _;
use crate::dialect::testing::fixture;
use crate::dialect::turn::{Call, Carrier};
use crate::dialect::usage::Usage;
use crate::dialect::{classify_path, parse, Dialect};
use crate::response::{observer, Observed};
use crate::wire::eventstream::Decoder;
use crate::wire::stream::End;
use crate::wire::tee::Sink;

/// The signature and redacted blob the fixtures carry.
const SIG: &str = "EqQBCkgIARABGAIiQFr7kB0yZ3uMCUu6h1Kq2h0NwT3c1ZxEnH0p8bCvQ5cV4mDw2tTnGQk";
const REDACTED: &str = "bW9jayByZWRhY3RlZCByZWFzb25pbmcgMDAwMQ==";

#[test]
fn converse_paths_for_any_model_and_invoke_stays_anthropic() {
    let converse = Some((Dialect::Converse, Endpoint::Generate));
    for path in [
        "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/converse",
        "/model/us.amazon.nova-pro-v1:0/converse-stream",
        "/model/meta.llama3-70b-instruct-v1:0/converse/",
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse",
    ] {
        assert_eq!(classify_path(path), converse, "{path}");
    }
    assert_eq!(
        classify_path("/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"),
        Some((Dialect::Anthropic, Endpoint::Generate))
    );
    for path in [
        "/model/meta.llama3-70b-instruct-v1:0/invoke",
        "/model/x/converse/more",
        "/model//converse",
        "/converse",
        "/bedrock/model/x/converse",
    ] {
        assert_eq!(classify_path(path), None, "{path}");
    }
}

#[test]
fn uploads_and_tool_result_images_with_their_format() {
    let body = br#"{"messages":[
      {"role":"user","content":[{"text":"look"},{"image":{"format":"png","source":{"bytes":"iVBORw0KGgo="}}},
        {"image":{"format":"jpeg","source":{"s3Location":{"uri":"s3://b/k.jpg"}}}}]},
      {"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"shot","input":{}}}]},
      {"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"text":"ok"},{"image":{"format":"jpeg","source":{"bytes":"/9j/4AAQ"}}}]}},
        {"toolResult":{"toolUseId":"t2","content":[{"json":{"a":1}}]}},{"cachePoint":{"type":"default"}}]}
    ]}"#;
    let doc = parse(body, Dialect::Converse).unwrap();
    let text = doc.text;
    let w = walk(&doc);
    assert_eq!(w.sites.len(), 2, "the s3Location image is not in the body");
    assert_eq!(w.sites[0].path, "messages[0].content[1]");
    assert_eq!(w.sites[0].carrier, None);
    let Payload::Base64 {
        data,
        media_type,
        spelling,
    } = &w.sites[1].payload
    else {
        panic!("base64")
    };
    assert_eq!(data.text, "/9j/4AAQ");
    assert_eq!(media_type.as_ref().unwrap().text, "jpeg");
    assert_eq!(*spelling, TypeSpelling::FormatName);
    assert_eq!(
        w.sites[1].path,
        "messages[2].content[0].toolResult.content[1]"
    );
    assert_eq!(w.sites[1].carrier, Some(0));
    assert_eq!(
        &text[w.sites[1].block.clone()],
        r#"{"image":{"format":"jpeg","source":{"bytes":"/9j/4AAQ"}}}"#
    );
    assert_eq!(w.carriers.len(), 1);
    assert_eq!(w.carriers[0].label.as_deref(), Some("toolUseId t1"));
    assert_eq!(w.style.block("gone", None), r#"{"text":"gone"}"#);
    // The message a response answers: the last one.
    let last = Converse.last_message(&doc).unwrap();
    assert!(text[last].starts_with(r#"{"role":"user","content":[{"toolResult""#));
}

/// Feed a recorded event stream fixture (`.bin`, AWS event-stream frames) to a Converse
/// observer through the wire crate's decoder, ended `end`.
fn observe_frames(name: &str, end: End) -> Observed {
    let mut decoder = Decoder::new();
    let mut messages = Vec::new();
    decoder.push(&fixture(name), &mut messages).unwrap();
    decoder.finish().unwrap();
    let mut sink = observer(Dialect::Converse);
    for m in &messages {
        sink.on_aws_message(m).unwrap();
    }
    sink.on_end(end);
    sink.observed().clone()
}

/// The turn both fixtures carry.
fn tool_turn() -> CapturedTurn {
    CapturedTurn {
        text: "Taking a screenshot.".into(),
        calls: vec![Call {
            id: Some("tooluse_01".into()),
            name: "screenshot".into(),
            arguments: r#"{"display":0}"#.into(),
        }],
        carriers: vec![
            Carrier::ConverseReasoning {
                position: 0,
                text: "The user wants a screenshot; take one first.".into(),
                signature: Some(SIG.into()),
            },
            Carrier::ConverseRedacted {
                position: 1,
                data: REDACTED.into(),
            },
        ],
        item_ids: Vec::new(),
    }
}

/// The fixtures' usage: `inputTokens` is the uncached input.
const USAGE: Usage = Usage {
    uncached_input_tokens: Some(12),
    cache_read_tokens: Some(5120),
    cache_write_tokens: Some(248),
    cache_write_5m_tokens: Some(148),
    cache_write_1h_tokens: Some(100),
    output_tokens: Some(7),
};

#[test]
fn the_json_body_and_the_stream_read_the_same_turn_and_usage() {
    let body = crate::response::testing::body(Dialect::Converse, "converse_body.json");
    assert_eq!(body.usage, USAGE);
    assert_eq!(body.turn, Some(tool_turn()));
    assert_eq!(body.reasoning_seen, 2);
    assert_eq!(body.error, None);
    let streamed = observe_frames("converse_tool.bin", End::Complete);
    assert_eq!(streamed.usage, USAGE);
    assert_eq!(streamed.turn, Some(tool_turn()));
    // The echo of that turn, in the next request, reads the same (fingerprints match).
    let next: serde_json::Value =
        serde_json::from_slice(&fixture("converse_next_request.json")).unwrap();
    let echoed = Converse
        .echoed_turn(&[&next["messages"][1].to_string()])
        .unwrap();
    assert_eq!(echoed, tool_turn());
}

#[test]
fn an_exception_mid_stream_is_the_error_and_no_turn_is_kept() {
    let o = observe_frames("converse_exception.bin", End::Complete);
    assert_eq!(o.error.as_deref(), Some("modelStreamErrorException"));
    assert_eq!(o.turn, None);
    // Cut before `metadata`: no usage, no turn.
    let cut = observe_frames("converse_exception.bin", End::ClientGone);
    assert_eq!(cut.usage, Usage::default());
}

#[test]
fn the_metadata_event_ends_the_stream_and_errors_read_as_errors() {
    let reader = Converse.response_reader();
    assert!(reader.reads_aws_events());
    let ev = |name| crate::wire::sse::SseEvent {
        event: Some(name),
        data: b"{}",
    };
    assert!(reader.is_end_marker(&ev("metadata")));
    assert!(!reader.is_end_marker(&ev("messageStop")));
    let mut sink = observer(Dialect::Converse);
    sink.on_json(
        br#"{"message":"Malformed input request: #: extraneous key [top_k] is not permitted"}"#,
    )
    .unwrap();
    sink.on_end(End::Complete);
    assert_eq!(sink.observed().error.as_deref(), Some("error"));
    assert_eq!(sink.observed().turn, None);
}
