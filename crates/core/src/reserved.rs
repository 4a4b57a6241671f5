//! The paths the proxy's listener keeps for itself, whatever the routes say (one list, read
//! by the proxy's dispatch and by the config's shadowing warning):
//!
//! - [`HEALTHZ`]: liveness, never behind the client token;
//! - [`METRICS`]: the Prometheus metrics;
//! - [`DASHBOARD`] and everything below it: the dashboard and its JSON API;
//! - when `[server] client_token` is set, a leading [`TOKEN_SEGMENT`] `/t/<token>` segment,
//!   which carries the token in the path (for browsers, and agents that can only change a
//!   base URL) and is stripped before anything else reads the path.
//!
//! A route with prefix `/` stays valid: it gets every other path.

/// Liveness: `GET /healthz` answers `200 ok`.
pub(crate) const HEALTHZ: &str = "/healthz";
/// `GET /metrics`: the Prometheus text format.
pub(crate) const METRICS: &str = "/metrics";
/// The dashboard's root; `/_cachekeeper/…` is all the dashboard's.
pub(crate) const DASHBOARD: &str = "/_cachekeeper";
/// The leading segment that carries the client token: `/t/<token>/…`.
pub(crate) const TOKEN_SEGMENT: &str = "/t";

/// A reserved path, as the dispatch reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved<'a> {
    Healthz,
    Metrics,
    /// The dashboard, with the path below [`DASHBOARD`] (`""` for the root without its
    /// slash, else starting with `/`).
    Dashboard(&'a str),
}

/// The warning given when the listener is bound to `addr`, reachable beyond this machine (not
/// a loopback address: `0.0.0.0`, `::`, a LAN address), while `[server] client_token` is unset
/// (`token_set` false): anyone who can reach the port can then spend the API keys the agents
/// send through it and read the dashboard. `None` on loopback or with a token. `serve` logs it
/// at bind and on every reload (the token may have been removed), `check` prints it for the
/// file's `listen`.
pub fn exposure_warning(addr: std::net::SocketAddr, token_set: bool) -> Option<String> {
    if token_set || addr.ip().is_loopback() {
        return None;
    }
    Some(format!(
        "listening on {addr}, beyond loopback, without [server] client_token: anyone who \
         can reach this port can use the proxy and its dashboard; set client_token, or listen \
         on 127.0.0.1"
    ))
}

/// Which reserved path `path` is, if any (the token segment already stripped).
pub fn classify(path: &str) -> Option<Reserved<'_>> {
    if path == HEALTHZ {
        return Some(Reserved::Healthz);
    }
    if path == METRICS {
        return Some(Reserved::Metrics);
    }
    let rest = path.strip_prefix(DASHBOARD)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(Reserved::Dashboard(rest))
}

/// Split a leading `/t/<token>` segment off `path`: the token and the rest of the path
/// (`/` when nothing follows). `None` when the path does not start with one.
pub fn split_token_segment(path: &str) -> Option<(&str, &str)> {
    let after = path.strip_prefix(TOKEN_SEGMENT)?.strip_prefix('/')?;
    let (token, rest) = match after.find('/') {
        Some(i) => after.split_at(i),
        None => (after, "/"),
    };
    Some((token, rest))
}

/// Whether a route `prefix` loses paths to a reserved path, and which; `token_set` when
/// `[server] client_token` is set (the token segment is reserved only then). For
/// `cachekeeper check`'s warnings.
pub(crate) fn shadowing(prefix: &str, token_set: bool) -> Option<&'static str> {
    let p = prefix.trim_end_matches('/');
    let at_or_below = |reserved: &str| {
        p.strip_prefix(reserved)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if p == HEALTHZ {
        return Some(HEALTHZ);
    }
    if p == METRICS {
        return Some(METRICS);
    }
    if at_or_below(DASHBOARD) {
        return Some(DASHBOARD);
    }
    if token_set && at_or_below(TOKEN_SEGMENT) {
        return Some(TOKEN_SEGMENT);
    }
    None
}

/// The warning `check` prints (and `serve` logs) for a shadowed route prefix.
pub(crate) fn shadowing_warning(route: &str, prefix: &str, reserved: &str) -> String {
    let what = match reserved {
        TOKEN_SEGMENT => "the /t/<token>/ segment (client_token is set)".to_owned(),
        DASHBOARD => format!("the reserved path {DASHBOARD}/…"),
        other => format!("the reserved path {other}"),
    };
    format!(
        "route {route:?}: prefix {prefix:?} is shadowed by {what}: the proxy answers those \
         requests itself and never forwards them"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_paths() {
        assert_eq!(classify("/healthz"), Some(Reserved::Healthz));
        assert_eq!(classify("/metrics"), Some(Reserved::Metrics));
        assert_eq!(classify("/metrics/x"), None);
        assert_eq!(classify("/_cachekeeper"), Some(Reserved::Dashboard("")));
        assert_eq!(classify("/_cachekeeper/"), Some(Reserved::Dashboard("/")));
        assert_eq!(
            classify("/_cachekeeper/api/sessions"),
            Some(Reserved::Dashboard("/api/sessions"))
        );
        assert_eq!(classify("/_cachekeeperx"), None);
        assert_eq!(classify("/anthropic/v1/messages"), None);
    }

    #[test]
    fn token_segment() {
        assert_eq!(
            split_token_segment("/t/abc/anthropic/v1/messages"),
            Some(("abc", "/anthropic/v1/messages"))
        );
        assert_eq!(split_token_segment("/t/abc"), Some(("abc", "/")));
        assert_eq!(split_token_segment("/t/abc/"), Some(("abc", "/")));
        assert_eq!(split_token_segment("/t/"), Some(("", "/")));
        assert_eq!(split_token_segment("/t"), None);
        assert_eq!(split_token_segment("/tx/abc"), None);
        assert_eq!(split_token_segment("/anthropic"), None);
    }

    #[test]
    fn shadowed_prefixes() {
        assert_eq!(shadowing("/metrics", false), Some("/metrics"));
        assert_eq!(shadowing("/metrics/", false), Some("/metrics"));
        assert_eq!(shadowing("/healthz", false), Some("/healthz"));
        assert_eq!(shadowing("/_cachekeeper", false), Some("/_cachekeeper"));
        assert_eq!(shadowing("/_cachekeeper/x", false), Some("/_cachekeeper"));
        assert_eq!(shadowing("/t", false), None);
        assert_eq!(shadowing("/t", true), Some("/t"));
        assert_eq!(shadowing("/t/x", true), Some("/t"));
        assert_eq!(shadowing("/tools", true), None);
        assert_eq!(shadowing("/", true), None);
        assert_eq!(shadowing("", true), None);
        assert_eq!(shadowing("/metricsx", false), None);
        assert_eq!(shadowing("/anthropic", true), None);
    }
}
