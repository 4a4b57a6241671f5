//! Reactive image recovery through the proxy: a provider that rejects an image gets one retry
//! with the image shrunk / replaced, and a model that sees no images is remembered.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::io::Cursor;
use std::sync::Arc;

use base64::Engine as _;
use common::*;
use serde_json::{json, Value};

/// A noisy RGB PNG of `w`×`h` (deterministic), base64.
fn png_b64(w: u32, h: u32) -> String {
    let mut seed: u32 = 12345;
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        image::Rgb([(x % 256) as u8, (y % 256) as u8, (seed >> 24) as u8])
    });
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    base64::engine::general_purpose::STANDARD.encode(out.into_inner())
}

/// Every Anthropic base64 image's decoded dimensions.
fn image_dims(v: &Value) -> Vec<(u32, u32)> {
    let mut dims = Vec::new();
    for m in v["messages"].as_array().unwrap() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "image" {
                let data = b["source"]["data"].as_str().unwrap();
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap();
                let img = image::load_from_memory(&bytes).unwrap();
                dims.push((img.width(), img.height()));
            }
        }
    }
    dims
}

fn config(mock: &Mock, state: &std::path::Path) -> String {
    format!(
        "[state]\npath = {:?}\n\n[[routes]]\nname = \"a\"\nprefix = \"/a\"\nupstream = \"{}\"\nprovider = \"anthropic\"\n",
        state.display().to_string(),
        mock.url()
    )
}

fn upload_request(model: &str, b64: &str) -> String {
    json!({"model": model, "max_tokens": 10, "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "what is in this photo?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
        ]}
    ]})
    .to_string()
}

const OK: &str = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"model":"m","stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}"#;

#[tokio::test]
async fn a_dimension_rejection_shrinks_to_the_stated_cap_and_retries_once() {
    let handler: Handler = Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        if image_dims(&v).iter().any(|&(w, h)| w.max(h) > 2000) {
            json_response(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content.1.image.source.base64.data: At least one of the image dimensions exceed max allowed size for many-image requests: 2000 pixels"}}"#,
            )
        } else {
            json_response(200, OK)
        }
    });
    let mock = start_mock(handler).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"))).await;
    let body = upload_request("claude-sonnet-4-5", &png_b64(2400, 1200));
    let (status, headers, _) = send(
        &client(),
        &proxy.url("/a/v1/messages"),
        &[("x-api-key", "k")],
        body,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2);
    let first: Value = serde_json::from_slice(&mock.requests.lock().unwrap()[0].body).unwrap();
    assert_eq!(image_dims(&first), vec![(2400, 1200)]);
    let retried: Value = serde_json::from_slice(&mock.last().body).unwrap();
    let dims = image_dims(&retried);
    assert_eq!(dims.len(), 1);
    assert!(dims[0].0 <= 2000 && dims[0].1 <= 2000, "{dims:?}");
    assert_eq!(
        retried["messages"][0]["content"][0]["text"],
        "what is in this photo?"
    );
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains("retried_without=image:too_large"), "{h}");
    proxy.stop().await;
}

#[tokio::test]
async fn a_model_that_sees_no_images_is_remembered() {
    let handler: Handler = Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let has_image = v["messages"].as_array().unwrap().iter().any(|m| {
            m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|b| b["type"] == "image")
        });
        if has_image {
            json_response(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support image input."}}"#,
            )
        } else {
            json_response(200, OK)
        }
    });
    let mock = start_mock(handler).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s.db");
    let proxy = start_proxy(&config(&mock, &state)).await;
    let body = upload_request("text-only-model", &png_b64(64, 64));
    let (status, _, _) = send(
        &client(),
        &proxy.url("/a/v1/messages"),
        &[("x-api-key", "k")],
        body.clone(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2);
    let retried: Value = serde_json::from_slice(&mock.last().body).unwrap();
    let blocks = retried["messages"][0]["content"].as_array().unwrap();
    assert_eq!(blocks[0]["text"], "what is in this photo?");
    assert_eq!(blocks[1]["type"], "text");
    assert_eq!(blocks[1]["text"], cachekeeper::texts::IMAGES_NOT_SUPPORTED);

    // Next request: replaced up front, no 400 — also after a restart.
    send(
        &client(),
        &proxy.url("/a/v1/messages"),
        &[("x-api-key", "k")],
        body.clone(),
    )
    .await;
    assert_eq!(mock.count(), 3);
    proxy.stop().await;
    let proxy = start_proxy(&config(&mock, &state)).await;
    let (status, _, _) = send(
        &client(),
        &proxy.url("/a/v1/messages"),
        &[("x-api-key", "k")],
        body,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 4);
    proxy.stop().await;
}
