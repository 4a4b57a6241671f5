//! Unknown-field 4xx: learn, retry once, remember — through the proxy, against mock upstreams
//! that behave like strict providers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;

use common::*;
use serde_json::{json, Value};

/// A chat request whose assistant turn carries RC + R + RD, and `reasoning_effort`.
fn chat_body(model: &str) -> String {
    json!({
        "model": model,
        "reasoning_effort": "high",
        "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": null,
             "reasoning_content": "Call the tool.",
             "reasoning": "Call the tool.",
             "reasoning_details": [{"type": "reasoning.text", "text": "Call the tool."}],
             "tool_calls": [{"id": "call_0", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}
        ]
    })
    .to_string()
}

fn assistant_keys(body: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).unwrap();
    let mut keys: Vec<String> = v["messages"][1]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

fn has_param(body: &[u8], p: &str) -> bool {
    let v: Value = serde_json::from_slice(body).unwrap();
    v.get(p).is_some()
}

const OK_CHAT: &str = r#"{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;

/// A mock that answers `status` + `error` while the sent body has any of `fields` on the
/// assistant message (or as a top-level parameter), and 200 otherwise.
fn strict(fields: &'static [&'static str], status: u16, error: &'static str) -> Handler {
    Arc::new(move |r: &Recorded| {
        let Ok(v) = serde_json::from_slice::<Value>(&r.body) else {
            return json_response(400, r#"{"error":{"message":"bad json"}}"#);
        };
        let msg = &v["messages"][1];
        let offending = fields
            .iter()
            .any(|f| msg.get(*f).is_some() || v.get(*f).is_some());
        if offending {
            json_response(status, error)
        } else if v["stream"] == json!(true) {
            sse_response(full(
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n",
            ))
        } else {
            json_response(200, OK_CHAT)
        }
    })
}

/// A route on the mock with a profile that sends carriers (`local`: RC + R).
fn config(mock: &Mock, state: &std::path::Path, provider: &str) -> String {
    format!(
        r#"
[state]
path = {state:?}

[[routes]]
name = "strict"
prefix = "/v"
upstream = "{}"
provider = "{provider}"
"#,
        mock.url(),
        state = state.display().to_string()
    )
}

async fn post(proxy: &Proxy, body: &str) -> (u16, http::HeaderMap, bytes::Bytes) {
    send(
        &client(),
        &proxy.url("/v/v1/chat/completions"),
        &[("authorization", "Bearer sk-test")],
        body.to_owned(),
    )
    .await
}

const MISTRAL_422: &str = r#"{"object":"Error","detail":[{"type":"extra_forbidden","loc":["body","messages",1,"assistant","reasoning_content"],"msg":"Extra inputs are not permitted","input":"Call the tool."}],"type":"invalid_request_error","code":3001}"#;

#[tokio::test]
async fn mistral_like_422_learns_retries_once_and_remembers_across_restart() {
    let mock = start_mock(strict(
        &["reasoning_content", "reasoning", "reasoning_details"],
        422,
        MISTRAL_422,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let proxy = start_proxy(&config(&mock, &state, "local")).await;

    // First request: 422, verdict stored, one retry without all three carriers.
    let (status, headers, body) = post(&proxy, &chat_body("Mistral-Large-Latest")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(mock.count(), 2);
    let reqs = mock.requests.lock().unwrap().clone();
    assert!(assistant_keys(&reqs[0].body).contains(&"reasoning_content".to_owned()));
    assert_eq!(
        assistant_keys(&reqs[1].body),
        vec!["content", "role", "tool_calls"]
    );
    // The credential went out on both attempts.
    assert_eq!(reqs[1].headers["authorization"], "Bearer sk-test");
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(
        h.contains(
            "retried_without=message:reasoning,message:reasoning_content,message:reasoning_details"
        ),
        "{h}"
    );

    // Next request: the field is omitted up front, no 422.
    let (status, _, _) = post(&proxy, &chat_body("Mistral-Large-Latest")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 3);
    assert_eq!(
        assistant_keys(&mock.last().body),
        vec!["content", "role", "tool_calls"]
    );
    // Model case is kept: a sibling model still gets its carriers (and learns on its own).
    let (status, _, _) = post(&proxy, &chat_body("mistral-large-latest")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 5);
    proxy.stop().await;

    // A restarted proxy knows the verdict: no second 422.
    let proxy = start_proxy(&config(&mock, &state, "local")).await;
    let (status, _, _) = post(&proxy, &chat_body("Mistral-Large-Latest")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 6);
    assert_eq!(
        assistant_keys(&mock.last().body),
        vec!["content", "role", "tool_calls"]
    );
    proxy.stop().await;
}

#[tokio::test]
async fn groq_like_400_on_a_streaming_request_retries_before_any_byte() {
    let groq = r#"{"error":{"message":"'messages.1' : for 'role:assistant' the following must be satisfied[('messages.1' : property 'reasoning_content' is unsupported)]","type":"invalid_request_error"}}"#;
    let mock = start_mock(strict(&["reasoning_content"], 400, groq)).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "local")).await;
    let mut v: Value = serde_json::from_str(&chat_body("llama-3.3-70b")).unwrap();
    v["stream"] = json!(true);
    let (status, headers, body) = post(&proxy, &v.to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(String::from_utf8_lossy(&body).contains("[DONE]"));
    assert_eq!(mock.count(), 2);
    // RC named: all three carriers dropped (widening).
    assert_eq!(
        assistant_keys(&mock.last().body),
        vec!["content", "role", "tool_calls"]
    );
    proxy.stop().await;
}

#[tokio::test]
async fn cerebras_and_gemini_compat_wordings_are_learned() {
    let cerebras = r#"{"message":"messages.1.assistant.reasoning_content: property 'messages.1.assistant.reasoning_content' is unsupported","type":"invalid_request_error","param":"validation_error","code":"wrong_api_format"}"#;
    let gemini = r#"[{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"reasoning_content\" at 'messages[1]': Cannot find field.","status":"INVALID_ARGUMENT"}}]"#;
    for wording in [cerebras, gemini] {
        let mock = start_mock(strict(&["reasoning_content"], 400, wording)).await;
        let dir = tempfile::tempdir().unwrap();
        let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "local")).await;
        let (status, _, _) = post(&proxy, &chat_body("some-model")).await;
        assert_eq!(status, 200, "{wording}");
        assert_eq!(mock.count(), 2, "{wording}");
        assert!(!assistant_keys(&mock.last().body).contains(&"reasoning_content".to_owned()));
        proxy.stop().await;
    }
}

#[tokio::test]
async fn openai_host_rejecting_reasoning_effort_drops_the_parameter() {
    let azure = r#"{"error":{"message":"Unrecognized request argument supplied: reasoning_effort","type":"invalid_request_error","param":null,"code":null}}"#;
    let mock = start_mock(strict(&["reasoning_effort"], 400, azure)).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "openai")).await;
    let (status, _, _) = post(&proxy, &chat_body("gpt-4.1")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2);
    let reqs = mock.requests.lock().unwrap().clone();
    assert!(has_param(&reqs[0].body, "reasoning_effort"));
    assert!(!has_param(&reqs[1].body, "reasoning_effort"));
    let (status, _, _) = post(&proxy, &chat_body("gpt-4.1")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 3);
    assert!(!has_param(&mock.last().body, "reasoning_effort"));
    proxy.stop().await;
}

#[tokio::test]
async fn no_retry_loop_and_no_retry_without_a_named_field() {
    // Rejects everything, always naming reasoning_details.
    let always: Handler = Arc::new(|_r: &Recorded| {
        json_response(
            400,
            r#"{"error":{"message":"Extra inputs are not permitted, field: 'messages[1].reasoning_details'"}}"#,
        )
    });
    let mock = start_mock(always).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "openrouter")).await;
    let (status, _, body) = post(&proxy, &chat_body("z-ai/glm-5.3-flash:US")).await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("reasoning_details"));
    // One retry (R + RD learned; RC survives), then the second 400 goes to the client.
    assert_eq!(mock.count(), 2);
    let reqs = mock.requests.lock().unwrap().clone();
    assert_eq!(
        assistant_keys(&reqs[1].body),
        vec!["content", "reasoning_content", "role", "tool_calls"]
    );
    // The same body again teaches nothing: no retry.
    let (status, _, _) = post(&proxy, &chat_body("z-ai/glm-5.3-flash:US")).await;
    assert_eq!(status, 400);
    assert_eq!(mock.count(), 3);
    proxy.stop().await;

    // Wordings that name no field are not verdicts.
    let opaque: Handler = Arc::new(|_r: &Recorded| {
        json_response(
            400,
            r#"{"error":{"message":"Provider returned error","code":400}}"#,
        )
    });
    let mock = start_mock(opaque).await;
    let proxy = start_proxy(&config(&mock, &dir.path().join("t.db"), "openrouter")).await;
    let (status, _, body) = post(&proxy, &chat_body("m")).await;
    assert_eq!(status, 400);
    assert_eq!(
        &body[..],
        br#"{"error":{"message":"Provider returned error","code":400}}"#
    );
    assert_eq!(mock.count(), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn must_echo_route_never_learns_reasoning_content() {
    let deepseek = r#"{"error":{"message":"The `reasoning_content` in the thinking mode must be passed back to the API.","type":"invalid_request_error"}}"#;
    let value: Handler = Arc::new(move |_r: &Recorded| json_response(400, deepseek));
    let mock = start_mock(value).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "deepseek")).await;
    let (status, _, _) = post(&proxy, &chat_body("deepseek-v4")).await;
    assert_eq!(status, 400);
    assert_eq!(mock.count(), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn verdicts_cli_lists_and_clears_and_a_running_proxy_notices() {
    let mock = start_mock(strict(
        &["reasoning_content", "reasoning", "reasoning_details"],
        422,
        MISTRAL_422,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let cfg_text = config(&mock, &state, "local");
    let cfg_path = dir.path().join("proxy.toml");
    std::fs::write(&cfg_path, &cfg_text).unwrap();
    let proxy = start_proxy(&cfg_text).await;
    post(&proxy, &chat_body("Mistral-Large")).await;
    assert_eq!(mock.count(), 2);

    let bin = env!("CARGO_BIN_EXE_cachekeeper");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(bin)
            .arg("verdicts")
            .arg("--config")
            .arg(&cfg_path)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // The writer thread stores the verdict shortly after it is learned.
    let mut listed = String::new();
    for _ in 0..50 {
        listed = cli(&[]);
        if listed.contains("Mistral-Large") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The verdict key keeps the mock's port (two local servers learn apart).
    let host = mock.url().trim_start_matches("http://").to_owned();
    assert!(
        listed.starts_with(&format!(
            "{host}\tMistral-Large\tmessage:reasoning,message:reasoning_content,message:reasoning_details\t20"
        )),
        "{listed}"
    );
    assert!(
        listed.contains("Extra inputs are not permitted"),
        "{listed}"
    );
    assert!(!listed.contains("sk-test"));

    let cleared = cli(&["--clear", &host, "Mistral-Large"]);
    assert!(cleared.contains("removed 1 verdict"), "{cleared}");
    assert!(cli(&[]).contains("no verdicts"));

    // Within a few seconds the running proxy sends the carriers again (and relearns).
    let mut relearned = false;
    for _ in 0..30 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let before = mock.count();
        post(&proxy, &chat_body("Mistral-Large")).await;
        if mock.count() - before == 2 {
            relearned = true;
            break;
        }
    }
    assert!(relearned, "the running proxy did not notice the clear");
    proxy.stop().await;
}

/// Lists the verdicts through the CLI, waiting (up to 5 s) for the writer thread to store one
/// naming `model`.
async fn listed_verdicts(cfg_path: &std::path::Path, model: &str) -> String {
    let bin = env!("CARGO_BIN_EXE_cachekeeper");
    let mut listed = String::new();
    for _ in 0..50 {
        let out = std::process::Command::new(bin)
            .arg("verdicts")
            .arg("--config")
            .arg(cfg_path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        listed = String::from_utf8(out.stdout).unwrap();
        if listed.contains(model) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    listed
}

/// Mistral's 422 lists one `extra_forbidden` entry per field; here the first names
/// `stream_options`, which this request does not send.
const MISTRAL_MULTI_422: &str = r#"{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","stream_options"],"msg":"Extra inputs are not permitted","input":{}},{"type":"extra_forbidden","loc":["body","messages",1,"assistant","reasoning_content"],"msg":"Extra inputs are not permitted","input":"Call the tool."}]},"type":"invalid_request_error","param":null,"code":null}"#;

#[tokio::test]
async fn multi_field_422_stores_the_wording_of_the_learned_entry() {
    let mock = start_mock(strict(
        &["reasoning_content", "reasoning", "reasoning_details"],
        422,
        MISTRAL_MULTI_422,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cfg_text = config(&mock, &dir.path().join("state.db"), "local");
    let cfg_path = dir.path().join("proxy.toml");
    std::fs::write(&cfg_path, &cfg_text).unwrap();
    let proxy = start_proxy(&cfg_text).await;
    let (status, _, _) = post(&proxy, &chat_body("mistral-medium-latest")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2);
    let listed = listed_verdicts(&cfg_path, "mistral-medium-latest").await;
    let host = mock.url().trim_start_matches("http://").to_owned();
    assert!(
        listed.starts_with(&format!(
            "{host}\tmistral-medium-latest\tmessage:reasoning,message:reasoning_content,message:reasoning_details\t20"
        )),
        "{listed}"
    );
    assert!(
        listed.trim_end().ends_with(
            "\tbody.messages.1.assistant.reasoning_content: Extra inputs are not permitted"
        ),
        "{listed}"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn top_level_reasoning_is_learned_apart_from_the_message_carrier() {
    // Rejects the top-level `reasoning` parameter, accepts the carrier on messages.
    let top: Handler = Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        if v.get("reasoning").is_some() {
            json_response(
                400,
                r#"{"error":{"message":"Unknown parameter: 'reasoning'.","type":"invalid_request_error","param":"reasoning","code":"unknown_parameter"}}"#,
            )
        } else {
            json_response(200, OK_CHAT)
        }
    });
    let mock = start_mock(top).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "local")).await;
    let mut body: Value = serde_json::from_str(&chat_body("qwen3")).unwrap();
    body["reasoning"] = json!({"effort": "high"});
    let (status, headers, _) = post(&proxy, &body.to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 2);
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains("retried_without=param:reasoning"), "{h}");
    let retry = mock.last().body;
    assert!(!has_param(&retry, "reasoning"));
    // The message carrier of the same name is still sent (the `local` profile reads RC + R).
    assert!(
        assistant_keys(&retry).contains(&"reasoning".to_owned()),
        "{:?}",
        assistant_keys(&retry)
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_complaint_about_a_value_is_not_learned_and_not_retried() {
    let value: Handler = Arc::new(|_r: &Recorded| {
        json_response(
            400,
            r#"{"error":{"message":"Unsupported value: 'reasoning.effort' does not support 'minimal' with this model. Supported values are: 'low', 'medium', and 'high'.","type":"invalid_request_error","param":"reasoning.effort","code":"unsupported_value"}}"#,
        )
    });
    let mock = start_mock(value).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "openai")).await;
    let mut body: Value = serde_json::from_str(&chat_body("o4-mini")).unwrap();
    body["reasoning"] = json!({"effort": "minimal"});
    let (status, _, resp) = post(&proxy, &body.to_string()).await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&resp).contains("Unsupported value"));
    assert_eq!(mock.count(), 1, "no retry");
    proxy.stop().await;
}

#[test]
fn verdicts_cli_reads_a_v1_database_migrated_to_namespaced_fields() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    {
        // The v1 schema and rows exactly as the first release wrote them.
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS verdicts (
                host TEXT NOT NULL, model TEXT NOT NULL, fields TEXT NOT NULL,
                wording TEXT NOT NULL, learned_at INTEGER NOT NULL, PRIMARY KEY (host, model));
             PRAGMA user_version = 1;",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO verdicts VALUES ('api.groq.com', 'qwen3-32b', ?1, ?2, ?3)",
            rusqlite::params![
                r#"["reasoning","reasoning_details","reasoning_effort"]"#,
                "property 'reasoning' is unsupported",
                now
            ],
        )
        .unwrap();
    }
    let cfg_path = dir.path().join("proxy.toml");
    std::fs::write(
        &cfg_path,
        "[state]\npath = \"old.db\"\n\n[[routes]]\nname = \"g\"\nprefix = \"/g\"\nupstream = \"https://api.groq.com/openai\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachekeeper"))
        .args(["verdicts", "--config"])
        .arg(&cfg_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(
        listed.starts_with(
            "api.groq.com\tqwen3-32b\tparam:reasoning_effort,message:reasoning,message:reasoning_details\t20"
        ),
        "{listed}"
    );
    assert!(listed
        .trim_end()
        .ends_with("\tproperty 'reasoning' is unsupported"));
}

fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn gunzip_if(r: &Recorded) -> Vec<u8> {
    use std::io::Read as _;
    if r.headers
        .get("content-encoding")
        .is_some_and(|v| v == "gzip")
    {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&r.body[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        r.body.to_vec()
    }
}

/// Failing inputs from the adversarial run. (1) The provider gzips its 422, as it does when
/// the official SDKs' `accept-encoding: gzip` goes upstream: the detector read compressed
/// bytes and learned nothing. (2) The client gzips its request body and nothing else changes:
/// the detector looked for the field in the still-encoded bytes. Both must learn and retry.
#[tokio::test]
async fn a_gzipped_4xx_and_a_gzipped_request_still_teach_and_retry() {
    let mock = start_mock(Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&gunzip_if(r)).unwrap();
        if v["messages"][1].get("reasoning_content").is_some() {
            http::Response::builder()
                .status(422)
                .header("content-type", "application/json")
                .header("content-encoding", "gzip")
                .body(full(gzip(MISTRAL_422.as_bytes())))
                .unwrap()
        } else {
            json_response(200, OK_CHAT)
        }
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("s.db"), "openrouter")).await;
    // (1) plain request, gzipped 422.
    let (status, h, _) = post(&proxy, &chat_body("gz-model-1")).await;
    assert_eq!(status, 200, "{h:?}");
    assert!(
        h["x-cachekeeper-rewrites"]
            .to_str()
            .unwrap()
            .contains("retried_without=message:"),
        "{h:?}"
    );
    assert_eq!(mock.count(), 2);
    // (2) gzipped request, gzipped 422. The `openrouter` profile sends all three carriers,
    // so the passes change nothing and the encoded bytes go upstream as sent.
    let (status, h, _) = send(
        &client(),
        &proxy.url("/v/v1/chat/completions"),
        &[
            ("authorization", "Bearer sk-test"),
            ("content-encoding", "gzip"),
        ],
        gzip(chat_body("gz-model-2").as_bytes()),
    )
    .await;
    assert_eq!(status, 200, "{h:?}");
    assert!(
        h["x-cachekeeper-rewrites"]
            .to_str()
            .unwrap()
            .contains("retried_without=message:"),
        "{h:?}"
    );
    assert_eq!(mock.count(), 4);
    proxy.stop().await;
}

const INVALID_SIGNATURE_400: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `signature` in `thinking` block"}}"#;

const OK_MESSAGE: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}"#;

/// An Anthropic turn with a thinking block signed `sig`, then a tool call and its result.
fn signed_body(sig: &str) -> String {
    json!({
        "model": "claude-opus-4-5",
        "max_tokens": 100,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Call the tool.", "signature": sig},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}
        ]
    })
    .to_string()
}

fn thinking_blocks(body: &[u8]) -> usize {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["messages"][1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "thinking")
        .count()
}

/// The failing input: a conversation carrying a thinking block whose signature the provider
/// no longer accepts (re-encoded by an agent, or from another account) failed on every turn.
/// Now the signature is remembered as rejected for the credential, the request is retried
/// once without it, and later requests strip it up front — after a restart too — while another
/// credential's requests are left alone.
#[tokio::test]
async fn a_rejected_thinking_signature_is_stripped_retried_once_and_remembered() {
    let mock = start_mock(Arc::new(|r: &Recorded| {
        if String::from_utf8_lossy(&r.body).contains("\"signature\":\"BAD\"") {
            json_response(400, INVALID_SIGNATURE_400)
        } else {
            json_response(200, OK_MESSAGE)
        }
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let cfg = config(&mock, &state, "anthropic");
    let proxy = start_proxy(&cfg).await;
    let post_as = |proxy: &Proxy, key: &'static str, body: String| {
        let url = proxy.url("/v/v1/messages");
        async move { send(&client(), &url, &[("x-api-key", key)], body).await }
    };

    let (status, headers, body) = post_as(&proxy, "sk-a", signed_body("BAD")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(mock.count(), 2, "one retry");
    let reqs = mock.requests.lock().unwrap().clone();
    assert_eq!(thinking_blocks(&reqs[0].body), 1);
    assert_eq!(thinking_blocks(&reqs[1].body), 0);
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains("thinking_rejected=1"), "{h}");
    assert!(h.contains("retried_without=thinking_signatures:1"), "{h}");

    // Same credential: stripped up front. A good signature is kept.
    let (status, _, _) = post_as(&proxy, "sk-a", signed_body("BAD")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 3);
    assert_eq!(thinking_blocks(&mock.last().body), 0);
    let (status, _, _) = post_as(&proxy, "sk-a", signed_body("GOOD")).await;
    assert_eq!(status, 200);
    assert_eq!(thinking_blocks(&mock.last().body), 1);
    assert_eq!(mock.count(), 4);

    // Another credential is not affected by the first one's rejection: its block is sent.
    let (status, _, _) = post_as(&proxy, "sk-b", signed_body("BAD")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 6, "sk-b learns on its own");
    proxy.stop().await;

    // After a restart the rejection is still known.
    let proxy = start_proxy(&cfg).await;
    let (status, _, _) = post_as(&proxy, "sk-a", signed_body("BAD")).await;
    assert_eq!(status, 200);
    assert_eq!(mock.count(), 7);
    assert_eq!(thinking_blocks(&mock.last().body), 0);
    // A request whose rejected block is already gone teaches nothing: the 400 passes through.
    proxy.stop().await;
}

/// A Chat mock for carrier restore: every answer is a tool call with `reasoning_content`.
/// Model `needs-rc` refuses an assistant tool-call turn without its reasoning (DeepSeek's
/// rule); model `rejects-rc` refuses any `reasoning_content` in input (a model that takes none).
fn restore_mock() -> Handler {
    Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let echoed: Vec<&Value> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .collect();
        let model = v["model"].as_str().unwrap();
        if model == "needs-rc"
            && echoed
                .iter()
                .any(|m| m["reasoning_content"] != json!("Call the tool.\u{2028}é"))
        {
            return json_response(
                400,
                r#"{"error":{"message":"Missing `reasoning_content` field in the assistant message at message index 1.","type":"invalid_request_error"}}"#,
            );
        }
        if model == "rejects-rc" && echoed.iter().any(|m| m.get("reasoning_content").is_some()) {
            return json_response(
                400,
                r#"{"error":{"message":"Unrecognized request argument supplied: reasoning_content","type":"invalid_request_error"}}"#,
            );
        }
        let n = echoed.len();
        json_response(
            200,
            &json!({"id": "c", "object": "chat.completion", "model": model,
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": null,
                    "reasoning_content": "Call the tool.\u{2028}é",
                    "tool_calls": [{"id": format!("call_{n}"), "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
            .to_string(),
        )
    })
}

/// The conversation after `turns` tool rounds, as an agent that drops `reasoning_content`
/// rebuilds it.
fn dropped_rc_body(model: &str, turns: usize) -> String {
    let mut messages = vec![json!({"role": "user", "content": "weather in Paris?"})];
    for i in 0..turns {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": "sunny"}));
    }
    json!({"model": model, "messages": messages}).to_string()
}

#[tokio::test]
async fn restore_puts_back_dropped_reasoning_and_backs_off_when_it_is_refused() {
    let mock = start_mock(restore_mock()).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&config(&mock, &dir.path().join("state.db"), "local")).await;

    // needs-rc: each turn's reasoning is captured and restored on the next; the mock checks it.
    for turns in 0..3 {
        let (status, headers, body) = post(&proxy, &dropped_rc_body("needs-rc", turns)).await;
        assert_eq!(
            status,
            200,
            "turn {turns}: {}",
            String::from_utf8_lossy(&body)
        );
        let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
        assert!(h.contains(&format!("reasoning_restored={turns};")), "{h}");
        assert!(
            h.contains(&format!("restored_reasoning_content={turns};")),
            "{h}"
        );
    }
    assert_eq!(mock.count(), 3, "never refused");
    // Another credential gets nothing restored: the provider's 400 reaches it.
    let (status, _, _) = send(
        &client(),
        &proxy.url("/v/v1/chat/completions"),
        &[("authorization", "Bearer sk-other")],
        dropped_rc_body("needs-rc", 1),
    )
    .await;
    assert_eq!(status, 400);

    // rejects-rc: the restored field is refused; one retry with the client's own carriers,
    // and restore stays off for the model.
    let (status, _, _) = post(&proxy, &dropped_rc_body("rejects-rc", 0)).await;
    assert_eq!(status, 200);
    let before = mock.count();
    let (status, headers, body) = post(&proxy, &dropped_rc_body("rejects-rc", 1)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(mock.count(), before + 2, "one retry");
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains("retried_without=restore"), "{h}");
    let reqs = mock.requests.lock().unwrap().clone();
    let first: Value = serde_json::from_slice(&reqs[before].body).unwrap();
    assert_eq!(
        first["messages"][1]["reasoning_content"],
        "Call the tool.\u{2028}é"
    );
    let retry: Value = serde_json::from_slice(&reqs[before + 1].body).unwrap();
    assert!(retry["messages"][1].get("reasoning_content").is_none());
    let (status, headers, _) = post(&proxy, &dropped_rc_body("rejects-rc", 1)).await;
    assert_eq!(status, 200);
    assert_eq!(
        mock.count(),
        before + 3,
        "restore is off: no refusal, no retry"
    );
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains("reasoning_restored=0;"), "{h}");
    proxy.stop().await;
}
