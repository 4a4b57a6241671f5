//! The rewrite-path matrix (criterion): bodies of 20 KB, 1 MB, 5 MB and 24 MB carrying 0, 20,
//! 21 and 100 base64 tool-result images, in each dialect (Anthropic Messages, OpenAI Chat,
//! OpenAI Responses, Gemini), with nothing to transcode: every image is within the route's
//! limits (headers of 2400 × 1350 px, `max_dimension` 2560, `embed_target_bytes` 4 MiB), so
//! the passes parse, count and — above the ceiling of 20 (the images are over 2000 px) —
//! evict. Beside them: a memcpy of each body (`Vec` allocation + copy, what any rewrite that
//! returns new bytes pays at least) and a body of 500,000 small text blocks (15 MB).
//!
//! Time: criterion's median per case (throughput in bytes, so criterion also prints MB/s).
//! Memory: a counting global allocator ([`peak_alloc`]) measures the peak of live heap bytes
//! during one run of the passes over each body, printed per MB of body before the timings
//! (the body itself is allocated before the measurement and not counted).
//!
//! Run (about 3 minutes on 2 cores; filters select rows, e.g. `-- 24mb_21img`):
//! `cargo bench --bench matrix`; memory table only: `cargo bench --bench matrix -- --list`.
#![allow(clippy::disallowed_macros, reason = "a benchmark prints its table")]

use std::hint::black_box;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cachekeeper::config::ImagesConfig;
use cachekeeper::dialect::Dialect;
use cachekeeper::rewrite::{rewrite_request, RewriteContext};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use peak_alloc::PeakAlloc;

#[global_allocator]
static PEAK: PeakAlloc = PeakAlloc;

/// Body sizes of the matrix, bytes.
const SIZES: [(&str, usize); 4] = [
    ("20kb", 20_000),
    ("1mb", 1_000_000),
    ("5mb", 5_000_000),
    ("24mb", 24_000_000),
];
/// Image counts of the matrix: none, at the strict ceiling (20), one over it, the many-image
/// ceiling (100).
const IMAGES: [usize; 4] = [0, 20, 21, 100];
/// Largest base64 image, bytes (a 2400 × 1350 screenshot as PNG is about this).
const MAX_IMAGE: usize = 1_100_000;

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

/// A PNG header of 2400×1350 followed by noise: `b64_len` bytes of base64.
fn screenshot(seed: u64, b64_len: usize) -> String {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend_from_slice(&13u32.to_be_bytes());
    v.extend_from_slice(b"IHDR");
    v.extend_from_slice(&2400u32.to_be_bytes());
    v.extend_from_slice(&1350u32.to_be_bytes());
    v.extend_from_slice(&[8, 6, 0, 0, 0]);
    let raw = (b64_len / 4 * 3).saturating_sub(v.len());
    v.extend_from_slice(&noise(seed, raw));
    STANDARD.encode(v)
}

/// `n` bytes of conversation text (ASCII, no escapes).
fn filler(n: usize) -> String {
    "lorem ipsum dolor sit amet ".repeat(n / 27 + 1)[..n].to_owned()
}

/// One body of about `size` bytes in `dialect`: a user turn of text, then `images` tool
/// results of one image each.
fn body(dialect: Dialect, size: usize, images: usize) -> Vec<u8> {
    let per_image = (size * 19 / 20)
        .checked_div(images)
        .unwrap_or(0)
        .min(MAX_IMAGE);
    let text = filler(size.saturating_sub(per_image * images + 300 * images + 200));
    let shots: Vec<String> = (0..images)
        .map(|t| screenshot(t as u64 + 1, per_image))
        .collect();
    let mut items = Vec::new();
    let joined = match dialect {
        Dialect::Anthropic => {
            items.push(format!(
                r#"{{"role":"user","content":[{{"type":"text","text":"{text}"}}]}}"#
            ));
            for (t, s) in shots.iter().enumerate() {
                items.push(format!(
                    r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"toolu_{t}","name":"computer","input":{{"action":"screenshot"}}}}]}}"#
                ));
                items.push(format!(
                    r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{t}","content":[{{"type":"text","text":"screen {t}"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{s}"}}}}]}}]}}"#
                ));
            }
            format!(
                r#"{{"model":"claude-sonnet-4-5","max_tokens":4096,"stream":true,"system":"You drive a computer.","messages":[{}]}}"#,
                items.join(",")
            )
        }
        Dialect::Openai => {
            items.push(format!(r#"{{"role":"user","content":"{text}"}}"#));
            for (t, s) in shots.iter().enumerate() {
                items.push(format!(
                    r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{t}","type":"function","function":{{"name":"shot","arguments":"{{}}"}}}}]}}"#
                ));
                items.push(format!(
                    r#"{{"role":"tool","tool_call_id":"call_{t}","content":[{{"type":"text","text":"screen {t}"}},{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{s}","detail":"high"}}}}]}}"#
                ));
            }
            format!(
                r#"{{"model":"gpt-5","stream":true,"messages":[{}]}}"#,
                items.join(",")
            )
        }
        Dialect::OpenaiResponses => {
            items.push(format!(
                r#"{{"role":"user","content":[{{"type":"input_text","text":"{text}"}}]}}"#
            ));
            for (t, s) in shots.iter().enumerate() {
                items.push(format!(
                    r#"{{"type":"function_call","call_id":"call_{t}","name":"shot","arguments":"{{}}"}}"#
                ));
                items.push(format!(
                    r#"{{"type":"function_call_output","call_id":"call_{t}","output":[{{"type":"input_text","text":"screen {t}"}},{{"type":"input_image","image_url":"data:image/png;base64,{s}","detail":"high"}}]}}"#
                ));
            }
            format!(r#"{{"model":"gpt-5","input":[{}]}}"#, items.join(","))
        }
        Dialect::Gemini => {
            items.push(format!(
                r#"{{"role":"user","parts":[{{"text":"{text}"}}]}}"#
            ));
            for (t, s) in shots.iter().enumerate() {
                items.push(format!(
                    r#"{{"role":"model","parts":[{{"functionCall":{{"name":"shot","args":{{}},"id":"fc_{t}"}}}}]}}"#
                ));
                items.push(format!(
                    r#"{{"role":"user","parts":[{{"functionResponse":{{"name":"shot","id":"fc_{t}","response":{{"output":"ok"}},"parts":[{{"inlineData":{{"mimeType":"image/png","data":"{s}"}}}}]}}}}]}}"#
                ));
            }
            format!(
                r#"{{"contents":[{}],"generationConfig":{{"temperature":0}}}}"#,
                items.join(",")
            )
        }
        Dialect::Converse => {
            items.push(format!(
                r#"{{"role":"user","content":[{{"text":"{text}"}}]}}"#
            ));
            for (t, s) in shots.iter().enumerate() {
                items.push(format!(
                    r#"{{"role":"assistant","content":[{{"toolUse":{{"toolUseId":"tooluse_{t}","name":"computer","input":{{"action":"screenshot"}}}}}}]}}"#
                ));
                items.push(format!(
                    r#"{{"role":"user","content":[{{"toolResult":{{"toolUseId":"tooluse_{t}","content":[{{"text":"screen {t}"}},{{"image":{{"format":"png","source":{{"bytes":"{s}"}}}}}}]}}}}]}}"#
                ));
            }
            format!(
                r#"{{"system":[{{"text":"You drive a computer."}}],"inferenceConfig":{{"maxTokens":4096}},"messages":[{}]}}"#,
                items.join(",")
            )
        }
    };
    joined.into_bytes()
}

/// An Anthropic body of 500,000 small text blocks (1,000 user turns of 500 blocks, ~15 MB).
fn many_blocks() -> Vec<u8> {
    let block = r#"{"type":"text","text":"line"}"#;
    let turn = format!(
        r#"{{"role":"user","content":[{}]}}"#,
        vec![block; 500].join(",")
    );
    format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":4096,"messages":[{}]}}"#,
        vec![turn.as_str(); 1000].join(",")
    )
    .into_bytes()
}

const DIALECTS: [(&str, Dialect); 5] = [
    ("anthropic", Dialect::Anthropic),
    ("openai", Dialect::Openai),
    ("responses", Dialect::OpenaiResponses),
    ("gemini", Dialect::Gemini),
    ("converse", Dialect::Converse),
];

/// The route's image settings: 2400 × 1350 screenshots of up to 1.1 MB are within limits.
fn images_config() -> ImagesConfig {
    ImagesConfig {
        max_dimension: 2560,
        embed_target_bytes: 4 * 1024 * 1024,
        ..ImagesConfig::default()
    }
}

/// Peak live heap bytes during one run of the passes over `body`.
fn peak_of(ctx: &RewriteContext<'_>, body: &[u8]) -> usize {
    let base = PEAK.current_usage();
    PEAK.reset_peak_usage();
    let out = rewrite_request(ctx, body);
    let peak = PEAK.peak_usage().saturating_sub(base);
    drop(black_box(out));
    peak
}

fn bench(c: &mut Criterion) {
    let images = images_config();
    let ctx = |dialect| RewriteContext::new(dialect, &images);
    let mut rows: Vec<(String, Dialect, Vec<u8>)> = Vec::new();
    for (dname, dialect) in DIALECTS {
        for (sname, size) in SIZES {
            for n in IMAGES {
                rows.push((
                    format!("{dname}/{sname}_{n}img"),
                    dialect,
                    body(dialect, size, n),
                ));
            }
        }
    }
    rows.push((
        "anthropic/15mb_500k_blocks".to_owned(),
        Dialect::Anthropic,
        many_blocks(),
    ));

    // Check each scenario once, and measure its peak memory.
    println!("| case | body MB | images seen | retired | peak heap MB | peak / body |");
    println!("|---|---|---|---|---|---|");
    for (name, dialect, body) in &rows {
        let out = match rewrite_request(&ctx(*dialect), body) {
            Ok(out) => out,
            Err(e) => panic!("{name}: {e}"),
        };
        let r = &out.report.images;
        assert_eq!(
            r.downscaled + r.repaired + r.failed_open,
            0,
            "{name}: {r:?}"
        );
        let peak = peak_of(&ctx(*dialect), body);
        let mb = body.len() as f64 / 1e6;
        println!(
            "| {name} | {mb:.2} | {} | {} | {:.1} | {:.2} |",
            r.seen,
            r.retired,
            peak as f64 / 1e6,
            peak as f64 / body.len() as f64
        );
    }

    let mut group = c.benchmark_group("matrix");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (name, dialect, body) in &rows {
        let ctx = ctx(*dialect);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("rewrite", name), body, |b, body| {
            b.iter(|| rewrite_request(&ctx, black_box(body)))
        });
    }
    for (sname, size) in SIZES {
        let body = body(Dialect::Anthropic, size, 21);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("memcpy", format!("{sname}_21img")),
            &body,
            |b, body| b.iter(|| black_box(body.as_slice()).to_vec()),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
