//! Logs on stderr (tracing-subscriber), one line per request, in the format `serve
//! --log-format` names ([`LogFormat`]): JSON lines for machines, or tracing-subscriber's
//! compact / pretty formatters for people.
//!
//! Credentials never appear: headers are not logged, and the query string is logged only
//! with `key=` (Gemini's API key parameter) redacted.
#![allow(
    clippy::disallowed_methods,
    reason = "the log writer's home: the one stderr writer and its drop check thread"
)]

use std::cell::RefCell;
use std::fmt;
use std::io::IsTerminal as _;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent as _;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// `serve --log-format`: how log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One compact human line per event (tracing-subscriber's `compact` formatter, with
    /// colours) when stderr is a terminal; JSON lines otherwise (a file, a pipe, journald).
    #[default]
    Auto,
    /// One JSON object per line, fields flattened (`timestamp`, `level`, `target`, the
    /// event's fields): what `tests/logs.rs` and log shippers read.
    Json,
    /// tracing-subscriber's `pretty` formatter: several lines per event, fields one per line,
    /// colours on a terminal.
    Pretty,
}

/// A [`LogFormat`] with `auto` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// tracing-subscriber's compact formatter.
    Compact,
    /// JSON lines.
    Json,
    /// tracing-subscriber's pretty formatter.
    Pretty,
}

impl LogFormat {
    /// The formatter for this choice; `terminal`: stderr is a terminal.
    pub fn resolve(self, terminal: bool) -> Resolved {
        match self {
            LogFormat::Auto if terminal => Resolved::Compact,
            LogFormat::Auto | LogFormat::Json => Resolved::Json,
            LogFormat::Pretty => Resolved::Pretty,
        }
    }
}

/// Most log lines waiting for the log's writer thread ([`init_with`]); past it new lines are
/// dropped and counted (`cachekeeper_log_lines_dropped_total`). A request's JSON line is
/// about 1.5 KiB, so the queue holds about 3 MiB at most: half a second of request lines at
/// 4,000 requests/s (the pass-through rate in `docs/performance.md`), on top of the pipe's
/// own buffer. A power of two, as tracing-appender recommends.
pub(crate) const LOG_QUEUE_LINES: usize = 2048;

/// How often the drop monitor reads the dropped-lines count; once a check finds no new drop
/// after some, one line says how many were lost.
const DROP_CHECK: Duration = Duration::from_secs(1);

/// `cachekeeper_log_lines_dropped_total`: log lines dropped because the log's reader (what
/// stderr is connected to) did not keep up. One process-wide log, so one process-wide count.
static LINES_DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The counter of dropped log lines (`cachekeeper_log_lines_dropped_total`,
/// [`crate::metrics::Metrics::with_log_lines_dropped`]).
pub(crate) fn lines_dropped() -> Counter {
    LINES_DROPPED.clone()
}

/// Keeps the log's writer thread: dropping it writes the lines still queued (within a
/// second) and stops it. Hold it until the process ends.
#[must_use = "dropping the guard stops the log's writer thread"]
pub struct LogGuard {
    _worker: Option<tracing_appender::non_blocking::WorkerGuard>,
}

/// Install the global JSON subscriber (`--log-format json`). `RUST_LOG` overrides the
/// default level (`info`).
pub fn init() -> LogGuard {
    init_with(LogFormat::Json).1
}

/// Install the global subscriber writing `format` to stderr; `RUST_LOG` overrides the default
/// level (`info`). Returns the formatter used and the guard of the log's writer thread. A
/// second call does nothing (the first subscriber stays).
///
/// Lines never block the thread that logs them: they are queued ([`LOG_QUEUE_LINES`]) for a
/// writer thread of their own (tracing-appender's lossy non-blocking writer). When stderr's
/// reader is slower than the proxy (a stopped pipe reader, a slow terminal), new lines are
/// dropped, counted (`cachekeeper_log_lines_dropped_total`), and once the drops stop one
/// line says how many were lost.
pub fn init_with(format: LogFormat) -> (Resolved, LogGuard) {
    let terminal = std::io::stderr().is_terminal();
    let resolved = format.resolve(terminal);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, worker) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .thread_name("cachekeeper-log")
        .finish(std::io::stderr());
    let drops = writer.error_counter();
    let builder = tracing_subscriber::fmt()
        .with_target(true)
        .with_writer(writer)
        .with_env_filter(filter);
    let installed = match resolved {
        Resolved::Json => builder.event_format(JsonLines).try_init(),
        Resolved::Compact => builder.compact().with_ansi(terminal).try_init(),
        Resolved::Pretty => builder.pretty().with_ansi(terminal).try_init(),
    };
    if installed.is_err() {
        return (resolved, LogGuard { _worker: None });
    }
    let monitor = std::thread::Builder::new()
        .name("cachekeeper-log-drops".into())
        .spawn(move || {
            let mut said = DropReport::default();
            loop {
                std::thread::sleep(DROP_CHECK);
                said.check(
                    u64::try_from(drops.dropped_lines()).unwrap_or(u64::MAX),
                    &LINES_DROPPED,
                );
            }
        });
    if let Err(e) = monitor {
        tracing::warn!(target: "cachekeeper::server", error = %e, "cannot start the log-drop monitor; dropped log lines are not counted");
    }
    (
        resolved,
        LogGuard {
            _worker: Some(worker),
        },
    )
}

/// The drop monitor's memory: how many drops it has counted and said.
#[derive(Debug, Default)]
struct DropReport {
    /// Dropped lines counted into the metric so far.
    counted: u64,
    /// Dropped lines the log has been told of so far.
    said: u64,
}

impl DropReport {
    /// One check with the writer's total of dropped lines `total`: count what is new in
    /// `metric`; when nothing new was dropped since the last check but some drops were never
    /// said, say how many (the reader keeps up again, so the line gets through). Returns the
    /// number said, if a line was written.
    fn check(&mut self, total: u64, metric: &Counter) -> Option<u64> {
        if total > self.counted {
            metric.inc_by(total - self.counted);
            self.counted = total;
            return None;
        }
        let unsaid = self.counted - self.said;
        if unsaid == 0 {
            return None;
        }
        self.said = self.counted;
        tracing::warn!(
            target: "cachekeeper::server",
            dropped = unsaid,
            "log lines dropped: stderr's reader did not keep up, so lines were dropped instead of stalling requests (cachekeeper_log_lines_dropped_total)"
        );
        Some(unsaid)
    }
}

/// The JSON line of an event: what tracing-subscriber's JSON formatter writes with
/// `flatten_event(true)`, no span fields, the target shown (`{"timestamp":…,"level":…, the
/// event's fields…,"target":…}` and a newline), byte for byte (a differential test against
/// it): serde_json's escaping and number forms, the fields written as tracing-serde's visitor
/// writes them ([`Members`]).
///
/// Why its own: tracing-subscriber's writes every token through an adaptor that checks each
/// piece for UTF-8 and goes through `fmt::Write`, 78,000 CPU instructions for a request's
/// line of 70 fields (callgrind, `benches/instructions.py`), a sixth of a pass-through
/// request. This one writes into a reused buffer and hands the line over once.
pub(crate) struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        thread_local! {
            /// The line being serialized, reused by every event of the thread.
            static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        LINE.with(|line| match line.try_borrow_mut() {
            Ok(mut buf) => {
                buf.clear();
                json_line(&mut buf, event)?;
                let r = writer.write_str(std::str::from_utf8(&buf).map_err(|_| fmt::Error)?);
                // A line that once held a huge field does not keep its memory.
                if buf.capacity() > MAX_KEPT_LINE_BYTES {
                    *buf = Vec::new();
                }
                r
            }
            // An event logged while this thread formats another (a field's `Debug` that
            // logs): a buffer of its own.
            Err(_) => {
                let mut buf = Vec::new();
                json_line(&mut buf, event)?;
                writer.write_str(std::str::from_utf8(&buf).map_err(|_| fmt::Error)?)
            }
        })
    }
}

/// The largest line buffer [`JsonLines`] keeps between events, bytes (a request line is
/// about 1.5 KiB).
const MAX_KEPT_LINE_BYTES: usize = 64 * 1024;

/// `event`'s JSON line, newline included, appended to `buf` ([`JsonLines`]).
fn json_line(buf: &mut Vec<u8>, event: &Event<'_>) -> fmt::Result {
    let mut timestamp = String::new();
    SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
    // A `log` record forwarded to tracing: its own level and target, not the forwarder's.
    let normalized = event.normalized_metadata();
    let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
    buf.extend_from_slice(b"{\"timestamp\":");
    json_value(buf, timestamp.as_str());
    buf.extend_from_slice(b",\"level\":\"");
    buf.extend_from_slice(level_name(*meta.level()).as_bytes());
    buf.push(b'"');
    event.record(&mut Members { buf: &mut *buf });
    Members { buf: &mut *buf }.key("target");
    json_value(buf, meta.target());
    buf.extend_from_slice(b"}\n");
    Ok(())
}

/// `value` as serde_json writes it (compact), appended to `buf`.
fn json_value<T: serde::Serialize + ?Sized>(buf: &mut Vec<u8>, value: &T) {
    // Writing into a `Vec` does not fail, and these values always serialize.
    let _ = serde_json::to_writer(&mut *buf, value);
}

/// An event's fields as JSON object members, `,"name":value` each: the bytes tracing-serde's
/// `SerdeMapVisitor` writes through serde_json's map serializer (the same escaping, number
/// and float forms, `Debug` values as strings), without its per-entry work. A field name is
/// copied as it is when it needs no escaping (field names are identifiers; serde_json
/// escapes only control characters, `"` and `\`), numbers go through `itoa`. A request's
/// line went from 24 k to 22 k instructions (callgrind, `benches/instructions.py`); the rest
/// is tracing's dispatch of each value, the name checks and copies, and the timestamp.
struct Members<'b> {
    buf: &'b mut Vec<u8>,
}

impl Members<'_> {
    fn key(&mut self, name: &str) {
        self.buf.push(b',');
        if name.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            self.buf.push(b'"');
            self.buf.extend_from_slice(name.as_bytes());
            self.buf.push(b'"');
        } else {
            json_value(self.buf, name);
        }
        self.buf.push(b':');
    }
}

impl tracing::field::Visit for Members<'_> {
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.key(field.name());
        self.buf
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.key(field.name());
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.key(field.name());
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.key(field.name());
        json_value(self.buf, &value);
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.key(field.name());
        json_value(self.buf, value);
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.key(field.name());
        json_value(self.buf, &format_args!("{value:?}"));
    }
}

/// A level as tracing-serde names it.
fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// Query parameters whose value is a credential (compared after percent-decoding, ignoring
/// case): Gemini's `key`, and the common spellings of API keys and tokens.
const SECRET_QUERY_PARAMS: &[&str] = &[
    "key",
    "api_key",
    "api-key",
    "apikey",
    "x-goog-api-key",
    "x-api-key",
    "access_token",
    "token",
    "auth",
    "password",
    "secret",
    "sig",
    "signature",
];

/// Percent-decode a query parameter name (invalid escapes are kept as they are).
fn decode_name(name: &str) -> String {
    let b = name.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query string with credential parameters' values replaced by `REDACTED`. Both `&` and
/// `;` separate parameters; names are percent-decoded before comparing.
pub(crate) fn redact_query(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    let mut rest = query;
    loop {
        let end = rest.find(['&', ';']).unwrap_or(rest.len());
        let pair = &rest[..end];
        let name = pair.split('=').next().unwrap_or("");
        let decoded = decode_name(name);
        if SECRET_QUERY_PARAMS
            .iter()
            .any(|s| decoded.trim().eq_ignore_ascii_case(s))
        {
            out.push_str(name);
            out.push_str("=REDACTED");
        } else {
            out.push_str(pair);
        }
        if end == rest.len() {
            return out;
        }
        out.push_str(&rest[end..=end]);
        rest = &rest[end + 1..];
    }
}

/// How a request ended, for its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The response body was delivered whole.
    Complete,
    /// The client went away before the response body ended; the upstream request was
    /// dropped (cancelled) with it.
    ClientDisconnected,
    /// The upstream broke the response body mid-way.
    UpstreamBroken,
    /// No response chunk arrived within `idle_timeout_ms`.
    IdleTimeout,
    /// The proxy was shutting down and its grace was over: it ended the response (an event
    /// stream after its last complete event).
    Shutdown,
    /// The proxy answered with its own error.
    ProxyError,
    /// A WebSocket (or other) upgrade was tunnelled.
    Upgraded,
}

impl Outcome {
    /// The name in the log line's `outcome` field.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::ClientDisconnected => "client_disconnected",
            Outcome::UpstreamBroken => "upstream_broken",
            Outcome::IdleTimeout => "idle_timeout",
            Outcome::Shutdown => "shutdown",
            Outcome::ProxyError => "proxy_error",
            Outcome::Upgraded => "upgraded",
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;
    use crate::testing::LogBuf as Buf;

    /// The drop monitor counts every dropped line once, and says how many once the drops stop
    /// (the check after the last new drop), then nothing until new drops.
    #[test]
    fn dropped_lines_are_counted_then_said_once_the_drops_stop() {
        let metric = Counter::default();
        let mut r = DropReport::default();
        assert_eq!(r.check(0, &metric), None);
        assert_eq!(r.check(5, &metric), None, "still dropping");
        assert_eq!(metric.get(), 5);
        assert_eq!(r.check(9, &metric), None, "still dropping");
        assert_eq!(metric.get(), 9);
        assert_eq!(r.check(9, &metric), Some(9), "the drops stopped");
        assert_eq!(r.check(9, &metric), None, "said once");
        assert_eq!(r.check(12, &metric), None);
        assert_eq!(r.check(12, &metric), Some(3), "only the new ones");
        assert_eq!(metric.get(), 12);
    }

    /// Events with every kind of field value a line can hold.
    fn events() {
        let err = std::io::Error::other("disk \"full\"");
        let none: Option<u64> = None;
        tracing::info!(
            target: "cachekeeper::request",
            route = "anthropic",
            path = %"/v1/messages",
            query = "a=1&key=REDACTED",
            quoted = "say \"hi\"\n\ttab\\ \u{1} \u{7f} é ☃ 🦀",
            status = 200u16,
            bytes_in = 130u64,
            delta = -5i64,
            ratio = 0.25f64,
            whole = 2.0f64,
            nan = f64::NAN,
            inf = f64::INFINITY,
            tiny = 1e-300f64,
            "odd \"name\"\t" = 1u64,
            dry_run = false,
            ttfb_ms = Some(3u64),
            absent = none,
            method = ?http::Method::POST,
            big = u128::MAX,
            error = &err as &(dyn std::error::Error + 'static),
            "request"
        );
        tracing::warn!(target: "cachekeeper::server", "accept failed: {}", "too many \"files\"");
        tracing::error!(target: "cachekeeper::state", kind = "carrier", "no message field: {}", 3);
    }

    /// Each line with its `timestamp` value blanked.
    fn lines(buf: &Buf) -> Vec<String> {
        let text = buf.text();
        text.split_inclusive('\n')
            .map(|l| {
                let start = l.find("\"timestamp\":\"").unwrap() + 13;
                let end = start + l[start..].find('"').unwrap();
                format!("{}{}", &l[..start], &l[end..])
            })
            .collect()
    }

    /// The JSON lines are tracing-subscriber's JSON formatter's (as configured before it was
    /// replaced: flattened, no spans, target on), byte for byte apart from the time.
    #[test]
    fn json_lines_are_tracing_subscribers_byte_for_byte() {
        let theirs = Buf::default();
        let ours = Buf::default();
        let t = theirs.clone();
        let reference = tracing_subscriber::fmt()
            .with_target(true)
            .with_writer(move || t.clone())
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .finish();
        tracing::subscriber::with_default(reference, events);
        let o = ours.clone();
        let fast = tracing_subscriber::fmt()
            .with_target(true)
            .with_writer(move || o.clone())
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(fast, events);
        let (want, got) = (lines(&theirs), lines(&ours));
        assert_eq!(want.len(), 3, "{want:?}");
        assert_eq!(got, want);
        // And they are JSON with the fields as given.
        let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
        assert_eq!(v["quoted"], "say \"hi\"\n\ttab\\ \u{1} \u{7f} é ☃ 🦀");
        assert_eq!(v["status"], 200);
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], "cachekeeper::request");
        assert!(v.get("absent").is_none());
    }

    #[test]
    fn auto_is_compact_on_a_terminal_and_json_elsewhere() {
        assert_eq!(LogFormat::Auto.resolve(true), Resolved::Compact);
        assert_eq!(LogFormat::Auto.resolve(false), Resolved::Json);
        assert_eq!(LogFormat::Json.resolve(true), Resolved::Json);
        assert_eq!(LogFormat::Pretty.resolve(false), Resolved::Pretty);
        assert_eq!(LogFormat::Pretty.resolve(true), Resolved::Pretty);
    }

    #[test]
    fn gemini_key_is_redacted() {
        assert_eq!(
            redact_query("alt=sse&key=AIzaSECRET"),
            "alt=sse&key=REDACTED"
        );
        assert_eq!(redact_query("KEY=x"), "KEY=REDACTED");
        assert_eq!(redact_query("alt=sse"), "alt=sse");
        assert_eq!(redact_query("monkey=1"), "monkey=1");
        assert_eq!(redact_query("%6Bey=S"), "%6Bey=REDACTED");
        assert_eq!(redact_query("a=1;key=S"), "a=1;key=REDACTED");
        assert_eq!(
            redact_query("token=S&apikey=S&x-goog-api-key=S&b=2"),
            "token=REDACTED&apikey=REDACTED&x-goog-api-key=REDACTED&b=2"
        );
        assert_eq!(redact_query("key"), "key=REDACTED");
    }
}
