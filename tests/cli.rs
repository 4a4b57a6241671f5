//! The command line as a person meets it, with the real binary: `check` lists routes in the
//! config file's order; every printing subcommand survives a closed pipe (`check | head -1`);
//! `serve` and `check` (and `report`, `state`, `verdicts`, `replay`) find `./proxy.toml`,
//! then the platform config directory, and say which file they loaded (or every place they
//! looked); `serve --log-format auto|json|pretty`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cachekeeper");

/// A config of `routes` (name, prefix) to a local upstream, with its state in `dir`.
fn write_config(dir: &Path, routes: &[(String, String)]) -> PathBuf {
    let mut toml = format!(
        "[state]\npath = {:?}\n",
        dir.join("state.db").display().to_string()
    );
    for (name, prefix) in routes {
        toml.push_str(&format!(
            "\n[[routes]]\nname = \"{name}\"\nprefix = \"{prefix}\"\nupstream = \"http://127.0.0.1:9\"\n"
        ));
    }
    let path = dir.join("proxy.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn routes(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, p)| ((*n).to_owned(), (*p).to_owned()))
        .collect()
}

/// `cachekeeper ARGS` in `cwd` with a private config directory (`XDG_CONFIG_HOME`, `HOME`).
fn run(cwd: &Path, config_home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env("XDG_CONFIG_HOME", config_home)
        .env("HOME", config_home)
        .output()
        .unwrap()
}

#[test]
fn check_prints_routes_in_config_order() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &routes(&[
            ("zeta", "/z"),
            ("alpha", "/alpha/long/prefix"),
            ("root", "/"),
        ]),
    );
    let out = run(
        dir.path(),
        dir.path(),
        &["check", "--config", cfg.to_str().unwrap()],
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("route "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["zeta", "alpha", "root"], "{text}");
}

/// `check` names the state store; a Redis URL's password (in the file or in the environment
/// variable `url_env` names) is printed as `***`, never in clear, and a bad URL's error does
/// not quote it either. `check` does not connect to Redis.
#[test]
fn check_prints_the_redis_url_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &routes(&[("a", "/a")]));
    let base = std::fs::read_to_string(&cfg).unwrap();
    let check = |state: &str, env: &[(&str, &str)]| {
        let toml = base.replacen("[state]\n", &format!("[state]\n{state}\n"), 1);
        std::fs::write(&cfg, toml).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["check", "--config", cfg.to_str().unwrap()]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = check("", &[]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!(
            "state: sqlite {}",
            dir.path().join("state.db").display()
        )),
        "{text}"
    );
    let (ok, text) = check(
        "backend = \"redis\"\nurl = \"redis://app:Tr0ub4dor@10.9.8.7:6390/2\"",
        &[],
    );
    assert!(ok, "{text}");
    assert!(
        text.contains("state: redis redis://app:***@10.9.8.7:6390/2"),
        "{text}"
    );
    assert!(!text.contains("Tr0ub4dor"), "{text}");
    let (ok, text) = check(
        "backend = \"redis\"\nurl_env = \"CK_TEST_URL\"",
        &[("CK_TEST_URL", "rediss://:c0rrect-h0rse@cache:6380/0")],
    );
    assert!(ok, "{text}");
    assert!(
        text.contains("state: redis rediss://:***@cache:6380/0"),
        "{text}"
    );
    assert!(!text.contains("c0rrect-h0rse"), "{text}");
    let (ok, text) = check(
        "backend = \"redis\"\nurl = \"redis://:Tr0ub4dor@h:1/not-a-db\"",
        &[],
    );
    assert!(!ok, "{text}");
    assert!(text.contains("database number"), "{text}");
    assert!(!text.contains("Tr0ub4dor"), "{text}");
}

#[test]
fn check_warns_about_a_listen_address_beyond_loopback_without_a_client_token() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &routes(&[("a", "/a")]));
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("[server]\nlisten = \"0.0.0.0:8787\"\n{text}")).unwrap();
    let out = run(
        dir.path(),
        dir.path(),
        &["check", "--config", cfg.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.lines().next().unwrap().starts_with(
            "warning: listening on 0.0.0.0:8787, beyond loopback, without [server] client_token"
        ),
        "{stdout}"
    );
    // With a token, no warning.
    std::fs::write(
        &cfg,
        format!("[server]\nlisten = \"0.0.0.0:8787\"\nclient_token = \"t\"\n{text}"),
    )
    .unwrap();
    let out = run(
        dir.path(),
        dir.path(),
        &["check", "--config", cfg.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("beyond loopback"), "{stdout}");
}

/// A route that lends the proxy's own AWS credentials (`sign_all`) on a listener beyond
/// loopback without a client token: `check` and `serve` refuse, naming the route and the fix.
#[test]
fn a_route_that_signs_all_refuses_an_open_listener_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("proxy.toml");
    let route = "[[routes]]\nname = \"bedrock\"\nprefix = \"/\"\nprovider = \"bedrock\"\n\
                 upstream = \"https://bedrock-runtime.us-east-1.amazonaws.com\"\n\
                 [routes.aws]\nsign_all = true\n";
    std::fs::write(&cfg, format!("[server]\nlisten = \"0.0.0.0:0\"\n{route}")).unwrap();
    let path = cfg.to_str().unwrap();
    let out = run(dir.path(), dir.path(), &["check", "--config", path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "route(s) bedrock ([routes.aws] sign_all) lend the proxy's own cloud credentials"
        ),
        "{stderr}"
    );
    let out = run(dir.path(), dir.path(), &["serve", "--config", path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("Set [server] client_token"), "{stderr}");
    // On loopback it starts (check passes).
    std::fs::write(&cfg, format!("[server]\nlisten = \"127.0.0.1:0\"\n{route}")).unwrap();
    let out = run(dir.path(), dir.path(), &["check", "--config", path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_survives_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    // Enough routes for more output than a pipe holds (64 KiB on Linux), so `head -1` leaves
    // while check is still writing.
    let many: Vec<(String, String)> = (0..600)
        .map(|i| (format!("r{i}"), format!("/r{i}")))
        .collect();
    let cfg = write_config(dir.path(), &many);
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#""$0" check --config "$1" | head -1; exit "${PIPESTATUS[0]}""#)
        .arg(BIN)
        .arg(&cfg)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1);
    assert!(stdout.starts_with("config OK: "), "{stdout}");
    // The reading end closed before anything is written.
    let out = into_closed_pipe(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cachekeeper ARGS` with its stdout a pipe whose reading end is closed before it writes.
fn into_closed_pipe(args: &[&str]) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

/// The failing input of a fresh-user pass: `report`, `state` and `verdicts` printed with
/// `println!`, which panics on a closed pipe (`( cachekeeper state ) | true`: exit 101,
/// "failed printing to stdout: Broken pipe"). Each now stops quietly with exit 0, as `check`.
#[test]
fn every_printing_subcommand_survives_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &routes(&[("a", "/a")]));
    let cfg = cfg.to_str().unwrap();
    for args in [
        &["report", "--config", cfg][..],
        &["report", "--json", "--config", cfg],
        &["state", "--config", cfg],
        &["verdicts", "--config", cfg],
    ] {
        let out = into_closed_pipe(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
#[test]
fn the_config_is_found_in_the_working_directory_then_the_config_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // Neither: the error names both places.
    let out = run(cwd.path(), home.path(), &["check"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let platform = home.path().join("cachekeeper").join("proxy.toml");
    assert!(err.contains("./proxy.toml"), "{err}");
    assert!(err.contains(&platform.display().to_string()), "{err}");
    // The platform config directory.
    std::fs::create_dir_all(platform.parent().unwrap()).unwrap();
    std::fs::copy(
        write_config(home.path(), &routes(&[("home", "/h")])),
        &platform,
    )
    .unwrap();
    let out = run(cwd.path(), home.path(), &["check"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("config OK: {}", platform.display())),
        "{text}"
    );
    assert!(text.contains("route home"), "{text}");
    // ./proxy.toml wins over it.
    write_config(cwd.path(), &routes(&[("here", "/x")]));
    let out = run(cwd.path(), home.path(), &["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("config OK: ./proxy.toml"), "{text}");
    assert!(text.contains("route here"), "{text}");
    // `serve` says which file it loaded.
    let (lines, _) = serve_until_ready(cwd.path(), home.path(), &["--log-format", "json"]);
    let loaded = lines
        .iter()
        .find(|l| l.contains("config loaded"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    let v: serde_json::Value = serde_json::from_str(loaded).unwrap();
    let want = std::fs::canonicalize(cwd.path().join("proxy.toml")).unwrap();
    assert_eq!(v["file"], want.display().to_string());
}

/// Start `serve` (no `--config`: found in `cwd`) on an ephemeral port with `args`, read
/// stderr until the ready line, stop it; the lines read and whether the ready line came.
fn serve_until_ready(cwd: &Path, home: &Path, args: &[&str]) -> (Vec<String>, bool) {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(args);
    let (mut child, lines, ready) = start_until_ready(cmd, cwd, home);
    let _ = child.kill();
    let _ = child.wait();
    (lines, ready)
}

/// Spawn `cmd` in `cwd` with a private config directory, read its stderr until the ready
/// line (30 s at most); the running child, the lines read and whether the ready line came.
fn start_until_ready(
    mut cmd: Command,
    cwd: &Path,
    home: &Path,
) -> (std::process::Child, Vec<String>, bool) {
    let mut child = cmd
        .current_dir(cwd)
        .env("XDG_CONFIG_HOME", home)
        .env("HOME", home)
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let mut ready = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        ready |= line.contains("cachekeeper ready");
        lines.push(line);
        if ready {
            break;
        }
    }
    (child, lines, ready)
}

/// The soft and hard "Max open files" of a running process, from `/proc/PID/limits`.
fn nofile(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_owned();
    let cols: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
    (cols[0].to_owned(), cols[1].to_owned())
}

#[test]
fn serve_raises_the_open_file_soft_limit_to_the_hard_limit() {
    let cwd = tempfile::tempdir().unwrap();
    write_config(cwd.path(), &routes(&[("a", "/a")]));
    // Started with a soft limit of 256 (the shell's `ulimit -Sn`), below the hard limit.
    let mut cmd = Command::new("bash");
    cmd.args([
        "-c",
        &format!("ulimit -Sn 256 && exec {BIN} serve --listen 127.0.0.1:0 --log-format json"),
    ]);
    let (mut child, lines, ready) = start_until_ready(cmd, cwd.path(), cwd.path());
    let (soft, hard) = nofile(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "{lines:?}");
    assert_eq!(soft, hard, "{lines:?}");
    if hard != "256" {
        let raised = lines
            .iter()
            .find(|l| l.contains("raised the open-file limit"))
            .unwrap_or_else(|| panic!("{lines:?}"));
        let v: serde_json::Value = serde_json::from_str(raised).unwrap();
        assert_eq!(v["from"], 256, "{raised}");
        assert_eq!(
            v["to"].to_string(),
            hard.replace("unlimited", "18446744073709551615")
        );
    }
}

#[test]
fn serve_log_formats() {
    let cwd = tempfile::tempdir().unwrap();
    write_config(cwd.path(), &routes(&[("a", "/a")]));
    let home = cwd.path();
    // json, and auto when stderr is not a terminal (a pipe here): one JSON object per line.
    for args in [&["--log-format", "json"][..], &[]] {
        let (lines, ready) = serve_until_ready(cwd.path(), home, args);
        assert!(ready, "{args:?}: {lines:?}");
        for l in &lines {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}"));
            assert!(v["level"].is_string(), "{l}");
        }
    }
    // pretty: tracing-subscriber's multi-line form, not JSON.
    let (lines, ready) = serve_until_ready(cwd.path(), home, &["--log-format", "pretty"]);
    assert!(ready, "{lines:?}");
    assert!(lines.iter().all(|l| !l.starts_with('{')), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.trim_start().starts_with("at ")),
        "{lines:?}"
    );
    // An unknown format is refused by the argument parser.
    let out = Command::new(BIN)
        .args(["serve", "--log-format", "xml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `auto` on a terminal: one compact human line per event (util-linux `script` gives the
/// process a pseudo-terminal). Skipped where `script` is not installed.
#[test]
fn serve_log_format_auto_on_a_terminal_is_compact() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` (util-linux) to give serve a terminal");
        return;
    }
    let cwd = tempfile::tempdir().unwrap();
    write_config(cwd.path(), &routes(&[("a", "/a")]));
    let log = cwd.path().join("typescript");
    // serve runs for two seconds on the terminal `script` gives it, then `timeout` stops it.
    let out = Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!(
            "timeout -s INT 2 {BIN} serve --listen 127.0.0.1:0 --config {}",
            cwd.path().join("proxy.toml").display()
        ))
        .arg(&log)
        .current_dir(cwd.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or(out.stdout)).into_owned();
    let ready = text
        .lines()
        .find(|l| l.contains("cachekeeper ready"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!ready.trim_start().starts_with('{'), "{ready}");
    assert!(ready.contains("INFO"), "{ready}");
}

/// `report`, `state`, `verdicts` and `replay` find their config as `serve` and `check` do
/// (a fresh-user test's R4: in the repository directory, with ./proxy.toml there, `report`
/// said `required arguments were not provided: --config`), and say on stderr which file they
/// loaded; with none anywhere, the error names every place looked.
#[test]
fn every_subcommand_finds_the_config_as_serve_does() {
    let cwd = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let session = cwd.path().join("session.jsonl");
    std::fs::write(&session, "").unwrap();
    let session = session.to_str().unwrap().to_owned();
    let commands: [&[&str]; 4] = [
        &["report"],
        &["state"],
        &["verdicts"],
        &["replay", &session],
    ];
    // Neither place: exit 2 naming both.
    let platform = home.path().join("cachekeeper").join("proxy.toml");
    for args in commands {
        let out = run(cwd.path(), home.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("./proxy.toml"), "{args:?}: {err}");
        assert!(
            err.contains(&platform.display().to_string()),
            "{args:?}: {err}"
        );
    }
    // The platform config directory, then ./proxy.toml over it.
    std::fs::create_dir_all(platform.parent().unwrap()).unwrap();
    std::fs::copy(
        write_config(home.path(), &routes(&[("home", "/h")])),
        &platform,
    )
    .unwrap();
    let here = write_config(cwd.path(), &routes(&[("here", "/x")]));
    for (expect, remove_here) in [(here.clone(), false), (platform.clone(), true)] {
        if remove_here {
            std::fs::remove_file(&here).unwrap();
        }
        let want = format!(
            "config loaded: {}",
            std::fs::canonicalize(&expect).unwrap().display()
        );
        for args in commands {
            let out = run(cwd.path(), home.path(), args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(&want), "{args:?}: {err}");
            assert!(!err.contains("required"), "{args:?}: {err}");
            if args[0] != "replay" {
                assert!(out.status.success(), "{args:?}: {out:?}");
            }
        }
    }
    // --config still wins.
    let other = tempfile::tempdir().unwrap();
    let explicit = write_config(other.path(), &routes(&[("other", "/o")]));
    let out = run(
        cwd.path(),
        home.path(),
        &["report", "--config", explicit.to_str().unwrap()],
    );
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "config loaded: {}",
            std::fs::canonicalize(&explicit).unwrap().display()
        )),
        "{err}"
    );
}

/// A host name as the listen address (a fresh-user test's R8: `[server] listen =
/// "localhost:8787"` and `--listen localhost:0` said only `invalid socket address syntax`):
/// the error says an IP and port are needed, with examples.
#[test]
fn a_host_name_as_listen_address_says_an_ip_is_needed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &routes(&[("a", "/a")]));
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("[server]\nlisten = \"localhost:8787\"\n{text}"),
    )
    .unwrap();
    let out = run(dir.path(), dir.path(), &["check"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("an IP address and port are needed")
            && err.contains("127.0.0.1:8787")
            && err.contains("[::1]:8787")
            && err.contains("localhost:8787"),
        "{err}"
    );
    // The same on the command line.
    write_config(dir.path(), &routes(&[("a", "/a")]));
    let out = run(
        dir.path(),
        dir.path(),
        &["serve", "--listen", "localhost:0"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("an IP address and port are needed") && err.contains("127.0.0.1:8787"),
        "{err}"
    );
}
