//! The response tee's cost: decoding (when compressed) plus event-stream framing of a copy of
//! the response, per MB of event stream — first with a sink that does nothing with the events
//! (`tee_sse_1mb`: the wire layer alone), then with the Anthropic response observer that reads
//! usage and the turn from every event (`observer_sse_1mb`: what a proxied response costs).
//!
//! Body: a ~1 MB Anthropic Messages stream (`message_start`, then text `content_block_delta`
//! events, a `ping` and a comment line now and then, `message_delta`, `message_stop`), fed in
//! 4 KiB chunks as the client would receive it:
//! - `plain`: no `content-encoding`;
//! - `gzip`: `content-encoding: gzip` (the tee decodes its copy first).
//!
//! Throughput is per byte of the decoded event stream in both cases.
//!
//! Run: `cargo bench --bench observe` (small sample sizes: the CI box has 2 cores).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use cachekeeper::dialect::Dialect;
use cachekeeper::response;
use cachekeeper::wire::sse::SseEvent;
use cachekeeper::wire::stream::{BodyObserver, End};
use cachekeeper::wire::tee::{Framing, Sink, SinkError, Tee};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Counts events and their data bytes (so the framing cannot be optimised away).
#[derive(Default)]
struct Count {
    events: u64,
    bytes: u64,
}

impl Sink for Count {
    fn on_event(&mut self, event: &SseEvent<'_>) -> Result<(), SinkError> {
        self.events += 1;
        self.bytes += event.data.len() as u64;
        Ok(())
    }
}

/// An Anthropic-shaped event stream of at least `min_bytes`; returns it and its event count.
fn anthropic_stream(min_bytes: usize) -> (Vec<u8>, u64) {
    let mut s = String::new();
    s.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":11800,\"output_tokens\":2}}}\n\n");
    s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    let mut events = 2;
    let mut i = 0u64;
    while s.len() < min_bytes {
        if i % 50 == 0 {
            s.push_str("event: ping\ndata: {\"type\": \"ping\"}\n\n");
            s.push_str(": OPENROUTER PROCESSING\n\n");
            events += 1;
        }
        s.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\" token {i} of a long answer,\"}}}}\n\n"
        ));
        events += 1;
        i += 1;
    }
    s.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    );
    s.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9000}}\n\n");
    s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    (s.into_bytes(), events + 3)
}

fn chunks(body: &[u8]) -> Vec<Bytes> {
    body.chunks(4096).map(Bytes::copy_from_slice).collect()
}

/// Feed every chunk through a fresh tee; the sink's counts.
fn observe(encoding: Option<&str>, chunks: &[Bytes]) -> Count {
    let mut tee = Tee::new(Framing::EventStream, encoding, Count::default());
    for c in chunks {
        tee.on_data(c);
    }
    tee.on_end(End::Complete);
    assert_eq!(tee.stopped(), None);
    tee.into_sink()
}

/// The same through the Anthropic response observer (usage, text, carriers).
fn observe_dialect(encoding: Option<&str>, chunks: &[Bytes]) -> Option<&'static str> {
    let mut tee = Tee::new(
        Framing::EventStream,
        encoding,
        response::observer(Dialect::Anthropic),
    );
    for c in chunks {
        tee.on_data(c);
    }
    tee.on_end(End::Complete);
    tee.stopped()
}

fn bench(c: &mut Criterion) {
    let (plain, events) = anthropic_stream(1_000_000);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let gzip = gz.finish().unwrap();
    let cases = [
        ("plain", None, chunks(&plain)),
        ("gzip", Some("gzip"), chunks(&gzip)),
    ];

    let mut group = c.benchmark_group("observe");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes(plain.len() as u64));
    for (name, encoding, chunks) in &cases {
        // Check the scenario before timing it.
        assert_eq!(observe(*encoding, chunks).events, events, "{name}");
        group.bench_with_input(
            BenchmarkId::new("tee_sse_1mb", name),
            chunks,
            |b, chunks| b.iter(|| observe(*encoding, black_box(chunks))),
        );
        assert_eq!(observe_dialect(*encoding, chunks), None, "{name}");
        group.bench_with_input(
            BenchmarkId::new("observer_sse_1mb", name),
            chunks,
            |b, chunks| b.iter(|| observe_dialect(*encoding, black_box(chunks))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
