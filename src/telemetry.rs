//! Logs on stderr (tracing-subscriber), one line per request, in the format `serve
//! --log-format` names ([`LogFormat`]): JSON lines for machines, or tracing-subscriber's
//! compact / pretty formatters for people.
//!
//! Credentials never appear: headers are not logged, and the query string is logged only
//! with `key=` (Gemini's API key parameter) redacted.

use std::io::IsTerminal as _;

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

/// Install the global JSON subscriber (`--log-format json`). `RUST_LOG` overrides the
/// default level (`info`).
pub fn init() {
    init_with(LogFormat::Json);
}

/// Install the global subscriber writing `format` to stderr; `RUST_LOG` overrides the default
/// level (`info`). Returns the formatter used. A second call does nothing (the first
/// subscriber stays).
pub fn init_with(format: LogFormat) -> Resolved {
    let terminal = std::io::stderr().is_terminal();
    let resolved = format.resolve(terminal);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_target(true)
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let _ = match resolved {
        Resolved::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
        Resolved::Compact => builder.compact().with_ansi(terminal).try_init(),
        Resolved::Pretty => builder.pretty().with_ansi(terminal).try_init(),
    };
    resolved
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
    use super::*;

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
