//! Property tests (proptest) over every request pass, through the public entry points of
//! `cachekeeper::rewrite` on each dialect (Anthropic Messages, OpenAI Chat, OpenAI Responses,
//! Gemini, Bedrock Converse):
//!
//! - no input panics (realistic bodies, arbitrary JSON, arbitrary bytes, truncated bodies);
//! - valid JSON in gives valid JSON out, and the user's own text survives;
//! - a body with nothing to change, or that is not JSON, is forwarded byte-identical
//!   (`body: None`, or an error the proxy answers by forwarding the original);
//! - the same input gives the same bytes, and applying the passes to their output changes
//!   nothing more (twice == once).
//!
//! Bodies are generated in the providers' own shapes: text, images (small real PNG / JPEG /
//! GIF files made here with the `image` crate, plus corrupt and mislabelled ones and images
//! over the 8000 px side limit), tool calls and results, thinking / reasoning blocks with
//! signatures, `cache_control` markers and Converse `cachePoint` blocks. The case count and the seed are fixed
//! ([`config`]), so CI runs the same cases every time; `PROPTEST_CASES=5000
//! PROPTEST_RNG_SEED=… cargo test --test properties_request` explores further.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;
mod images_fixtures;

use std::sync::OnceLock;

use cachekeeper::caching::{Breakpoints, CacheSettings, CacheTtl, Stabiliser, CACHE_OFF};
use cachekeeper::config::ImagesConfig;
use cachekeeper::dialect::Dialect;
use cachekeeper::provider::ResolvedProvider;
use cachekeeper::rewrite::{
    rewrite_known, rewrite_request, KnownTurns, ReasoningInputs, RewriteContext,
};
use image::{DynamicImage, ImageFormat};
use images_fixtures::{b64, encode, png, screenshot};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{json, Map, Value};

/// Cases per property: fixed, so CI's run time is known (the whole file stays well under a
/// minute on the project's 2-core machine). `PROPTEST_CASES` raises it when run by hand.
const CASES: u32 = 192;

/// The proptest configuration of every property here: [`CASES`] cases (unless
/// `PROPTEST_CASES` is set), a fixed seed (unless `PROPTEST_RNG_SEED` is set), no regression
/// files (a failure found is kept as a named unit test of its input instead).
fn config() -> Config {
    let env = Config::default();
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let rng_seed = match env.rng_seed {
        RngSeed::Random => RngSeed::Fixed(0x5EED_0012),
        fixed => fixed,
    };
    Config {
        cases,
        rng_seed,
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..env
    }
}

// ---------------------------------------------------------------------------------------
// Images: small real files, and the broken ones agents send.
// ---------------------------------------------------------------------------------------

/// One image as a request carries it: the declared media type and the base64 text.
#[derive(Debug, Clone)]
struct Img {
    media: &'static str,
    data: String,
}

/// The image pool, made once: real PNG / JPEG / GIF files (one over the 8000 px side limit,
/// one over a 64 KiB embed target), a mislabelled one, a truncated one and non-base64 text.
fn pool() -> &'static [Img] {
    static POOL: OnceLock<Vec<Img>> = OnceLock::new();
    POOL.get_or_init(|| {
        let small = png(&screenshot(16, 16, 1, 0));
        let shot = png(&screenshot(300, 200, 2, 0));
        let noisy = png(&screenshot(200, 160, 3, 6));
        let wide = png(&screenshot(8100, 2, 4, 0));
        let jpeg = encode(
            &DynamicImage::ImageRgb8(screenshot(40, 30, 5, 2)),
            ImageFormat::Jpeg,
        );
        let gif = encode(
            &DynamicImage::ImageRgba8(images_fixtures::rgba(10, 10)),
            ImageFormat::Gif,
        );
        vec![
            Img {
                media: "image/png",
                data: b64(&small),
            },
            Img {
                media: "image/png",
                data: b64(&shot),
            },
            Img {
                media: "image/png",
                data: b64(&noisy),
            },
            Img {
                media: "image/png",
                data: b64(&wide),
            },
            Img {
                media: "image/jpeg",
                data: b64(&jpeg),
            },
            Img {
                media: "image/gif",
                data: b64(&gif),
            },
            // A PNG labelled as JPEG.
            Img {
                media: "image/jpeg",
                data: b64(&small),
            },
            // A PNG cut after its header.
            Img {
                media: "image/png",
                data: b64(&shot[..40]),
            },
            Img {
                media: "image/png",
                data: "!!not base64!!".to_owned(),
            },
            Img {
                media: "image/webp",
                data: String::new(),
            },
        ]
    })
}

fn img() -> impl Strategy<Value = Img> {
    (0..pool().len()).prop_map(|i| pool()[i].clone())
}

// ---------------------------------------------------------------------------------------
// Text and small JSON.
// ---------------------------------------------------------------------------------------

/// Text as agents send it: words, and now and then quotes, backslashes, control characters,
/// non-ASCII, lone `\u` look-alikes and the Claude Code billing line.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9 .,]{0,40}",
        2 => prop::collection::vec(any::<char>(), 0..16).prop_map(String::from_iter),
        1 => Just("x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;".to_owned()),
        1 => Just("quote \" backslash \\ slash / \\u00e9 \u{e9} \u{1F600} \n\t\r\u{0}".to_owned()),
        1 => Just(String::new()),
    ]
}

/// Any small JSON value (tool inputs, unknown fields).
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn maybe_cache_control(v: &mut Value, marked: bool, ttl: bool) {
    if marked {
        v["cache_control"] = if ttl {
            json!({"type": "ephemeral", "ttl": "1h"})
        } else {
            json!({"type": "ephemeral"})
        };
    }
}

fn signature() -> impl Strategy<Value = String> {
    prop_oneof!["[A-Za-z0-9+/]{8,64}={0,2}", Just(String::new())]
}

fn id() -> impl Strategy<Value = String> {
    "(toolu_|call_|fc_)[a-z0-9]{1,6}"
}

// ---------------------------------------------------------------------------------------
// Anthropic Messages.
// ---------------------------------------------------------------------------------------

fn anthropic_image() -> impl Strategy<Value = Value> {
    (img(), 0..10u8, any::<bool>()).prop_map(|(img, how, marked)| {
        let mut v = match how {
            0 => json!({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}),
            1 => json!({"type": "image", "source": {"type": "file", "file_id": "file_011"}}),
            2 => json!({"type": "image"}),
            _ => json!({"type": "image", "source": {"type": "base64",
                        "media_type": img.media, "data": img.data}}),
        };
        maybe_cache_control(&mut v, marked && how % 3 == 0, false);
        v
    })
}

fn anthropic_text_block() -> impl Strategy<Value = Value> {
    (text(), prop::bool::weighted(0.15), any::<bool>()).prop_map(|(t, marked, ttl)| {
        let mut v = json!({"type": "text", "text": t});
        maybe_cache_control(&mut v, marked, ttl);
        v
    })
}

fn anthropic_user_block() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => anthropic_text_block(),
        3 => anthropic_image(),
        3 => (
            id(),
            prop_oneof![
                text().prop_map(Value::String),
                prop::collection::vec(
                    prop_oneof![anthropic_text_block(), anthropic_image()],
                    0..4
                )
                .prop_map(Value::Array),
            ],
            any::<bool>(),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(id, content, err, marked)| {
                let mut v = json!({"type": "tool_result", "tool_use_id": id, "content": content});
                if err {
                    v["is_error"] = json!(true);
                }
                maybe_cache_control(&mut v, marked, false);
                v
            }),
        1 => any_json().prop_map(|x| json!({"type": "x_unknown_block", "x": x})),
    ]
}

fn anthropic_assistant_block() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => anthropic_text_block(),
        3 => (id(), "[a-z_]{1,12}", any_json())
            .prop_map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input})),
        2 => (text(), signature())
            .prop_map(|(t, s)| json!({"type": "thinking", "thinking": t, "signature": s})),
        1 => signature().prop_map(|d| json!({"type": "redacted_thinking", "data": d})),
    ]
}

fn anthropic_message() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => (prop_oneof![Just("user"), Just("assistant")], text())
            .prop_map(|(r, t)| json!({"role": r, "content": t})),
        3 => prop::collection::vec(anthropic_user_block(), 0..5)
            .prop_map(|c| json!({"role": "user", "content": c})),
        3 => prop::collection::vec(anthropic_assistant_block(), 0..4)
            .prop_map(|c| json!({"role": "assistant", "content": c})),
    ]
}

fn anthropic_body() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(anthropic_message(), 0..14),
        prop_oneof![
            Just("claude-sonnet-4-5"),
            Just("claude-opus-4-1-20250805"),
            Just("claude-3-5-haiku-latest")
        ],
        0..4u8,
        any::<bool>(),
        any::<bool>(),
        proptest::option::weighted(0.1, any_json()),
    )
        .prop_map(|(messages, model, system, tools, thinking, extra)| {
            let mut body = json!({"model": model, "max_tokens": 1024, "messages": messages});
            match system {
                1 => body["system"] = json!("You are a coding agent."),
                2 => {
                    body["system"] = json!([
                        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;"},
                        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
                    ])
                }
                3 => body["system"] = json!([{"type": "text", "text": "Be brief."}]),
                _ => {}
            }
            if tools {
                body["tools"] = json!([{"name": "computer", "description": "Use the computer.",
                    "input_schema": {"type": "object", "properties": {"action": {"type": "string"}}}}]);
            }
            if thinking {
                body["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
                body["stream"] = json!(true);
            }
            if let Some(x) = extra {
                body["x_extra"] = x;
            }
            body
        })
}

// ---------------------------------------------------------------------------------------
// OpenAI Chat Completions.
// ---------------------------------------------------------------------------------------

fn data_url(img: &Img) -> String {
    format!("data:{};base64,{}", img.media, img.data)
}

fn chat_image() -> impl Strategy<Value = Value> {
    (img(), 0..8u8).prop_map(|(img, how)| match how {
        0 => json!({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}),
        1 => json!({"type": "image_url", "image_url": data_url(&img)}),
        2 => json!({"type": "image_url", "image_url": {"url": data_url(&img), "detail": "high"}}),
        _ => json!({"type": "image_url", "image_url": {"url": data_url(&img)}}),
    })
}

fn chat_parts() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => text().prop_map(Value::String),
        3 => prop::collection::vec(
            prop_oneof![
                2 => text().prop_map(|t| json!({"type": "text", "text": t})),
                2 => chat_image(),
            ],
            0..4
        )
        .prop_map(Value::Array),
    ]
}

fn chat_message() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => chat_parts().prop_map(|c| json!({"role": "user", "content": c})),
        2 => (
            proptest::option::of(text()),
            proptest::option::of(text()),
            prop::collection::vec((id(), "[a-z_]{1,10}"), 0..3),
        )
            .prop_map(|(content, reasoning, calls)| {
                let mut m = json!({"role": "assistant", "content": content});
                if let Some(r) = reasoning {
                    m["reasoning_content"] = json!(r);
                }
                if !calls.is_empty() {
                    m["tool_calls"] = calls
                        .into_iter()
                        .map(|(id, name)| json!({"id": id, "type": "function",
                            "function": {"name": name, "arguments": "{}"}}))
                        .collect();
                }
                m
            }),
        2 => (id(), chat_parts())
            .prop_map(|(id, c)| json!({"role": "tool", "tool_call_id": id, "content": c})),
        1 => text().prop_map(|t| json!({"role": "system", "content": t})),
    ]
}

fn chat_body() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(chat_message(), 0..14),
        prop_oneof![
            Just("gpt-4o"),
            Just("deepseek-reasoner"),
            Just("o3"),
            Just("gemini-2.5-pro")
        ],
        any::<bool>(),
        proptest::option::weighted(0.2, any_json()),
    )
        .prop_map(|(messages, model, stream, opts)| {
            let mut body = json!({"model": model, "messages": messages});
            if stream {
                body["stream"] = json!(true);
            }
            if let Some(o) = opts {
                body["stream_options"] = o;
            }
            body
        })
}

// ---------------------------------------------------------------------------------------
// OpenAI Responses.
// ---------------------------------------------------------------------------------------

fn responses_part() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => text().prop_map(|t| json!({"type": "input_text", "text": t})),
        2 => (img(), 0..6u8).prop_map(|(img, how)| match how {
            0 => json!({"type": "input_image", "image_url": "https://example.com/a.png"}),
            1 => json!({"type": "input_image", "file_id": "file_1"}),
            _ => json!({"type": "input_image", "image_url": data_url(&img), "detail": "auto"}),
        }),
    ]
}

fn responses_item() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => prop::collection::vec(responses_part(), 0..4)
            .prop_map(|c| json!({"role": "user", "content": c})),
        1 => text().prop_map(|t| json!({"role": "user", "content": t})),
        1 => text().prop_map(|t| json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": t}]})),
        2 => (id(), "[a-z_]{1,10}")
            .prop_map(|(id, n)| json!({"type": "function_call", "call_id": id, "name": n, "arguments": "{}"})),
        2 => (id(), prop_oneof![
                text().prop_map(Value::String),
                prop::collection::vec(responses_part(), 0..3).prop_map(Value::Array)
            ])
            .prop_map(|(id, o)| json!({"type": "function_call_output", "call_id": id, "output": o})),
        1 => (signature(), text()).prop_map(|(enc, s)| json!({"type": "reasoning", "id": "rs_1",
            "summary": [{"type": "summary_text", "text": s}], "encrypted_content": enc})),
    ]
}

fn responses_body() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            1 => text().prop_map(Value::String),
            4 => prop::collection::vec(responses_item(), 0..12).prop_map(Value::Array),
        ],
        prop_oneof![Just("gpt-5"), Just("o4-mini")],
        any::<bool>(),
    )
        .prop_map(|(input, model, reasoning)| {
            let mut body = json!({"model": model, "input": input, "stream": true});
            if reasoning {
                body["include"] = json!(["reasoning.encrypted_content"]);
                body["reasoning"] = json!({"effort": "medium"});
            }
            body
        })
}

// ---------------------------------------------------------------------------------------
// Gemini.
// ---------------------------------------------------------------------------------------

fn gemini_inline(img: &Img, snake: bool) -> Value {
    if snake {
        json!({"inline_data": {"mime_type": img.media, "data": img.data}})
    } else {
        json!({"inlineData": {"mimeType": img.media, "data": img.data}})
    }
}

fn gemini_part() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => text().prop_map(|t| json!({"text": t})),
        2 => (img(), any::<bool>()).prop_map(|(i, s)| gemini_inline(&i, s)),
        1 => ("[a-z_]{1,10}", any_json(), proptest::option::of(signature())).prop_map(|(n, a, s)| {
            let mut p = json!({"functionCall": {"name": n, "args": a}});
            if let Some(s) = s {
                p["thoughtSignature"] = json!(s);
            }
            p
        }),
        1 => ("[a-z_]{1,10}", prop::collection::vec((img(), any::<bool>()), 0..2)).prop_map(|(n, imgs)| {
            let mut p = json!({"functionResponse": {"name": n, "response": {"output": "ok"}}});
            if !imgs.is_empty() {
                p["functionResponse"]["parts"] =
                    imgs.iter().map(|(i, s)| gemini_inline(i, *s)).collect();
            }
            p
        }),
        1 => (text(), signature()).prop_map(|(t, s)| json!({"text": t, "thought": true, "thoughtSignature": s})),
    ]
}

fn gemini_body() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(
            (
                prop_oneof![Just("user"), Just("model")],
                prop::collection::vec(gemini_part(), 0..4),
            )
                .prop_map(|(r, p)| json!({"role": r, "parts": p})),
            0..12,
        ),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(contents, system, model)| {
            let mut body = json!({"contents": contents,
                "generationConfig": {"thinkingConfig": {"includeThoughts": true}}});
            if system {
                body["systemInstruction"] = json!({"parts": [{"text": "Be brief."}]});
            }
            if model {
                body["model"] = json!("gemini-2.5-flash");
            }
            body
        })
}

// ---------------------------------------------------------------------------------------
// Amazon Bedrock Converse.
// ---------------------------------------------------------------------------------------

/// An image block: base64 bytes with the format as a bare name (a mislabelled one too, as
/// the pool has it), an `s3Location` source, or none.
fn converse_image() -> impl Strategy<Value = Value> {
    (img(), 0..8u8).prop_map(|(img, how)| match how {
        0 => json!({"image": {"format": "png", "source": {"s3Location": {"uri": "s3://b/a.png"}}}}),
        1 => json!({"image": {"format": "png"}}),
        _ => json!({"image": {"format": img.media.trim_start_matches("image/"),
                "source": {"bytes": img.data}}}),
    })
}

fn converse_user_block() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => text().prop_map(|t| json!({"text": t})),
        3 => converse_image(),
        3 => (
            id(),
            prop::collection::vec(
                prop_oneof![
                    text().prop_map(|t| json!({"text": t})),
                    converse_image(),
                    any_json().prop_map(|j| json!({"json": j})),
                ],
                0..4,
            ),
            any::<bool>(),
        )
            .prop_map(|(id, content, err)| {
                let mut v = json!({"toolResult": {"toolUseId": id, "content": content}});
                if err {
                    v["toolResult"]["status"] = json!("error");
                }
                v
            }),
        1 => Just(json!({"cachePoint": {"type": "default"}})),
        1 => any_json().prop_map(|x| json!({"xUnknownBlock": x})),
    ]
}

fn converse_assistant_block() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => text().prop_map(|t| json!({"text": t})),
        3 => (id(), "[a-z_]{1,12}", any_json()).prop_map(|(id, name, input)| {
            json!({"toolUse": {"toolUseId": id, "name": name, "input": input}})
        }),
        2 => (text(), signature()).prop_map(|(t, s)| {
            json!({"reasoningContent": {"reasoningText": {"text": t, "signature": s}}})
        }),
        1 => signature().prop_map(|d| json!({"reasoningContent": {"redactedContent": d}})),
    ]
}

fn converse_body() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(
            prop_oneof![
                prop::collection::vec(converse_user_block(), 0..5)
                    .prop_map(|c| json!({"role": "user", "content": c})),
                prop::collection::vec(converse_assistant_block(), 0..4)
                    .prop_map(|c| json!({"role": "assistant", "content": c})),
            ],
            0..12,
        ),
        0..3u8,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(messages, system, tools, thinking)| {
            let mut body = json!({"messages": messages, "inferenceConfig": {"maxTokens": 1024}});
            match system {
                1 => body["system"] = json!([{"text": "You drive a desktop."}]),
                2 => {
                    body["system"] =
                        json!([{"text": "Be brief."}, {"cachePoint": {"type": "default"}}])
                }
                _ => {}
            }
            if tools {
                body["toolConfig"] = json!({"tools": [{"toolSpec": {"name": "computer",
                    "inputSchema": {"json": {"type": "object"}}}}]});
            }
            if thinking {
                body["additionalModelRequestFields"] =
                    json!({"thinking": {"type": "enabled", "budget_tokens": 2048}});
            }
            body
        })
}

// ---------------------------------------------------------------------------------------
// Settings and the checks.
// ---------------------------------------------------------------------------------------

fn body_for(dialect: Dialect) -> BoxedStrategy<Value> {
    match dialect {
        Dialect::Anthropic => anthropic_body().boxed(),
        Dialect::Openai => chat_body().boxed(),
        Dialect::OpenaiResponses => responses_body().boxed(),
        Dialect::Gemini => gemini_body().boxed(),
        Dialect::Converse => converse_body().boxed(),
    }
}

/// The route settings a case runs with.
#[derive(Debug, Clone)]
struct Settings {
    images: ImagesConfig,
    cache: CacheSettings,
    /// Upstream host for reasoning shaping (`None`: no shaping).
    host: Option<&'static str>,
    usage_in_streams: bool,
    pretty: bool,
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        (1..25usize, 1..120usize, 0..3u8, 1..9usize, 0..4usize),
        (any::<bool>(), 0..3u32, any::<bool>()),
        (0..3u8, any::<bool>(), any::<bool>()),
        (
            proptest::option::of(prop_oneof![
                Just("api.anthropic.com"),
                Just("api.openai.com"),
                Just("api.deepseek.com"),
                Just("openrouter.ai"),
                Just("generativelanguage.googleapis.com"),
                Just("api.moonshot.ai"),
            ]),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (max_blocks, small, bytes, batch, floor),
                (low, calls, in_user),
                (bp, ttl, stab),
                (host, pretty),
            )| {
                let images = ImagesConfig {
                    max_blocks,
                    max_blocks_small: small.max(max_blocks),
                    max_bytes: [24_000_000, 200_000, 20_000][usize::from(bytes)],
                    evict_batch: batch,
                    evict_floor: floor,
                    evict_low_water: low.then_some(max_blocks / 3),
                    embed_target_bytes: 64 * 1024,
                    max_calls_per_image: calls,
                    agent_images_in_user_turns: in_user,
                    ..ImagesConfig::default()
                };
                let cache = CacheSettings {
                    breakpoints: if bp > 0 {
                        Breakpoints::Auto
                    } else {
                        Breakpoints::Off
                    },
                    ttl: ttl.then_some(CacheTtl::OneHour),
                    stabilize: if stab {
                        vec![Stabiliser::ClaudeCodeBillingLine]
                    } else {
                        Vec::new()
                    },
                };
                Settings {
                    images,
                    cache,
                    host,
                    usage_in_streams: calls % 2 == 0,
                    pretty,
                }
            },
        )
}

/// Run `f` with the rewrite context for `dialect` and `s`.
fn with_ctx<T>(dialect: Dialect, s: &Settings, f: impl FnOnce(&RewriteContext<'_>) -> T) -> T {
    let provider = s
        .host
        .map(|h| ResolvedProvider::resolve(None, h, None))
        .unwrap_or_else(|| ResolvedProvider::resolve(None, "api.anthropic.com", None));
    let path = match dialect {
        Dialect::Anthropic => "/v1/messages",
        Dialect::Openai => "/v1/chat/completions",
        Dialect::OpenaiResponses => "/v1/responses",
        Dialect::Gemini => "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        Dialect::Converse => "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/converse",
    };
    let ctx = RewriteContext {
        reasoning: s.host.map(|_| ReasoningInputs {
            provider: &provider,
            upstream_path: path,
            droppable_params: &[],
            droppable_betas: &[],
            anthropic_beta: None,
            path_model: match dialect {
                Dialect::Gemini => Some("gemini-2.5-flash"),
                Dialect::Converse => Some("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
                _ => None,
            },
            verdicts: &(),
            rejected: &(),
        }),
        usage_in_streams: s.usage_in_streams,
        cache: &s.cache,
        ..RewriteContext::new(dialect, &s.images)
    };
    f(&ctx)
}

fn render(v: &Value, pretty: bool) -> Vec<u8> {
    if pretty {
        serde_json::to_vec_pretty(v).unwrap()
    } else {
        serde_json::to_vec(v).unwrap()
    }
}

/// The texts a user wrote in user messages (text blocks, string contents), which no pass may
/// lose; the Claude Code billing line (which the stabiliser removes) is left out.
fn user_texts(dialect: Dialect, v: &Value, out: &mut Vec<String>) {
    let list = match dialect {
        Dialect::Anthropic | Dialect::Openai | Dialect::Converse => v.get("messages"),
        Dialect::OpenaiResponses => v.get("input"),
        Dialect::Gemini => v.get("contents"),
    };
    let Some(Value::Array(list)) = list else {
        return;
    };
    for m in list {
        if m.get("role").and_then(Value::as_str) != Some("user") {
            continue;
        }
        let content = m.get("content").or_else(|| m.get("parts"));
        match content {
            Some(Value::String(s)) => out.push(s.clone()),
            Some(Value::Array(parts)) => {
                for p in parts {
                    let kind = p.get("type").and_then(Value::as_str);
                    if matches!(kind, Some("text" | "input_text") | None) {
                        if let Some(Value::String(t)) = p.get("text") {
                            out.push(t.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out.retain(|t| !t.contains("x-anthropic-billing-header"));
}

/// Every string value in `v`.
fn strings(v: &Value, out: &mut std::collections::HashSet<String>) {
    match v {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The properties of one valid body: no panic, deterministic, valid JSON out, the user's
/// text kept, and a second run over the output changes nothing.
fn check_valid(dialect: Dialect, s: &Settings, value: &Value) -> Result<(), TestCaseError> {
    let body = render(value, s.pretty);
    with_ctx(dialect, s, |ctx| {
        let first = rewrite_request(ctx, &body)
            .map_err(|e| TestCaseError::fail(format!("valid body refused: {e}")))?;
        let again = rewrite_request(ctx, &body).unwrap();
        prop_assert_eq!(&first.body, &again.body, "deterministic");
        let Some(out) = first.body else {
            return Ok(());
        };
        prop_assert_ne!(&out, &body, "Some(body) must differ from the input");
        let after: Value = serde_json::from_slice(&out).map_err(|e| {
            TestCaseError::fail(format!(
                "output is not JSON ({e}): {}",
                String::from_utf8_lossy(&out)
            ))
        })?;
        let mut kept = std::collections::HashSet::new();
        strings(&after, &mut kept);
        let mut texts = Vec::new();
        user_texts(dialect, value, &mut texts);
        for t in texts {
            prop_assert!(kept.contains(&t), "user text {:?} lost", t);
        }
        let second = rewrite_request(ctx, &out)
            .map_err(|e| TestCaseError::fail(format!("output refused: {e}")))?;
        prop_assert_eq!(
            second.body.as_deref().map(String::from_utf8_lossy),
            None,
            "a second run changed the output of the first"
        );
        Ok(())
    })
}

/// Nothing to change: no images, no markers to add, no shaping, no usage request: the body
/// goes through as it came (`body: None`).
fn check_untouched(dialect: Dialect, value: &Value, pretty: bool) -> Result<(), TestCaseError> {
    let s = Settings {
        images: ImagesConfig::default(),
        cache: CACHE_OFF.clone(),
        host: None,
        usage_in_streams: false,
        pretty,
    };
    let body = render(value, pretty);
    with_ctx(dialect, &s, |ctx| {
        let out = rewrite_request(ctx, &body).unwrap();
        prop_assert_eq!(
            out.body.as_deref().map(String::from_utf8_lossy),
            None,
            "a body with nothing to change was rewritten"
        );
        Ok(())
    })
}

/// Any bytes: no panic; when the passes do return a body it is JSON; when they refuse, the
/// proxy forwards the original.
fn check_any(dialect: Dialect, s: &Settings, body: &[u8]) -> Result<(), TestCaseError> {
    with_ctx(dialect, s, |ctx| {
        if let Ok(out) = rewrite_request(ctx, body) {
            if let Some(new) = out.body {
                prop_assert!(
                    serde_json::from_slice::<Value>(&new).is_ok(),
                    "not JSON out of {:?}",
                    String::from_utf8_lossy(body)
                );
            }
        }
        let known = KnownTurns::from_body(dialect, body);
        if let Ok(Some(new)) = rewrite_known(ctx, &known, body).map(|o| o.body) {
            prop_assert!(serde_json::from_slice::<Value>(&new).is_ok());
        }
        Ok(())
    })
}

/// Remove every image, thinking and marker from a body, so nothing is left to rewrite.
fn plain_text_only(dialect: Dialect, v: &mut Value) {
    fn drop_keys(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("cache_control");
                m.values_mut().for_each(drop_keys);
            }
            Value::Array(a) => a.iter_mut().for_each(drop_keys),
            _ => {}
        }
    }
    let is_image = |p: &Value| {
        let kind = p.get("type").and_then(Value::as_str);
        matches!(kind, Some("image" | "image_url" | "input_image"))
            || p.get("inlineData").is_some()
            || p.get("inline_data").is_some()
            || p.get("functionResponse").is_some()
            || p.get("image").is_some()
            || p.get("toolResult").is_some()
            || p.get("cachePoint").is_some()
    };
    fn walk(v: &mut Value, is_image: &dyn Fn(&Value) -> bool) {
        match v {
            Value::Array(a) => {
                a.retain(|p| !is_image(p));
                a.iter_mut().for_each(|x| walk(x, is_image));
            }
            Value::Object(m) => m.values_mut().for_each(|x| walk(x, is_image)),
            _ => {}
        }
    }
    walk(v, &is_image);
    drop_keys(v);
    if let Some(Value::Object(m)) = Some(&mut *v) {
        let _ = dialect;
        m.remove("system");
    }
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

fn dialect_and_body() -> impl Strategy<Value = (Dialect, Value)> {
    dialects().prop_flat_map(|d| (Just(d), body_for(d)))
}

proptest! {
    #![proptest_config(config())]

    /// Realistic bodies under random route settings.
    #[test]
    fn realistic_bodies((dialect, body) in dialect_and_body(), s in settings()) {
        check_valid(dialect, &s, &body)?;
    }

    /// Text-only bodies with nothing configured go through byte-identical.
    #[test]
    fn nothing_to_change_is_untouched((dialect, mut body) in dialect_and_body(), pretty in any::<bool>()) {
        plain_text_only(dialect, &mut body);
        check_untouched(dialect, &body, pretty)?;
    }

    /// Arbitrary JSON values as bodies of each dialect, and arbitrary JSON under the
    /// dialect's list key.
    #[test]
    fn arbitrary_json(dialect in dialects(), v in any_json(), s in settings(), under in any::<bool>()) {
        let v = if under {
            let key = match dialect {
                Dialect::Anthropic | Dialect::Openai | Dialect::Converse => "messages",
                Dialect::OpenaiResponses => "input",
                Dialect::Gemini => "contents",
            };
            let mut m = Map::new();
            m.insert(key.to_owned(), v);
            m.insert("model".to_owned(), json!("m"));
            Value::Object(m)
        } else {
            v
        };
        check_any(dialect, &s, &render(&v, s.pretty))?;
    }

    /// Arbitrary bytes, and realistic bodies cut short or with one byte changed: no panic.
    #[test]
    fn arbitrary_and_damaged_bytes(
        (dialect, body) in dialect_and_body(),
        s in settings(),
        noise in prop::collection::vec(any::<u8>(), 0..64),
        cut in any::<prop::sample::Index>(),
        flip in any::<(prop::sample::Index, u8)>(),
    ) {
        check_any(dialect, &s, &noise)?;
        let bytes = render(&body, s.pretty);
        let cut_at = cut.index(bytes.len() + 1);
        check_any(dialect, &s, &bytes[..cut_at])?;
        let mut flipped = bytes.clone();
        let i = flip.0.index(flipped.len());
        flipped[i] = flip.1;
        check_any(dialect, &s, &flipped)?;
    }
}

/// Not JSON at all: every dialect refuses, so the proxy forwards the bytes unchanged.
#[test]
fn not_json_is_refused() {
    let s = Settings {
        images: ImagesConfig::default(),
        cache: CACHE_OFF.clone(),
        host: Some("api.anthropic.com"),
        usage_in_streams: true,
        pretty: false,
    };
    for d in all_dialects() {
        for body in [
            &b""[..],
            b"{",
            b"\xff\xfe{}",
            b"{\"messages\":[}",
            b"not json",
        ] {
            with_ctx(d, &s, |ctx| {
                assert!(rewrite_request(ctx, body).is_err(), "{d:?} {body:?}")
            });
        }
    }
}

/// The generators reach the passes: over a fixed sample, a fair share of realistic bodies of
/// every dialect is rewritten (so the properties above are not vacuous).
#[test]
fn generated_bodies_are_rewritten() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::new(config());
    for d in all_dialects() {
        let strategy = (body_for(d), settings());
        let (mut rewritten, mut total) = (0, 0);
        for _ in 0..200 {
            let (body, s) = strategy.new_tree(&mut runner).unwrap().current();
            let bytes = render(&body, s.pretty);
            let out = with_ctx(d, &s, |ctx| rewrite_request(ctx, &bytes).unwrap());
            total += 1;
            rewritten += usize::from(out.body.is_some());
        }
        eprintln!("{d:?}: {rewritten}/{total} rewritten");
        assert!(
            rewritten * 10 > total,
            "{d:?}: only {rewritten}/{total} rewritten"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Depth: every walker after the dialect parse, on 100,000 levels of nesting.
// ---------------------------------------------------------------------------------------

/// Levels of nesting in the depth tests: far past any recursion a thread's stack could hold
/// (a 2 MiB test or tokio thread overflows a few thousand frames deep).
const DEEP: usize = 100_000;

/// Bodies where one value (`@`) is nested [`DEEP`] levels: in the list itself, a message's
/// content, a tool result, a `cache_control`, an image source, `system`, a tool schema, a tool
/// input, an image URL, a Responses output, Gemini parts and blobs, Converse tool results,
/// tools and image sources.
const DEEP_TEMPLATES: &[&str] = &[
    r#"{"model":"m","max_tokens":1,"messages":@}"#,
    r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":@}]}"#,
    r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":@}]}]}"#,
    r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":@}]}]}"#,
    r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":@}}]}]}"#,
    r#"{"model":"m","max_tokens":1,"system":@,"tools":[{"name":"t","input_schema":@}],"messages":[{"role":"user","content":"hi"}]}"#,
    r#"{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"t","name":"n","input":@}]}],"x":@}"#,
    r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":@}]}],"stream":true}"#,
    r#"{"model":"m","messages":[{"role":"tool","tool_call_id":"c","content":@}],"stream_options":@}"#,
    r#"{"model":"m","input":@}"#,
    r#"{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":@}]}"#,
    r#"{"contents":[{"role":"user","parts":[{"inlineData":@}]}]}"#,
    r#"{"contents":[{"parts":@}],"systemInstruction":@}"#,
    r#"{"messages":[{"role":"user","content":[{"toolResult":{"toolUseId":"t","content":@}}]}],"toolConfig":{"tools":@},"system":@}"#,
    r#"{"messages":[{"role":"user","content":[{"image":{"format":"png","source":@}}]}],"additionalModelRequestFields":@}"#,
];

/// `template` with `@` nested `depth` levels deep as arrays, objects, or an unclosed array.
fn deep_bodies(template: &str, depth: usize) -> Vec<Vec<u8>> {
    let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
    let mixed = format!(
        "{}{}",
        r#"[{"type":"text","text":"x","content":"#.repeat(depth / 2),
        "}]".repeat(depth / 2)
    );
    let unclosed = "[".repeat(depth);
    [arrays, objects, mixed, unclosed]
        .iter()
        .map(|v| template.replace('@', v).into_bytes())
        .collect()
}

fn all_dialects() -> [Dialect; 5] {
    [
        Dialect::Anthropic,
        Dialect::Openai,
        Dialect::OpenaiResponses,
        Dialect::Gemini,
        Dialect::Converse,
    ]
}

/// Every request pass and every response observer on bodies nested 100,000 levels (and 100,
/// where values built with serde_json still parse): no stack overflow (it would crash this
/// test binary), and what comes out is JSON. The body check (`crate::json::parse`) skips
/// values without recursing, so deep bodies do reach the walkers.
#[test]
fn deep_nesting_never_overflows_the_stack() {
    let s = Settings {
        images: ImagesConfig {
            max_blocks: 1,
            max_calls_per_image: 1,
            embed_target_bytes: 64 * 1024,
            ..ImagesConfig::default()
        },
        cache: CacheSettings {
            breakpoints: Breakpoints::Auto,
            ttl: Some(CacheTtl::OneHour),
            stabilize: vec![Stabiliser::ClaudeCodeBillingLine],
        },
        host: Some("api.anthropic.com"),
        usage_in_streams: true,
        pretty: false,
    };
    let mut rewritten = 0;
    for template in DEEP_TEMPLATES {
        for (depth, deep) in [(DEEP, true), (100, false)] {
            for body in deep_bodies(template, depth) {
                for d in all_dialects() {
                    with_ctx(d, &s, |ctx| {
                        let out = rewrite_request(ctx, &body);
                        if let Ok(Some(new)) = out.map(|o| o.body) {
                            assert!(valid_json(&new), "{d:?} {depth}: {template}");
                            if deep {
                                rewritten += 1;
                            }
                        }
                        let known = KnownTurns::from_body(d, &body);
                        let _ = rewrite_known(ctx, &known, &body);
                    });
                    observe_deep(d, &body);
                }
            }
        }
    }
    // Deep bodies are valid JSON: some get markers or a usage request like any other.
    assert!(rewritten > 0);
}

/// Valid JSON at any depth (serde_json skips an ignored value without recursing; a
/// `serde_json::Value` stops at 128 levels).
fn valid_json(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

/// The response side on a deep body: as a JSON response and as one event's data.
fn observe_deep(d: Dialect, body: &[u8]) {
    use cachekeeper::wire::stream::{BodyObserver, End};
    use cachekeeper::wire::tee::{Framing, Tee};
    let mut tee = Tee::new(Framing::Json, None, cachekeeper::response::observer(d));
    tee.on_data(&bytes::Bytes::copy_from_slice(body));
    tee.on_end(End::Complete);
    let mut sse = b"event: message_start\ndata: ".to_vec();
    sse.extend_from_slice(body);
    sse.extend_from_slice(b"\n\n");
    let mut tee = Tee::new(
        Framing::EventStream,
        None,
        cachekeeper::response::observer(d),
    );
    tee.on_data(&bytes::Bytes::from(sse));
    tee.on_end(End::Complete);
}

/// Through the whole proxy in-process (sessions, accounting, prefix digests, the passes,
/// breakpoints on, the state file): every deep body reaches the upstream byte-identical,
/// and the proxy keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_nesting_goes_through_the_proxy() {
    use common::*;
    let upstream_body = r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":1,"output_tokens":1}}"#;
    let mock = start_mock(std::sync::Arc::new(move |_r: &Recorded| {
        json_response(200, upstream_body)
    }))
    .await;
    let mut toml = config_for(&mock.url(), "");
    toml = toml.replacen(
        "name = \"anthropic\"",
        "name = \"anthropic\"\ncache_breakpoints = \"auto\"",
        1,
    );
    let proxy = start_proxy(&toml).await;
    let c = client();
    // One path per template, by the dialect it is written in; arrays for every template,
    // objects too where a walker reads objects (a marker, an image source, a blob). The pure
    // test above runs every pass on every combination.
    for template in DEEP_TEMPLATES {
        let path = if template.contains("\"contents\"") {
            "/gemini/v1beta/models/gemini-2.5-flash:generateContent"
        } else if template.contains("\"input\"") {
            "/openai/v1/responses"
        } else if template.contains("image_url") || template.contains("tool_call_id") {
            "/openai/v1/chat/completions"
        } else {
            "/anthropic/v1/messages"
        };
        let all = deep_bodies(template, DEEP);
        let objects = ["cache_control", "source", "inlineData"]
            .iter()
            .any(|k| template.contains(k));
        let bodies = if objects { &all[..2] } else { &all[..1] };
        for body in bodies {
            let (status, _, _) = send(
                &c,
                &proxy.url(path),
                &[
                    ("x-api-key", "sk-ant-test"),
                    ("anthropic-version", "2023-06-01"),
                ],
                body.clone(),
            )
            .await;
            assert_eq!(status, 200, "{path} {template}");
            let sent = mock.last().body;
            assert!(
                sent == *body || valid_json(&sent) && valid_json(body),
                "{path}: {template} was damaged"
            );
        }
    }
    let (status, _, _) = send(
        &c,
        &proxy.url("/anthropic/v1/messages"),
        &[("x-api-key", "sk-ant-test")],
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    proxy.stop().await;
}
