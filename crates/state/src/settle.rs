//! Read-your-writes across instances (`[state] write_wait_ms`, docs/state.md "Several
//! instances"): with a shared backend (Redis), the last chunk of a generation response waits
//! until the writes queued before it (the turn's session record and captured carriers)
//! have reached the backend, at most `write_wait_ms`. A turn that lands on another instance
//! right after this one answered then finds them there. Past the bound the chunk goes and
//! the writes complete later; every wait is counted by how it ended
//! (`cachekeeper_state_write_waits_total{result}`).
//!
//! Nothing else waits: other writes are queued and written by the writer thread as before,
//! and with a backend only this process writes (SQLite) there is nothing to wait for (the
//! process's own memory already holds every write).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// Default `[state] write_wait_ms`: the longest the last chunk of a response waits for its
/// turn's writes to reach a shared backend, ms (the figure: a round trip to a Redis on
/// the same network is well under a millisecond; 50 ms covers a busy writer's batch and a
/// slow network without a user noticing).
pub(crate) const DEFAULT_WRITE_WAIT_MS: u64 = 50;

/// Largest accepted `[state] write_wait_ms`, ms: a response's end is never held longer than
/// this (a value above it is rejected at load as a likely typo of seconds for ms).
pub(crate) const MAX_WRITE_WAIT_MS: u64 = 5_000;

/// How one wait ended: the `result` label of `cachekeeper_state_write_waits_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitResult {
    /// `written`: every earlier write reached the backend within the bound.
    Written,
    /// `late`: the bound passed first; the chunk went on, the writes complete later.
    Late,
    /// `held`: the backend is in an outage (the writes are held for retry); the chunk went
    /// at once.
    Held,
}

impl WaitResult {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::Late => "late",
            Self::Held => "held",
        }
    }
}

/// `cachekeeper_state_write_waits_total{result}`: the waits of [`settled`], by how they ended.
pub type WaitCounters = Family<[(&'static str, &'static str); 1], Counter>;

/// Count one wait that ended as `result`.
fn count(counters: &WaitCounters, result: WaitResult) {
    counters.get_or_create(&[("result", result.as_str())]).inc();
}

/// A wait the response body holds its last chunk for (`wire::stream::Hold`).
pub(crate) type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Wait for `written` — the writer's answer once every earlier write is applied: `true` when
/// they reached the backend, `false` when it holds them in an outage — at most `bound`, and
/// count how the wait ended in `counters`. A writer that is gone (the sender dropped) counts
/// as `held`.
pub(crate) fn settled(
    written: tokio::sync::oneshot::Receiver<bool>,
    bound: Duration,
    counters: WaitCounters,
) -> Wait {
    Box::pin(async move {
        let result = match tokio::time::timeout(bound, written).await {
            Ok(Ok(true)) => WaitResult::Written,
            Ok(Ok(false) | Err(_)) => WaitResult::Held,
            Err(_) => WaitResult::Late,
        };
        count(&counters, result);
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;

    fn counted(c: &WaitCounters, result: WaitResult) -> u64 {
        c.get_or_create(&[("result", result.as_str())]).get()
    }

    #[tokio::test(start_paused = true)]
    async fn each_wait_is_counted_by_how_it_ended() {
        let c = WaitCounters::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tx.send(true).unwrap();
        settled(rx, Duration::from_millis(50), c.clone()).await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        tx.send(false).unwrap();
        settled(rx, Duration::from_millis(50), c.clone()).await;
        let (tx, rx) = tokio::sync::oneshot::channel::<bool>();
        drop(tx);
        settled(rx, Duration::from_millis(50), c.clone()).await;
        // No answer: the (paused) clock runs to the bound and the wait ends late.
        let (_tx, rx) = tokio::sync::oneshot::channel::<bool>();
        let start = tokio::time::Instant::now();
        settled(rx, Duration::from_millis(50), c.clone()).await;
        assert_eq!(start.elapsed(), Duration::from_millis(50));
        assert_eq!(counted(&c, WaitResult::Written), 1);
        assert_eq!(counted(&c, WaitResult::Held), 2);
        assert_eq!(counted(&c, WaitResult::Late), 1);
    }
}
