//! The store's writer: the one thread that owns the backend. It applies the queued writes in
//! batches, answers the reads that go through to the backend, retries what an outage holds
//! ([`crate::outage`]), reloads or forgets what another process changed, prunes past
//! retention and evicts for `[state] max_bytes`.
#![allow(
    clippy::disallowed_methods,
    reason = "the store's writer thread: it waits for work and paces retries, off any request's path"
)]

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::cache::Absent;
use crate::{
    now_secs, outage, Backend, Change, ChangeSink, Class, Fault, Inner, Kind, Record, RecordKey,
    StateError, DAY_SECS, RELOAD_INTERVAL,
};

/// Eviction for `max_bytes` stops when the total is at or below this share of it, percent,
/// so the next writes do not evict again at once.
pub(crate) const EVICT_TO_PERCENT: u64 = 90;

pub(crate) enum Op {
    Put(Record),
    Delete(RecordKey),
    /// Read through to the backend; the answer goes to the sender (`None`: the read failed).
    Get(RecordKey, mpsc::Sender<Option<Option<Record>>>),
    /// The load phase ([`Store::load`]): read each key as [`Op::Get`] does; the answers, in
    /// order, go to the async receiver.
    Load(
        Vec<RecordKey>,
        tokio::sync::oneshot::Sender<Vec<Option<Option<Record>>>>,
    ),
    /// Every stored record of the kind ([`Backend::scan`]) goes to the sender (`None`: the
    /// read failed).
    Scan(Kind, mpsc::Sender<Option<Vec<Record>>>),
    /// The backend's total size ([`Backend::total_bytes`]) goes to the sender.
    #[cfg_attr(not(test), allow(dead_code))]
    TotalBytes(mpsc::Sender<Option<u64>>),
    /// Flush marker: the sender is told once every earlier op is applied (writes held in an
    /// outage are retried first).
    Sync(mpsc::Sender<()>),
    /// [`Store::settled`]: the sender is told once every earlier op is applied: `true` when
    /// the writes reached the backend, `false` when it is in an outage (they are held). Never
    /// retries or waits itself.
    Settled(tokio::sync::oneshot::Sender<bool>),
    /// [`Store::inject_fault`]: the value read back goes to the sender (`None`: refused).
    Fault(Fault, mpsc::Sender<Option<i64>>),
    /// Another process changed a resident record, or anything ([`Backend::watch`]): read it
    /// again (after every earlier op).
    Changed(Change),
}

/// What the writer thread needs besides the backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriterLimits {
    pub(crate) retention_days: u32,
    pub(crate) max_bytes: u64,
    /// The backend could not be reached when the store opened (the warning is logged): the
    /// writer starts in an outage, holding writes until the backend answers.
    pub(crate) unreached: bool,
}

/// The sink a store gives its backend ([`Backend::watch`]): a non-resident record another
/// process changed is forgotten at once; a resident one, or "anything", goes to the writer,
/// which reads it again in order with the local writes. Holds the store weakly: it does not
/// keep the writer running once the store is dropped.
pub(crate) fn change_sink(inner: &Arc<Inner>, tx: &Arc<mpsc::Sender<Op>>) -> ChangeSink {
    let inner = Arc::downgrade(inner);
    let tx = Arc::downgrade(tx);
    Arc::new(move |change: Change| match change {
        Change::Key(key) if !key.kind.is_resident() => {
            if let Some(inner) = inner.upgrade() {
                inner.forget(&key);
            }
        }
        change => {
            if let Some(tx) = tx.upgrade() {
                let _ = tx.send(Op::Changed(change));
            }
        }
    })
}

/// Delete records past their kind's retention. Failures are logged (fail open).
pub(crate) fn prune_all(backend: &mut dyn Backend, retention_days: u32) {
    let now = now_secs();
    for kind in Kind::ALL {
        let days = kind.retention_days(retention_days);
        if days == 0 {
            continue;
        }
        let cutoff = now.saturating_sub(i64::from(days).saturating_mul(DAY_SECS));
        if let Err(e) = backend.prune(kind, cutoff) {
            tracing::warn!(target: "cachekeeper::state", kind = kind.name(), error = %e, "could not prune old state");
        }
    }
}

/// Evict for `max_bytes`: when the total passes it, delete the oldest records of the large
/// kinds, then of the small kinds, until the total is at most [`EVICT_TO_PERCENT`] % of it.
/// Pinned kinds (verdicts) are never evicted. Returns the keys removed and the new total.
pub(crate) fn evict(
    backend: &mut dyn Backend,
    max_bytes: u64,
) -> Result<(Vec<RecordKey>, u64), StateError> {
    let mut total = backend.total_bytes()?;
    let mut removed = Vec::new();
    if total <= max_bytes {
        return Ok((removed, total));
    }
    let target = max_bytes / 100 * EVICT_TO_PERCENT;
    for class in [Class::Large, Class::Small] {
        let kinds: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|k| k.class() == class)
            .collect();
        'class: while total > target {
            let batch = backend.oldest(&kinds, 256)?;
            if batch.is_empty() {
                break;
            }
            for (key, size) in batch {
                backend.delete(&key)?;
                total = total.saturating_sub(size);
                removed.push(key);
                if total <= target {
                    break 'class;
                }
            }
        }
    }
    Ok((removed, total))
}

/// One read of the writer ([`Op::Get`], [`Op::Load`]): the write of `key` held in an outage,
/// else the backend's answer (`None`: the read failed).
pub(crate) fn read_one(
    backend: &mut dyn Backend,
    writes: &outage::Writes,
    inner: &Inner,
    key: &RecordKey,
) -> Option<Option<Record>> {
    if let Some(held) = writes.held(key) {
        return Some(held);
    }
    let read = backend.get(key).ok();
    if read.is_some() {
        answered(inner);
    }
    read
}

/// A backend call succeeded: the store answers again after a load that timed out
/// ([`Store::load`]); said once.
pub(crate) fn answered(inner: &Inner) {
    if inner.stalled.swap(false, Ordering::Relaxed) {
        tracing::info!(target: "cachekeeper::state", "the state store answers again: requests read it again");
    }
}

pub(crate) fn writer_loop(
    mut backend: Box<dyn Backend>,
    rx: mpsc::Receiver<Op>,
    inner: Arc<Inner>,
    limits: WriterLimits,
) {
    let mut writes = outage::Writes::new(
        backend.location(),
        inner.write_errors.clone(),
        inner.writes_dropped.clone(),
    );
    if limits.unreached {
        writes.start_unreached();
    }
    // Count a local write of a resident record as taken from the queue.
    let dequeued = |key: &RecordKey| {
        if key.kind.is_resident() {
            if let Ok(mut c) = inner.cache.lock() {
                c.note_dequeued(key);
            }
        }
    };
    let mut upkeep = Upkeep::new(backend.as_mut(), limits);
    // An op taken from the queue while gathering puts into one batch: handled next, so the
    // ops keep their order.
    let mut next: Option<Op> = None;
    loop {
        let op = match next.take() {
            Some(op) => Ok(op),
            None => rx.recv_timeout(writes.wait(RELOAD_INTERVAL)),
        };
        match op {
            Ok(Op::Put(rec)) => {
                // Past the queue's bounds the oldest puts are dropped as they are taken.
                let take = |rec: &Record| {
                    dequeued(&rec.key);
                    !inner.backlog.take(rec, &inner.writes_dropped)
                };
                let batch = put_batch(rec, &rx, &mut next, Duration::from_millis(GATHER_MS), &take);
                if batch.is_empty() {
                    continue;
                }
                write_batch(backend.as_mut(), &inner, &mut writes, &mut upkeep, batch);
            }
            Ok(Op::Delete(key)) => {
                dequeued(&key);
                if writes.failing() {
                    writes.hold_delete(key);
                } else if let Err(e) = backend.delete(&key) {
                    writes.failed(&e, &inner.durable);
                    writes.hold_delete(key);
                }
            }
            Ok(op @ (Op::Get(..) | Op::Load(..) | Op::Scan(..) | Op::TotalBytes(..))) => {
                answer(backend.as_mut(), &writes, &inner, op);
            }
            Ok(Op::Sync(done)) => {
                if writes.retry(backend.as_mut(), &inner.durable, true) {
                    upkeep.recount(backend.as_mut());
                }
                let _ = done.send(());
            }
            Ok(Op::Settled(done)) => {
                let _ = done.send(!writes.failing());
            }
            Ok(Op::Fault(Fault::StallMs(ms), reply)) => {
                let _ = reply.send(i64::try_from(ms).ok());
                std::thread::sleep(Duration::from_millis(ms));
            }
            Ok(Op::Fault(fault, reply)) => {
                let _ = reply.send(backend.inject_fault(fault).ok());
            }
            Ok(Op::Changed(Change::All)) => {
                reload(backend.as_mut(), &inner, &writes);
                upkeep.recount(backend.as_mut());
            }
            Ok(Op::Changed(Change::Key(key))) => match backend.get(&key) {
                Ok(found) => apply_change(&inner, &writes, &key, found),
                Err(_) => upkeep.reload_due = true,
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The store is gone (shutdown flushed first): a last try for held writes.
                writes.retry(backend.as_mut(), &inner.durable, true);
                return;
            }
        }
        upkeep.after_op(backend.as_mut(), &inner, &mut writes);
    }
}

/// Answer a read op (`Get`, `Load`, `Scan`, `TotalBytes`) from the backend, overlaid with the
/// writes still held ([`outage::Writes::overlay`]); any other op is ignored.
fn answer(backend: &mut dyn Backend, writes: &outage::Writes, inner: &Inner, op: Op) {
    match op {
        Op::Get(key, reply) => {
            let _ = reply.send(read_one(backend, writes, inner, &key));
        }
        Op::Load(keys, reply) => {
            let answers = keys
                .iter()
                .map(|key| read_one(backend, writes, inner, key))
                .collect();
            let _ = reply.send(answers);
        }
        Op::Scan(kind, reply) => {
            let _ = reply.send(backend.scan(kind).ok().map(|s| writes.overlay(kind, s)));
        }
        Op::TotalBytes(reply) => {
            let _ = reply.send(backend.total_bytes().ok());
        }
        _ => {}
    }
}

/// Write one batch of puts, or hold it while writes are failing (or when this write fails:
/// [`outage::Writes`] retries it); a write counts toward the store's size ([`Upkeep::wrote`]).
fn write_batch(
    backend: &mut dyn Backend,
    inner: &Inner,
    writes: &mut outage::Writes,
    upkeep: &mut Upkeep,
    batch: Vec<Record>,
) {
    if writes.failing() {
        writes.hold_puts(batch);
        return;
    }
    match backend.put_all(&batch) {
        Ok(()) => {
            answered(inner);
            let bytes = batch.iter().map(Record::size).sum::<u64>();
            upkeep.wrote(backend, inner, writes, bytes);
        }
        Err(e) => {
            writes.failed(&e, &inner.durable);
            writes.hold_puts(batch);
        }
    }
}

/// The writer loop's own bookkeeping between ops: the store's approximate size (for
/// `[state] max_bytes`), the periodic check for changes made elsewhere ([`RELOAD_INTERVAL`])
/// and the daily prune (`retention_days`).
struct Upkeep {
    limits: WriterLimits,
    /// Total size since the last exact count, bytes; an exact count is taken only when it
    /// passes `max_bytes`.
    approx_bytes: u64,
    /// The "verdicts alone exceed max_bytes" warning was logged (once per writer).
    over_cap_warned: bool,
    /// A change another process announced could not be read: reload at the next check.
    reload_due: bool,
    last_check: Instant,
    last_prune: Instant,
}

impl Upkeep {
    fn new(backend: &mut dyn Backend, limits: WriterLimits) -> Self {
        Self {
            limits,
            approx_bytes: backend.total_bytes().unwrap_or(0),
            over_cap_warned: false,
            reload_due: false,
            last_check: Instant::now(),
            last_prune: Instant::now(),
        }
    }

    /// Take an exact count of the store's size (after a reload or held writes landed).
    fn recount(&mut self, backend: &mut dyn Backend) {
        self.approx_bytes = backend.total_bytes().unwrap_or(self.approx_bytes);
    }

    /// `bytes` were written: past `max_bytes`, evict the oldest records (never verdicts) and
    /// forget them in the read cache.
    fn wrote(
        &mut self,
        backend: &mut dyn Backend,
        inner: &Inner,
        writes: &mut outage::Writes,
        bytes: u64,
    ) {
        self.approx_bytes = self.approx_bytes.saturating_add(bytes);
        if self.approx_bytes <= self.limits.max_bytes {
            return;
        }
        match evict(backend, self.limits.max_bytes) {
            Ok((removed, total)) => {
                if !removed.is_empty() {
                    tracing::info!(target: "cachekeeper::state", records = removed.len(), bytes = total, "evicted the oldest records for [state] max_bytes");
                    if let Ok(mut c) = inner.cache.lock() {
                        for k in &removed {
                            c.remove(k);
                        }
                    }
                }
                if total > self.limits.max_bytes && !self.over_cap_warned {
                    self.over_cap_warned = true;
                    tracing::warn!(target: "cachekeeper::state", bytes = total, "verdicts alone exceed [state] max_bytes; they are never evicted");
                }
                self.approx_bytes = total;
            }
            Err(e) => writes.failed(&e, &inner.durable),
        }
    }

    /// After every op (or a quiet interval): retry held writes, and when an outage just ended
    /// or the interval passed, reload what others changed and prune once a day.
    fn after_op(&mut self, backend: &mut dyn Backend, inner: &Inner, writes: &mut outage::Writes) {
        let was_failing = writes.failing();
        if writes.retry(backend, &inner.durable, false) {
            self.recount(backend);
        }
        // An outage just ended: what others changed meanwhile is checked now, not at the next
        // interval (a backend that was unreachable at start loads its records here).
        let resumed = was_failing && !writes.failing();
        if resumed {
            // The backend takes writes again: loads wait for it again from the next request
            // (the failing input of a break-it pass: the first request after an outage still
            // read memory only, and numbered a turn another instance had numbered).
            answered(inner);
        }
        if resumed || self.last_check.elapsed() >= RELOAD_INTERVAL {
            self.last_check = Instant::now();
            if backend.changed_elsewhere().unwrap_or(false) || std::mem::take(&mut self.reload_due)
            {
                reload(backend, inner, writes);
                self.recount(backend);
            }
            if self.last_prune.elapsed() >= Duration::from_secs(86_400) {
                self.last_prune = Instant::now();
                prune_all(backend, self.limits.retention_days);
                reload(backend, inner, writes);
            }
        }
    }
}

/// Most puts one backend transaction carries ([`put_batch`]): bounds the time a burst holds
/// the writer before it reads the queue again (a count, so the bytes written never depend on
/// timing).
pub(crate) const MAX_PUT_BATCH: usize = 256;

/// How long the writer gathers puts after the first one of a batch before it writes them
/// (group commit), ms. Under load one transaction then carries many requests' rows instead
/// of one commit (WAL frames, locks) per put, and a request's put does not wake the writer
/// thread: the writer sleeps through the window in [`GATHER_STEP_MS`] steps, never waiting
/// on the queue, so a sender finds no waiting receiver to wake. A read, delete or flush
/// queued meanwhile ends the window at the next step. Costs a write at most this long in
/// memory before it reaches the backend (reads are served from memory meanwhile). Measured
/// on the 130-byte POST load of `benches/load.sh`: the writer thread was 30 % of the
/// proxy's CPU with a commit per put (`docs/performance.md#pass-through-load-benchesloadsh`).
pub(crate) const GATHER_MS: u64 = 5;

/// The writer's sleep between two looks at the queue while gathering, ms ([`GATHER_MS`]).
pub(crate) const GATHER_STEP_MS: u64 = 1;

/// `first` and the puts queued behind it within `gather` (up to [`MAX_PUT_BATCH`]; see
/// [`GATHER_MS`]), a later put of a key replacing an earlier one (each turn rewrites its
/// session's record: only the last state matters). The first op that is not a put goes to
/// `next`, to be handled after the batch, and ends the gathering. Which puts share a batch
/// depends on timing; what the backend holds after it does not.
/// `take` sees every put taken from the queue, `first` included, and says whether to keep it
/// (false: dropped for the queue's bounds, [`backlog`]).
pub(crate) fn put_batch(
    first: Record,
    rx: &mpsc::Receiver<Op>,
    next: &mut Option<Op>,
    gather: Duration,
    take: &dyn Fn(&Record) -> bool,
) -> Vec<Record> {
    let start = Instant::now();
    let mut batch = Vec::new();
    if take(&first) {
        batch.push(first);
    }
    'gather: while batch.len() < MAX_PUT_BATCH {
        match rx.try_recv() {
            Ok(Op::Put(rec)) => {
                if take(&rec) {
                    batch.push(rec);
                }
            }
            Ok(op) => {
                *next = Some(op);
                break;
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
            Err(mpsc::TryRecvError::Empty) => {
                let left = gather.saturating_sub(start.elapsed());
                if left.is_zero() {
                    break 'gather;
                }
                std::thread::sleep(left.min(Duration::from_millis(GATHER_STEP_MS)));
            }
        }
    }
    if batch.len() > 1 {
        let mut last = std::collections::HashMap::with_capacity(batch.len());
        for (i, rec) in batch.iter().enumerate() {
            last.insert(rec.key.clone(), i);
        }
        let mut i = 0;
        batch.retain(|rec| {
            let keep = last.get(&rec.key) == Some(&i);
            i += 1;
            keep
        });
    }
    batch
}

/// Another process changed the records: reload the resident kinds (with the writes held in
/// an outage applied; a key with a local write still queued keeps what memory has), forget
/// the rest (read again on demand).
pub(crate) fn reload(backend: &mut dyn Backend, inner: &Inner, writes: &outage::Writes) {
    let mut fresh = Vec::new();
    for kind in Kind::ALL.into_iter().filter(|k| k.is_resident()) {
        match backend.scan(kind) {
            Ok(r) => fresh.push((kind, writes.overlay(kind, r))),
            Err(_) => return,
        }
    }
    if let Ok(mut c) = inner.cache.lock() {
        c.clear_non_resident();
        for (kind, records) in fresh {
            c.replace_kind(kind, records);
        }
        if let Ok(mut a) = inner.absent.lock() {
            *a = Absent::default();
        }
        inner.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// Another process changed the resident record at `key`, and the backend now holds `found`:
/// memory takes it, unless a local write of the key is queued or held in an outage (that
/// write reaches the backend later, so it is the one the backend ends with).
pub(crate) fn apply_change(
    inner: &Inner,
    writes: &outage::Writes,
    key: &RecordKey,
    found: Option<Record>,
) {
    if writes.held(key).is_some() {
        return;
    }
    if let Ok(mut c) = inner.cache.lock() {
        if c.is_queued(key) {
            return;
        }
        match found {
            // A newer build's record: this build cannot read it; keep what memory has.
            Some(rec) if rec.version > rec.key.kind.version() => return,
            Some(rec) => c.insert(rec),
            None => {
                c.remove(key);
            }
        }
        inner.epoch.fetch_add(1, Ordering::SeqCst);
    }
}
