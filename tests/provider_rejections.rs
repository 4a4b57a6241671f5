//! Three public failure reports, replayed through the proxy against mock upstreams that answer
//! as the providers did (issue 30): each mock answers 400 with the provider's own error text
//! and shape when the request is wrong, and 200 otherwise. Each test first shows the agent's
//! request fails sent straight to the mock, then that the proxy sends what the provider takes.
//!
//! 1. OpenRouter, Gemini 3: a `reasoning_details` entry with no `data` on a tool-call turn.
//! 2. Cerebras: top-level `enable_thinking` and `reasoning` (Cerebras' error shape, no `error`
//!    wrapper).
//! 3. OpenAI Responses: a reasoning item no longer right before the item it produced.
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

const AUTH: (&str, &str) = ("authorization", "Bearer sk-issue-30");

fn config(prefix: &str, upstream: &str, provider: &str) -> String {
    let dir = tempfile::tempdir().unwrap().keep();
    format!(
        "[state]\npath = {:?}\n\n[[routes]]\nname = \"r\"\nprefix = \"{prefix}\"\nupstream = \"{upstream}\"\nprovider = \"{provider}\"\n",
        dir.join("state.db").display().to_string()
    )
}

fn body(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

// ---- 1. OpenRouter, Gemini 3 ------------------------------------------------------------

/// The thought signature the mock issues with tool call `call`.
fn signature(call: &str) -> String {
    format!("EjQKMgGOGx-{call}-sig==")
}

/// OpenRouter's 400 for a Gemini tool call whose signature did not come back: "Provider
/// returned error" with the upstream's words in `metadata.raw` (reported in
/// https://github.com/massgen/MassGen/issues/624 and
/// https://github.com/microsoft/agent-framework/issues/2947).
fn openrouter_missing(name: &str, position: usize) -> String {
    let raw = format!(
        "Gemini models require OpenRouter reasoning details to be preserved in each request. \
         Please refer to our docs: https://openrouter.ai/docs/guides/best-practices/reasoning-tokens#preserving-reasoning-blocks. \
         Upstream error: {{\n  \"error\": {{\n    \"code\": 400,\n    \"message\": \"Function call is missing a \
         thought_signature in functionCall parts. This is required for tools to work correctly, and missing \
         thought_signature may lead to degraded model performance. Additional data, function call \
         `default_api:{name}` , position {position}. Please refer to \
         https://ai.google.dev/gemini-api/docs/thought-signatures for more details.\",\n    \"status\": \
         \"INVALID_ARGUMENT\"\n  }}\n}}\n"
    );
    json!({"error": {"message": "Provider returned error", "code": 400,
                     "metadata": {"raw": raw, "provider_name": "Google AI Studio"}}})
    .to_string()
}

/// OpenRouter serving a Gemini 3 model: every assistant tool-call turn must carry, in its
/// `reasoning_details`, the `reasoning.encrypted` entry issued with its call, and no
/// `reasoning.encrypted` entry without `data` (OpenRouter turns it into the call's empty
/// signature). Otherwise a tool call with reasoning details.
fn openrouter_gemini() -> Handler {
    Arc::new(|r: &Recorded| {
        let v = body(&r.body);
        let msgs = v["messages"].as_array().unwrap();
        for (i, m) in msgs.iter().enumerate() {
            let Some(calls) = m["tool_calls"].as_array() else {
                continue;
            };
            let details = m["reasoning_details"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let encrypted: Vec<&Value> = details
                .iter()
                .filter(|d| d["type"] == "reasoning.encrypted")
                .collect();
            let call = calls[0]["id"].as_str().unwrap();
            let signed = encrypted.iter().any(|d| d["data"] == signature(call));
            let stub = encrypted
                .iter()
                .any(|d| d["data"].as_str().is_none_or(str::is_empty));
            if !signed || stub {
                let name = calls[0]["function"]["name"].as_str().unwrap();
                return json_response(400, &openrouter_missing(name, i));
            }
        }
        let n = msgs.iter().filter(|m| m["role"] == "assistant").count();
        let call = format!("tool_get_weather_{n}");
        json_response(
            200,
            &json!({"id": format!("gen-{n}"), "object": "chat.completion", "model": v["model"],
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": "", "reasoning": "Look up the weather.",
                    "reasoning_details": [
                        {"type": "reasoning.text", "text": "Look up the weather.",
                         "format": "google-gemini-v1", "index": 0},
                        {"type": "reasoning.encrypted", "data": signature(&call), "id": call,
                         "format": "google-gemini-v1", "index": 1}],
                    "tool_calls": [{"id": call, "type": "function", "index": 0,
                        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
            .to_string(),
        )
    })
}

const GEMINI_MODEL: &str = "google/gemini-3-pro-preview";

/// The agent's second request: the tool-call turn echoed with `details`, and its result.
fn openrouter_echo(details: Value) -> String {
    let call = "tool_get_weather_0";
    json!({"model": GEMINI_MODEL, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_details": details,
         "tool_calls": [{"id": call, "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": call, "content": "sunny"}]})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openrouter_reasoning_details_entries_without_data() {
    let mock = start_mock(openrouter_gemini()).await;
    let proxy = start_proxy(&config("/or", &mock.url(), "openrouter")).await;
    let c = client();
    let direct = format!("{}/v1/chat/completions", mock.url());
    let via = proxy.url("/or/v1/chat/completions");
    let first = json!({"model": GEMINI_MODEL,
                       "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    .to_string();
    let (status, _, _) = send(&c, &via, &[AUTH], first).await;
    assert_eq!(status, 200);

    let text = json!({"type": "reasoning.text", "text": "Look up the weather.",
                      "format": "google-gemini-v1", "index": 0});
    let real = json!({"type": "reasoning.encrypted", "data": signature("tool_get_weather_0"),
                      "id": "tool_get_weather_0", "format": "google-gemini-v1", "index": 1});
    let stub = json!({"type": "reasoning.encrypted", "id": "tool_get_weather_0",
                      "format": "google-gemini-v1", "index": 2});
    // (a) the whole array kept plus a stub; (b) the stub in place of the real entry.
    for (case, details, want) in [
        (
            "stub appended",
            json!([text, real, stub]),
            json!([text, real]),
        ),
        ("stub instead", json!([text, stub]), json!([text, real])),
    ] {
        let req = openrouter_echo(details);
        let (status, _, b) = send(&c, &direct, &[], req.clone()).await;
        assert_eq!(status, 400, "{case}: the mock takes it without the proxy");
        let err = body(&b);
        assert_eq!(err["error"]["message"], "Provider returned error");
        assert!(err["error"]["metadata"]["raw"]
            .as_str()
            .unwrap()
            .contains("Function call is missing a thought_signature in functionCall parts"));

        let (status, headers, b) = send(&c, &via, &[AUTH], req.clone()).await;
        assert_eq!(status, 200, "{case}: {}", String::from_utf8_lossy(&b));
        let sent = body(&mock.last().body);
        assert_eq!(sent["messages"][1]["reasoning_details"], want, "{case}");
        let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
        assert!(h.contains("carriers_dropped=1;"), "{case}: {h}");
        let restored = if case == "stub instead" { 1 } else { 0 };
        assert!(
            h.contains(&format!("restored_reasoning_details={restored};")),
            "{case}: {h}"
        );
        // Deterministic: the same request goes out as the same bytes.
        let before = mock.last().body;
        send(&c, &via, &[AUTH], req).await;
        assert_eq!(mock.last().body, before, "{case}");
    }
    proxy.stop().await;
}

// ---- 2. Cerebras ------------------------------------------------------------------------

/// Cerebras' 400 for a body property it does not know: its own shape, no `error` wrapper
/// (https://github.com/mengxi-ream/read-frog/issues/1327, `body.enableThinking`;
/// https://github.com/CherryHQ/cherry-studio/issues/11191, `body.thinking`).
fn cerebras_unsupported(property: &str) -> String {
    json!({"message": format!("body.{property}: property 'body.{property}' is unsupported"),
           "type": "invalid_request_error", "param": "validation_error",
           "code": "wrong_api_format"})
    .to_string()
}

/// Cerebras: the first top-level property it does not take is a 400 (the reasoning controls
/// it documents are `reasoning_effort`, `reasoning_format`, `disable_reasoning`,
/// `clear_thinking`); otherwise a text answer.
fn cerebras() -> Handler {
    const TAKES: [&str; 10] = [
        "model",
        "messages",
        "stream",
        "max_completion_tokens",
        "temperature",
        "tools",
        "reasoning_effort",
        "reasoning_format",
        "disable_reasoning",
        "clear_thinking",
    ];
    Arc::new(|r: &Recorded| {
        let v = body(&r.body);
        if let Some(k) = v
            .as_object()
            .unwrap()
            .keys()
            .find(|k| !TAKES.contains(&k.as_str()))
        {
            return json_response(400, &cerebras_unsupported(k));
        }
        json_response(
            200,
            &json!({"id": "c1", "object": "chat.completion", "model": v["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Sunny.", "reasoning": "Easy."}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
            .to_string(),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cerebras_top_level_thinking_parameters() {
    let mock = start_mock(cerebras()).await;
    let proxy = start_proxy(&config("/cb", &mock.url(), "cerebras")).await;
    let c = client();
    let req = json!({"model": "qwen-3-235b-a22b-thinking-2507", "enable_thinking": true,
                     "reasoning": {"effort": "high"}, "reasoning_effort": "high",
                     "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    .to_string();
    let (status, _, b) = send(
        &c,
        &format!("{}/v1/chat/completions", mock.url()),
        &[],
        req.clone(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body(&b),
        body(cerebras_unsupported("enable_thinking").as_bytes())
    );

    let (status, headers, b) = send(&c, &proxy.url("/cb/v1/chat/completions"), &[AUTH], req).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
    assert_eq!(mock.count(), 2, "stripped up front: no rejected attempt");
    let sent = body(&mock.last().body);
    assert_eq!(
        sent,
        json!({"model": "qwen-3-235b-a22b-thinking-2507", "reasoning_effort": "high",
               "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    );
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains("params_dropped=2;"), "{h}");
    proxy.stop().await;
}

// ---- 3. OpenAI Responses ----------------------------------------------------------------

/// OpenAI's 400 for an item whose reasoning item does not come before it, as reported in
/// https://github.com/continuedev/continue/issues/11309 (the body, relayed by LiteLLM) and
/// https://github.com/continuedev/continue/issues/12620.
fn responses_without_reasoning(item: &str, kind: &str, rs: &str) -> String {
    json!({"error": {"message": format!(
               "Item '{item}' of type '{kind}' was provided without its required 'reasoning' item: '{rs}'."),
           "type": "invalid_request_error", "param": "input", "code": null}})
    .to_string()
}

/// OpenAI Responses, stateless: the items it issued (`msg_1`, `fc_1`, produced by `rs_1`)
/// must each come after `rs_1` in `input`. The first request gets `[rs_1, msg_1, fc_1]`.
fn responses() -> Handler {
    Arc::new(|r: &Recorded| {
        let v = body(&r.body);
        let input = v["input"].as_array().unwrap();
        let at = |id: &str| input.iter().position(|i| i["id"] == id);
        for (item, kind) in [("msg_1", "message"), ("fc_1", "function_call")] {
            if let Some(p) = at(item) {
                if at("rs_1").is_none_or(|rs| rs > p) {
                    return json_response(400, &responses_without_reasoning(item, kind, "rs_1"));
                }
            }
        }
        json_response(
            200,
            &json!({"id": "resp_1", "object": "response", "status": "completed",
                "model": v["model"], "output": [
                    {"type": "reasoning", "id": "rs_1", "summary": [],
                     "encrypted_content": "gAAAAB-rs_1"},
                    {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                     "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
                    {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                     "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"}],
                "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}})
            .to_string(),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_reasoning_item_stays_before_the_item_it_produced() {
    let mock = start_mock(responses()).await;
    let proxy = start_proxy(&config("/oa", &mock.url(), "openai")).await;
    let c = client();
    let via = proxy.url("/oa/v1/responses");
    let user = json!({"role": "user", "content": "Weather in Paris?"});
    let head = json!({"model": "gpt-5", "store": false,
                      "include": ["reasoning.encrypted_content"]});
    let request = |input: Vec<Value>| {
        let mut r = head.clone();
        r["input"] = Value::Array(input);
        r.to_string()
    };
    let (status, _, b) = send(&c, &via, &[AUTH], request(vec![user.clone()])).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
    let output = body(&b)["output"].as_array().unwrap().clone();
    let (rs, msg, fc) = (&output[0], &output[1], &output[2]);
    let result = json!({"type": "function_call_output", "call_id": "call_1", "output": "sunny"});

    // The agent moved the reasoning item after the message it produced.
    let reordered = request(vec![
        user.clone(),
        msg.clone(),
        rs.clone(),
        fc.clone(),
        result.clone(),
    ]);
    let (status, _, b) = send(
        &c,
        &format!("{}/v1/responses", mock.url()),
        &[],
        reordered.clone(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body(&b),
        body(responses_without_reasoning("msg_1", "message", "rs_1").as_bytes())
    );

    let (status, headers, b) = send(&c, &via, &[AUTH], reordered.clone()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
    let sent = body(&mock.last().body);
    assert_eq!(
        sent["input"],
        json!([user, rs, msg, fc, result]),
        "the output order"
    );
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains("reasoning_restored=1;"), "{h}");
    // Each item goes out as the client sent it, and the same request as the same bytes.
    let bytes = mock.last().body;
    for item in [&user, rs, msg, fc, &result] {
        let text = item.to_string();
        assert!(
            bytes.windows(text.len()).any(|w| w == text.as_bytes()),
            "{text}"
        );
    }
    send(&c, &via, &[AUTH], reordered).await;
    assert_eq!(mock.last().body, bytes);

    // An item the response did not carry in the run: forwarded as sent (the 400 relayed).
    let foreign = json!({"type": "message", "id": "msg_9", "role": "assistant",
                         "content": [{"type": "output_text", "text": "x"}]});
    let unknown = request(vec![
        user.clone(),
        msg.clone(),
        foreign,
        rs.clone(),
        fc.clone(),
        result.clone(),
    ]);
    let (status, _, _) = send(&c, &via, &[AUTH], unknown.clone()).await;
    assert_eq!(status, 400);
    assert_eq!(mock.last().body, unknown.as_bytes());
    proxy.stop().await;
}
