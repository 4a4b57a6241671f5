//! `cachekeeper state`: what a proxy stored, listed without content; purged; and the state
//! file holds no reasoning text in clear.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;

const REASONING: [&str; 2] = ["User wants the weather; ", "call get_weather for Paris."];

/// A DeepSeek-style upstream: every chat request gets the streamed reasoning + tool call.
fn deepseek() -> Handler {
    let sse = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/responses/deepseek_reasoning.sse"),
    )
    .unwrap();
    Arc::new(move |_r: &Recorded| sse_response(full(sse.clone())))
}

fn chat(user: &str) -> String {
    serde_json::json!({
        "model": "deepseek-chat",
        "stream": true,
        "messages": [{"role": "user", "content": user}]
    })
    .to_string()
}

fn cli(cfg: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cachekeeper"))
        .arg("state")
        .arg("--config")
        .arg(cfg)
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Every file SQLite keeps for the database.
fn file_bytes(db: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        if let Ok(b) = std::fs::read(&p) {
            all.extend_from_slice(&b);
        }
    }
    all
}

fn rows(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines, reason = "one scenario, read in order")]
async fn proxy_stores_sealed_carriers_that_state_lists_and_purges() {
    let mock = start_mock(deepseek()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let cfg_text = config_for(
        &mock.url(),
        &format!("[state]\npath = {:?}\n", db.display().to_string()),
    );
    let cfg = dir.path().join("proxy.toml");
    std::fs::write(&cfg, &cfg_text).unwrap();

    // Nothing yet: the command does not create the file.
    assert!(ok(&cli(&cfg, &[])).contains("no records"));
    assert!(!db.exists());

    let proxy = start_proxy(&cfg_text).await;
    let c = client();
    let url = proxy.url("/openai/v1/chat/completions");
    // Two credentials, two turns each (different user messages: different fingerprints), and
    // one index record per credential for the model: 6 records;
    // and one request without a credential (kept in memory only).
    for (i, auth) in ["Bearer sk-alpha-1", "Bearer sk-beta-2"].iter().enumerate() {
        for turn in 0..2 {
            let (status, _, body) = send(
                &c,
                &url,
                &[("authorization", auth)],
                chat(&format!("q{i}{turn}")),
            )
            .await;
            assert_eq!(status, 200);
            assert!(String::from_utf8_lossy(&body).contains("reasoning_content"));
        }
    }
    let (status, _, _) = send(&c, &url, &[], chat("no credential")).await;
    assert_eq!(status, 200);
    // A clean shutdown flushes the queued writes.
    proxy.stop().await;

    let host = mock.url().trim_start_matches("http://").to_owned();
    let listed = ok(&cli(&cfg, &[]));
    let lines: Vec<Vec<&str>> = listed.lines().map(rows).collect();
    // 6 carriers; 5 sessions (scoped) and their 5 turns (scope "").
    assert!(
        listed.contains(" 16 record(s)") && listed.contains("2 credential scope(s)"),
        "{listed}"
    );
    assert!(
        lines
            .iter()
            .any(|r| r.len() == 6 && r[0] == "carrier" && r[1] == "6" && r[3] == "2"),
        "{listed}"
    );
    assert!(
        lines
            .iter()
            .any(|r| r.len() == 7 && r[..4] == ["carrier", host.as_str(), "deepseek-chat", "6"]),
        "{listed}"
    );
    for secret in ["sk-alpha", "sk-beta", REASONING[0], REASONING[1]] {
        assert!(!listed.contains(secret), "{secret}: {listed}");
    }
    // The state file, read directly, holds none of the reasoning text nor the credentials.
    let bytes = file_bytes(&db);
    for needle in REASONING
        .iter()
        .chain(&["get_weather", "sk-alpha-1", "sk-beta-2"])
    {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "{needle:?} in the state file"
        );
    }

    // --older-than only with --purge; unknown kinds list the valid ones.
    let out = cli(&cfg, &["--older-than", "3"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--purge"),
        "{out:?}"
    );
    let out = cli(&cfg, &["--purge", "--kind", "carriers"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("unknown kind \"carriers\"")
            && err.contains(
                "verdict, carrier, session, usage, watermark, rejected_signature, transcode, response_link"
            ),
        "{err}"
    );

    // An old carrier (written 10 days ago): --older-than 5 purges it alone.
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "UPDATE records SET written_at = written_at - 864000
             WHERE rowid = (SELECT MIN(rowid) FROM records WHERE kind = 'carrier')",
            [],
        )
        .unwrap();
    }
    let listed = ok(&cli(&cfg, &["--kind", "carrier"]));
    assert!(listed.contains("10d"), "{listed}");
    let purged = ok(&cli(&cfg, &["--purge", "--older-than", "5"]));
    assert!(
        purged.starts_with("purged 1 record(s) written more than 5 day(s) ago (carrier 1)"),
        "{purged}"
    );
    assert!(ok(&cli(&cfg, &[])).contains(" 15 record(s)"));
    let purged = ok(&cli(&cfg, &["--purge", "--kind", "verdict"]));
    assert!(purged.starts_with("purged 0 record(s)"), "{purged}");
    let purged = ok(&cli(&cfg, &["--purge"]));
    assert!(
        purged.starts_with("purged 15 record(s) (carrier 5, session 5, usage 5)"),
        "{purged}"
    );
    assert!(ok(&cli(&cfg, &[])).contains("no records in"));
}

/// The reasoning a DeepSeek-like upstream streams with each tool call (non-ASCII, an escape and
/// U+2028), and requires back on every echoed assistant turn.
const THOUGHT: &str = "Call the tool.\u{2028}\u{e9} \"q\"";

/// A DeepSeek-like upstream: 400 when an echoed assistant turn lacks its exact
/// `reasoning_content`; otherwise a tool call with reasoning.
fn needs_reasoning() -> Handler {
    Arc::new(|r: &Recorded| {
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let msgs = v["messages"].as_array().unwrap();
        if msgs
            .iter()
            .filter(|m| m["role"] == "assistant")
            .any(|m| m["reasoning_content"] != serde_json::json!(THOUGHT))
        {
            return json_response(
                400,
                r#"{"error":{"message":"Missing `reasoning_content` field in the assistant message at message index 1.","type":"invalid_request_error"}}"#,
            );
        }
        let n = msgs.iter().filter(|m| m["role"] == "assistant").count();
        json_response(
            200,
            &serde_json::json!({"id": "c", "object": "chat.completion", "model": v["model"],
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": null, "reasoning_content": THOUGHT,
                    "tool_calls": [{"id": format!("call_{n}"), "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
            .to_string(),
        )
    })
}

/// The conversation after `turns` tool rounds, rebuilt by an agent that drops
/// `reasoning_content`.
fn dropped(turns: usize) -> String {
    let mut messages = vec![serde_json::json!({"role": "user", "content": "weather in Paris?"})];
    for i in 0..turns {
        messages.push(
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
        );
        messages.push(
            serde_json::json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": "sunny"}),
        );
    }
    serde_json::json!({"model": "deepseek-chat", "messages": messages}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_proxy_restores_from_the_file_for_the_same_key_only_until_purged() {
    let mock = start_mock(needs_reasoning()).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let cfg_text = format!(
        "[state]\npath = {:?}\n\n[[routes]]\nname = \"ds\"\nprefix = \"/v\"\nupstream = \"{}\"\nprovider = \"local\"\n",
        db.display().to_string(),
        mock.url()
    );
    let cfg = dir.path().join("proxy.toml");
    std::fs::write(&cfg, &cfg_text).unwrap();
    let post = |proxy: &Proxy, key: &'static str, body: String| {
        let url = proxy.url("/v/v1/chat/completions");
        async move { send(&client(), &url, &[("authorization", key)], body).await }
    };

    let proxy = start_proxy(&cfg_text).await;
    let (status, _, _) = post(&proxy, "Bearer sk-one", dropped(0)).await;
    assert_eq!(status, 200);
    proxy.stop().await;
    let bytes = file_bytes(&db);
    assert!(!bytes.windows(14).any(|w| w == b"Call the tool."));

    // A new process on the same file: the carrier comes from disk, for the same key only.
    let proxy = start_proxy(&cfg_text).await;
    let (status, headers, body) = post(&proxy, "Bearer sk-one", dropped(1)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let h = headers["x-cachekeeper-rewrites"].to_str().unwrap();
    assert!(h.contains("restored_reasoning_content=1;"), "{h}");
    let sent: serde_json::Value = serde_json::from_slice(&mock.last().body).unwrap();
    assert_eq!(sent["messages"][1]["reasoning_content"], THOUGHT);
    let (status, _, _) = post(&proxy, "Bearer sk-two", dropped(1)).await;
    assert_eq!(status, 400, "another key gets nothing restored");

    // Purged by the CLI while it runs: within a few seconds the proxy restores nothing.
    let purged = ok(&cli(&cfg, &["--purge", "--kind", "carrier"]));
    assert!(
        purged.starts_with("purged 3 record(s) (carrier 3)"),
        "{purged}"
    );
    let mut forgot = false;
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let (status, _, _) = post(&proxy, "Bearer sk-one", dropped(1)).await;
        if status == 400 {
            forgot = true;
            break;
        }
    }
    assert!(forgot, "the running proxy did not notice the purge");
    proxy.stop().await;
}
