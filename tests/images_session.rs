//! A 20-turn Anthropic computer-use session of 1920×1080 screenshots (~1.5 MB PNG each)
//! through `rewrite_request` with one shared transcode cache, as the proxy runs it.
//!
//! Every forwarded agent image is ≤ `embed_target_bytes` and ≤ 1568 px; the forwarded bytes of
//! earlier messages are identical turn to turn (the provider's cached prefix survives); each
//! screenshot is transcoded once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod images_fixtures;

use cachekeeper::config::ImagesConfig;
use cachekeeper::dialect::Dialect;
use cachekeeper::images::cache::TranscodeCache;
use cachekeeper::rewrite::{rewrite_request, RewriteContext};
use image::ImageFormat;
use images_fixtures::*;

const TURNS: usize = 20;

#[test]
fn twenty_turns_of_screenshots() {
    let cfg = ImagesConfig::default();
    let cache = TranscodeCache::new(cfg.transcode_cache_bytes);
    let ctx = RewriteContext {
        transcodes: Some((&cache).into()),
        credential_scope: "session",
        ..RewriteContext::new(Dialect::Anthropic, &cfg)
    };
    let shots: Vec<String> = (0..TURNS as u64)
        .map(|t| {
            let bytes = png(&screenshot(1920, 1080, 100 + t, 1));
            assert!(
                (1_000_000..2_500_000).contains(&bytes.len()),
                "screenshot of {} bytes",
                bytes.len()
            );
            a_image("image/png", &b64(&bytes))
        })
        .collect();
    let mut previous: Option<Vec<u8>> = None;
    let mut third = None;
    for turn in 1..=TURNS {
        let body = anthropic_body(&[], &shots[..turn]);
        let out = rewrite_request(&ctx, &body).unwrap();
        let sent = out.body.clone().unwrap();
        assert_eq!(
            out.report.images.retired, 0,
            "turn {turn}: no eviction under 100 small images"
        );
        assert_eq!(out.report.images.downscaled, turn);
        let v: serde_json::Value = serde_json::from_slice(&sent).unwrap();
        let messages = v["messages"].as_array().unwrap();
        let mut seen = 0;
        for m in messages.iter().skip(2).step_by(2) {
            let content = &m["content"][0]["content"];
            let data = content[1]["source"]["data"].as_str().unwrap();
            assert_eq!(content[1]["source"]["media_type"], "image/jpeg");
            assert!(
                data.len() as u64 <= cfg.embed_target_bytes,
                "turn {turn}: {} B",
                data.len()
            );
            let img = image::load_from_memory_with_format(&unb64(data), ImageFormat::Jpeg).unwrap();
            assert!(img.width().max(img.height()) <= cfg.max_dimension);
            assert!(content[2]["text"]
                .as_str()
                .unwrap()
                .contains("downscaled from 1920x1080"));
            seen += 1;
        }
        assert_eq!(seen, turn);
        // Earlier messages forwarded byte-identically: the previous turn's body minus its
        // closing `]}` is a prefix of this one.
        if let Some(prev) = &previous {
            let head = &prev[..prev.len() - 2];
            assert!(sent.starts_with(head), "turn {turn}: earlier bytes changed");
        }
        // The transcode cache: one miss per new screenshot.
        assert_eq!(cache.stats().misses, turn as u64, "turn {turn}");
        if turn == 3 {
            third = Some(sent.clone());
        }
        previous = Some(sent);
    }
    // A restart (fresh cache) gives the same bytes.
    let fresh = TranscodeCache::new(cfg.transcode_cache_bytes);
    let body = anthropic_body(&[], &shots[..3]);
    let again = rewrite_request(
        &RewriteContext {
            transcodes: Some((&fresh).into()),
            ..ctx
        },
        &body,
    )
    .unwrap();
    assert_eq!(again.body, third);
}
