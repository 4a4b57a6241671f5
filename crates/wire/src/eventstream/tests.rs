//! Tests of the event-stream decoder: frames built by `aws-smithy-eventstream`'s encoder and by
//! an independent encoder written from the specification
//! (<https://smithy.io/2.0/aws/amazon-eventstream.html>), decoded in every split.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::Message as SmithyMessage;
use base64::Engine as _;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{json, Value};

/// Cases per property (fixed, so CI's run time is known).
const CASES: u32 = 256;

/// As in the workspace's `tests/properties_*.rs`: [`CASES`] cases unless `PROPTEST_CASES` is
/// set, a fixed seed unless `PROPTEST_RNG_SEED` is set, no regression files.
fn config() -> Config {
    let env = Config::default();
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let rng_seed = match env.rng_seed {
        RngSeed::Random => RngSeed::Fixed(0x5EED_0029),
        fixed => fixed,
    };
    Config {
        cases,
        rng_seed,
        failure_persistence: None,
        ..env
    }
}

/// A frame as the specification lays it out, written without the crate: string headers
/// (type 7), then the payload, the two CRC32s over what precedes them.
pub(crate) fn spec_frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(u8::try_from(name.len()).unwrap());
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    spec_frame_raw(&h, payload)
}

/// A frame around raw header bytes (any bytes: the CRCs are right whatever they hold).
fn spec_frame_raw(headers: &[u8], payload: &[u8]) -> Vec<u8> {
    let total = u32::try_from(16 + headers.len() + payload.len()).unwrap();
    let mut f = Vec::new();
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&u32::try_from(headers.len()).unwrap().to_be_bytes());
    let prelude_crc = crc32fast::hash(&f);
    f.extend_from_slice(&prelude_crc.to_be_bytes());
    f.extend_from_slice(headers);
    f.extend_from_slice(payload);
    let message_crc = crc32fast::hash(&f);
    f.extend_from_slice(&message_crc.to_be_bytes());
    f
}

/// The same frame through the crate's encoder.
fn smithy_frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut m = SmithyMessage::new(Bytes::copy_from_slice(payload));
    for (name, value) in headers {
        m = m.add_header(Header::new(
            (*name).to_owned(),
            HeaderValue::String((*value).to_owned().into()),
        ));
    }
    let mut out = Vec::new();
    write_message_to(&m, &mut out).unwrap();
    out
}

/// The headers Bedrock puts on an event, in its order.
pub(crate) fn bedrock_event(event_type: &str) -> [(&str, &str); 3] {
    [
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ]
}

fn event(event_type: &str, payload: &[u8]) -> Message {
    Message {
        message_type: Some(MessageType::Event),
        event_type: Some(event_type.to_owned()),
        content_type: Some("application/json".to_owned()),
        error_message: None,
        payload: Bytes::copy_from_slice(payload),
    }
}

/// Decode `bytes` cut at `cuts` (sorted positions); the messages and the first error (of the
/// pushes, else of `finish`).
fn decode(bytes: &[u8], cuts: &[usize]) -> (Vec<Message>, Result<(), Error>) {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let cut = cut.clamp(at, bytes.len());
        if let Err(e) = d.push(&bytes[at..cut], &mut out) {
            return (out, Err(e));
        }
        at = cut;
    }
    let end = d.finish();
    (out, end)
}

/// ConverseStream's closing `metadata` event: usage (cache reads and writes included) and
/// latency, with Bedrock's `p` padding field.
const METADATA: &str = concat!(
    r#"{"usage":{"inputTokens":1250,"outputTokens":86,"totalTokens":12336,"#,
    r#""cacheReadInputTokens":11000,"cacheWriteInputTokens":0},"#,
    r#""metrics":{"latencyMs":1875},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}"#
);

/// An Anthropic `message_delta` event, as InvokeModelWithResponseStream carries it base64-coded
/// in a `chunk` event's `bytes`.
const MESSAGE_DELTA: &str = concat!(
    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"#,
    r#""usage":{"output_tokens":86}}"#
);

fn chunk_payload() -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(MESSAGE_DELTA);
    format!(r#"{{"bytes":"{b64}","p":"abcdefghijklmnopqrstu"}}"#)
}

#[test]
fn crt_test_vector_decodes() {
    // A frame without headers from the AWS CRT's tests
    // (https://github.com/awslabs/aws-c-event-stream/blob/main/tests/message_deserializer_test.c):
    // total 0x1d = 29 = 16 + 13-byte payload, headers 0, prelude CRC 0xfd528c5a, message CRC
    // 0xc3653936.
    let frame: &[u8] = &[
        0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x00, 0xfd, 0x52, 0x8c, 0x5a, b'{', b'\'', b'f',
        b'o', b'o', b'\'', b':', b'\'', b'b', b'a', b'r', b'\'', b'}', 0xc3, 0x65, 0x39, 0x36,
    ];
    assert_eq!(spec_frame(&[], b"{'foo':'bar'}"), frame);
    let (msgs, end) = decode(frame, &[]);
    end.unwrap();
    assert_eq!(
        msgs,
        vec![Message {
            message_type: None,
            event_type: None,
            content_type: None,
            error_message: None,
            payload: Bytes::from_static(b"{'foo':'bar'}"),
        }]
    );
}

#[test]
fn converse_stream_metadata_frame() {
    let headers = bedrock_event("metadata");
    let frame = spec_frame(&headers, METADATA.as_bytes());
    // The independent encoder and the crate's agree byte for byte.
    assert_eq!(frame, smithy_frame(&headers, METADATA.as_bytes()));
    // Headers: 1 + 11 + 1 + 2 + 8 (":event-type" "metadata"), 1 + 13 + 1 + 2 + 16
    // (":content-type" "application/json"), 1 + 13 + 1 + 2 + 5 (":message-type" "event").
    assert_eq!(&frame[4..8], &78u32.to_be_bytes());
    assert_eq!(frame.len(), 16 + 78 + METADATA.len());
    assert_eq!(
        &frame[..4],
        &u32::try_from(frame.len()).unwrap().to_be_bytes()
    );
    assert_eq!(&frame[12..24], b"\x0b:event-type");

    let (msgs, end) = decode(&frame, &[]);
    end.unwrap();
    assert_eq!(msgs, vec![event("metadata", METADATA.as_bytes())]);
    let body: Value = serde_json::from_slice(&msgs[0].payload).unwrap();
    assert_eq!(
        body["usage"],
        json!({"inputTokens": 1250, "outputTokens": 86, "totalTokens": 12336,
               "cacheReadInputTokens": 11000, "cacheWriteInputTokens": 0})
    );
    assert_eq!(body["metrics"]["latencyMs"], 1875);
}

#[test]
fn invoke_model_chunk_frame() {
    let headers = bedrock_event("chunk");
    let payload = chunk_payload();
    let frame = spec_frame(&headers, payload.as_bytes());
    assert_eq!(frame, smithy_frame(&headers, payload.as_bytes()));
    assert_eq!(&frame[4..8], &75u32.to_be_bytes());

    let (msgs, end) = decode(&frame, &[7, 40]);
    end.unwrap();
    assert_eq!(msgs, vec![event("chunk", payload.as_bytes())]);
    let body: Value = serde_json::from_slice(&msgs[0].payload).unwrap();
    let inner = base64::engine::general_purpose::STANDARD
        .decode(body["bytes"].as_str().unwrap())
        .unwrap();
    let delta: Value = serde_json::from_slice(&inner).unwrap();
    assert_eq!(
        delta,
        json!({"type": "message_delta",
               "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": 86}})
    );
}

#[test]
fn exception_and_error_messages() {
    let exception = spec_frame(
        &[
            (":exception-type", "throttlingException"),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        br#"{"message":"Too many requests, please wait before trying again."}"#,
    );
    let error = spec_frame(
        &[
            (":message-type", "error"),
            (":error-code", "InternalError"),
            (":error-message", "An internal server error occurred."),
        ],
        b"",
    );
    let stream = [exception, error].concat();
    let (msgs, end) = decode(&stream, &[]);
    end.unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0].message_type, Some(MessageType::Exception));
    assert_eq!(msgs[0].event_type.as_deref(), Some("throttlingException"));
    assert_eq!(msgs[0].content_type.as_deref(), Some("application/json"));
    assert_eq!(msgs[1].message_type, Some(MessageType::Error));
    assert_eq!(msgs[1].event_type.as_deref(), Some("InternalError"));
    assert_eq!(
        msgs[1].error_message.as_deref(),
        Some("An internal server error occurred.")
    );
    assert!(msgs[1].payload.is_empty());
}

/// Two Bedrock frames: a ConverseStream delta and its metadata.
fn two_frames() -> (Vec<u8>, Vec<Message>) {
    let delta = br#"{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcdefgh"}"#;
    let a = smithy_frame(&bedrock_event("contentBlockDelta"), delta);
    let b = smithy_frame(&bedrock_event("metadata"), METADATA.as_bytes());
    let want = vec![
        event("contentBlockDelta", delta),
        event("metadata", METADATA.as_bytes()),
    ];
    ([a, b].concat(), want)
}

#[test]
fn every_split_point_of_two_frames() {
    let (stream, want) = two_frames();
    for i in 0..=stream.len() {
        let (msgs, end) = decode(&stream, &[i]);
        assert_eq!(end, Ok(()), "split at {i}");
        assert_eq!(msgs, want, "split at {i}");
    }
}

#[test]
fn every_pair_of_split_points_of_two_frames() {
    let (stream, want) = two_frames();
    for i in 0..=stream.len() {
        for j in i..=stream.len() {
            let (msgs, end) = decode(&stream, &[i, j]);
            assert!(end.is_ok() && msgs == want, "splits at {i}, {j}");
        }
    }
}

#[test]
fn byte_by_byte() {
    let (stream, want) = two_frames();
    let cuts: Vec<usize> = (1..stream.len()).collect();
    let (msgs, end) = decode(&stream, &cuts);
    end.unwrap();
    assert_eq!(msgs, want);
}

#[test]
fn truncated_stream_yields_whole_frames_then_errs_at_finish() {
    let (stream, want) = two_frames();
    let first = usize::try_from(u32::from_be_bytes(stream[..4].try_into().unwrap())).unwrap();
    for cut in 0..stream.len() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        d.push(&stream[..cut], &mut out).unwrap();
        let whole = usize::from(cut >= first);
        assert_eq!(out, want[..whole], "cut at {cut}");
        assert_eq!(d.buffered(), cut - whole * first);
        let end = d.finish();
        if cut == 0 || cut == first {
            assert_eq!(end, Ok(()));
        } else {
            assert_eq!(
                end,
                Err(Error::Truncated {
                    buffered: cut - whole * first
                })
            );
            assert_eq!(d.finish(), Err(Error::Poisoned));
        }
    }
}

#[test]
fn prelude_crc_flip_is_reported_at_the_prelude() {
    let (stream, _) = two_frames();
    for bit in 0..96 {
        let mut bad = stream.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let mut d = Decoder::new();
        let mut out = Vec::new();
        // Only the prelude: the error does not wait for the frame's stated length.
        let e = d.push(&bad[..PRELUDE_BYTES], &mut out).unwrap_err();
        assert!(matches!(e, Error::PreludeCrc { .. }), "bit {bit}: {e:?}");
        assert!(out.is_empty());
        assert_eq!(d.error(), Some(&e));
        assert_eq!(d.buffered(), 0);
    }
}

#[test]
fn message_crc_flip_in_the_second_frame() {
    let (stream, want) = two_frames();
    let end = stream.len();
    for bit in 0..32 {
        let mut bad = stream.clone();
        bad[end - 4 + bit / 8] ^= 1 << (bit % 8);
        let (msgs, res) = decode(&bad, &[]);
        // The first frame is yielded; the second is the CRC error.
        assert_eq!(msgs, want[..1]);
        let stated = u32::from_be_bytes(bad[end - 4..].try_into().unwrap());
        let computed = u32::from_be_bytes(stream[end - 4..].try_into().unwrap());
        assert_eq!(res, Err(Error::MessageCrc { computed, stated }));
    }
}

#[test]
fn payload_flip_is_a_message_crc_error() {
    let (stream, _) = two_frames();
    let mut bad = stream.clone();
    bad[100] ^= 0x20;
    let (msgs, res) = decode(&bad, &[50]);
    assert!(msgs.is_empty());
    assert!(matches!(res, Err(Error::MessageCrc { .. })), "{res:?}");
}

#[test]
fn poisoned_decoder_yields_nothing_more() {
    let (stream, _) = two_frames();
    let mut bad = stream.clone();
    bad[9] ^= 1;
    let mut d = Decoder::new();
    let mut out = Vec::new();
    assert!(matches!(
        d.push(&bad, &mut out),
        Err(Error::PreludeCrc { .. })
    ));
    assert_eq!(d.push(&stream, &mut out), Err(Error::Poisoned));
    assert!(out.is_empty());
    assert_eq!(d.finish(), Err(Error::Poisoned));
    assert!(matches!(d.error(), Some(Error::PreludeCrc { .. })));
}

/// A prelude stating `total` bytes, its CRC right.
pub(crate) fn prelude(total: u32, headers: u32) -> Vec<u8> {
    let mut p = total.to_be_bytes().to_vec();
    p.extend_from_slice(&headers.to_be_bytes());
    let crc = crc32fast::hash(&p);
    p.extend_from_slice(&crc.to_be_bytes());
    p
}

#[test]
fn a_huge_stated_length_is_refused_at_once() {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    let e = d.push(&prelude(u32::MAX, 0), &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::TooLarge {
            length: u32::MAX,
            max: MAX_FRAME_BYTES
        }
    );
    assert_eq!(d.buffered(), 0);
    // One past the limit, split inside the prelude.
    let mut d = Decoder::with_max_frame_bytes(1000);
    let p = prelude(1001, 0);
    d.push(&p[..5], &mut out).unwrap();
    let e = d.push(&p[5..], &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::TooLarge {
            length: 1001,
            max: 1000
        }
    );
    // At the limit: buffered.
    let mut d = Decoder::with_max_frame_bytes(1000);
    d.push(&prelude(1000, 0), &mut out).unwrap();
    assert_eq!(d.buffered(), 12);
}

#[test]
fn max_frame_bytes_is_the_specification_sum() {
    assert_eq!(MAX_FRAME_BYTES, 12 + 131_072 + 25_165_824 + 4);
}

#[test]
fn a_length_below_the_minimum_is_refused() {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    assert_eq!(d.push(&prelude(15, 0), &mut out), Err(Error::TooShort(15)));
}

#[test]
fn malformed_headers_with_good_crcs() {
    // Headers length 1 (the specification's headers are 0 or at least 2 bytes).
    let frame = spec_frame_raw(&[5], b"{}");
    let (msgs, res) = decode(&frame, &[]);
    assert!(msgs.is_empty());
    assert!(matches!(res, Err(Error::Malformed(_))), "{res:?}");
    // An unknown header value type (0x60).
    let frame = spec_frame_raw(b"\x01a\x60", b"");
    let (_, res) = decode(&frame, &[]);
    assert!(matches!(res, Err(Error::Malformed(_))), "{res:?}");
}

#[test]
fn buffer_never_outgrows_the_frame_limit() {
    let payload = vec![b'x'; 900];
    let frame = spec_frame(&bedrock_event("chunk"), &payload);
    let max = frame.len();
    let mut d = Decoder::with_max_frame_bytes(max);
    let mut out = Vec::new();
    for piece in frame.chunks(7) {
        d.push(piece, &mut out).unwrap();
        assert!(d.buf.capacity() <= max, "{} > {max}", d.buf.capacity());
    }
    d.finish().unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload.len(), 900);
}

#[test]
fn non_string_headers_read_as_absent() {
    let m = SmithyMessage::new(Bytes::from_static(b"{}"))
        .add_header(Header::new(":message-type", HeaderValue::Int32(1)))
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String("chunk".into()),
        ));
    let mut frame = Vec::new();
    write_message_to(&m, &mut frame).unwrap();
    let (msgs, end) = decode(&frame, &[]);
    end.unwrap();
    assert_eq!(msgs[0].message_type, None);
    assert_eq!(msgs[0].event_type.as_deref(), Some("chunk"));
}

/// One generated message: its headers and payload.
#[derive(Debug, Clone)]
struct Gen {
    kind: &'static str,
    name: String,
    payload: Vec<u8>,
}

impl Gen {
    fn frame(&self) -> Vec<u8> {
        let type_header = match self.kind {
            "exception" => ":exception-type",
            "error" => ":error-code",
            _ => ":event-type",
        };
        smithy_frame(
            &[
                (type_header, self.name.as_str()),
                (":content-type", "application/json"),
                (":message-type", self.kind),
            ],
            &self.payload,
        )
    }

    fn message(&self) -> Message {
        Message {
            message_type: Some(MessageType::from_header(self.kind)),
            event_type: Some(self.name.clone()),
            content_type: Some("application/json".to_owned()),
            error_message: None,
            payload: Bytes::copy_from_slice(&self.payload),
        }
    }
}

fn messages() -> impl Strategy<Value = Vec<Gen>> {
    let one = (
        prop_oneof![Just("event"), Just("exception"), Just("error")],
        "[a-zA-Z]{1,24}",
        prop::collection::vec(any::<u8>(), 0..400),
    )
        .prop_map(|(kind, name, payload)| Gen {
            kind,
            name,
            payload,
        });
    prop::collection::vec(one, 1..12)
}

/// Sorted cut positions into a stream of `len` bytes.
fn cuts() -> impl Strategy<Value = Vec<prop::sample::Index>> {
    prop::collection::vec(any::<prop::sample::Index>(), 0..24)
}

fn positions(cuts: &[prop::sample::Index], len: usize) -> Vec<usize> {
    let mut p: Vec<usize> = cuts.iter().map(|i| i.index(len + 1)).collect();
    p.sort_unstable();
    p
}

proptest! {
    #![proptest_config(config())]

    /// Many frames decode to their messages, whatever the chunking.
    #[test]
    fn any_chunking_decodes_the_same(gens in messages(), cuts in cuts()) {
        let stream: Vec<u8> = gens.iter().flat_map(Gen::frame).collect();
        let want: Vec<Message> = gens.iter().map(Gen::message).collect();
        let (msgs, end) = decode(&stream, &positions(&cuts, stream.len()));
        prop_assert_eq!(end, Ok(()));
        prop_assert_eq!(msgs, want);
    }

    /// A stream cut anywhere yields the frames wholly before the cut, no error until
    /// `finish`, and `Truncated` there unless the cut is between frames.
    #[test]
    fn a_cut_stream_yields_the_frames_before_it(
        gens in messages(),
        cuts in cuts(),
        at in any::<prop::sample::Index>(),
    ) {
        let frames: Vec<Vec<u8>> = gens.iter().map(Gen::frame).collect();
        let stream = frames.concat();
        let cut = at.index(stream.len());
        let mut ends = Vec::new();
        let mut sum = 0;
        for f in &frames {
            sum += f.len();
            ends.push(sum);
        }
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        let boundary = cut == 0 || ends.contains(&cut);
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let mut from = 0;
        for p in positions(&cuts, cut) {
            prop_assert_eq!(d.push(&stream[from..p], &mut out), Ok(()));
            from = p;
        }
        prop_assert_eq!(d.push(&stream[from..cut], &mut out), Ok(()));
        let want: Vec<Message> = gens[..whole].iter().map(Gen::message).collect();
        prop_assert_eq!(out, want);
        let end = d.finish();
        if boundary {
            prop_assert_eq!(end, Ok(()));
        } else {
            let matched = matches!(end, Err(Error::Truncated { .. }));
            prop_assert!(matched, "{:?}", end);
        }
    }

    /// A flipped bit in a frame's prelude CRC or message CRC is that CRC's error; the frames
    /// before it are yielded.
    #[test]
    fn a_flipped_crc_bit_is_the_crc_error(
        gens in messages(),
        which in any::<prop::sample::Index>(),
        bit in 0usize..32,
        in_prelude in any::<bool>(),
        cuts in cuts(),
    ) {
        let frames: Vec<Vec<u8>> = gens.iter().map(Gen::frame).collect();
        let k = which.index(frames.len());
        let start: usize = frames[..k].iter().map(Vec::len).sum();
        let crc_at = if in_prelude { start + 8 } else { start + frames[k].len() - 4 };
        let mut stream = frames.concat();
        stream[crc_at + bit / 8] ^= 1 << (bit % 8);
        let (msgs, end) = decode(&stream, &positions(&cuts, stream.len()));
        let want: Vec<Message> = gens[..k].iter().map(Gen::message).collect();
        prop_assert_eq!(msgs, want);
        let matched = if in_prelude {
            matches!(end, Err(Error::PreludeCrc { .. }))
        } else {
            matches!(end, Err(Error::MessageCrc { .. }))
        };
        prop_assert!(matched, "{:?}", end);
    }

    /// Random bytes, in random chunks, never panic; a poisoned decoder stays poisoned.
    #[test]
    fn random_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        cuts in cuts(),
    ) {
        let (_, end) = decode(&bytes, &positions(&cuts, bytes.len()));
        let _ = end;
    }

    /// Random header bytes inside frames whose lengths and CRCs are right (so the crate's
    /// header parser sees them) never panic: a message or `Malformed`.
    #[test]
    fn random_headers_with_good_crcs_never_panic(
        headers in prop::collection::vec(any::<u8>(), 0..300),
        payload in prop::collection::vec(any::<u8>(), 0..64),
        cuts in cuts(),
    ) {
        let frame = spec_frame_raw(&headers, &payload);
        let (msgs, end) = decode(&frame, &positions(&cuts, frame.len()));
        match end {
            Ok(()) => prop_assert_eq!(msgs.len(), 1),
            Err(Error::Malformed(_)) => prop_assert!(msgs.is_empty()),
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
    }

    /// Valid frames with random bytes overwritten never panic, and never yield a message that
    /// was not sent.
    #[test]
    fn corrupted_frames_never_panic(
        gens in messages(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cuts in cuts(),
    ) {
        let mut stream: Vec<u8> = gens.iter().flat_map(Gen::frame).collect();
        for (at, b) in &edits {
            let i = at.index(stream.len());
            stream[i] = *b;
        }
        let want: Vec<Message> = gens.iter().map(Gen::message).collect();
        let (msgs, _) = decode(&stream, &positions(&cuts, stream.len()));
        for m in &msgs {
            prop_assert!(want.contains(m));
        }
    }
}
