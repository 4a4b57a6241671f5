//! Property tests (proptest) of the response side: the server-sent-events framer (through the
//! public tee, `cachekeeper::wire::tee::Tee`, as the proxy drives it) and the per-dialect
//! response observers (`cachekeeper::response::observer`).
//!
//! - Framing: a generated event stream (any line ending, comments, `id` lines, a BOM, field
//!   values with or without the optional space) frames to exactly the events it was made of,
//!   and any byte stream frames to the same events, skipped count and truncation flag whatever
//!   the chunk boundaries, also through `content-encoding: gzip` and with a small event cap.
//! - Observers: the recorded provider streams and bodies of `tests/fixtures/responses`, with
//!   JSON values replaced by values of any type, and arbitrary bytes, never panic, and every
//!   observer call gives the same result whatever the chunk boundaries.
//!
//! The case count and the seed are fixed (see `config`); `PROPTEST_CASES` /
//! `PROPTEST_RNG_SEED` explore further when run by hand.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::io::Write;

use bytes::Bytes;
use cachekeeper::dialect::Dialect;
use cachekeeper::response::{self, ResponseSink};
use cachekeeper::wire::sse::SseEvent;
use cachekeeper::wire::stream::{BodyObserver, End};
use cachekeeper::wire::tee::{Framing, Limits, Sink, SinkError, Tee};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::Value;

/// Cases per property (fixed, so CI's run time is known).
const CASES: u32 = 256;

/// As in `properties_request.rs`: [`CASES`] cases unless `PROPTEST_CASES` is set, a fixed
/// seed unless `PROPTEST_RNG_SEED` is set, no regression files.
fn config() -> Config {
    let env = Config::default();
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let rng_seed = match env.rng_seed {
        RngSeed::Random => RngSeed::Fixed(0x5EED_0013),
        fixed => fixed,
    };
    Config {
        cases,
        rng_seed,
        failure_persistence: None,
        ..env
    }
}

/// One dispatched event, owned.
type Ev = (Option<String>, Vec<u8>);

/// Records every event it is fed; with an inner observer, also what it answered.
#[derive(Default)]
struct Recorder {
    events: Vec<Ev>,
    inner: Option<ResponseSink>,
    /// The inner observer's result for each event / body (`Err` text or `Ok`).
    results: Vec<Result<(), String>>,
    json: Option<Vec<u8>>,
    ended: Option<End>,
}

impl Recorder {
    fn observing(d: Dialect) -> Self {
        Self {
            inner: Some(response::observer(d)),
            ..Self::default()
        }
    }
}

impl Sink for Recorder {
    fn on_event(&mut self, e: &SseEvent<'_>) -> Result<(), SinkError> {
        self.events
            .push((e.event.map(str::to_owned), e.data.to_vec()));
        if let Some(s) = &mut self.inner {
            let r = s.on_event(e);
            self.results.push(r.clone().map_err(|e| e.0));
        }
        // Keep framing whatever the observer said: the property compares every event.
        Ok(())
    }
    fn on_json(&mut self, body: &[u8]) -> Result<(), SinkError> {
        self.json = Some(body.to_vec());
        if let Some(s) = &mut self.inner {
            let r = s.on_json(body);
            self.results.push(r.clone().map_err(|e| e.0));
        }
        Ok(())
    }
    fn on_end(&mut self, end: End) {
        self.ended = Some(end);
        if let Some(s) = &mut self.inner {
            s.on_end(end);
        }
    }
}

/// What one run of the tee produced, to compare across splits.
#[derive(Debug, PartialEq)]
struct Run {
    events: Vec<Ev>,
    results: Vec<Result<(), String>>,
    json: Option<Vec<u8>>,
    stopped: Option<&'static str>,
    truncated: bool,
    skipped: u64,
}

/// Feed `bytes` cut at `cuts` (byte offsets, any order) through a fresh tee.
fn run(
    framing: Framing,
    coding: Option<&str>,
    limits: Limits,
    sink: Recorder,
    bytes: &[u8],
    cuts: &[usize],
) -> Run {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.push(0);
    cuts.push(bytes.len());
    cuts.sort_unstable();
    cuts.dedup();
    let mut tee = Tee::with_limits(framing, coding, sink, limits);
    for w in cuts.windows(2) {
        tee.on_data(&Bytes::copy_from_slice(&bytes[w[0]..w[1]]));
    }
    tee.on_end(End::Complete);
    let stopped = tee.stopped();
    let truncated = tee.truncated_event();
    let skipped = tee.skipped_events();
    let sink = tee.into_sink();
    Run {
        events: sink.events,
        results: sink.results,
        json: sink.json,
        stopped,
        truncated,
        skipped,
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

// ---------------------------------------------------------------------------------------
// Generated event streams with a known framing.
// ---------------------------------------------------------------------------------------

/// A field value: any characters but line breaks.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[ -~]{0,24}",
        2 => prop::collection::vec(any::<char>(), 0..12).prop_map(|c| c
            .into_iter()
            .filter(|c| *c != '\n' && *c != '\r')
            .collect()),
        1 => Just("{\"type\":\"ping\"}".to_owned()),
        1 => Just(String::new()),
    ]
}

#[derive(Debug, Clone)]
enum Line {
    Data(String, bool),
    Event(String),
    Comment(String),
    Id(String),
    Other(String),
}

#[derive(Debug, Clone)]
struct Stream {
    events: Vec<Vec<Line>>,
    newline: &'static str,
    bom: bool,
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        5 => (value(), any::<bool>()).prop_map(|(v, s)| Line::Data(v, s)),
        2 => "[a-z_.]{0,20}".prop_map(Line::Event),
        1 => value().prop_map(Line::Comment),
        1 => "[0-9]{0,4}".prop_map(Line::Id),
        1 => "[a-z]{1,6}".prop_map(Line::Other),
    ]
}

fn stream() -> impl Strategy<Value = Stream> {
    (
        prop::collection::vec(prop::collection::vec(line(), 0..6), 0..10),
        prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        any::<bool>(),
    )
        .prop_map(|(events, newline, bom)| Stream {
            events,
            newline,
            bom,
        })
}

impl Stream {
    fn bytes(&self) -> Vec<u8> {
        let mut s = String::new();
        if self.bom {
            s.push('\u{feff}');
        }
        for ev in &self.events {
            for l in ev {
                match l {
                    Line::Data(v, true) => s.push_str(&format!("data: {v}")),
                    // Without the optional space, a value that starts with one loses it.
                    Line::Data(v, false) => s.push_str(&format!("data:{v}")),
                    Line::Event(v) => s.push_str(&format!("event: {v}")),
                    Line::Comment(v) => s.push_str(&format!(":{v}")),
                    Line::Id(v) => s.push_str(&format!("id: {v}")),
                    Line::Other(name) => s.push_str(name),
                }
                s.push_str(self.newline);
            }
            s.push_str(self.newline);
        }
        s.into_bytes()
    }

    /// The events the standard's interpretation gives.
    fn expected(&self) -> Vec<Ev> {
        let mut out = Vec::new();
        for ev in &self.events {
            let mut name: Option<String> = None;
            let mut data: Option<Vec<u8>> = None;
            let push = |data: &mut Option<Vec<u8>>, v: &str| match data {
                Some(d) => {
                    d.push(b'\n');
                    d.extend_from_slice(v.as_bytes());
                }
                None => *data = Some(v.as_bytes().to_vec()),
            };
            for l in ev {
                match l {
                    Line::Data(v, true) => push(&mut data, v),
                    // Without the optional space, a value that starts with one loses it.
                    Line::Data(v, false) => push(&mut data, v.strip_prefix(' ').unwrap_or(v)),
                    Line::Event(v) => name = Some(v.clone()),
                    // A line without a colon is a field named by the whole line, empty value.
                    Line::Other(n) if n == "data" => push(&mut data, ""),
                    Line::Other(n) if n == "event" => name = Some(String::new()),
                    _ => {}
                }
            }
            if let Some(d) = data {
                out.push((name.filter(|n| !n.is_empty()), d));
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Recorded provider responses, mutated.
// ---------------------------------------------------------------------------------------

/// The dialect of a fixture under `tests/fixtures/responses`, by its name.
fn fixture_dialect(name: &str) -> Option<Dialect> {
    // `.bin`: AWS event-stream frames (Converse streams), read by the core's own tests
    // through the event-stream decoder, not the SSE framer this property drives.
    if name.ends_with("_request.json")
        || name.ends_with("_next_request.json")
        || name.ends_with(".bin")
    {
        return None;
    }
    Some(match name {
        n if n.starts_with("anthropic_") => Dialect::Anthropic,
        n if n.starts_with("converse_") => Dialect::Converse,
        n if n.starts_with("responses_") => Dialect::OpenaiResponses,
        "gemini_openai_compat.sse" => Dialect::Openai,
        n if n.starts_with("gemini_") => Dialect::Gemini,
        _ => Dialect::Openai,
    })
}

/// Every response fixture: (dialect, is an event stream, bytes).
fn fixtures() -> &'static [(Dialect, bool, Vec<u8>)] {
    static ALL: std::sync::OnceLock<Vec<(Dialect, bool, Vec<u8>)>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/responses");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
            .into_iter()
            .filter_map(|n| {
                let d = fixture_dialect(&n)?;
                let bytes = std::fs::read(format!("{dir}/{n}")).unwrap();
                Some((d, n.ends_with(".sse"), bytes))
            })
            .collect()
    })
}

/// Any small JSON value.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e20f64..1e20).prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Replace the value at a path chosen by `path` (child indices, modulo each container's size)
/// with `with`.
fn mutate(v: &mut Value, path: &[usize], with: Value) {
    let Some((&first, rest)) = path.split_first() else {
        *v = with;
        return;
    };
    let child = match v {
        Value::Array(a) if !a.is_empty() => {
            let n = a.len();
            &mut a[first % n]
        }
        Value::Object(o) if !o.is_empty() => {
            let n = o.len();
            o.values_mut().nth(first % n).unwrap()
        }
        _ => {
            *v = with;
            return;
        }
    };
    if rest.is_empty() || first % 4 == 0 {
        *child = with;
    } else {
        mutate(child, rest, with);
    }
}

/// An SSE body's events, each data that is JSON mutated by `muts[i % n]`, written back as
/// one `data:` line per event.
fn mutate_stream(bytes: &[u8], muts: &[(usize, Vec<usize>, Value)]) -> Vec<u8> {
    let events = run(
        Framing::EventStream,
        None,
        Limits::default(),
        Recorder::default(),
        bytes,
        &[],
    )
    .events;
    let mut out = Vec::new();
    for (i, (name, data)) in events.into_iter().enumerate() {
        let data = match serde_json::from_slice::<Value>(&data) {
            Ok(mut v) => {
                for (at, path, with) in muts {
                    if at % events_len_hint() == i % events_len_hint() {
                        mutate(&mut v, path, with.clone());
                    }
                }
                serde_json::to_vec(&v).unwrap()
            }
            Err(_) => data,
        };
        if let Some(n) = name {
            out.extend_from_slice(format!("event: {n}\n").as_bytes());
        }
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&data);
        out.extend_from_slice(b"\n\n");
    }
    out
}

/// Events are picked for mutation by index modulo this.
fn events_len_hint() -> usize {
    7
}

fn mutation() -> impl Strategy<Value = (usize, Vec<usize>, Value)> {
    (
        0..7usize,
        prop::collection::vec(0..16usize, 0..6),
        any_json(),
    )
}

fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<usize>(), 0..12)
}

fn dialects() -> impl Strategy<Value = Dialect> {
    prop_oneof![
        Just(Dialect::Anthropic),
        Just(Dialect::Openai),
        Just(Dialect::OpenaiResponses),
        Just(Dialect::Gemini),
        Just(Dialect::Converse),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// A generated stream frames to exactly its events, whatever the chunk boundaries, plain
    /// and gzip-encoded.
    #[test]
    fn framer_matches_the_standard(s in stream(), cuts in cuts()) {
        let bytes = s.bytes();
        let want = s.expected();
        let plain = run(Framing::EventStream, None, Limits::default(), Recorder::default(), &bytes, &cuts);
        prop_assert_eq!(&plain.events, &want);
        prop_assert!(!plain.truncated);
        let gz = gzip(&bytes);
        let decoded = run(Framing::EventStream, Some("gzip"), Limits::default(), Recorder::default(), &gz, &cuts);
        prop_assert_eq!(&decoded.events, &want);
    }

    /// Any bytes frame the same in one chunk as in many, with the default cap and a 16-byte
    /// one (events skipped the same), and a stream cut anywhere frames a prefix of the events.
    #[test]
    fn framer_split_invariant(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            stream().prop_map(|s| s.bytes()),
            prop::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b':'), Just(b'd'), Just(b' ')], 0..64),
        ],
        cuts in cuts(),
        cap in prop_oneof![Just(16usize), Just(1usize << 24)],
    ) {
        let limits = Limits { event_bytes: cap, ..Limits::default() };
        let whole = run(Framing::EventStream, None, limits, Recorder::default(), &bytes, &[]);
        let split = run(Framing::EventStream, None, limits, Recorder::default(), &bytes, &cuts);
        prop_assert_eq!(&whole, &split);
        let byte_by_byte: Vec<usize> = (0..bytes.len()).collect();
        let single = run(Framing::EventStream, None, limits, Recorder::default(), &bytes, &byte_by_byte);
        prop_assert_eq!(&whole, &single);
    }

    /// Recorded provider responses with values of the wrong type anywhere: no observer
    /// panics, and each gives the same answers whatever the split.
    #[test]
    fn observers_on_mutated_recordings(
        which in any::<prop::sample::Index>(),
        muts in prop::collection::vec(mutation(), 0..4),
        cuts in cuts(),
        other in dialects(),
    ) {
        let all = fixtures();
        let (dialect, sse, bytes) = &all[which.index(all.len())];
        let (framing, body) = if *sse {
            (Framing::EventStream, mutate_stream(bytes, &muts))
        } else {
            let mut v: Value = serde_json::from_slice(bytes).unwrap();
            for (_, path, with) in &muts {
                mutate(&mut v, path, with.clone());
            }
            (Framing::Json, serde_json::to_vec(&v).unwrap())
        };
        // Its own dialect, and another one (a route configured with the wrong dialect).
        for d in [*dialect, other] {
            let whole = run(framing, None, Limits::default(), Recorder::observing(d), &body, &[]);
            let split = run(framing, None, Limits::default(), Recorder::observing(d), &body, &cuts);
            prop_assert_eq!(&whole, &split);
        }
    }

    /// Arbitrary bytes and arbitrary JSON as events and as bodies, to every observer.
    #[test]
    fn observers_on_arbitrary_input(
        d in dialects(),
        noise in prop::collection::vec(any::<u8>(), 0..128),
        events in prop::collection::vec((proptest::option::of("[a-z_.]{1,30}"), any_json()), 0..8),
        cuts in cuts(),
    ) {
        let mut stream = Vec::new();
        for (name, v) in &events {
            if let Some(n) = name {
                stream.extend_from_slice(format!("event: {n}\n").as_bytes());
            }
            stream.extend_from_slice(format!("data: {v}\n\n").as_bytes());
        }
        for body in [&noise, &stream] {
            let whole = run(Framing::EventStream, None, Limits::default(), Recorder::observing(d), body, &[]);
            let split = run(Framing::EventStream, None, Limits::default(), Recorder::observing(d), body, &cuts);
            prop_assert_eq!(&whole, &split);
        }
        for (_, v) in &events {
            let body = serde_json::to_vec(v).unwrap();
            run(Framing::Json, None, Limits::default(), Recorder::observing(d), &body, &cuts);
        }
        run(Framing::Json, None, Limits::default(), Recorder::observing(d), &noise, &cuts);
    }
}

/// The fixtures are all read (a rename would silently shrink the property above).
#[test]
fn every_fixture_is_used() {
    let all = fixtures();
    assert!(all.len() >= 15, "{} response fixtures", all.len());
    assert!(all.iter().any(|(d, sse, _)| *d == Dialect::Gemini && *sse));
    assert!(all
        .iter()
        .any(|(d, sse, _)| *d == Dialect::OpenaiResponses && !*sse));
}
