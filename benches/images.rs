//! Image pass benchmarks (criterion): the transcode of a 1920×1080 PNG screenshot (~1.5 MB),
//! a transcode-cache hit for it (key hash + lookup), and the whole pipeline on a 20-screenshot
//! Anthropic session turn with a warm cache.
//!
//! Run: `cargo bench --bench images`
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

#[path = "../tests/images_fixtures/mod.rs"]
mod images_fixtures;

use std::hint::black_box;
use std::time::Duration;

use cachekeeper::config::ImagesConfig;
use cachekeeper::dialect::Dialect;
use cachekeeper::images::cache::{key, TranscodeCache};
use cachekeeper::images::codec::{transcode, Mode, Target};
use cachekeeper::rewrite::{rewrite_request, RewriteContext};
use criterion::{criterion_group, criterion_main, Criterion};
use images_fixtures::*;

fn bench(c: &mut Criterion) {
    let cfg = ImagesConfig::default();
    let shot = b64(&png(&screenshot(1920, 1080, 100, 1)));
    let target = Target {
        max_side: cfg.max_dimension,
        max_len: cfg.embed_target_bytes,
        data_url: false,
        mode: Mode::Downscale,
    };
    let cache = TranscodeCache::new(cfg.transcode_cache_bytes);
    let k = key("bench", &target, &shot);
    cache.get_or_compute(k, || transcode(&shot, &target));

    let mut group = c.benchmark_group("images");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("transcode_1920x1080_png", |b| {
        b.iter(|| transcode(black_box(&shot), &target).unwrap())
    });
    group.bench_function("cache_hit_1920x1080_png", |b| {
        b.iter(|| {
            let k = key("bench", &target, black_box(&shot));
            cache.get(&k).unwrap()
        })
    });

    let shots: Vec<String> = (0..20u64)
        .map(|t| a_image("image/png", &b64(&png(&screenshot(1920, 1080, 100 + t, 1)))))
        .collect();
    let body = anthropic_body(&[], &shots);
    let ctx = RewriteContext {
        transcodes: Some((&cache).into()),
        credential_scope: "bench",
        ..RewriteContext::new(Dialect::Anthropic, &cfg)
    };
    let warm = rewrite_request(&ctx, &body).unwrap();
    assert_eq!(warm.report.images.downscaled, 20);
    group.bench_function("pipeline_20_screenshots_warm", |b| {
        b.iter(|| rewrite_request(&ctx, black_box(&body)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
