//! The response body on its way back: forwarded frame by frame as it arrives (never
//! buffered), with an idle timeout between frames, a clean end in the dialect's error shape
//! when the upstream breaks an event stream mid-way, and the request's log line written when
//! the body ends or the client goes away.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use crate::dialect::Dialect;
use crate::proxy::errors::midstream_error_event;
use crate::telemetry::{Outcome, RequestLog};
use crate::wire::upstream::{BoxError, UpstreamBody};

/// The upstream response body, observed.
pub struct ObservedBody {
    inner: UpstreamBody,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    /// `Some(dialect)` when the response is an event stream: a mid-stream failure then ends
    /// it with the dialect's error event instead of a broken connection.
    sse: Option<Option<Dialect>>,
    finished: bool,
    log: Option<RequestLog>,
    started: Instant,
}

impl ObservedBody {
    /// Wrap `inner`. `log` is emitted once, when the body ends or is dropped.
    pub fn new(
        inner: UpstreamBody,
        idle_timeout: Duration,
        sse: Option<Option<Dialect>>,
        log: RequestLog,
        started: Instant,
    ) -> Self {
        Self {
            inner,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            sse,
            finished: false,
            log: Some(log),
            started,
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.finished = true;
        if let Some(log) = self.log.take() {
            log.emit(outcome, elapsed_ms(self.started));
        }
    }

    /// The stream broke: end it with the dialect's error event (Anthropic and OpenAI event
    /// streams) or abort it (everything else), never with a clean end.
    fn broken(
        &mut self,
        outcome: Outcome,
        detail: String,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        tracing::warn!(
            target: "cachekeeper::stream",
            route = self.log.as_ref().map(|l| l.route.as_str()).unwrap_or("-"),
            detail = %detail,
            "upstream response broke mid-way"
        );
        let event = self.sse.and_then(|d| midstream_error_event(d, &detail));
        if let Some(log) = self.log.as_mut() {
            log.error = Some(outcome.as_str());
            if let Some(e) = &event {
                log.response_bytes += e.len() as u64;
            }
        }
        self.finish(outcome);
        match (self.sse, event) {
            (Some(_), Some(e)) => Poll::Ready(Some(Ok(Frame::data(e)))),
            // No error event in this dialect (Gemini) or not an event stream: abort, so the
            // client sees a broken response rather than a clean end.
            _ => Poll::Ready(Some(Err(detail.into()))),
        }
    }
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Body for ObservedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.finished {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(log)) = (frame.data_ref(), this.log.as_mut()) {
                    log.response_bytes += data.len() as u64;
                }
                let deadline = tokio::time::Instant::now() + this.idle_timeout;
                this.idle.as_mut().reset(deadline);
                if this.inner.is_end_stream() {
                    // A sized body ends with its last frame: hyper will not poll again.
                    this.finish(Outcome::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => this.broken(Outcome::UpstreamBroken, e.to_string()),
            Poll::Ready(None) => {
                this.finish(Outcome::Complete);
                Poll::Ready(None)
            }
            Poll::Pending => match this.idle.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let ms = this.idle_timeout.as_millis();
                    this.broken(
                        Outcome::IdleTimeout,
                        format!("no data from upstream for {ms} ms"),
                    )
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.sse.is_some() {
            // An injected error event could change the length: never promise one.
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}

impl Drop for ObservedBody {
    fn drop(&mut self) {
        if !self.finished {
            if self.inner.is_end_stream() {
                // An empty or fully read body that hyper never polled to its end.
                self.finish(Outcome::Complete);
            } else {
                // The client went away; dropping `inner` closes (cancels) the upstream request.
                self.finish(Outcome::ClientDisconnected);
            }
        }
    }
}
