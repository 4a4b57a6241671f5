//! Request bodies: a bounded read that never refuses (an oversized body is streamed through
//! with the part already read), and `content-encoding` decoding for the passes.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http_body::Frame;
use http_body_util::{BodyExt, BodyStream, Empty, Full, StreamBody};
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::decode::{Coding, DecodeError, Decoder, PushError};
use crate::upstream::{BoxError, UpstreamBody};

/// Result of [`read_bounded`].
pub enum ReadBody {
    /// The whole body, at most `limit` bytes, and its reservation in the [`BufferBudget`]
    /// (hold it while the body, or a copy of it, is in memory).
    Buffered(Bytes, BudgetPermit),
    /// The body is larger than `limit`: what was read so far and the rest, to be streamed
    /// upstream untouched.
    TooLarge { head: Vec<Bytes>, rest: Incoming },
    /// The [`BufferBudget`] had no room for the body within the wait: what was read so far
    /// and the rest, to be streamed upstream untouched.
    OverBudget { head: Vec<Bytes>, rest: Incoming },
}

/// How often a working-memory reservation ([`BufferBudget::reserve_working`]) looks for room
/// while it waits, ms: a decode takes tens of ms to seconds, so this adds little to its wait.
const WORKING_POLL: Duration = Duration::from_millis(10);

/// Bytes per permit of the [`BufferBudget`]'s semaphore (1 KiB): a 1 GiB budget is 2^20
/// permits, and one `acquire_many` (a `u32` of permits) can reserve up to 4 TiB.
const BUDGET_UNIT: u64 = 1024;

/// What one buffered body costs in memory while the proxy holds it, as a multiple of its
/// size: the body itself, its decoded copy for the passes and their working memory (parse,
/// session prefix, rewritten copy, allocator slack). Measured by `benches/memory.py` (debug
/// build): one 20 MB text-only body takes the proxy's peak RSS from 12 MiB to 108 MiB, two at
/// once to 207 MiB: ~4.8x per body. The budget charges each body this many times its size, so
/// `max_buffered_bytes` bounds the memory the bodies really take, not just their wire bytes.
pub(crate) const BODY_MEMORY_FACTOR: u64 = 5;

/// A global budget for request bodies held in memory (`[server] max_buffered_bytes`): a
/// counting semaphore over bytes, in [`BUDGET_UNIT`] permits (tokio's `Semaphore`, which
/// serves waiters first come, first served). Shared by every request, and by every
/// configuration snapshot of a running proxy.
#[derive(Debug)]
pub struct BufferBudget {
    sem: Arc<Semaphore>,
    /// The budget, in permits.
    total: u64,
}

/// Bytes of a [`BufferBudget`] reserved by one body; returned when dropped.
#[derive(Debug, Default)]
pub struct BudgetPermit(Option<OwnedSemaphorePermit>);

impl BudgetPermit {
    /// Permits held ([`BUDGET_UNIT`] bytes each).
    fn units(&self) -> u64 {
        self.0.as_ref().map_or(0, |p| p.num_permits() as u64)
    }

    fn merge(&mut self, more: OwnedSemaphorePermit) {
        match &mut self.0 {
            Some(p) => p.merge(more),
            None => self.0 = Some(more),
        }
    }
}

impl BufferBudget {
    /// A budget of `bytes` (rounded up to whole KiB).
    pub fn new(bytes: u64) -> Self {
        let total = bytes
            .div_ceil(BUDGET_UNIT)
            .min(Semaphore::MAX_PERMITS as u64);
        Self {
            sem: Arc::new(Semaphore::new(usize::try_from(total).unwrap_or(usize::MAX))),
            total,
        }
    }

    /// Bytes reserved right now (in whole KiB).
    #[cfg(any(test, feature = "testing"))]
    pub fn reserved_bytes(&self) -> u64 {
        let free = self.sem.available_permits() as u64;
        self.total.saturating_sub(free) * BUDGET_UNIT
    }

    /// The whole budget, bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total.saturating_mul(BUDGET_UNIT)
    }

    /// Reserve `bytes` of working memory (an image decode's, measured before it runs, not a
    /// body's: no [`BODY_MEMORY_FACTOR`]), waiting until `deadline` for room, first come first
    /// served with the bodies. `None` when the deadline passed first, or when `bytes` is more
    /// than the whole budget (it could never fit).
    pub async fn reserve_working(&self, bytes: u64, deadline: Instant) -> Option<BudgetPermit> {
        if bytes > self.total_bytes() {
            return None;
        }
        // Not a queued `acquire`: tokio's semaphore serves waiters in order, so a decode
        // waiting for hundreds of MB would hold back every small body behind it (the failing
        // input of a break-it pass: a text request waited 3 s for an image decode's room).
        // Room is taken when it is there, checked every `WORKING_POLL`.
        let units = u32::try_from(bytes.div_ceil(BUDGET_UNIT)).ok()?;
        loop {
            match Arc::clone(&self.sem).try_acquire_many_owned(units) {
                Ok(p) => return Some(BudgetPermit(Some(p))),
                Err(tokio::sync::TryAcquireError::Closed) => return None,
                Err(tokio::sync::TryAcquireError::NoPermits) => {}
            }
            if Instant::now() + WORKING_POLL > deadline {
                return None;
            }
            tokio::time::sleep(WORKING_POLL).await;
        }
    }

    /// Grow `permit` to cover a body of `bytes` ([`BODY_MEMORY_FACTOR`] times its size, at
    /// most the whole budget), waiting until `deadline` for room. `false` when the deadline
    /// passed first (the permit keeps what it had).
    async fn reserve(&self, permit: &mut BudgetPermit, bytes: u64, deadline: Instant) -> bool {
        let need = bytes
            .saturating_mul(BODY_MEMORY_FACTOR)
            .div_ceil(BUDGET_UNIT);
        self.reserve_units(permit, need, deadline).await
    }

    /// Grow `permit` to `need` units (at most the whole budget), waiting until `deadline`.
    async fn reserve_units(&self, permit: &mut BudgetPermit, need: u64, deadline: Instant) -> bool {
        let need = need.min(self.total);
        let more = need.saturating_sub(permit.units());
        if more == 0 {
            return true;
        }
        let Ok(more) = u32::try_from(more) else {
            return false;
        };
        let acquire = Arc::clone(&self.sem).acquire_many_owned(more);
        match tokio::time::timeout_at(deadline, acquire).await {
            Ok(Ok(p)) => {
                permit.merge(p);
                true
            }
            // Timed out, or the semaphore was closed (it never is).
            _ => false,
        }
    }
}

/// Why a client's body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The client's stream failed (it went away, or sent a malformed body).
    #[error(transparent)]
    Client(#[from] hyper::Error),
    /// No body data arrived for this long, ms: the client stalled mid-body.
    #[error("no request body data for {0} ms")]
    Stalled(u64),
}

/// How [`read_bounded`] reads: the size limit, the gap allowed between chunks, and the
/// budget with how long to wait for room in it.
pub struct ReadLimits<'a> {
    /// Largest body buffered, bytes (`max_rewrite_bytes`).
    pub limit: u64,
    /// Longest wait for the next chunk (`body_idle_timeout_ms`).
    pub idle: Duration,
    /// The global budget (`max_buffered_bytes`).
    pub budget: &'a BufferBudget,
    /// Longest wait for room in the budget, in all (`buffer_wait_ms`).
    pub budget_wait: Duration,
}

/// Read a body up to `limit` bytes, waiting at most `idle` for each chunk, and reserving its
/// bytes in the budget first: a `content-length` is reserved whole before anything is read
/// (a body waiting for room stays in the client's socket, not in memory); a body of unknown
/// length is reserved chunk by chunk. A `content-length` above the limit skips reading
/// entirely; no room within `budget_wait` gives [`ReadBody::OverBudget`].
///
/// Errors: [`ReadError::Client`] when the client's stream fails, [`ReadError::Stalled`] when
/// it sends nothing for `idle`.
pub async fn read_bounded(
    mut body: Incoming,
    content_length: Option<u64>,
    limits: ReadLimits<'_>,
) -> Result<ReadBody, ReadError> {
    let ReadLimits {
        limit,
        idle,
        budget,
        budget_wait,
    } = limits;
    if content_length.is_some_and(|n| n > limit) {
        return Ok(ReadBody::TooLarge {
            head: Vec::new(),
            rest: body,
        });
    }
    let deadline = Instant::now() + budget_wait;
    let mut permit = BudgetPermit::default();
    if let Some(n) = content_length {
        if !budget.reserve(&mut permit, n, deadline).await {
            return Ok(ReadBody::OverBudget {
                head: Vec::new(),
                rest: body,
            });
        }
        // The length is known (hyper holds the client to it): copy each chunk into one
        // buffer as it arrives, so the chunks and their concatenation are never all held.
        let mut buf = BytesMut::with_capacity(usize::try_from(n).unwrap_or(0));
        loop {
            let next = tokio::time::timeout(idle, body.frame())
                .await
                .map_err(|_| ReadError::Stalled(millis(idle)))?;
            let Some(frame) = next else { break };
            if let Ok(data) = frame?.into_data() {
                buf.extend_from_slice(&data);
            }
        }
        return Ok(ReadBody::Buffered(buf.freeze(), permit));
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    loop {
        let next = tokio::time::timeout(idle, body.frame())
            .await
            .map_err(|_| ReadError::Stalled(millis(idle)))?;
        let Some(frame) = next else { break };
        let frame = frame?;
        if let Ok(data) = frame.into_data() {
            total += data.len() as u64;
            chunks.push(data);
            if total > limit {
                return Ok(ReadBody::TooLarge {
                    head: chunks,
                    rest: body,
                });
            }
            if !budget.reserve(&mut permit, total, deadline).await {
                return Ok(ReadBody::OverBudget {
                    head: chunks,
                    rest: body,
                });
            }
        }
    }
    Ok(ReadBody::Buffered(concat(chunks, total), permit))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn concat(mut chunks: Vec<Bytes>, total: u64) -> Bytes {
    if chunks.len() == 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut buf = BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
    for c in chunks {
        buf.extend_from_slice(&c);
    }
    buf.freeze()
}

/// A buffered body for the upstream.
pub fn full(bytes: Bytes) -> UpstreamBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// The client's body streamed upstream as it arrives, after the chunks already read.
///
/// `sent` fires once the client's body has ended (whole, or with an error), so the caller can
/// start the first-byte timer only then: an upload may take longer than the timeout.
///
/// A request that has no body (nothing read and the client's body already at its end: no
/// `content-length` and no `transfer-encoding`, or `content-length: 0`) goes upstream without
/// one. A stream body of unknown length would make hyper's client add
/// `transfer-encoding: chunked` and an empty chunked body to every method but GET / HEAD /
/// CONNECT (found by testing: the openai and anthropic SDKs' body-less `DELETE`s).
///
/// `idle` bounds the wait for each of the client's chunks: past it the body fails with
/// [`ReadError::Stalled`] (boxed; [`client_fault`] finds it in the upstream client's error).
/// The wait starts only when the upstream side asks for the next chunk, so a slow upstream
/// never counts against the client.
pub fn streamed(
    head: Vec<Bytes>,
    rest: Incoming,
    idle: Duration,
    sent: tokio::sync::oneshot::Sender<()>,
) -> UpstreamBody {
    if head.is_empty() && http_body::Body::is_end_stream(&rest) {
        let _ = sent.send(());
        return Empty::new().map_err(|never| match never {}).boxed_unsync();
    }
    let head = futures_util::stream::iter(head.into_iter().map(|b| Ok(Frame::data(b))));
    let rest = futures_util::stream::unfold(Some(rest), move |state| async move {
        let mut body = state?;
        match tokio::time::timeout(idle, body.frame()).await {
            Ok(None) => None,
            Ok(Some(Ok(frame))) => Some((Ok(frame), Some(body))),
            Ok(Some(Err(e))) => Some((Err(Box::new(ReadError::Client(e)) as BoxError), None)),
            Err(_) => Some((
                Err(Box::new(ReadError::Stalled(millis(idle))) as BoxError),
                None,
            )),
        }
    });
    let end = futures_util::stream::once(async move {
        let _ = sent.send(());
    })
    .filter_map(|()| async { None::<Result<Frame<Bytes>, BoxError>> });
    StreamBody::new(head.chain(rest).chain(end)).boxed_unsync()
}

/// The client's body fault ([`ReadError`]) behind an error of the upstream client, when the
/// request failed because the client's body did (it stalled or broke while streamed).
pub fn client_fault<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a ReadError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(r) = c.downcast_ref::<ReadError>() {
            return Some(r);
        }
        cur = c.source();
    }
    None
}

/// Read up to `limit` bytes of a response body. Returns what was read and, when the body
/// is longer, the unread rest (`None` when the body ended within the limit).
pub async fn read_prefix(
    mut body: UpstreamBody,
    limit: u64,
) -> Result<(Bytes, Option<UpstreamBody>), BoxError> {
    let mut chunks = Vec::new();
    let mut total = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            total += data.len() as u64;
            chunks.push(data);
            if total > limit {
                return Ok((concat(chunks, total), Some(body)));
            }
        }
    }
    Ok((concat(chunks, total), None))
}

/// `head` followed by the rest of a body.
pub fn prepend(head: Vec<Bytes>, rest: UpstreamBody) -> UpstreamBody {
    let head = futures_util::stream::iter(head.into_iter().map(|b| Ok(Frame::data(b))));
    StreamBody::new(head.chain(BodyStream::new(rest))).boxed_unsync()
}

/// Decode a whole body by its `content-encoding`, at most `limit` decoded bytes: the codings
/// and rules of [`crate::decode`] (the one decoder of both directions; `identity`,
/// empty or no header returns the body as is).
///
/// Errors: [`DecodeError`]: a coding it does not decode, stacked codings, corrupt or truncated
/// data, or a decoded body over `limit` (a decompression bomb stops there): the caller then
/// forwards the original bytes, and logs why.
pub fn decode(encoding: Option<&str>, data: &[u8], limit: u64) -> Result<Vec<u8>, DecodeError> {
    let Some(coding) = Coding::from_header(encoding)? else {
        return Ok(data.to_vec());
    };
    let mut out = Vec::new();
    let mut collect = |piece: &[u8]| {
        out.extend_from_slice(piece);
        Ok::<(), std::convert::Infallible>(())
    };
    let mut decoder = Decoder::new(coding, limit);
    let decoded = decoder
        .push(data, &mut collect)
        .and_then(|()| decoder.finish(&mut collect));
    match decoded {
        Ok(()) => Ok(out),
        Err(PushError::Decode(e)) => Err(e),
        Err(PushError::Output(never)) => match never {},
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The failing input of a break-it pass: an image decode waiting for hundreds of MB of
    /// room held back every small body behind it (tokio's semaphore serves waiters in order).
    /// A working-memory reservation waits without queueing; a body that fits goes at once,
    /// and the decode gets its room once it is free, or gives up at its deadline; one larger
    /// than the whole budget never waits.
    #[tokio::test]
    async fn a_waiting_decode_never_holds_back_a_body_that_fits() {
        let budget = Arc::new(BufferBudget::new(1024 * 1024));
        let later = Instant::now() + Duration::from_secs(30);
        let held = budget.reserve_working(900 * 1024, later).await.unwrap();
        let b = Arc::clone(&budget);
        let decode = tokio::spawn(async move { b.reserve_working(500 * 1024, later).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!decode.is_finished(), "no room for the decode yet");
        // A body of 20 KiB (charged 100 KiB) fits beside the held 900 KiB: at once.
        let mut body = BudgetPermit::default();
        let now = Instant::now() + Duration::from_millis(1);
        assert!(budget.reserve(&mut body, 20 * 1024, now).await);
        drop(body);
        drop(held);
        let got = decode
            .await
            .unwrap()
            .expect("room once the first decode ended");
        assert_eq!(budget.reserved_bytes(), 500 * 1024);
        drop(got);
        assert!(budget
            .reserve_working(2 * 1024 * 1024, later)
            .await
            .is_none());
        let soon = Instant::now() + Duration::from_millis(30);
        let _all = budget.reserve_working(1024 * 1024, soon).await.unwrap();
        assert!(
            budget.reserve_working(1024, soon).await.is_none(),
            "the deadline"
        );
    }

    #[tokio::test]
    async fn the_budget_waits_for_room_and_gives_up_at_the_deadline() {
        let budget = Arc::new(BufferBudget::new(10 * 1024));
        let soon = || Instant::now() + Duration::from_millis(50);
        let f = BODY_MEMORY_FACTOR;
        let mut a = BudgetPermit::default();
        assert!(budget.reserve(&mut a, 8 * 1024 / f, soon()).await);
        assert_eq!(budget.reserved_bytes(), 8 * 1024);
        // Growing a reservation takes only the difference; partial KiB round up.
        assert!(budget.reserve(&mut a, 8 * 1024 / f + 1, soon()).await);
        assert_eq!(budget.reserved_bytes(), 9 * 1024);
        let mut b = BudgetPermit::default();
        assert!(!budget.reserve(&mut b, 4 * 1024 / f, soon()).await);
        assert_eq!(b.units(), 0);
        // A waiter gets its room when another body's reservation is dropped.
        let waiter = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move {
                let mut b = BudgetPermit::default();
                let later = Instant::now() + Duration::from_secs(30);
                let ok = budget
                    .reserve(&mut b, 4 * 1024 / BODY_MEMORY_FACTOR, later)
                    .await;
                (ok, b.units())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a);
        assert_eq!(waiter.await.unwrap(), (true, 4));
        assert_eq!(budget.reserved_bytes(), 0);
        // More than the whole budget is held to the whole budget.
        let mut c = BudgetPermit::default();
        assert!(budget.reserve(&mut c, 1 << 40, soon()).await);
        assert_eq!(budget.reserved_bytes(), 10 * 1024);
    }

    #[test]
    fn gzip_roundtrip_and_bomb_limit() {
        let plain = br#"{"model":"m","messages":[]}"#;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(plain).unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(decode(Some("gzip"), &gz, 1024).unwrap(), plain);
        // Each failure says why (the log line's `reason`: a fresh-user pass found one
        // wording for a bomb, corrupt data and an unknown coding alike).
        let why = |enc: &str, data: &[u8], limit: u64| {
            decode(Some(enc), data, limit).unwrap_err().to_string()
        };
        assert_eq!(why("gzip", &gz, 5), "decoded body exceeds 5 bytes");
        let corrupt = why("gzip", b"not gzip data, not gzip data", 1024);
        assert!(corrupt.starts_with("corrupt gzip data"), "{corrupt}");
        assert_eq!(
            why("compress", &gz, 1024),
            "unsupported content-encoding \"compress\""
        );
        assert_eq!(
            why("gzip, gzip", &gz, 1024),
            "stacked content-encoding \"gzip, gzip\" (more than one coding)"
        );
        assert_eq!(
            why("gzip", &gz[..gz.len() - 4], 1024),
            "gzip stream ends before its end marker"
        );
        assert_eq!(decode(None, plain, 1024).unwrap(), plain);
        assert_eq!(decode(Some("identity"), plain, 1024).unwrap(), plain);
        assert_eq!(decode(Some(" GZIP "), &gz, 1024).unwrap(), plain);
    }

    #[test]
    fn br_zstd_deflate() {
        let plain = b"hello hello hello hello";
        let mut br = Vec::new();
        {
            let mut w = brotli::CompressorWriter::new(&mut br, 4096, 5, 22);
            w.write_all(plain).unwrap();
        }
        assert_eq!(decode(Some("br"), &br, 1024).unwrap(), plain);
        let z = zstd::stream::encode_all(&plain[..], 3).unwrap();
        assert_eq!(decode(Some("zstd"), &z, 1024).unwrap(), plain);
        let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zl.write_all(plain).unwrap();
        assert_eq!(
            decode(Some("deflate"), &zl.finish().unwrap(), 1024).unwrap(),
            plain
        );
        let mut raw =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        raw.write_all(plain).unwrap();
        assert_eq!(
            decode(Some("deflate"), &raw.finish().unwrap(), 1024).unwrap(),
            plain
        );
    }
}
