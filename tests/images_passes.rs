//! Image passes 1–4 on real image bytes, through `rewrite_request`, on every dialect:
//! golden outputs, repairs, repeat cap, bad input, idempotence, the transcode cache, and the
//! reactive-recovery rebuild.
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
use cachekeeper::images::recovery::{classify_image_rejection, ImageRejection};
use cachekeeper::rewrite::{rewrite_request, RewriteContext, RewriteOutcome};
use cachekeeper::texts;
use image::{DynamicImage, ImageFormat};
use images_fixtures::*;

fn ctx<'a>(
    dialect: Dialect,
    images: &'a ImagesConfig,
    cache: Option<&'a TranscodeCache>,
) -> RewriteContext<'a> {
    RewriteContext {
        transcodes: cache.map(Into::into),
        credential_scope: "test",
        ..RewriteContext::new(dialect, images)
    }
}

fn run(dialect: Dialect, images: &ImagesConfig, body: &[u8]) -> RewriteOutcome {
    rewrite_request(&ctx(dialect, images, None), body).unwrap()
}

/// The retry's rebuild, as the server does it: the whole pipeline again on the original body
/// with the rejection's recovery applied.
fn rebuild_for_rejection(
    c: &RewriteContext<'_>,
    body: &[u8],
    rejection: &ImageRejection,
) -> Result<RewriteOutcome, cachekeeper::dialect::ParseError> {
    let c = RewriteContext {
        image_recovery: Some(rejection.kind),
        ..*c
    };
    rewrite_request(&c, body)
}

/// The 1920×1080 golden screenshot (flat UI, 47 KB PNG) and its pinned input hash.
fn golden_png() -> Vec<u8> {
    png(&screenshot(1920, 1080, 7, 0))
}
const GOLDEN_INPUT_SHA: &str = "57609796b168f74252c28fd0cea2c9cb71528288276bbc47e179f057d645e0ea";
/// The JPEG every dialect forwards for it (bare base64 and data-URL budgets give the same
/// bytes here: the first quality step fits both).
const GOLDEN_OUTPUT_SHA: &str = "e9a64915749f5737aff6c99afed0c07bd1c1de12b57654ce89fad8dda3588929";

fn assert_downscaled_jpeg(mime: &str, bytes: &[u8]) -> (u32, u32) {
    assert_eq!(mime, "image/jpeg");
    let img = image::load_from_memory_with_format(bytes, ImageFormat::Jpeg).unwrap();
    (img.width(), img.height())
}

#[test]
fn golden_every_dialect() {
    let png = golden_png();
    assert_eq!(sha(&png), GOLDEN_INPUT_SHA, "fixture generator changed");
    let data = b64(&png);
    let url = format!("data:image/png;base64,{data}");
    let cfg = ImagesConfig::default();
    let cache = TranscodeCache::new(64 << 20);
    let note = texts::downscale_note((1920, 1080), (1568, 882));
    let cases: Vec<(Dialect, Vec<u8>)> = vec![
        (
            Dialect::Anthropic,
            anthropic_body(&[], &[a_image("image/png", &data)]),
        ),
        (Dialect::Openai, chat_body(None, std::slice::from_ref(&url))),
        (
            Dialect::OpenaiResponses,
            responses_body(None, std::slice::from_ref(&url)),
        ),
        (
            Dialect::Gemini,
            gemini_body(None, &[("image/png".to_owned(), data.clone())], true),
        ),
    ];
    for (dialect, body) in cases {
        let out = rewrite_request(&ctx(dialect, &cfg, Some(&cache)), &body).unwrap();
        let new = out.body.clone().expect("downscaled");
        let images = images_in(&new);
        assert!(!images.is_empty(), "{dialect:?}");
        for (mime, bytes) in &images {
            assert_eq!(
                assert_downscaled_jpeg(mime, bytes),
                (1568, 882),
                "{dialect:?}"
            );
            assert_eq!(
                sha(bytes),
                GOLDEN_OUTPUT_SHA,
                "{dialect:?}: codec output changed"
            );
        }
        // One note per downscaled image, right after it.
        let notes = texts_in(&new).into_iter().filter(|t| *t == note).count();
        assert_eq!(notes, images.len(), "{dialect:?}");
        assert_eq!(out.report.images.downscaled, images.len(), "{dialect:?}");
        // Without the cache: the same bytes.
        assert_eq!(run(dialect, &cfg, &body).body, out.body, "{dialect:?}");
        // Idempotent.
        assert_eq!(run(dialect, &cfg, &new).body, None, "{dialect:?}");
    }
    let stats = cache.stats();
    assert_eq!(
        stats.misses, 2,
        "one transcode per target (base64 and data URL)"
    );
    assert!(stats.hits >= 2);
}

#[test]
fn golden_note_position_anthropic() {
    let data = b64(&golden_png());
    let body = anthropic_body(&[], &[a_image("image/png", &data)]);
    let out = run(Dialect::Anthropic, &ImagesConfig::default(), &body);
    let v: serde_json::Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
    let content = &v["messages"][2]["content"][0]["content"];
    assert_eq!(content[0]["text"], "screen 0");
    assert_eq!(content[1]["type"], "image");
    assert_eq!(content[1]["source"]["media_type"], "image/jpeg");
    assert_eq!(content[2]["type"], "text");
    assert!(content[2]["text"]
        .as_str()
        .unwrap()
        .contains("1920x1080 to 1568x882"));
    assert_eq!(content.as_array().unwrap().len(), 3);
}

#[test]
fn small_images_are_byte_identical() {
    let small = png(&screenshot(800, 600, 3, 0));
    let data = b64(&small);
    let url = format!("data:image/png;base64,{data}");
    let cfg = ImagesConfig::default();
    for (dialect, body) in [
        (
            Dialect::Anthropic,
            anthropic_body(
                &[a_image("image/png", &data)],
                &[a_image("image/png", &data)],
            ),
        ),
        (
            Dialect::Openai,
            chat_body(Some(&url), std::slice::from_ref(&url)),
        ),
        (
            Dialect::OpenaiResponses,
            responses_body(Some(&url), std::slice::from_ref(&url)),
        ),
        (
            Dialect::Gemini,
            gemini_body(
                Some(("image/png", &data)),
                &[("image/png".to_owned(), data.clone())],
                true,
            ),
        ),
    ] {
        let out = run(dialect, &cfg, &body);
        assert_eq!(out.body, None, "{dialect:?}: {:?}", out.report.reasons);
        assert!(out.report.images.seen >= 2);
    }
}

#[test]
fn uploads_are_not_downscaled() {
    let data = b64(&golden_png());
    let body = anthropic_body(&[a_image("image/png", &data)], &[]);
    assert_eq!(
        run(Dialect::Anthropic, &ImagesConfig::default(), &body).body,
        None
    );
}

#[test]
fn media_type_from_magic_bytes_keeps_the_bytes() {
    let jpeg = encode(
        &DynamicImage::ImageRgb8(screenshot(64, 48, 1, 2)),
        ImageFormat::Jpeg,
    );
    let data = b64(&jpeg);
    let cfg = ImagesConfig::default();
    // `IMAGE/JPEG`: Anthropic's media_type enum is case-sensitive (a fresh-user test's B8:
    // it went upstream as is).
    for declared in [
        "image/png",
        "image/jpg",
        "",
        "image",
        "IMAGE/JPEG",
        "Image/Jpeg",
    ] {
        let body = anthropic_body(&[a_image(declared, &data)], &[a_image(declared, &data)]);
        let out = run(Dialect::Anthropic, &cfg, &body);
        let new = out.body.clone().unwrap();
        for (mime, bytes) in images_in(&new) {
            assert_eq!(mime, "image/jpeg");
            assert_eq!(bytes, jpeg, "bytes untouched");
        }
        assert_eq!(out.report.images.repaired, 2);
        assert!(
            out.report.reasons[0].contains("messages[0].content[1]"),
            "{:?}",
            out.report.reasons
        );
        assert_eq!(run(Dialect::Anthropic, &cfg, &new).body, None);
        // Only the media type string changed.
        assert_eq!(
            new.len() + 2 * declared.len(),
            body.len() + 2 * "image/jpeg".len()
        );
    }
    // Data URLs: the header only.
    for header in [
        "data:image/png;base64,",
        "data:image;base64,",
        "data:image/jpg;base64,",
    ] {
        let url = format!("{header}{data}");
        let body = chat_body(Some(&url), std::slice::from_ref(&url));
        let out = run(Dialect::Openai, &cfg, &body);
        let new = out.body.unwrap();
        for (mime, bytes) in images_in(&new) {
            assert_eq!(
                (mime.as_str(), bytes.as_slice()),
                ("image/jpeg", jpeg.as_slice())
            );
        }
    }
    // Gemini too.
    let body = gemini_body(Some(("image/png", &data)), &[], false);
    let new = run(Dialect::Gemini, &cfg, &body).body.unwrap();
    assert_eq!(images_in(&new)[0].0, "image/jpeg");
}

#[test]
fn rejected_formats_are_converted_or_replaced() {
    let cfg = ImagesConfig::default();
    let shot = DynamicImage::ImageRgb8(screenshot(120, 80, 5, 2));
    let bmp = encode(&shot, ImageFormat::Bmp);
    let tiff = encode(&shot, ImageFormat::Tiff);
    let heic = ftyp(b"heic", &[b"mif1", b"heic"]);
    let avif = ftyp(b"avif", &[b"mif1", b"avif"]);
    let svg = b"<?xml version=\"1.0\"?><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"/>".to_vec();
    // BMP and TIFF uploads become PNG with the same pixels.
    for (declared, bytes) in [
        ("image/bmp", &bmp),
        ("image/tiff", &tiff),
        ("image/png", &bmp),
    ] {
        let body = anthropic_body(&[a_image(declared, &b64(bytes))], &[]);
        let out = run(Dialect::Anthropic, &cfg, &body);
        let new = out.body.unwrap();
        let (mime, png_bytes) = &images_in(&new)[0];
        assert_eq!(mime, "image/png");
        let img = image::load_from_memory_with_format(png_bytes, ImageFormat::Png).unwrap();
        assert_eq!(img.to_rgb8(), shot.to_rgb8());
        assert_eq!(out.report.images.repaired, 1);
        assert_eq!(run(Dialect::Anthropic, &cfg, &new).body, None);
    }
    // Undecodable here: one fixed text naming the format; the rest of the message survives.
    for (bytes, text) in [
        (&heic, texts::UNSUPPORTED_HEIC),
        (&avif, texts::UNSUPPORTED_AVIF),
        (&svg, texts::UNSUPPORTED_SVG),
    ] {
        let body = anthropic_body(&[a_image("image/jpeg", &b64(bytes))], &[]);
        let out = run(Dialect::Anthropic, &cfg, &body);
        let new = out.body.unwrap();
        assert!(images_in(&new).is_empty());
        assert!(texts_in(&new).contains(&text.to_owned()));
        assert!(texts_in(&new).contains(&"Fix this page".to_owned()));
        assert_eq!(out.report.images.replaced, 1);
    }
    // Gemini takes HEIC as it is.
    let body = gemini_body(Some(("image/heic", &b64(&heic))), &[], false);
    assert_eq!(run(Dialect::Gemini, &cfg, &body).body, None);
    let body = chat_body(Some(&format!("data:image/heic;base64,{}", b64(&heic))), &[]);
    let new = run(Dialect::Openai, &cfg, &body).body.unwrap();
    assert!(texts_in(&new).contains(&texts::UNSUPPORTED_HEIC.to_owned()));
}

#[test]
fn hard_limits_shrink_just_enough() {
    let cfg = ImagesConfig::default();
    // 8100 px wide upload on Anthropic: to 8000 px, still PNG.
    let wide = png(&screenshot(8100, 40, 9, 0));
    let body = anthropic_body(&[a_image("image/png", &b64(&wide))], &[]);
    let out = run(Dialect::Anthropic, &cfg, &body);
    let new = out.body.unwrap();
    let (mime, bytes) = &images_in(&new)[0];
    assert_eq!(mime, "image/png");
    let img = image::load_from_memory(bytes).unwrap();
    assert_eq!((img.width(), img.height()), (8000, 40));
    // OpenAI has no side limit: untouched.
    let url = format!("data:image/png;base64,{}", b64(&wide));
    assert_eq!(
        run(Dialect::Openai, &cfg, &chat_body(Some(&url), &[])).body,
        None
    );
    // Over max_image_bytes: shrunk under it.
    let cfg = ImagesConfig {
        max_image_bytes: 100_000,
        ..ImagesConfig::default()
    };
    let noisy = png(&screenshot(600, 400, 2, 6));
    assert!(b64(&noisy).len() > 100_000);
    let body = anthropic_body(&[a_image("image/png", &b64(&noisy))], &[]);
    let out = run(Dialect::Anthropic, &cfg, &body);
    let new = out.body.unwrap();
    let (mime, _) = &images_in(&new)[0];
    assert_eq!(mime, "image/jpeg");
    let v: serde_json::Value = serde_json::from_slice(&new).unwrap();
    let len = v["messages"][0]["content"][1]["source"]["data"]
        .as_str()
        .unwrap()
        .len();
    assert!(len <= 100_000, "{len}");
    assert_eq!(run(Dialect::Anthropic, &cfg, &new).body, None);
}

/// The Converse API takes at most 3.75 MB of image bytes per image (`ImageSource.bytes`, sent
/// as base64): an upload between 3.75 MB and 5 MB is shrunk under it even on a route whose
/// `max_image_bytes` allows far more (the tighter of the two holds). The failing input: the
/// wire used Anthropic's rules, with no size cap of their own, and passed it as sent.
#[test]
fn a_converse_image_over_3_75_mb_is_shrunk_under_it() {
    let cfg = ImagesConfig {
        max_image_bytes: 20_000_000,
        ..ImagesConfig::default()
    };
    let noisy = png(&screenshot(1300, 1100, 4, 120));
    assert!(
        (3_750_000..5_000_000).contains(&noisy.len()),
        "{}",
        noisy.len()
    );
    let upload = [("image/png".to_owned(), b64(&noisy))];
    let body = converse_body(&upload, &[]);
    let out = run(Dialect::Converse, &cfg, &body);
    assert_eq!(out.report.images.repaired, 1, "{:?}", out.report.reasons);
    let new: serde_json::Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
    let image = &new["messages"][0]["content"][1]["image"];
    let sent = unb64(image["source"]["bytes"].as_str().unwrap());
    assert!(sent.len() <= 3_750_000, "{}", sent.len());
    assert_eq!(image["format"], "jpeg");
    // Under the cap: as sent; Anthropic's wire keeps `max_image_bytes` alone.
    let small = [(
        "image/png".to_owned(),
        b64(&png(&screenshot(600, 400, 2, 6))),
    )];
    assert_eq!(
        run(Dialect::Converse, &cfg, &converse_body(&small, &[])).body,
        None
    );
    let a = anthropic_body(&[a_image("image/png", &b64(&noisy))], &[]);
    assert_eq!(run(Dialect::Anthropic, &cfg, &a).body, None);
}

#[test]
fn a_flat_banner_downscaled_for_gemini_is_never_a_larger_jpeg() {
    // The failing input: a 9000×300 flat-colour PNG (a wide banner) in a Gemini tool result
    // came out as a JPEG 2.3× the PNG's bytes.
    let cfg = ImagesConfig::default();
    let src = png(&banner(9000, 300));
    let body = gemini_body(None, &[("image/png".to_owned(), b64(&src))], false);
    let out = run(Dialect::Gemini, &cfg, &body);
    assert_eq!(out.report.images.downscaled, 1);
    let new = out.body.clone().unwrap();
    let images = images_in(&new);
    assert_eq!(images.len(), 1);
    let (mime, bytes) = &images[0];
    assert_eq!(mime, "image/png");
    let img = image::load_from_memory_with_format(bytes, ImageFormat::Png).unwrap();
    assert_eq!((img.width(), img.height()), (1568, 52));
    assert!(bytes.len() < src.len(), "{} vs {}", bytes.len(), src.len());
    // Deterministic, and a second run changes nothing.
    assert_eq!(run(Dialect::Gemini, &cfg, &body).body, out.body);
    assert_eq!(run(Dialect::Gemini, &cfg, &new).body, None);
}

#[test]
fn an_agent_image_over_the_downscale_bound_is_left_unless_the_provider_would_reject_it() {
    // 16,020,000 px (over the 16,000,000-pixel downscale bound), flat, small in bytes.
    let cfg = ImagesConfig::default();
    let src = png(&banner(20_000, 801));
    let data = b64(&src);
    assert!((data.len() as u64) < cfg.max_image_bytes);
    // Gemini has no side limit: over max_dimension only, so forwarded as sent, with a reason.
    let body = gemini_body(None, &[("image/png".to_owned(), data.clone())], false);
    let out = run(Dialect::Gemini, &cfg, &body);
    assert_eq!(out.body, None);
    assert_eq!(
        (out.report.images.downscaled, out.report.images.failed_open),
        (0, 0)
    );
    assert!(
        out.report.reasons.iter().any(|r| r
            == "left image contents[2].parts[0].functionResponse.parts[0] as sent: 16020000 px \
                are over the 16000000-pixel downscale bound (within the gemini profile's \
                limits, so not repaired)"),
        "{:?}",
        out.report.reasons
    );
    // Anthropic rejects a side over 8000 px: repaired (the repair bound is 100,000,000 px) to
    // 8000 px, as a repair does (PNG, the smallest change), not downscaled to 1568.
    let body = anthropic_body(&[], &[a_image("image/png", &data)]);
    let out = run(Dialect::Anthropic, &cfg, &body);
    assert_eq!(
        (out.report.images.repaired, out.report.images.downscaled),
        (1, 0)
    );
    let new = out.body.unwrap();
    let (mime, bytes) = &images_in(&new)[0];
    assert_eq!(mime, "image/png");
    let img = image::load_from_memory(bytes).unwrap();
    assert_eq!((img.width(), img.height()), (8000, 320));
}

#[test]
fn many_image_rule_after_eviction() {
    // 21 uploads (floor case: eviction keeps the newest 3 screenshots) and one upload at
    // 2400 px: the request still carries > 20 images, so that upload goes to 2000 px.
    let cfg = ImagesConfig::default();
    let small = b64(&png(&screenshot(100, 80, 1, 0)));
    let big = b64(&png(&screenshot(2400, 300, 2, 0)));
    let mut uploads: Vec<String> = (0..20).map(|_| a_image("image/png", &small)).collect();
    uploads.push(a_image("image/png", &big));
    let shots: Vec<String> = (0..5).map(|_| a_image("image/png", &small)).collect();
    let body = anthropic_body(&uploads, &shots);
    let out = run(Dialect::Anthropic, &cfg, &body);
    let new = out.body.unwrap();
    let sizes: Vec<(u32, u32)> = images_in(&new)
        .iter()
        .map(|(_, b)| {
            let i = image::load_from_memory(b).unwrap();
            (i.width(), i.height())
        })
        .collect();
    assert!(
        sizes.iter().all(|(w, h)| *w <= 2000 && *h <= 2000),
        "{sizes:?}"
    );
    assert!(sizes.contains(&(2000, 250)));
    assert_eq!(run(Dialect::Anthropic, &cfg, &new).body, None);
}

#[test]
fn repeat_cap_replaces_only_the_newest() {
    let cfg = ImagesConfig {
        max_calls_per_image: 2,
        ..ImagesConfig::default()
    };
    let a = b64(&png(&screenshot(100, 80, 1, 0)));
    let b = b64(&png(&screenshot(100, 80, 2, 0)));
    let shots: Vec<String> = [&a, &b, &a, &a, &b, &a]
        .iter()
        .map(|d| a_image("image/png", d))
        .collect();
    let body = anthropic_body(&[a_image("image/png", &a)], &shots);
    let out = run(Dialect::Anthropic, &cfg, &body);
    let new = out.body.clone().unwrap();
    assert_eq!(out.report.images.repeat_capped, 2);
    let capped = texts::repeat_cap(2);
    let ts = texts_in(&new);
    assert_eq!(ts.iter().filter(|t| **t == capped).count(), 2);
    // The upload is not counted; the 3rd and 4th `a` among agent images are replaced.
    assert_eq!(images_in(&new).len(), 5);
    let v: serde_json::Value = serde_json::from_slice(&new).unwrap();
    assert_eq!(
        v["messages"][8]["content"][0]["content"][1]["text"],
        capped.as_str()
    );
    assert_eq!(
        v["messages"][12]["content"][0]["content"][1]["text"],
        capped.as_str()
    );
    assert_eq!(
        v["messages"][6]["content"][0]["content"][1]["type"],
        "image"
    );
    assert_eq!(run(Dialect::Anthropic, &cfg, &new).body, None);
    // 0 = unlimited.
    assert_eq!(
        run(Dialect::Anthropic, &ImagesConfig::default(), &body).body,
        None
    );
}

#[test]
fn bad_input_fails_open_per_image() {
    let cfg = ImagesConfig::default();
    let good = png(&screenshot(1920, 1080, 4, 0));
    let truncated = good[..good.len() / 2].to_vec();
    let bomb = bomb_png(100_000, 100_000);
    let gif_header = b"GIF89a\x10\x27\x10\x27\x00\x00\x00".to_vec();
    let cases: Vec<String> = vec![
        "!!!not base64!!!".to_owned(),
        b64(&truncated),
        b64(b"\x00\x01\x02 unknown format bytes"),
        b64(&bomb),
        String::new(),
    ];
    // A GIF header claiming 10000 px: declared right, undecodable: left alone.
    let body = anthropic_body(&[], &[a_image("image/gif", &b64(&gif_header))]);
    assert_eq!(run(Dialect::Anthropic, &cfg, &body).body, None);
    for data in &cases {
        for dialect in [Dialect::Anthropic, Dialect::Gemini] {
            let body = match dialect {
                Dialect::Anthropic => {
                    anthropic_body(&[a_image("image/png", data)], &[a_image("image/png", data)])
                }
                _ => gemini_body(
                    Some(("image/png", data)),
                    &[("image/png".to_owned(), data.clone())],
                    false,
                ),
            };
            let out = run(dialect, &cfg, &body);
            assert_eq!(
                out.body,
                None,
                "{dialect:?} {}: {:?}",
                &data[..data.len().min(20)],
                out.report.reasons
            );
        }
        let url = format!("data:image/png;base64,{data}");
        let body = chat_body(Some(&url), std::slice::from_ref(&url));
        assert_eq!(run(Dialect::Openai, &cfg, &body).body, None);
    }
    // A broken image next to a good one: the good one is still downscaled.
    let body = anthropic_body(
        &[],
        &[
            a_image("image/png", &b64(&bomb)),
            a_image("image/png", &b64(&good)),
        ],
    );
    let out = run(Dialect::Anthropic, &cfg, &body);
    assert_eq!(out.report.images.downscaled, 1);
    assert_eq!(out.report.images.failed_open, 1);
    let imgs = images_in(&out.body.unwrap());
    assert_eq!(imgs[0].1, bomb);
    assert_eq!(imgs[1].0, "image/jpeg");
}

#[test]
fn alpha_is_flattened_onto_white() {
    let cfg = ImagesConfig {
        max_dimension: 100,
        ..ImagesConfig::default()
    };
    let rgba = encode(&DynamicImage::ImageRgba8(rgba(200, 200)), ImageFormat::Png);
    let body = anthropic_body(&[], &[a_image("image/png", &b64(&rgba))]);
    let new = run(Dialect::Anthropic, &cfg, &body).body.unwrap();
    let (_, jpeg) = &images_in(&new)[0];
    let img = image::load_from_memory(jpeg).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (100, 100));
    let p = img.get_pixel(10, 10).0;
    assert!(p.iter().all(|c| *c > 240), "{p:?}");
}

#[test]
fn property_rewriting_twice_changes_nothing() {
    let mut rng = Rng(0x1A6E_5EED);
    let pool: Vec<(String, Vec<u8>)> = vec![
        ("image/png".into(), png(&screenshot(1700, 300, 1, 0))),
        ("image/png".into(), png(&screenshot(300, 200, 2, 0))),
        (
            "image/png".into(),
            encode(
                &DynamicImage::ImageRgb8(screenshot(90, 60, 3, 1)),
                ImageFormat::Jpeg,
            ),
        ),
        (
            "image/jpeg".into(),
            encode(
                &DynamicImage::ImageRgb8(screenshot(90, 60, 4, 1)),
                ImageFormat::Bmp,
            ),
        ),
        (
            "image/gif".into(),
            encode(
                &DynamicImage::ImageRgb8(screenshot(90, 60, 5, 0)),
                ImageFormat::Gif,
            ),
        ),
        (
            "image/webp".into(),
            encode(&DynamicImage::ImageRgba8(rgba(90, 60)), ImageFormat::WebP),
        ),
        ("image/jpeg".into(), ftyp(b"heic", &[b"heic"])),
        ("image/png".into(), b"garbage".to_vec()),
    ];
    let cache = TranscodeCache::new(64 << 20);
    let mut rewritten = 0;
    for round in 0..40 {
        let cfg = ImagesConfig {
            max_calls_per_image: rng.below(3) as u32,
            max_blocks: [20, 4, 8][rng.below(3) as usize],
            max_blocks_small: [100, 8][rng.below(2) as usize],
            evict_batch: 1 + rng.below(4) as usize,
            ..ImagesConfig::default()
        };
        let pick = |rng: &mut Rng| {
            let (mime, bytes) = &pool[rng.below(pool.len() as u64) as usize];
            (mime.clone(), b64(bytes))
        };
        let n_up = rng.below(3) as usize;
        let n_shot = rng.below(10) as usize;
        let ups: Vec<(String, String)> = (0..n_up).map(|_| pick(&mut rng)).collect();
        let shots: Vec<(String, String)> = (0..n_shot).map(|_| pick(&mut rng)).collect();
        let dialect = [
            Dialect::Anthropic,
            Dialect::Openai,
            Dialect::OpenaiResponses,
            Dialect::Gemini,
            Dialect::Converse,
        ][round % 5];
        let url = |(m, d): &(String, String)| format!("data:{m};base64,{d}");
        let body = match dialect {
            Dialect::Anthropic => anthropic_body(
                &ups.iter().map(|(m, d)| a_image(m, d)).collect::<Vec<_>>(),
                &shots.iter().map(|(m, d)| a_image(m, d)).collect::<Vec<_>>(),
            ),
            Dialect::Openai => chat_body(
                ups.first().map(url).as_deref(),
                &shots.iter().map(url).collect::<Vec<_>>(),
            ),
            Dialect::OpenaiResponses => responses_body(
                ups.first().map(url).as_deref(),
                &shots.iter().map(url).collect::<Vec<_>>(),
            ),
            Dialect::Gemini => gemini_body(
                ups.first().map(|(m, d)| (m.as_str(), d.as_str())),
                &shots,
                rng.chance(50),
            ),
            Dialect::Converse => converse_body(&ups, &shots),
        };
        let c = ctx(dialect, &cfg, Some(&cache));
        let first = rewrite_request(&c, &body).unwrap();
        let again = rewrite_request(&c, &body).unwrap();
        assert_eq!(first.body, again.body, "deterministic");
        assert_eq!(first.report, again.report);
        let Some(new) = first.body else { continue };
        rewritten += 1;
        serde_json::from_slice::<serde_json::Value>(&new).unwrap();
        let second = rewrite_request(&c, &new).unwrap();
        assert_eq!(
            second.body.as_deref().map(String::from_utf8_lossy),
            None,
            "round {round} {dialect:?}: second pass changed the body: {:?}",
            second.report.reasons
        );
    }
    assert!(rewritten > 20, "only {rewritten} rewritten");
}

#[test]
fn recovery_rebuilds() {
    let cfg = ImagesConfig::default();
    let big = b64(&png(&screenshot(2400, 300, 2, 0)));
    let small = b64(&png(&screenshot(100, 80, 1, 0)));
    let body = anthropic_body(
        &[a_image("image/png", &big)],
        &[a_image("image/png", &small)],
    );
    let c = ctx(Dialect::Anthropic, &cfg, None);
    // Many-image rule stated by the provider: every image to 2000 px.
    let err = br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content.1.image.source.base64.data: At least one of the image dimensions exceed max allowed size for many-image requests: 2000 pixels"}}"#;
    let rejection = classify_image_rejection(400, err).unwrap();
    let out = rebuild_for_rejection(&c, &body, &rejection).unwrap();
    let imgs = images_in(&out.body.unwrap());
    let first = image::load_from_memory(&imgs[0].1).unwrap();
    assert_eq!((first.width(), first.height()), (2000, 250));
    // A model that cannot see images: every image becomes the placeholder.
    let rejection =
        classify_image_rejection(404, b"No endpoints found that support image input").unwrap();
    let out = rebuild_for_rejection(&c, &body, &rejection).unwrap();
    let new = out.body.unwrap();
    assert!(images_in(&new).is_empty());
    let placeholders = texts_in(&new)
        .iter()
        .filter(|t| *t == texts::IMAGES_NOT_SUPPORTED)
        .count();
    assert_eq!(placeholders, 2);
    let v: serde_json::Value = serde_json::from_slice(&new).unwrap();
    assert_eq!(v["messages"][2]["content"][0]["tool_use_id"], "toolu_0");
    // Corrupt: images that do not decode are replaced; good ones kept.
    let body = anthropic_body(
        &[a_image("image/png", &b64(&bomb_png(10, 10)))],
        &[a_image("image/png", &small)],
    );
    let rejection = classify_image_rejection(400, b"Failed to decode image").unwrap();
    let new = rebuild_for_rejection(&c, &body, &rejection)
        .unwrap()
        .body
        .unwrap();
    assert_eq!(images_in(&new).len(), 1);
    assert!(texts_in(&new).contains(&texts::CORRUPT_IMAGE.to_owned()));
    // Nested Gemini images are removed from functionResponse.parts; the text goes next to it.
    let body = gemini_body(None, &[("image/png".to_owned(), small.clone())], false);
    let rejection = classify_image_rejection(400, b"model does not support image input").unwrap();
    let c = ctx(Dialect::Gemini, &cfg, None);
    let new = rebuild_for_rejection(&c, &body, &rejection)
        .unwrap()
        .body
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&new).unwrap();
    let parts = &v["contents"][2]["parts"];
    assert_eq!(parts[0]["functionResponse"]["parts"], serde_json::json!([]));
    assert_eq!(parts[1]["text"], texts::IMAGES_NOT_SUPPORTED);
}

/// The official `google-genai` Python SDK sends `inlineData.data` in URL-safe base64 (`-`,
/// `_`). Found by testing: every image pass skipped such images, so a PNG labelled
/// `image/jpeg` went upstream unrepaired.
#[test]
fn gemini_url_safe_base64_is_read() {
    use base64::engine::general_purpose::URL_SAFE;
    use base64::Engine as _;
    let cfg = ImagesConfig::default();
    // A real PNG labelled image/jpeg: the media type is repaired, the data string untouched.
    let png_bytes = png(&screenshot(320, 200, 3, 2));
    let url_safe = URL_SAFE.encode(&png_bytes);
    assert!(url_safe.contains('-') && url_safe.contains('_'));
    let body = gemini_body(Some(("image/jpeg", &url_safe)), &[], false);
    let out = run(Dialect::Gemini, &cfg, &body);
    let new = out.body.expect("the media type is repaired");
    let expected = String::from_utf8(body.clone()).unwrap().replacen(
        "\"mimeType\":\"image/jpeg\"",
        "\"mimeType\":\"image/png\"",
        1,
    );
    assert_eq!(String::from_utf8(new).unwrap(), expected);
    assert_eq!(out.report.images.repaired, 1);
    // A 1920x1080 agent screenshot in URL-safe base64 is downscaled (the output is standard
    // base64, as every provider documents).
    let shot = URL_SAFE.encode(golden_png());
    assert!(shot.contains('-') || shot.contains('_'));
    let body = gemini_body(None, &[("image/png".to_owned(), shot)], false);
    let out = run(Dialect::Gemini, &cfg, &body);
    assert_eq!(out.report.images.downscaled, 1);
    let images = images_in(&out.body.expect("downscaled"));
    assert_eq!(images.len(), 1);
    assert_eq!(
        assert_downscaled_jpeg(&images[0].0, &images[0].1),
        (1568, 882)
    );
    assert_eq!(sha(&images[0].1), GOLDEN_OUTPUT_SHA);
}
