//! Micro-benchmarks of the request rewrite (batch image eviction) beside a plain
//! `serde_json::Value` parse + serialize of the same body.
//!
//! Bodies:
//! - `24mb_21img`: a ~24 MB Anthropic request, 21 screenshots of ~1.1 MB base64 each
//!   (2400×1350 PNG headers, so the strict 20 applies): 8 carriers retired.
//! - `23mb_20img`: the same with 20 screenshots: nothing to change (`body: None`).
//! - `20kb_text`: a 20 KB request without images.
//!
//! Carrier restore (`restore/…`), on the 21-screenshot body whose assistant turns carried a
//! signed thinking block each, echoed without them (as an agent that drops thinking sends it):
//! - `restore/all_known`: all 21 thinking blocks restored, then the other passes;
//! - `restore/none_known`: the same body, no turn known (every fingerprint computed, nothing
//!   found: a model that has captured turns, but not these);
//! - `restore/off`: the same body without the restore pass (`rewrite_request`).
//!
//! Run: `cargo bench --bench rewrite` (small sample sizes: the CI box has 2 cores).

use std::hint::black_box;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cachekeeper::config::ImagesConfig;
use cachekeeper::dialect::Dialect;
use cachekeeper::provider::ResolvedProvider;
use cachekeeper::rewrite::{
    rewrite_known, rewrite_request, KnownTurns, ReasoningInputs, RewriteContext,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Deterministic filler bytes (xorshift), so base64 looks like real image data.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A PNG header of 2400×1350 followed by `len` noise bytes, base64.
fn screenshot(seed: u64, len: usize) -> String {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend_from_slice(&13u32.to_be_bytes());
    v.extend_from_slice(b"IHDR");
    v.extend_from_slice(&2400u32.to_be_bytes());
    v.extend_from_slice(&1350u32.to_be_bytes());
    v.extend_from_slice(&[8, 6, 0, 0, 0]);
    v.extend_from_slice(&noise(seed, len));
    STANDARD.encode(v)
}

/// An Anthropic body: a system prompt and `text_bytes` of conversation text, then `images`
/// tool results of one ~1.1 MB screenshot each.
fn anthropic_body(images: usize, text_bytes: usize) -> Vec<u8> {
    anthropic_body_thinking(images, text_bytes, false)
}

/// [`anthropic_body`], each tool-use turn led by a signed thinking block when `thinking`.
fn anthropic_body_thinking(images: usize, text_bytes: usize, thinking: bool) -> Vec<u8> {
    let mut messages = Vec::new();
    let filler = "lorem ipsum dolor sit amet ".repeat(text_bytes / 27 / 2 + 1);
    messages.push(format!(
        r#"{{"role":"user","content":[{{"type":"text","text":"{filler}"}}]}}"#
    ));
    messages.push(format!(
        r#"{{"role":"assistant","content":[{{"type":"text","text":"{filler}"}}]}}"#
    ));
    for t in 0..images {
        messages.push(format!(
            r#"{{"role":"assistant","content":[{}{{"type":"tool_use","id":"toolu_{t}","name":"computer","input":{{"action":"screenshot"}}}}]}}"#,
            if thinking {
                format!(
                    r#"{{"type":"thinking","thinking":"Step {t}: take a screenshot to see the screen.","signature":"{}"}},"#,
                    STANDARD.encode(noise(t as u64 + 100, 300))
                )
            } else {
                String::new()
            }
        ));
        messages.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{t}","content":[{{"type":"text","text":"screen {t}"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}}]}}]}}"#,
            screenshot(t as u64 + 1, 825_000)
        ));
    }
    format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":4096,"stream":true,"system":"You drive a computer.","messages":[{}]}}"#,
        messages.join(",")
    )
    .into_bytes()
}

fn value_round_trip(body: &[u8]) -> Vec<u8> {
    let v: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => return Vec::new(),
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

fn bench(c: &mut Criterion) {
    let images = ImagesConfig::default();
    // The proxy's path: a transcode cache that is warm after the first request of a session
    // (criterion's warm-up fills it), so images are hashed and looked up, never re-decoded.
    let cache = cachekeeper::images::cache::TranscodeCache::new(images.transcode_cache_bytes);
    let ctx = RewriteContext {
        transcodes: Some((&cache).into()),
        ..RewriteContext::new(Dialect::Anthropic, &images)
    };
    let bodies = [
        // 21 images > the ceiling of 20: retired down to the low-water mark (10 left).
        ("24mb_21img", anthropic_body(21, 900_000), Some(11)),
        ("23mb_20img", anthropic_body(20, 900_000), None),
        ("20kb_text", anthropic_body(0, 20_000), None),
    ];
    let mut group = c.benchmark_group("rewrite");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, body, retired) in &bodies {
        // Check the scenario before timing it.
        match rewrite_request(&ctx, body) {
            Ok(out) => {
                assert_eq!(out.body.is_some(), retired.is_some(), "{name}");
                assert_eq!(
                    Some(out.report.images.carriers_retired).filter(|n| *n > 0),
                    *retired
                );
            }
            Err(e) => panic!("{name}: {e}"),
        }
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("eviction", name), body, |b, body| {
            b.iter(|| rewrite_request(&ctx, black_box(body)))
        });
        group.bench_with_input(
            BenchmarkId::new("value_parse_serialize", name),
            body,
            |b, body| b.iter(|| value_round_trip(black_box(body))),
        );
    }
    group.finish();

    // Carrier restore on the computer-use body.
    let provider = ResolvedProvider::resolve(None, "api.anthropic.com", None);
    let restore_ctx = RewriteContext {
        reasoning: Some(ReasoningInputs {
            provider: &provider,
            upstream_path: "/v1/messages",
            droppable_params: &[],
            droppable_betas: &[],
            anthropic_beta: None,
            path_model: None,
            verdicts: &(),
            rejected: &(),
        }),
        ..ctx
    };
    let kept = anthropic_body_thinking(21, 900_000, true);
    let dropped = anthropic_body(21, 900_000);
    let known = KnownTurns::from_body(Dialect::Anthropic, &kept);
    assert_eq!(known.len(), 22, "21 tool-use turns and the text turn");
    let none = KnownTurns::from_body(Dialect::Anthropic, b"{}");
    match rewrite_known(&restore_ctx, &known, &dropped) {
        Ok(out) => assert_eq!(out.report.restore.thinking, 21),
        Err(e) => panic!("restore: {e}"),
    }
    let mut group = c.benchmark_group("restore");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes(dropped.len() as u64));
    group.bench_function("all_known", |b| {
        b.iter(|| rewrite_known(&restore_ctx, &known, black_box(&dropped)))
    });
    group.bench_function("none_known", |b| {
        b.iter(|| rewrite_known(&restore_ctx, &none, black_box(&dropped)))
    });
    group.bench_function("off", |b| {
        b.iter(|| rewrite_request(&restore_ctx, black_box(&dropped)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
