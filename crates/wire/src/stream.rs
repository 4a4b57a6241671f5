//! The response body on its way back: forwarded frame by frame as it arrives (never
//! buffered), with an idle timeout between frames and an observer hook that sees each chunk,
//! a break, and the end. Knows nothing of LLMs: what a break turns into on the wire (an
//! event-stream error event, or an abort) is the observer's decision.
//!
//! At shutdown, when the grace is nearly over, the [`Cutoff`] ends every body still open: an
//! event stream at its next event boundary (the client never holds part of an event), any
//! other body at once; then as a [`Break::Shutdown`].
//!
//! An observer may hold one frame back for a bounded wait of its own ([`BodyObserver::hold`]:
//! the last chunk of a response until its records are stored where the next request may be
//! served); the body forwards nothing else meanwhile and reports no end.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use crate::upstream::{BoxError, UpstreamBody};

/// Why a response body stopped before its natural end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Break {
    /// The upstream's body failed (reset, truncated, protocol error).
    UpstreamBroken,
    /// No chunk arrived within the idle timeout.
    IdleTimeout,
    /// The proxy is shutting down and the grace is over ([`Cutoff`]).
    Shutdown,
}

/// Ends the bodies still open when the shutdown grace is over: [`Cutoff::cut`] fires every
/// [`CutWait`] handed out. Cheap to clone; one per server, shared across reloads.
#[derive(Debug, Clone)]
pub struct Cutoff(Arc<tokio::sync::watch::Sender<bool>>);

/// Completes when the [`Cutoff`] fires (never, if it is dropped without firing).
pub type CutWait = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Default for Cutoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Cutoff {
    pub fn new() -> Self {
        Self(Arc::new(tokio::sync::watch::channel(false).0))
    }

    /// End every body that waits on this cutoff.
    pub fn cut(&self) {
        self.0.send_replace(true);
    }

    /// A future for one body ([`ObservedBody::cut_by`]).
    pub fn waiter(&self) -> CutWait {
        let mut rx = self.0.subscribe();
        Box::pin(async move {
            if rx.wait_for(|cut| *cut).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// Whether bytes ending in `tail` end an event-stream event (or nothing was sent): the last
/// line end is followed by a blank line (WHATWG HTML, event stream interpretation: lines end
/// with `\n`, `\r\n` or `\r`).
fn at_event_boundary(tail: &[u8]) -> bool {
    tail.is_empty()
        || tail.ends_with(b"\n\n")
        || tail.ends_with(b"\r\r")
        || tail.ends_with(b"\n\r\n")
        || tail.ends_with(b"\r\n\r\n")
}

/// The length of the shortest prefix of `chunk` after which the stream (`tail`, the last
/// bytes sent, then `chunk`) is at an event boundary, if any.
fn first_event_boundary(tail: &[u8], chunk: &[u8]) -> Option<usize> {
    let mut window: Vec<u8> = tail.to_vec();
    for (i, b) in chunk.iter().enumerate() {
        window.push(*b);
        if window.len() > 4 {
            window.remove(0);
        }
        // A `\r` ending the window may start a `\r\n`: the boundary is after the `\n`.
        let cr_pending = *b == b'\r' && chunk.get(i + 1) == Some(&b'\n');
        if !cr_pending && at_event_boundary(&window) {
            return Some(i + 1);
        }
    }
    None
}

/// How a response body ended; told to [`BodyObserver::on_end`] exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Delivered whole.
    Complete,
    /// The upstream broke or went idle mid-way ([`Break`]).
    Broken(Break),
    /// The client went away first; dropping the body cancelled the upstream request.
    ClientGone,
}

/// A wait an observer holds a frame for ([`BodyObserver::hold`]). Bounded by whoever made it.
pub type Hold = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Sees a response body as it passes. Runs synchronously inside the body's poll: it must not
/// block, do I/O or wait on a lock held across an await, and it can never alter or fail the
/// client's bytes; it delays them only by a bounded [`Self::hold`] of its own.
pub trait BodyObserver: Send {
    /// A data chunk, just before it is handed to the client.
    fn on_data(&mut self, _chunk: &Bytes) {}
    /// The body broke mid-way (`detail` says how). Return a last chunk to end the stream with
    /// instead of aborting it (e.g. an event-stream error event); `None` aborts, so the
    /// client sees a broken response rather than a clean end.
    fn on_break(&mut self, _why: Break, _detail: &str) -> Option<Bytes> {
        None
    }
    /// The body ended. Called exactly once, after every other call but [`Self::hold`].
    fn on_end(&mut self, _end: End) {}
    /// Asked after each data chunk's [`Self::on_data`] (and the complete end's
    /// [`Self::on_end`], when the end came with it or after it): a wait the chunk (or the end)
    /// must be held for before it reaches the client, or `None` to pass it at once. The wait
    /// must be bounded: the body waits for it whole. Not asked on a break.
    fn hold(&mut self) -> Option<Hold> {
        None
    }
}

/// The upstream response body, observed.
pub struct ObservedBody<O: BodyObserver> {
    inner: UpstreamBody,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    /// The observer may end a broken body with a chunk of its own, so no length is promised.
    may_append: bool,
    finished: bool,
    observer: O,
    /// The shutdown cut, until it fires ([`Self::cut_by`]).
    cut: Option<CutWait>,
    /// The cut fired: an event stream ends at its next event boundary, anything else now.
    cutting: bool,
    /// The last bytes handed to the client (at most 4), to find the event boundary.
    tail: Vec<u8>,
    /// The observer's wait ([`BodyObserver::hold`]) and what goes to the client after it: a
    /// frame, or the end (`None`).
    held: Option<(Hold, Option<Frame<Bytes>>)>,
}

impl<O: BodyObserver> ObservedBody<O> {
    /// Wrap `inner`, allowing at most `idle_timeout` between two frames. `may_append`: the
    /// observer may answer a break with a last chunk (then no `size_hint` is promised).
    pub fn new(inner: UpstreamBody, idle_timeout: Duration, may_append: bool, observer: O) -> Self {
        Self {
            inner,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            may_append,
            finished: false,
            observer,
            cut: None,
            cutting: false,
            tail: Vec::new(),
            held: None,
        }
    }

    /// End the body when `cut` completes ([`Cutoff::waiter`]): at once, or, when the observer
    /// may end it with a chunk of its own (an event stream), at its next event boundary.
    pub fn cut_by(mut self, cut: CutWait) -> Self {
        self.cut = Some(cut);
        self
    }

    fn remember_tail(&mut self, data: &[u8]) {
        self.tail
            .extend_from_slice(&data[data.len().saturating_sub(4)..]);
        let excess = self.tail.len().saturating_sub(4);
        self.tail.drain(..excess);
    }

    fn finish(&mut self, end: End) {
        if !self.finished {
            self.finished = true;
            self.observer.on_end(end);
        }
    }

    /// Pass `next` (a frame, or the end) to the client, after the observer's wait if it
    /// asks for one.
    fn release(
        &mut self,
        next: Option<Frame<Bytes>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.observer.hold() {
            Some(hold) => {
                self.held = Some((hold, next));
                self.poll_held(cx)
            }
            None => Poll::Ready(next.map(Ok)),
        }
    }

    /// The held frame (or end) once the observer's wait is over.
    fn poll_held(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some((hold, _)) = &mut self.held else {
            return Poll::Ready(None);
        };
        if hold.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let next = self.held.take().and_then(|(_, next)| next);
        Poll::Ready(next.map(Ok))
    }

    fn broken(
        &mut self,
        why: Break,
        detail: String,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let last = self.observer.on_break(why, &detail);
        if let Some(chunk) = &last {
            self.observer.on_data(chunk);
        }
        self.finish(End::Broken(why));
        match last {
            Some(chunk) if self.may_append => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            _ => Poll::Ready(Some(Err(detail.into()))),
        }
    }
}

impl<O: BodyObserver + Unpin> Body for ObservedBody<O> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Every field is `Unpin`, so this is a plain `&mut`.
        let this = self.get_mut();
        if this.held.is_some() {
            return this.poll_held(cx);
        }
        if this.finished {
            return Poll::Ready(None);
        }
        if let Some(cut) = &mut this.cut {
            if cut.as_mut().poll(cx).is_ready() {
                this.cut = None;
                this.cutting = true;
            }
        }
        if this.cutting && (!this.may_append || at_event_boundary(&this.tail)) {
            return this.broken(Break::Shutdown, "the proxy is shutting down".to_owned());
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(mut frame))) => {
                if this.cutting {
                    // Part of an event is with the client: send up to the event's end, no
                    // further; the next poll ends the body.
                    if let Some(data) = frame.data_mut() {
                        if let Some(end) = first_event_boundary(&this.tail, data) {
                            data.truncate(end);
                        }
                    }
                }
                if let Some(data) = frame.data_ref() {
                    this.observer.on_data(data);
                    if this.may_append {
                        this.remember_tail(data);
                    }
                }
                let deadline = tokio::time::Instant::now() + this.idle_timeout;
                this.idle.as_mut().reset(deadline);
                if this.inner.is_end_stream() || frame.is_trailers() {
                    // A sized body ends with its last frame, and trailers are always the last frame:
                    // hyper will not poll again (the upstream sent trailers: not a client gone).
                    this.finish(End::Complete);
                }
                this.release(Some(frame), cx)
            }
            Poll::Ready(Some(Err(e))) => this.broken(Break::UpstreamBroken, e.to_string()),
            Poll::Ready(None) => {
                this.finish(End::Complete);
                this.release(None, cx)
            }
            Poll::Pending => match this.idle.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let ms = this.idle_timeout.as_millis();
                    this.broken(
                        Break::IdleTimeout,
                        format!("no data from upstream for {ms} ms"),
                    )
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        // A held frame is still to come.
        self.held.is_none() && (self.finished || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.may_append {
            // An appended last chunk could change the length: never promise one.
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}

impl<O: BodyObserver> Drop for ObservedBody<O> {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            // An empty or fully read body that hyper never polled to its end.
            self.finish(End::Complete);
        } else {
            // The client went away; dropping `inner` closes (cancels) the upstream request.
            self.finish(End::ClientGone);
        }
    }
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
    use http_body_util::{BodyExt, StreamBody};
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Seen {
        data: Vec<u8>,
        breaks: Vec<Break>,
        ends: Vec<End>,
    }

    struct Recorder(Arc<Mutex<Seen>>, Option<&'static str>);

    impl BodyObserver for Recorder {
        fn on_data(&mut self, chunk: &Bytes) {
            self.0.lock().unwrap().data.extend_from_slice(chunk);
        }
        fn on_break(&mut self, why: Break, _detail: &str) -> Option<Bytes> {
            self.0.lock().unwrap().breaks.push(why);
            self.1.map(|s| Bytes::from_static(s.as_bytes()))
        }
        fn on_end(&mut self, end: End) {
            self.0.lock().unwrap().ends.push(end);
        }
    }

    fn body(chunks: Vec<Result<&'static str, &'static str>>) -> UpstreamBody {
        let s = futures_util::stream::iter(chunks.into_iter().map(|c| match c {
            Ok(d) => Ok(Frame::data(Bytes::from_static(d.as_bytes()))),
            Err(e) => Err(BoxError::from(e)),
        }));
        StreamBody::new(s).boxed_unsync()
    }

    #[tokio::test]
    async fn every_chunk_is_seen_in_order_and_end_is_told_once() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let b = ObservedBody::new(
            body(vec![Ok("a"), Ok("bc"), Ok("d")]),
            Duration::from_secs(5),
            false,
            Recorder(seen.clone(), None),
        );
        let out = b.collect().await.unwrap().to_bytes();
        assert_eq!(&out[..], b"abcd");
        let s = seen.lock().unwrap();
        assert_eq!(s.data, b"abcd");
        assert_eq!(s.ends, vec![End::Complete]);
    }

    /// The failing input: a chunked response with trailers. Hyper stops polling after the
    /// trailers frame and drops the body, which was told `ClientGone`.
    #[tokio::test]
    async fn trailers_end_the_body_complete() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-t", http::HeaderValue::from_static("1"));
        let frames = vec![
            Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"data: 1\n\n"))),
            Ok(Frame::trailers(trailers)),
        ];
        let inner = StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync();
        let mut b = ObservedBody::new(
            inner,
            Duration::from_secs(5),
            false,
            Recorder(seen.clone(), None),
        );
        // Poll as hyper does: up to the trailers frame, then drop.
        while let Some(f) = b.frame().await {
            if f.unwrap().is_trailers() {
                break;
            }
        }
        drop(b);
        assert_eq!(seen.lock().unwrap().ends, vec![End::Complete]);
    }

    #[tokio::test]
    async fn a_break_ends_with_the_observers_chunk_when_allowed() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut b = ObservedBody::new(
            body(vec![Ok("a"), Err("reset")]),
            Duration::from_secs(5),
            true,
            Recorder(seen.clone(), Some("event: error\n\n")),
        );
        let mut got = Vec::new();
        while let Some(f) = b.frame().await {
            got.extend_from_slice(&f.unwrap().into_data().unwrap());
        }
        assert_eq!(got, b"aevent: error\n\n");
        drop(b);
        let s = seen.lock().unwrap();
        assert_eq!(s.breaks, vec![Break::UpstreamBroken]);
        assert_eq!(s.ends, vec![End::Broken(Break::UpstreamBroken)]);
    }

    #[tokio::test]
    async fn a_break_aborts_without_a_chunk() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut b = ObservedBody::new(
            body(vec![Ok("a"), Err("reset")]),
            Duration::from_secs(5),
            true,
            Recorder(seen.clone(), None),
        );
        assert!(b.frame().await.unwrap().is_ok());
        assert!(b.frame().await.unwrap().is_err());
        drop(b);
        assert_eq!(
            seen.lock().unwrap().ends,
            vec![End::Broken(Break::UpstreamBroken)]
        );
    }

    #[test]
    fn event_boundaries_by_line_end() {
        assert!(at_event_boundary(b""));
        for t in [&b"a\n\n"[..], b"a\r\r", b"a\r\n\r\n", b"a\n\r\n"] {
            assert!(at_event_boundary(t), "{t:?}");
        }
        for t in [&b"a"[..], b"a\n", b"a\r\n", b"\r\n\r"] {
            assert!(!at_event_boundary(t), "{t:?}");
        }
        assert_eq!(first_event_boundary(b"da", b"ta: 1\n\nevent: x"), Some(7));
        assert_eq!(first_event_boundary(b"a\n", b"\nmore"), Some(1));
        // `\r\n\r` then `\n`: the boundary is after the `\n`.
        assert_eq!(first_event_boundary(b"a", b"\r\n\r\nb"), Some(4));
        assert_eq!(first_event_boundary(b"a", b"bc\n"), None);
    }

    /// The cut fires while half an event is with the client: the rest of that event goes, the
    /// next event does not, and the observer ends the stream with its chunk.
    #[tokio::test]
    async fn a_cut_ends_an_event_stream_at_its_next_event_boundary() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let cutoff = Cutoff::new();
        let mut b = ObservedBody::new(
            StreamBody::new(stream).boxed_unsync(),
            Duration::from_secs(5),
            true,
            Recorder(seen.clone(), Some("event: error\n\n")),
        )
        .cut_by(cutoff.waiter());
        let data = |s: &'static str| Ok(Frame::data(Bytes::from_static(s.as_bytes())));
        tx.send(data("data: 1\n\ndata: ")).await.unwrap();
        let mut got = b
            .frame()
            .await
            .unwrap()
            .unwrap()
            .into_data()
            .unwrap()
            .to_vec();
        cutoff.cut();
        tx.send(data("2\n\ndata: 3\n\n")).await.unwrap();
        while let Some(f) = b.frame().await {
            got.extend_from_slice(&f.unwrap().into_data().unwrap());
        }
        assert_eq!(got, b"data: 1\n\ndata: 2\n\nevent: error\n\n");
        assert_eq!(
            seen.lock().unwrap().ends,
            vec![End::Broken(Break::Shutdown)]
        );
        // A body the observer cannot end with a chunk is aborted at once.
        let mut b = ObservedBody::new(
            body(vec![Ok("{\"a\":")]),
            Duration::from_secs(5),
            false,
            Recorder(Arc::new(Mutex::new(Seen::default())), None),
        )
        .cut_by(cutoff.waiter());
        assert!(b.frame().await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_dropped_body_tells_client_gone() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let pending = StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, BoxError>,
        >())
        .boxed_unsync();
        let b = ObservedBody::new(
            pending,
            Duration::from_secs(5),
            false,
            Recorder(seen.clone(), None),
        );
        drop(b);
        assert_eq!(seen.lock().unwrap().ends, vec![End::ClientGone]);
    }

    /// Holds the frame that carries `at` (or, with `at` empty, the end) until `release`
    /// fires.
    struct Holder {
        seen: Arc<Mutex<Seen>>,
        at: &'static [u8],
        release: Option<tokio::sync::oneshot::Receiver<()>>,
        due: bool,
    }

    impl BodyObserver for Holder {
        fn on_data(&mut self, chunk: &Bytes) {
            self.seen.lock().unwrap().data.extend_from_slice(chunk);
            self.due = !self.at.is_empty() && &chunk[..] == self.at;
        }
        fn on_end(&mut self, end: End) {
            self.seen.lock().unwrap().ends.push(end);
            self.due = self.at.is_empty();
        }
        fn hold(&mut self) -> Option<Hold> {
            if !std::mem::take(&mut self.due) {
                return None;
            }
            let rx = self.release.take()?;
            Some(Box::pin(async move {
                let _ = rx.await;
            }))
        }
    }

    fn holder(at: &'static [u8]) -> (Holder, tokio::sync::oneshot::Sender<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let h = Holder {
            seen: Arc::new(Mutex::new(Seen::default())),
            at,
            release: Some(rx),
            due: false,
        };
        (h, tx)
    }

    #[tokio::test]
    async fn a_held_chunk_reaches_the_client_only_after_the_wait_and_nothing_passes_it() {
        use futures_util::FutureExt;
        let (h, release) = holder(b"last");
        let seen = h.seen.clone();
        let mut b = ObservedBody::new(
            body(vec![Ok("a"), Ok("last"), Ok("after")]),
            Duration::from_secs(5),
            false,
            h,
        );
        let first = b.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"a");
        // The observer saw the chunk; the client does not get it, nor anything after it.
        assert!(b.frame().now_or_never().is_none());
        assert!(b.frame().now_or_never().is_none());
        assert_eq!(seen.lock().unwrap().data, b"alast");
        assert!(!b.is_end_stream());
        release.send(()).unwrap();
        let held = b.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&held[..], b"last");
        let rest = b.collect().await.unwrap().to_bytes();
        assert_eq!(&rest[..], b"after");
        assert_eq!(seen.lock().unwrap().ends, vec![End::Complete]);
    }

    #[tokio::test]
    async fn a_held_end_is_reported_only_after_the_wait() {
        use futures_util::FutureExt;
        let (h, release) = holder(b"");
        let seen = h.seen.clone();
        let mut b = ObservedBody::new(body(vec![Ok("{}")]), Duration::from_secs(5), false, h);
        let first = b.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"{}");
        // The end was told to the observer; the client is not told it yet.
        assert!(b.frame().now_or_never().is_none());
        assert_eq!(seen.lock().unwrap().ends, vec![End::Complete]);
        assert!(!b.is_end_stream());
        release.send(()).unwrap();
        assert!(b.frame().await.is_none());
        assert!(b.is_end_stream());
    }
}
