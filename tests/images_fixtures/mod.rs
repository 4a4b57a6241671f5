//! Real image fixtures for the image-pass tests, generated from fixed seeds (no binary files in
//! the repository). The golden tests pin the SHA-256 of the generated inputs too, so a change
//! in the generator or the `image` crate's encoders shows up as an input mismatch first.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use image::{DynamicImage, ImageFormat, Rgb, RgbImage, Rgba, RgbaImage};
use sha2::{Digest, Sha256};
use std::io::Cursor;

/// xorshift64*: the fixed-seed generator of every fixture.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A desktop-like screenshot: panels, a title bar, rows of "text" dashes, and per-pixel noise
/// of amplitude `noise` (0 = flat, compresses well; 6 ≈ 1.5 MB as PNG at 1920×1080).
pub fn screenshot(w: u32, h: u32, seed: u64, noise: u8) -> RgbImage {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let bg = [
        200 + rng.below(40) as u8,
        200 + rng.below(40) as u8,
        210 + rng.below(40) as u8,
    ];
    let mut img = RgbImage::from_pixel(w, h, Rgb(bg));
    // Title bar and side panel.
    for y in 0..h.min(32) {
        for x in 0..w {
            img.put_pixel(x, y, Rgb([40, 44, 52]));
        }
    }
    let panel = w / 5;
    for y in 32..h {
        for x in 0..panel {
            img.put_pixel(x, y, Rgb([235, 235, 240]));
        }
    }
    // Text rows: dark dashes.
    let mut y = 48;
    while y + 10 < h {
        let mut x = panel + 16 + rng.below(24) as u32;
        while x + 40 < w {
            let len = 8 + rng.below(48) as u32;
            let shade = 20 + rng.below(60) as u8;
            for yy in y..y + 9 {
                for xx in x..(x + len).min(w) {
                    img.put_pixel(xx, yy, Rgb([shade, shade, shade + 10]));
                }
            }
            x += len + 6 + rng.below(10) as u32;
            if rng.chance(4) {
                break;
            }
        }
        y += 18;
    }
    if noise > 0 {
        let span = u64::from(noise) * 2 + 1;
        for p in img.pixels_mut() {
            let r = rng.next();
            for c in 0..3 {
                let d = ((r >> (c * 8)) % span) as i16 - i16::from(noise);
                p[c] = (i16::from(p[c]) + d).clamp(0, 255) as u8;
            }
        }
    }
    img
}

/// A small RGBA image with a transparent corner (for alpha flattening).
/// A wide banner in flat colours (bands and blocks, no gradients): compresses far better as PNG
/// than as JPEG.
pub fn banner(w: u32, h: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        let c = match (x / 700, y / 60) {
            (0, _) => [250, 200, 20],
            (n, r) if (n + r) % 3 == 0 => [20, 40, 110],
            (n, _) if n % 2 == 0 => [240, 240, 245],
            _ => [200, 30, 40],
        };
        Rgb(c)
    })
}

pub fn rgba(w: u32, h: u32) -> RgbaImage {
    RgbaImage::from_fn(w, h, |x, y| {
        if x < w / 2 && y < h / 2 {
            Rgba([0, 0, 0, 0])
        } else {
            Rgba([(x % 256) as u8, (y % 256) as u8, 128, 255])
        }
    })
}

pub fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

pub fn png(img: &RgbImage) -> Vec<u8> {
    encode(&DynamicImage::ImageRgb8(img.clone()), ImageFormat::Png)
}

pub fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

pub fn unb64(s: &str) -> Vec<u8> {
    STANDARD.decode(s).unwrap()
}

pub fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A PNG whose (valid, CRC-checked) IHDR claims `w`×`h`, followed by a tiny IDAT and IEND: a
/// decompression-bomb header.
pub fn bomb_png(w: u32, h: u32) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    let chunk = |v: &mut Vec<u8>, kind: &[u8], data: &[u8]| {
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        v.extend_from_slice(&body);
        v.extend_from_slice(&crc32(&body).to_be_bytes());
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut v, b"IHDR", &ihdr);
    chunk(
        &mut v,
        b"IDAT",
        &[0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut v, b"IEND", &[]);
    v
}

/// An ISO-BMFF `ftyp` header with `major` and `compat` brands (HEIC / HEIF / AVIF sniffing).
pub fn ftyp(major: &[u8; 4], compat: &[&[u8; 4]]) -> Vec<u8> {
    let size = 16 + 4 * compat.len();
    let mut v = (size as u32).to_be_bytes().to_vec();
    v.extend_from_slice(b"ftyp");
    v.extend_from_slice(major);
    v.extend_from_slice(&[0, 0, 0, 0]);
    for c in compat {
        v.extend_from_slice(*c);
    }
    v.extend_from_slice(&[0; 64]);
    v
}

/// An Anthropic image block.
pub fn a_image(media_type: &str, data: &str) -> String {
    format!(
        r#"{{"type":"image","source":{{"type":"base64","media_type":"{media_type}","data":"{data}"}}}}"#
    )
}

/// An Anthropic body: `upload` blocks in the first user turn, then one tool_result per shot.
pub fn anthropic_body(uploads: &[String], shots: &[String]) -> Vec<u8> {
    let mut first = vec![r#"{"type":"text","text":"Fix this page"}"#.to_owned()];
    first.extend(uploads.iter().cloned());
    let mut messages = vec![format!(
        r#"{{"role":"user","content":[{}]}}"#,
        first.join(",")
    )];
    for (t, shot) in shots.iter().enumerate() {
        messages.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"toolu_{t}","name":"computer","input":{{"action":"screenshot"}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{t}","content":[{{"type":"text","text":"screen {t}"}},{shot}]}}]}}"#
        ));
    }
    format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{}]}}"#,
        messages.join(",")
    )
    .into_bytes()
}

/// An OpenAI Chat body: an upload, then per shot an assistant tool call and a tool message
/// whose content holds the image part.
pub fn chat_body(upload: Option<&str>, shots: &[String]) -> Vec<u8> {
    let mut messages = vec![r#"{"role":"system","content":"be brief"}"#.to_owned()];
    let mut first = vec![r#"{"type":"text","text":"Fix this page"}"#.to_owned()];
    if let Some(u) = upload {
        first.push(format!(
            r#"{{"type":"image_url","image_url":{{"url":"{u}"}}}}"#
        ));
    }
    messages.push(format!(
        r#"{{"role":"user","content":[{}]}}"#,
        first.join(",")
    ));
    for (t, url) in shots.iter().enumerate() {
        messages.push(format!(
            r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{t}","type":"function","function":{{"name":"shot","arguments":"{{}}"}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"tool","tool_call_id":"call_{t}","content":[{{"type":"text","text":"screen {t}"}},{{"type":"image_url","image_url":{{"url":"{url}","detail":"high"}}}}]}}"#
        ));
    }
    format!(r#"{{"model":"gpt-5","messages":[{}]}}"#, messages.join(",")).into_bytes()
}

/// An OpenAI Responses body: an upload message, then function_call / function_call_output
/// pairs with the image in the output list.
pub fn responses_body(upload: Option<&str>, shots: &[String]) -> Vec<u8> {
    let mut first = vec![r#"{"type":"input_text","text":"Fix this page"}"#.to_owned()];
    if let Some(u) = upload {
        first.push(format!(
            r#"{{"type":"input_image","image_url":"{u}","detail":"auto"}}"#
        ));
    }
    let mut items = vec![format!(
        r#"{{"role":"user","content":[{}]}}"#,
        first.join(",")
    )];
    for (t, url) in shots.iter().enumerate() {
        items.push(format!(
            r#"{{"type":"function_call","call_id":"call_{t}","name":"shot","arguments":"{{}}"}}"#
        ));
        items.push(format!(
            r#"{{"type":"function_call_output","call_id":"call_{t}","output":[{{"type":"input_text","text":"screen {t}"}},{{"type":"input_image","image_url":"{url}","detail":"high"}}]}}"#
        ));
    }
    format!(r#"{{"model":"gpt-5","input":[{}]}}"#, items.join(",")).into_bytes()
}

/// A Gemini body: an upload, then per shot a functionCall and a functionResponse whose
/// `parts` hold the image, with a second copy of the image as a sibling part when `sibling`.
pub fn gemini_body(
    upload: Option<(&str, &str)>,
    shots: &[(String, String)],
    sibling: bool,
) -> Vec<u8> {
    let mut first = vec![r#"{"text":"Fix this page"}"#.to_owned()];
    if let Some((mime, data)) = upload {
        first.push(format!(
            r#"{{"inlineData":{{"mimeType":"{mime}","data":"{data}"}}}}"#
        ));
    }
    let mut contents = vec![format!(
        r#"{{"role":"user","parts":[{}]}}"#,
        first.join(",")
    )];
    for (t, (mime, data)) in shots.iter().enumerate() {
        contents.push(format!(
            r#"{{"role":"model","parts":[{{"functionCall":{{"name":"shot","args":{{}},"id":"fc_{t}"}}}}]}}"#
        ));
        let blob = format!(r#"{{"inlineData":{{"mimeType":"{mime}","data":"{data}"}}}}"#);
        let extra = if sibling {
            format!(",{blob}")
        } else {
            String::new()
        };
        contents.push(format!(
            r#"{{"role":"user","parts":[{{"functionResponse":{{"name":"shot","id":"fc_{t}","response":{{"output":"ok"}},"parts":[{blob}]}}}}{extra}]}}"#
        ));
    }
    format!(
        r#"{{"contents":[{}],"generationConfig":{{"temperature":0}}}}"#,
        contents.join(",")
    )
    .into_bytes()
}

/// A Bedrock Converse body: uploads (`(media type, base64)`, the format written as its bare
/// name) in the first user turn, then per shot a toolUse and a toolResult holding the image.
pub fn converse_body(uploads: &[(String, String)], shots: &[(String, String)]) -> Vec<u8> {
    let image = |(mime, data): &(String, String)| {
        let format = mime.trim_start_matches("image/");
        format!(r#"{{"image":{{"format":"{format}","source":{{"bytes":"{data}"}}}}}}"#)
    };
    let mut first = vec![r#"{"text":"Fix this page"}"#.to_owned()];
    first.extend(uploads.iter().map(image));
    let mut messages = vec![format!(
        r#"{{"role":"user","content":[{}]}}"#,
        first.join(",")
    )];
    for (t, shot) in shots.iter().enumerate() {
        messages.push(format!(
            r#"{{"role":"assistant","content":[{{"toolUse":{{"toolUseId":"tooluse_{t}","name":"computer","input":{{}}}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"user","content":[{{"toolResult":{{"toolUseId":"tooluse_{t}","content":[{{"text":"screen {t}"}},{}]}}}}]}}"#,
            image(shot)
        ));
    }
    format!(r#"{{"messages":[{}]}}"#, messages.join(",")).into_bytes()
}

/// Every base64 image payload in a body (Anthropic `data`, Gemini `data`, data URLs), with
/// its declared type, in document order.
pub fn images_in(body: &[u8]) -> Vec<(String, Vec<u8>)> {
    fn walk(v: &serde_json::Value, out: &mut Vec<(String, Vec<u8>)>) {
        match v {
            serde_json::Value::Object(o) => {
                let mime = o
                    .get("media_type")
                    .or_else(|| o.get("mimeType"))
                    .and_then(|m| m.as_str());
                if let (Some(m), Some(d)) = (mime, o.get("data").and_then(|d| d.as_str())) {
                    out.push((m.to_owned(), STANDARD.decode(d).unwrap_or_default()));
                }
                for (k, x) in o {
                    if let (true, Some(u)) = (k == "url" || k == "image_url", x.as_str()) {
                        if let Some(rest) = u.strip_prefix("data:") {
                            if let Some((meta, data)) = rest.split_once(',') {
                                out.push((
                                    meta.trim_end_matches(";base64").to_owned(),
                                    STANDARD.decode(data).unwrap_or_default(),
                                ));
                            }
                        }
                    }
                    walk(x, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let mut out = Vec::new();
    walk(&v, &mut out);
    out
}

/// Every text of every text block / part in a body.
pub fn texts_in(body: &[u8]) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(t) = o.get("text").and_then(|t| t.as_str()) {
                    out.push(t.to_owned());
                }
                o.values().for_each(|x| walk(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let mut out = Vec::new();
    walk(&v, &mut out);
    out
}
