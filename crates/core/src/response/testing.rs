//! Test helpers: recorded responses fed to an observer without the real framer.

use super::{observe_body, observe_events, observer, Observed};
use crate::dialect::testing::{fixture, split_sse};
use crate::dialect::Dialect;
use crate::wire::sse::SseEvent;
use crate::wire::stream::End;
use crate::wire::tee::{Sink, SinkError};

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
