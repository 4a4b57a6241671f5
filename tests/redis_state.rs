//! The Redis state backend under faults, through the proxy: Redis killed mid-session and
//! restarted (every request served, one warning, writes resume), Redis not up when the proxy
//! starts, a record cut short in Redis (ignored by `cachekeeper report`), and an outage past
//! the held-writes bound (4,096 keys: the oldest dropped and counted, writes resuming after).
//! The proxy runs in-process against the mock upstream; Redis is Debian's `redis-server` on a free loopback
//! port (`tests/common/redis.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::redis::RedisServer;
use common::*;

/// The members of Redis's index of usage records (`ck:v1:meta:index:usage`: one per record
/// written, its key after `ck:v1:usage:`), in index order.
fn usage_members(raw: &mut ::redis::Connection) -> Vec<String> {
    ::redis::cmd("ZRANGE")
        .arg("ck:v1:meta:index:usage")
        .arg(0)
        .arg(-1)
        .query(raw)
        .unwrap()
}

/// Usage records Redis holds (the members of their index whose record is there).
fn stored_usage(server: &RedisServer) -> usize {
    let mut raw = server.raw();
    usage_members(&mut raw)
        .iter()
        .filter(|m| {
            ::redis::cmd("EXISTS")
                .arg(format!("ck:v1:usage:{m}"))
                .query::<i64>(&mut raw)
                .unwrap()
                == 1
        })
        .count()
}

/// The `cachekeeper::state` log lines about `url` (the store names its Redis by URL).
fn state_lines(url: &str) -> Vec<serde_json::Value> {
    log_text()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "cachekeeper::state" && v["path"] == url)
        .collect()
}

fn redis_config(mock: &Mock, server: &RedisServer) -> String {
    config_for(
        &mock.url(),
        &format!("[state]\nbackend = \"redis\"\nurl = {:?}\n", server.url()),
    )
}

async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// Redis killed (SIGKILL) in the middle of a session and started again on the same port
/// (empty: no persistence): every request is served whole throughout, the outage logs one
/// warning (naming the URL, never the key or the user's text) and counts its failed writes,
/// and once Redis is back the writes held meanwhile and every later one are in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_session_and_restarted() {
    logs();
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let mut server = RedisServer::start();
    let url = server.url();
    let proxy = start_proxy(&redis_config(&mock, &server)).await;
    assert!(proxy.store.is_durable());
    let errors = "cachekeeper_state_write_errors_total";
    let mut sent = 0;
    for _ in 0..3 {
        assert_eq!(state_turn(&proxy, "s", sent).await, 200);
        sent += 1;
    }
    proxy.store.flush();
    assert_eq!(stored_usage(&server), 3);
    assert_eq!(metric(&proxy, errors).await, Some(0.0));

    server.kill();
    let killed_at = sent;
    let mut during = 0;
    while metric(&proxy, errors).await == Some(0.0) {
        assert!(during < 200, "no write failed");
        assert_eq!(state_turn(&proxy, "s", sent).await, 200);
        sent += 1;
        during += 1;
        proxy.store.flush();
    }
    for _ in 0..10 {
        assert_eq!(state_turn(&proxy, "s", sent).await, 200);
        sent += 1;
    }
    proxy.store.flush();
    assert!(!proxy.store.is_durable());
    // Far fewer than the 4,096 held writes: none dropped (the counter is served).
    assert_eq!(
        metric(&proxy, "cachekeeper_state_writes_dropped_total").await,
        Some(0.0)
    );
    let warnings: Vec<_> = state_lines(&url)
        .into_iter()
        .filter(|v| v["level"] == "WARN")
        .collect();
    assert_eq!(warnings.len(), 1, "one warning per outage: {warnings:?}");
    assert_eq!(
        warnings[0]["message"],
        "state writes failing; serving on, keeping records in memory and retrying"
    );

    server.restart();
    // Served while the writer finds Redis again (a retry every second).
    let mut after = 0;
    while !proxy.store.is_durable() {
        assert!(after < 100, "writes never resumed");
        assert_eq!(state_turn(&proxy, "s", sent).await, 200);
        sent += 1;
        after += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(state_turn(&proxy, "s", sent).await, 200);
    sent += 1;
    proxy.store.flush();
    let lines = state_lines(&url);
    let resumed: Vec<_> = lines
        .iter()
        .filter(|v| v["message"] == "state writes resumed")
        .collect();
    assert_eq!(resumed.len(), 1, "{lines:?}");
    assert_eq!(resumed[0]["dropped"], 0);
    assert_eq!(
        lines.iter().filter(|v| v["level"] == "WARN").count(),
        1,
        "still one warning: {lines:?}"
    );
    // Redis came back empty: the turns from the kill on are there, the held ones included,
    // and the one written after the restart.
    assert_eq!(stored_usage(&server), sent - killed_at);
    for line in &lines {
        let text = line.to_string();
        assert!(
            !text.contains(TURN_KEY) && !text.contains(TURN_TEXT),
            "{text}"
        );
    }
    proxy.stop().await;
}

/// Redis not up when the proxy starts: it serves from memory with one warning, connects in
/// the background, and once Redis answers writes there (one info line), with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_started_before_redis_uses_it_once_it_answers() {
    logs();
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let proxy = start_proxy(&redis_config(&mock, &server)).await;
    assert!(!proxy.store.is_durable());
    let mut sent = 0;
    for _ in 0..3 {
        assert_eq!(state_turn(&proxy, "early", sent).await, 200);
        sent += 1;
    }
    proxy.store.flush();
    let lines = state_lines(&url);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["level"], "WARN");
    assert_eq!(
        lines[0]["message"],
        "cannot reach Redis; serving from memory and connecting in the background"
    );

    server.restart();
    assert!(
        wait_for(Duration::from_secs(10), || proxy.store.is_durable()).await,
        "never switched to Redis"
    );
    assert_eq!(state_turn(&proxy, "early", sent).await, 200);
    sent += 1;
    proxy.store.flush();
    assert_eq!(stored_usage(&server), sent, "held and later turns in Redis");
    let lines = state_lines(&url);
    let reachable: Vec<_> = lines
        .iter()
        .filter(|v| v["message"] == "state store reachable; using it from now on")
        .collect();
    assert_eq!(reachable.len(), 1, "{lines:?}");
    assert_eq!(reachable[0]["level"], "INFO");
    assert_eq!(lines.iter().filter(|v| v["level"] == "WARN").count(), 1);
    proxy.stop().await;
}

/// A usage record cut short in Redis (as a write torn by a crash would leave it, under its
/// real key and index entry) is not misread: `cachekeeper report` shows the session's other
/// turns and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_cut_short_in_redis_is_skipped_by_report() {
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let server = RedisServer::start();
    let config = redis_config(&mock, &server);
    let proxy = start_proxy(&config).await;
    for i in 0..3 {
        assert_eq!(state_turn(&proxy, "torn", i).await, 200);
    }
    proxy.store.flush();
    proxy.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("proxy.toml");
    std::fs::write(&cfg, &config).unwrap();
    let report = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachekeeper"))
            .args(["report", "--json", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json
    };
    let before = report();
    assert_eq!(before.as_array().unwrap().len(), 1, "{before}");
    assert_eq!(before[0]["turns"], 3);

    let mut raw = server.raw();
    let members = usage_members(&mut raw);
    assert_eq!(members.len(), 3);
    let name = format!("ck:v1:usage:{}", members[1]);
    let whole: Vec<u8> = ::redis::cmd("GET").arg(&name).query(&mut raw).unwrap();
    let _: () = ::redis::cmd("SET")
        .arg(&name)
        .arg(&whole[..whole.len() / 2])
        .query(&mut raw)
        .unwrap();
    let after = report();
    assert_eq!(after.as_array().unwrap().len(), 1, "{after}");
    assert_eq!(after[0]["turns"], 2, "the torn record is skipped: {after}");
}

/// Turns in the bound test: each writes two distinct keys (its session's record and its usage
/// record), so 2 × 2,100 = 4,200 keys, past the 4,096 held in an outage
/// (`crates/state/src/outage.rs` `MAX_PENDING_RECORDS`).
const BOUND_TURNS: usize = 2_100;

/// The held-writes bound (`MAX_PENDING_RECORDS`, `docs/state.md#when-the-file-cannot-be-written`).
const MAX_HELD: usize = 4_096;

/// Concurrent requests while filling the bound.
const BOUND_CONCURRENCY: usize = 32;

/// Redis killed while the proxy serves: more than 4,096 distinct keys' writes arrive, the
/// oldest held ones are dropped and counted in `cachekeeper_state_writes_dropped_total`
/// (exactly the keys past the bound), every request is served whole, and once Redis is
/// back the newest held writes and later ones reach it while the dropped ones never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_holds_4096_keys_and_drops_the_oldest_writes_past_them() {
    logs();
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let mut server = RedisServer::start();
    let url = server.url();
    let proxy = start_proxy(&redis_config(&mock, &server)).await;
    let errors = "cachekeeper_state_write_errors_total";
    let dropped = "cachekeeper_state_writes_dropped_total";
    assert_eq!(state_turn(&proxy, "first", 0).await, 200);
    proxy.store.flush();
    assert_eq!(stored_usage(&server), 1);

    server.kill();
    // Turns of session "first" until a write has failed: the outage has begun, and every
    // write from the kill on is held (one session key, one usage key per turn).
    let mut during = 0;
    while metric(&proxy, errors).await == Some(0.0) {
        assert!(during < 200, "no write failed");
        assert_eq!(state_turn(&proxy, "first", 1 + during).await, 200);
        during += 1;
        proxy.store.flush();
    }
    // Many small turns at once, each of a session of its own.
    let target = proxy.url("/anthropic/v1/messages");
    let mut next = 0;
    let mut tasks = tokio::task::JoinSet::new();
    while next < BOUND_TURNS || !tasks.is_empty() {
        while next < BOUND_TURNS && tasks.len() < BOUND_CONCURRENCY {
            let target = target.clone();
            let i = next;
            tasks.spawn(async move {
                let body = format!(
                    r#"{{"model":"claude-x","max_tokens":8,"messages":[{{"role":"user","content":"{TURN_TEXT} {i}"}}]}}"#
                );
                let session = format!("bound-{i:04}");
                let headers = [("x-api-key", TURN_KEY), ("x-cachekeeper-session", &*session)];
                send(&client(), &target, &headers, body).await
            });
            next += 1;
        }
        let (status, _, body) = tasks.join_next().await.unwrap().unwrap();
        assert_eq!(status, 200);
        assert_eq!(&body[..], TURN_REPLY.as_bytes(), "served whole");
    }
    proxy.store.flush();
    assert!(!proxy.store.is_durable());
    // Distinct keys held: "first"'s session, its `during` usage records, and two per turn.
    let held = 1 + during + 2 * BOUND_TURNS;
    let want_dropped = held - MAX_HELD;
    assert_eq!(metric(&proxy, dropped).await, Some(want_dropped as f64));

    server.restart();
    let mut after = 0;
    while !proxy.store.is_durable() {
        assert!(after < 100, "writes never resumed");
        tokio::time::sleep(Duration::from_millis(200)).await;
        after += 1;
        proxy.store.flush();
    }
    assert_eq!(state_turn(&proxy, "after", 0).await, 200);
    proxy.store.flush();
    let lines = state_lines(&url);
    let resumed: Vec<_> = lines
        .iter()
        .filter(|v| v["message"] == "state writes resumed")
        .collect();
    assert_eq!(resumed.len(), 1, "{lines:?}");
    assert_eq!(resumed[0]["dropped"], want_dropped);
    assert_eq!(resumed[0]["records"], MAX_HELD);
    assert_eq!(metric(&proxy, dropped).await, Some(want_dropped as f64));
    // Redis came back empty: it holds what survived the bound (the newest held writes) and
    // the turn after. The oldest held usage record ("first"'s turn 2) was dropped; the
    // newest turn's and the later one are there.
    let mut raw = server.raw();
    let exists = |raw: &mut ::redis::Connection, member: &str| -> bool {
        usage_members(raw).iter().any(|m| m.ends_with(member))
    };
    assert!(!exists(&mut raw, "first%0A00000002"));
    assert!(exists(
        &mut raw,
        &format!("bound-{:04}%0A00000001", BOUND_TURNS - 1)
    ));
    assert!(exists(&mut raw, "after%0A00000001"));
    proxy.stop().await;
}

/// Session records Redis holds (`ck:v1:session:*`).
fn stored_sessions(server: &RedisServer) -> usize {
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("ck:v1:session:*")
        .query(&mut server.raw())
        .unwrap();
    keys.len()
}

/// `[state] write_wait_ms`: the last chunk of a response waits for its turn's writes to reach
/// Redis. In time: the client has the response only once its session record is in Redis
/// (read here with no flush), counted `written`. While Redis holds every write
/// (`CLIENT PAUSE … WRITE`, far longer than the bound) the bound passes, the response is
/// served whole anyway and the write lands once Redis takes writes again, counted `late`.
/// Redis down: no wait at all, counted `held`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_waits_for_its_turns_writes_at_most_write_wait_ms() {
    logs();
    let mock = start_mock(Arc::new(|_r: &Recorded| json_response(200, TURN_REPLY))).await;
    let mut server = RedisServer::start();
    let config = config_for(
        &mock.url(),
        &format!(
            "[state]\nbackend = \"redis\"\nurl = {:?}\nwrite_wait_ms = 300\n",
            server.url()
        ),
    );
    let proxy = start_proxy(&config).await;
    let waits =
        |result: &str| format!("cachekeeper_state_write_waits_total{{result=\"{result}\"}}");

    assert_eq!(state_turn(&proxy, "w1", 0).await, 200);
    assert_eq!(
        stored_sessions(&server),
        1,
        "in Redis before the client had the response"
    );
    assert_eq!(metric(&proxy, &waits("written")).await, Some(1.0));
    assert_eq!(metric(&proxy, &waits("late")).await, None);

    // The writer idle first (the first turn's usage record written): the next turn's reads
    // are answered, its writes are what waits. (A read queued behind a paused write would
    // time out, and the store would count as not answering: then no response waits at all,
    // `tests/faults.rs`.)
    proxy.store.flush();
    let _: () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(state_turn(&proxy, "w2", 0).await, 200);
    assert_eq!(metric(&proxy, &waits("late")).await, Some(1.0));
    let _: () = ::redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut server.raw())
        .unwrap();
    proxy.store.flush();
    assert_eq!(stored_sessions(&server), 2, "the late write landed");

    server.kill();
    let mut sent = 0;
    while metric(&proxy, "cachekeeper_state_write_errors_total").await == Some(0.0) {
        assert!(sent < 200, "no write failed");
        assert_eq!(state_turn(&proxy, "w3", sent).await, 200);
        sent += 1;
        proxy.store.flush();
    }
    assert_eq!(state_turn(&proxy, "w3", sent).await, 200);
    assert!(metric(&proxy, &waits("held")).await >= Some(1.0));
    proxy.stop().await;
}
