//! `serve --record FILE`: every buffered generation request a route receives, written as one
//! `cachekeeper replay` line (`{"ts": <unix ms>, "route": NAME, "path": REST, "body":
//! <request>}`, `docs/replay.md`), the body as the client sent it (its `content-encoding`
//! decoded).
//!
//! The file holds prompts and images in clear: it is created mode 0600 (an existing file is
//! set to 0600 too) and appended to. Requests never wait on the disk: each one hands its
//! bytes (a reference-counted [`Bytes`], no copy) to a bounded queue read by one writer thread,
//! which writes and flushes one line per request. A full queue drops the line, and a failed
//! write is logged; the request goes on either way (fail open).
#![allow(
    clippy::disallowed_methods,
    reason = "serve --record's own writer thread waits for records, off any request's path"
)]

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::time::Duration;

use bytes::Bytes;

/// Lines queued for the writer at most; beyond that a line is dropped (with a warning).
const QUEUE: usize = 256;

/// Longest a [`Recorder::flush`] waits for the writer, ms.
const FLUSH_WAIT_MS: u64 = 5_000;

/// The largest body decoded for the file, bytes (the proxy's own `max_rewrite_bytes` bounds
/// what is buffered; this only guards the decoder).
const DECODE_LIMIT: u64 = 1 << 30;

enum Job {
    Line {
        ts_ms: i64,
        route: String,
        path: String,
        encoding: Option<String>,
        body: Bytes,
    },
    Flush(SyncSender<()>),
}

/// The writer of a `--record` file.
#[derive(Debug)]
pub(crate) struct Recorder {
    tx: SyncSender<Job>,
    path: PathBuf,
}

impl Recorder {
    /// Open (create, mode 0600, or append to) `path` and start the writer thread.
    ///
    /// Errors: the file cannot be opened or its mode set.
    pub(crate) fn open(path: &Path) -> io::Result<Recorder> {
        let mut opts = OpenOptions::new();
        opts.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let file = opts.open(path)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        let (tx, rx) = sync_channel(QUEUE);
        let shown = path.display().to_string();
        std::thread::Builder::new()
            .name("cachekeeper-record".to_owned())
            .spawn(move || write_loop(file, &rx, &shown))?;
        Ok(Recorder {
            tx,
            path: path.to_owned(),
        })
    }

    /// Queue one request's line; never waits.
    pub(crate) fn record(
        &self,
        ts_ms: i64,
        route: &str,
        path: &str,
        encoding: Option<&str>,
        body: Bytes,
    ) {
        let job = Job::Line {
            ts_ms,
            route: route.to_owned(),
            path: path.to_owned(),
            encoding: encoding.map(str::to_owned),
            body,
        };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                tracing::warn!(target: "cachekeeper::record", file = %self.path.display(), "record queue full; a request was not recorded");
            }
            Err(TrySendError::Disconnected(_)) => {
                tracing::warn!(target: "cachekeeper::record", file = %self.path.display(), "record writer stopped; a request was not recorded");
            }
        }
    }

    /// Wait (up to [`FLUSH_WAIT_MS`]) until every line queued so far is written. Blocking:
    /// call it off the async threads.
    pub(crate) fn flush(&self) {
        let (tx, rx) = sync_channel(1);
        if self.tx.send(Job::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_millis(FLUSH_WAIT_MS));
        }
    }
}

fn write_loop(mut file: std::fs::File, rx: &Receiver<Job>, shown: &str) {
    while let Ok(job) = rx.recv() {
        match job {
            Job::Flush(done) => {
                let _ = file.flush();
                let _ = done.send(());
            }
            Job::Line {
                ts_ms,
                route,
                path,
                encoding,
                body,
            } => {
                let Some(line) = line(ts_ms, &route, &path, encoding.as_deref(), &body) else {
                    tracing::warn!(target: "cachekeeper::record", route = %route, "request body is not JSON; not recorded");
                    continue;
                };
                if let Err(e) = file.write_all(line.as_bytes()).and_then(|()| file.flush()) {
                    tracing::warn!(target: "cachekeeper::record", file = %shown, error = %e, "cannot write the record file");
                }
            }
        }
    }
}

/// One replay line, newline-terminated; `None` when the (decoded) body is not JSON.
fn line(
    ts_ms: i64,
    route: &str,
    path: &str,
    encoding: Option<&str>,
    body: &[u8],
) -> Option<String> {
    let decoded = crate::wire::body::decode(encoding, body, DECODE_LIMIT).ok()?;
    let text = std::str::from_utf8(&decoded).ok()?;
    // A JSON text holds no raw line break inside a string (control characters are escaped),
    // so breaks are whitespace between tokens: spaces keep the line one line.
    let one_line = text.trim().replace(['\n', '\r'], " ");
    let raw = serde_json::value::RawValue::from_string(one_line).ok()?;
    #[derive(serde::Serialize)]
    struct Line<'a> {
        ts: i64,
        route: &'a str,
        path: &'a str,
        body: &'a serde_json::value::RawValue,
    }
    let mut out = serde_json::to_string(&Line {
        ts: ts_ms,
        route,
        path,
        body: &raw,
    })
    .ok()?;
    out.push('\n');
    Some(out)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_replay_lines_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        let r = Recorder::open(&path).unwrap();
        r.record(
            5,
            "anthropic",
            "/v1/messages",
            None,
            Bytes::from_static(b"{\"model\": \"m\",\n \"messages\": []}\n"),
        );
        r.record(
            6,
            "anthropic",
            "/v1/messages",
            None,
            Bytes::from_static(b"not json"),
        );
        r.record(
            7,
            "openai",
            "/v1/chat/completions",
            None,
            Bytes::from_static(b"{}"),
        );
        r.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        // The body's own bytes, its line breaks (JSON whitespace) turned into spaces.
        assert_eq!(
            lines[0],
            "{\"ts\":5,\"route\":\"anthropic\",\"path\":\"/v1/messages\",\"body\":{\"model\": \"m\",  \"messages\": []}}"
        );
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["ts"], 5);
        assert_eq!(v["body"]["model"], "m");
        assert_eq!(
            lines[1],
            "{\"ts\":7,\"route\":\"openai\",\"path\":\"/v1/chat/completions\",\"body\":{}}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Appended, not truncated.
        drop(r);
        let r = Recorder::open(&path).unwrap();
        r.record(
            8,
            "openai",
            "/v1/chat/completions",
            None,
            Bytes::from_static(b"{}"),
        );
        r.flush();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
    }
}
