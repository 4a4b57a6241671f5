//! The dashboard at `/_cachekeeper/` (`docs/guide/cache-money.md#dashboard`): one page (HTML, script and
//! style embedded in the binary: no CDN, no external fonts, works offline) and its JSON API.
//!
//! Paths below `/_cachekeeper` (the proxy's reserved-path dispatch strips that prefix, and a
//! `/t/<token>` segment before it):
//!
//! | path | answer |
//! |---|---|
//! | `` (no slash) | `308` to `_cachekeeper/`, so the page's relative URLs resolve below it |
//! | `/`, `/index.html` | the page |
//! | `/app.js`, `/style.css`, `/favicon.svg` | its script, style and icon |
//! | `/api/sessions[?since=DURATION]` | JSON list of [`SessionSummary`], newest activity first |
//! | `/api/sessions/<id>[?since=DURATION]` | JSON [`SessionDetail`] (summary + turns), or 404 |
//! | anything else | `404` JSON `{"error": …}` |
//!
//! Every answer carries `Content-Security-Policy: default-src 'self'` (the page has no inline
//! script or style) and `X-Content-Type-Options: nosniff`; the API answers `Cache-Control:
//! no-store`. The page sets every client-controlled string (model names, session ids) as
//! text, never as HTML; the API returns them unchanged (JSON-escaped only).
//!
//! [`SessionSummary`]: crate::accounting::summary::SessionSummary
//! [`SessionDetail`]: crate::accounting::summary::SessionDetail

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use percent_encoding::percent_decode_str;
use serde::Serialize;

use crate::accounting::pricing::Pricing;
use crate::accounting::{record, summary};
use crate::state::Store;

/// The page.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// Its script (builds the tables and the SVG chart from the API).
const APP_JS: &str = include_str!("assets/app.js");
/// Its style (system font stack).
const STYLE_CSS: &str = include_str!("assets/style.css");
/// Its icon (so the browser does not ask the proxy's root for `/favicon.ico`).
const FAVICON_SVG: &str = include_str!("assets/favicon.svg");

/// The page's only source of script, style, images and API calls: itself.
const CSP: &str = "default-src 'self'";

/// How long an API call waits for the store to read the stored turns, ms.
const LOAD_TIMEOUT_MS: u64 = 2_000;

/// Where the bare `/_cachekeeper` redirects: relative, so it keeps a `/t/<token>` segment.
const ROOT_REDIRECT: &str = "_cachekeeper/";

/// A JSON error body.
#[derive(Serialize)]
struct ApiError<'a> {
    error: &'a str,
}

/// Answer a dashboard request. `path` is what follows `/_cachekeeper` (`""` for the root
/// without its slash, else starting with `/`); `query` the raw query string. Reads the stored
/// turns through `store` (waiting at most [`LOAD_TIMEOUT_MS`]), so callers on an async runtime
/// should run it where blocking is allowed.
pub(crate) fn serve(
    store: &Store,
    pricing: &Pricing,
    path: &str,
    query: Option<&str>,
) -> Response<Bytes> {
    match path {
        "" => redirect(ROOT_REDIRECT),
        "/" | "/index.html" => asset(INDEX_HTML, "text/html; charset=utf-8"),
        "/app.js" => asset(APP_JS, "text/javascript; charset=utf-8"),
        "/style.css" => asset(STYLE_CSS, "text/css; charset=utf-8"),
        "/favicon.svg" => asset(FAVICON_SVG, "image/svg+xml"),
        _ => match path.strip_prefix("/api/sessions") {
            Some(rest) => sessions_api(store, pricing, rest, query),
            None => error(StatusCode::NOT_FOUND, "not found"),
        },
    }
}

/// `/api/sessions` (`rest` empty or `/`) and `/api/sessions/<id>`.
fn sessions_api(
    store: &Store,
    pricing: &Pricing,
    rest: &str,
    query: Option<&str>,
) -> Response<Bytes> {
    let since = match param(query, "since").filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => match summary::since_ms(&text, summary::now_ms()) {
            Ok(ms) => Some(ms),
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        },
    };
    let id = match rest {
        "" | "/" => None,
        _ => match rest.strip_prefix('/') {
            Some(raw) if !raw.contains('/') => match percent_decode_str(raw).decode_utf8() {
                Ok(id) => Some(id.into_owned()),
                Err(_) => return error(StatusCode::NOT_FOUND, "no such session"),
            },
            _ => return error(StatusCode::NOT_FOUND, "not found"),
        },
    };
    let turns = record::load_turns(store, Duration::from_millis(LOAD_TIMEOUT_MS));
    match id {
        None => json(StatusCode::OK, &summary::sessions(&turns, pricing, since)),
        Some(id) => match summary::session_detail(&turns, pricing, &id, since) {
            Some(d) => json(StatusCode::OK, &d),
            None => error(StatusCode::NOT_FOUND, "no such session"),
        },
    }
}

/// The percent-decoded value of `name` in a query string (`+` is a space).
fn param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| {
            let v = v.replace('+', " ");
            percent_decode_str(&v).decode_utf8_lossy().into_owned()
        })
    })
}

fn response(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Bytes> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn asset(body: &'static str, content_type: &'static str) -> Response<Bytes> {
    let mut r = response(
        StatusCode::OK,
        content_type,
        Bytes::from_static(body.as_bytes()),
    );
    // The assets change only with the binary: revalidate, never serve a stale page.
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Bytes> {
    let (status, body) = match serde_json::to_vec(value) {
        Ok(b) => (status, b),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            br#"{"error":"cannot serialize"}"#.to_vec(),
        ),
    };
    let mut r = response(status, "application/json", Bytes::from(body));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn error(status: StatusCode, message: &str) -> Response<Bytes> {
    json(status, &ApiError { error: message })
}

fn redirect(location: &'static str) -> Response<Bytes> {
    let mut r = response(
        StatusCode::PERMANENT_REDIRECT,
        "text/plain; charset=utf-8",
        Bytes::from_static(b"see _cachekeeper/\n"),
    );
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(location));
    r
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::accounting::record::{TurnRecord, UsageRecord};
    use crate::accounting::{Cause, Collapse};
    use crate::state::MemoryBackend;

    const SCRIPT_MODEL: &str = "<script>alert(1)</script>";

    fn store_with(turns: &[TurnRecord]) -> Store {
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, 1 << 30, 1 << 26);
        for t in turns {
            store.put(t.to_record("").unwrap());
        }
        store
    }

    /// One minute ago, read once: every fixture turn's time is this plus its number, so
    /// their order never depends on how long the fixture took to build (a loaded machine
    /// put "evil" turn 1 after "s/1 x" turn 2 when each read the clock).
    static BASE_MS: std::sync::LazyLock<i64> =
        std::sync::LazyLock::new(|| summary::now_ms() - 60_000);

    fn turn(session: &str, n: u32, model: &str, write: u64, read: u64) -> TurnRecord {
        TurnRecord {
            session: session.into(),
            turn: n,
            ts_ms: *BASE_MS + i64::from(n),
            route: "anthropic".into(),
            provider: "anthropic".into(),
            model: model.into(),
            streamed: false,
            status: 200,
            usage: UsageRecord {
                uncached_input_tokens: Some(10),
                cache_read_tokens: Some(read),
                cache_write_tokens: Some(write),
                output_tokens: Some(5),
                ..UsageRecord::default()
            },
            passes: BTreeMap::new(),
            collapse: None,
            idle_ms: None,
        }
    }

    fn fixture() -> Store {
        let mut t2 = turn("s/1 x", 2, "claude-sonnet-4-5", 900, 100);
        t2.collapse = Some(Collapse {
            at: "messages[3]".into(),
            cause: Cause::ClientHistory,
            write_tokens: Some(900),
        });
        store_with(&[
            turn("s/1 x", 1, "claude-sonnet-4-5", 1_000, 0),
            t2,
            turn("evil", 1, SCRIPT_MODEL, 0, 0),
        ])
    }

    fn body_json(r: &Response<Bytes>) -> serde_json::Value {
        serde_json::from_slice(r.body()).unwrap()
    }

    fn header(r: &Response<Bytes>, name: header::HeaderName) -> &str {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    #[test]
    fn assets_with_types_and_csp() {
        let store = store_with(&[]);
        let p = Pricing::default();
        for (path, ty, needle) in [
            ("/", "text/html; charset=utf-8", "<svg id=\"chart\""),
            ("/index.html", "text/html; charset=utf-8", "src=\"app.js\""),
            ("/app.js", "text/javascript; charset=utf-8", "textContent"),
            ("/style.css", "text/css; charset=utf-8", "system-ui"),
            ("/favicon.svg", "image/svg+xml", "<svg"),
        ] {
            let r = serve(&store, &p, path, None);
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            assert_eq!(header(&r, header::CONTENT_TYPE), ty, "{path}");
            assert_eq!(
                header(&r, header::CONTENT_SECURITY_POLICY),
                "default-src 'self'"
            );
            assert_eq!(header(&r, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
            let text = std::str::from_utf8(r.body()).unwrap();
            assert!(text.contains(needle), "{path} lacks {needle}");
        }
        let r = serve(&store, &p, "", None);
        assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(header(&r, header::LOCATION), "_cachekeeper/");
    }

    #[test]
    fn the_page_is_self_contained_and_never_parses_data_as_html() {
        let all = format!("{INDEX_HTML}{APP_JS}{STYLE_CSS}{FAVICON_SVG}");
        for banned in [
            "http://",
            "https://",
            "//cdn",
            "@import",
            "url(",
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            let hits: Vec<&str> = all
                .lines()
                .filter(|l| l.contains(banned) && !l.contains("\"http://www.w3.org/2000/svg\""))
                .collect();
            assert!(hits.is_empty(), "{banned}: {hits:?}");
        }
        // No inline script or style (the CSP forbids them).
        assert!(!INDEX_HTML.contains("<script>"));
        assert!(!INDEX_HTML.contains("style="));
        for handler in [
            " onclick=",
            " onload=",
            " onerror=",
            " onchange=",
            " onkeydown=",
        ] {
            assert!(
                !INDEX_HTML.contains(handler),
                "inline event handler {handler}"
            );
        }
        // Relative API URLs only.
        assert!(APP_JS.contains("getJson(\"api/sessions\""));
        assert!(!APP_JS.contains("\"/api"));
    }

    #[test]
    fn session_list_round_trips_raw_strings() {
        let store = fixture();
        let r = serve(&store, &Pricing::default(), "/api/sessions", None);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, header::CONTENT_TYPE), "application/json");
        assert_eq!(header(&r, header::CACHE_CONTROL), "no-store");
        let list = body_json(&r);
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), 2);
        // Newest activity first: "evil" turn 1 is at -60 s + 1 ms, "s/1 x" turn 2 at + 2 ms.
        assert_eq!(list[0]["session"], "s/1 x");
        assert_eq!(list[0]["turns"], 2);
        assert_eq!(list[0]["cache_write_tokens"], 1_900);
        assert_eq!(list[0]["collapses"], 1);
        assert_eq!(list[0]["by_cause"][0]["cause"], "client_history");
        assert_eq!(list[1]["model"], SCRIPT_MODEL);
        // The raw bytes are JSON-escaped only: serde leaves `<` alone, the page sets text.
        assert!(std::str::from_utf8(r.body())
            .unwrap()
            .contains(SCRIPT_MODEL));
    }

    #[test]
    fn session_detail_by_encoded_id_and_404s() {
        let store = fixture();
        let p = Pricing::default();
        let r = serve(&store, &p, "/api/sessions/s%2F1%20x", None);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, header::CACHE_CONTROL), "no-store");
        let d = body_json(&r);
        assert_eq!(d["summary"]["session"], "s/1 x");
        let turns = d["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0]["cache_write_tokens"], 1_000);
        assert_eq!(turns[1]["cache_read_tokens"], 100);
        assert_eq!(turns[1]["collapse"]["at"], "messages[3]");
        assert_eq!(turns[1]["collapse"]["cause"], "client_history");
        assert_eq!(turns[0]["collapse"], serde_json::Value::Null);

        for path in [
            "/api/sessions/nope",
            "/api/sessions/a/b",
            "/api/other",
            "/x.js",
            "/api",
        ] {
            let r = serve(&store, &p, path, None);
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(header(&r, header::CONTENT_TYPE), "application/json");
            assert!(body_json(&r)["error"].is_string(), "{path}");
        }
    }

    #[test]
    fn since_window_and_bad_duration() {
        let store = fixture();
        let p = Pricing::default();
        let r = serve(&store, &p, "/api/sessions", Some("since=1h"));
        assert_eq!(body_json(&r).as_array().unwrap().len(), 2);
        let r = serve(&store, &p, "/api/sessions/", Some("x=1&since=10s"));
        assert_eq!(body_json(&r).as_array().unwrap().len(), 0);
        let r = serve(&store, &p, "/api/sessions", Some("since="));
        assert_eq!(body_json(&r).as_array().unwrap().len(), 2);
        let r = serve(&store, &p, "/api/sessions", Some("since=soon"));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert!(body_json(&r)["error"]
            .as_str()
            .unwrap()
            .contains("examples: 30m"));
        assert_eq!(
            param(Some("a=1&since=2%20h"), "since").as_deref(),
            Some("2 h")
        );
        assert_eq!(param(Some("since=1+h"), "since").as_deref(), Some("1 h"));
        assert_eq!(param(None, "since"), None);
    }
}
