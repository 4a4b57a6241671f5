//! Test helpers: recorded responses fed to an observer without the real framer.

use std::path::PathBuf;

use super::{observe_body, observe_events, observer, Observed};
use crate::dialect::Dialect;
use crate::wire::sse::SseEvent;
use crate::wire::stream::End;
use crate::wire::tee::{Sink, SinkError};

/// A fixture under `tests/fixtures/responses/`.
pub(crate) fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/responses")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A recorded event stream split at blank lines (`\n\n` or `\r\n\r\n`): per event its
/// `event:` field and its `data:` lines joined with `\n`; comment lines skipped. A minimal
/// stand-in for the real framer.
pub(crate) fn split_sse(raw: &[u8]) -> Vec<(Option<String>, Vec<u8>)> {
    let mut events = Vec::new();
    let (mut name, mut data, mut has_data) = (None, Vec::new(), false);
    for line in raw.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if has_data || name.is_some() {
                events.push((name.take(), std::mem::take(&mut data)));
            }
            has_data = false;
            continue;
        }
        if line.starts_with(b":") {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => name = Some(String::from_utf8_lossy(value).into_owned()),
            b"data" => {
                if has_data {
                    data.push(b'\n');
                }
                data.extend_from_slice(value);
                has_data = true;
            }
            _ => {}
        }
    }
    if has_data {
        events.push((name, data));
    }
    events
}

/// Feed a recorded stream to a fresh observer, end it with `end`; the first error, if any.
pub(crate) fn run_stream(dialect: Dialect, raw: &[u8], end: End) -> (Observed, Option<SinkError>) {
    let mut sink = observer(dialect);
    let mut err = None;
    for (name, data) in split_sse(raw) {
        let ev = SseEvent {
            event: name.as_deref(),
            data: &data,
        };
        if let Err(e) = sink.on_event(&ev) {
            err = Some(e);
            break;
        }
    }
    sink.on_end(end);
    (sink.observed().clone(), err)
}

/// A recorded stream fixture, ended complete; panics on an observing error. (Also checks
/// that [`observe_events`] gives the same.)
pub(crate) fn stream(dialect: Dialect, name: &str) -> Observed {
    let raw = fixture(name);
    let (o, err) = run_stream(dialect, &raw, End::Complete);
    assert_eq!(err, None, "{name}");
    let events = split_sse(&raw);
    let events = events.iter().map(|(n, d)| SseEvent {
        event: n.as_deref(),
        data: d,
    });
    assert_eq!(observe_events(dialect, events, End::Complete), o, "{name}");
    o
}

/// A recorded JSON body fixture, ended complete; panics on an observing error.
pub(crate) fn body(dialect: Dialect, name: &str) -> Observed {
    let raw = fixture(name);
    let mut sink = observer(dialect);
    sink.on_json(&raw).unwrap_or_else(|e| panic!("{name}: {e}"));
    sink.on_end(End::Complete);
    assert_eq!(&observe_body(dialect, &raw, End::Complete), sink.observed());
    sink.observed().clone()
}
