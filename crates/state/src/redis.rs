//! The shared [`Backend`]: records in a Redis (or protocol-compatible: Valkey, ...) server, so
//! several cachekeeper instances see one store (`[state] backend = "redis"`,
//! `docs/state.md#redis`).
//!
//! - Client: the `redis` crate's [`ConnectionManager`] (one multiplexed connection that
//!   reconnects on the next command after a failure), TLS for `rediss://` on rustls.
//! - The [`Backend`] trait is synchronous (the store's writer thread and the CLI call it), so
//!   the backend owns a one-worker tokio runtime of its own and blocks on it; it is never
//!   called from an async task ([`Store::open`](super::Store::open) opens it on a plain
//!   thread).
//! - Layout and value format: [`codec`]. Every write is one `MULTI`/`EXEC` transaction (the
//!   record, its index entry, its size, the generation counter), so another instance never
//!   sees a record without its bookkeeping; values are self-checking, so a truncated or
//!   foreign value is ignored, never misread.
//! - Expiry: a record of a kind with a retention gets `SET ... EX retention` (Redis drops it
//!   by itself, and a `volatile-*` eviction policy may drop it under memory pressure);
//!   verdicts get no TTL (never evicted by a full Redis). The store's daily prune still
//!   removes what is past retention, bookkeeping included.
//! - Changes by other instances: every write publishes what it changed on
//!   [`changes::CHANNEL`] in its own transaction, and a store's backend subscribes
//!   ([`Backend::watch`], [`changes::listen`]): another instance's verdict is read again and
//!   replaced in memory, another record forgotten, as soon as the message arrives. Every
//!   write also increments [`codec::GENERATION_KEY`]; while the subscription is down,
//!   [`Backend::changed_elsewhere`] reports an increment this backend did not make (the
//!   store then reloads its resident kinds and forgets the rest, within
//!   [`super::RELOAD_INTERVAL`]).
//! - Redis down when the store opens: [`RedisBackend::open_lazy`] gives a backend anyway;
//!   its commands fail until Redis answers, which the store treats as an outage from the
//!   start ([`Backend::probe`] tells it when Redis is back).

pub(crate) mod changes;
#[cfg(feature = "testing")]
pub mod codec;
#[cfg(not(feature = "testing"))]
pub(crate) mod codec;
#[cfg(any(test, feature = "testing"))]
pub mod test_server;
pub(crate) mod tls;
pub(crate) mod url;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{AsyncCommands, RedisError};

use super::{Backend, ChangeSink, Kind, Record, RecordKey, StateError};
pub use url::{RedisUrl, UrlText};

/// How long opening a connection may take, ms. Loopback or a LAN answers in well under
/// a second; past it the command fails and the store keeps the record in memory.
pub(crate) const CONNECT_TIMEOUT_MS: u64 = 1_000;

/// How long a write (or a scan for the CLI) waits for Redis's answer, ms.
pub(crate) const WRITE_TIMEOUT_MS: u64 = 2_000;

/// Default `[state] read_timeout_ms`: how long a read of one record waits for Redis, ms
/// (the issue's figure: a request that misses its memory cache must not wait longer).
pub(crate) const DEFAULT_READ_TIMEOUT_MS: u64 = 20;

/// Records fetched per `MGET` in a scan.
const SCAN_CHUNK: usize = 256;

/// Index entries a prune removes per script call (bounds the time Redis is busy with it).
const PRUNE_CHUNK: usize = 500;

/// Seconds in a day (retention is configured in days).
const DAY_SECS: u64 = 86_400;

/// Deletes up to `ARGV[3]` records of a kind older than `ARGV[2]` (exclusive), with their
/// index entries and sizes, atomically; when it removed any, increments the generation and
/// publishes `ARGV[5]` on channel `ARGV[4]` ([`changes::message_all`]).
/// KEYS: index, sizes, generation. ARGV: record key prefix, cutoff, limit, channel, message.
/// Returns {index entries removed, records deleted, generation}.
const PRUNE_SCRIPT: &str = r"
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local deleted = 0
for _, m in ipairs(members) do
  deleted = deleted + redis.call('DEL', ARGV[1] .. m)
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
end
local generation = 0
if #members > 0 then
  generation = redis.call('INCR', KEYS[3])
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return {#members, deleted, generation}
";

/// Settings of [`RedisBackend::open`].
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub url: RedisUrl,
    /// `[state] read_timeout_ms`: the longest wait for one record read.
    pub read_timeout: Duration,
    /// `[state] retention_days`: the TTL given to records (0 = none).
    pub retention_days: u32,
    /// `[state] ca_file`, resolved: the only CAs a `rediss://` connection trusts ([`tls`]);
    /// `None`, the platform's roots.
    pub ca_file: Option<std::path::PathBuf>,
}

impl From<RedisError> for StateError {
    fn from(e: RedisError) -> Self {
        StateError::Redis(e.to_string())
    }
}

/// Records in Redis.
pub struct RedisBackend {
    /// `Some` until drop (shut down without waiting for the connection task).
    rt: Option<tokio::runtime::Runtime>,
    conn: ConnectionManager,
    /// The client `conn` was made from: the change subscription opens its own connection.
    client: ::redis::Client,
    opts: RedisOptions,
    /// This backend's id in the change messages ([`changes::instance_id`]).
    id: u64,
    /// The change subscription's state, once [`Backend::watch`] started it.
    health: Option<Arc<changes::Health>>,
    /// The generation counter as last seen: after our own write, or a check.
    seen_generation: i64,
    /// Another writer's increment was seen while writing (not reported yet).
    changed: bool,
    /// A command failed since the last successful check: what is cached may be stale.
    unsure: bool,
}

impl RedisBackend {
    /// Connect to `opts.url` and check that the server answers. Errors: the URL is not usable
    /// by the client, or the server cannot be reached (the message names the URL redacted).
    pub fn open(opts: &RedisOptions) -> Result<Self, StateError> {
        match Self::open_lazy(opts)? {
            (me, None) => Ok(me),
            (_, Some(e)) => Err(e),
        }
    }

    /// [`Self::open`], but a server that cannot be reached still gives the backend, with the
    /// reason: its commands fail until the server answers (the client connects again on each
    /// command), and it reports a change elsewhere on its first successful check (nothing
    /// read before that is known). Errors: only what no later connection can fix (the URL,
    /// the client's runtime).
    pub(crate) fn open_lazy(opts: &RedisOptions) -> Result<(Self, Option<StateError>), StateError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("cachekeeper-redis")
            .enable_all()
            .build()
            .map_err(|e| StateError::Redis(format!("cannot start the Redis client: {e}")))?;
        let where_ = opts.url.redacted().to_owned();
        let client = match &opts.ca_file {
            Some(path) => tls::client_with_ca(
                opts.url.expose(),
                tls::read_ca(path).map_err(StateError::Redis)?,
            ),
            None => ::redis::Client::open(opts.url.expose()),
        }
        .map_err(|e| StateError::Redis(format!("{where_}: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(CONNECT_TIMEOUT_MS)))
            .set_response_timeout(Some(Duration::from_millis(WRITE_TIMEOUT_MS)))
            // One attempt per command: a Redis that is down fails the write at once (the
            // store keeps it in memory) instead of holding the writer through retries.
            .set_number_of_retries(0);
        let conn = {
            let _ctx = rt.enter();
            ConnectionManager::new_lazy_with_config(client.clone(), config)
                .map_err(|e| StateError::Redis(format!("{where_}: {e}")))?
        };
        let mut me = Self {
            rt: Some(rt),
            conn,
            client,
            opts: opts.clone(),
            id: changes::instance_id(),
            health: None,
            seen_generation: 0,
            changed: false,
            unsure: false,
        };
        let mut c = me.conn.clone();
        let seen: Result<Option<i64>, StateError> =
            me.block(async move { c.get(codec::GENERATION_KEY).await });
        match seen {
            Ok(seen) => {
                me.seen_generation = seen.unwrap_or(0);
                Ok((me, None))
            }
            Err(e) => Ok((me, Some(StateError::Redis(tls::explain(&where_, opts, &e))))),
        }
    }

    /// Run `fut` on the backend's runtime, waiting for it. A failure marks the cache unsure
    /// ([`Self::unsure`]).
    fn block<T>(
        &mut self,
        fut: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StateError> {
        let out = self.block_quiet(fut);
        if out.is_err() {
            self.unsure = true;
        }
        out
    }

    /// [`Self::block`] without marking the cache unsure (a read that timed out says nothing
    /// about what is cached).
    #[allow(
        clippy::disallowed_methods,
        reason = "runs on the store's own reader/writer threads, never a request's task"
    )]
    fn block_quiet<T>(
        &self,
        fut: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StateError> {
        match &self.rt {
            Some(rt) => rt.block_on(fut).map_err(StateError::from),
            None => Err(StateError::Redis("client shut down".into())),
        }
    }

    /// Account for a generation our write produced: one more than we saw is ours alone; more
    /// means another writer wrote in between.
    fn wrote(&mut self, generation: i64) {
        if generation != self.seen_generation.saturating_add(1) {
            self.changed = true;
        }
        self.seen_generation = generation;
    }

    /// TTL of a record of `kind`, seconds; `None` for no expiry (verdicts, or retention 0).
    fn ttl_secs(&self, kind: Kind) -> Option<u64> {
        if kind == Kind::Verdict {
            return None;
        }
        match kind.retention_days(self.opts.retention_days) {
            0 => None,
            days => Some(u64::from(days).saturating_mul(DAY_SECS)),
        }
    }

    fn add_put(&self, pipe: &mut ::redis::Pipeline, rec: &Record) {
        let member = codec::member(&rec.key);
        let name = codec::record_key_of(rec.key.kind, &member);
        let set = pipe.cmd("SET").arg(&name).arg(codec::encode(rec));
        if let Some(ttl) = self.ttl_secs(rec.key.kind) {
            set.arg("EX").arg(ttl);
        }
        set.ignore();
        pipe.cmd("ZADD")
            .arg(codec::index_key(rec.key.kind))
            .arg(rec.written_at)
            .arg(&member)
            .ignore();
        pipe.cmd("HSET")
            .arg(codec::sizes_key(rec.key.kind))
            .arg(&member)
            .arg(rec.size())
            .ignore();
    }

    /// Decode the value stored for `key`; a refused value is logged and ignored.
    fn decoded(bytes: Option<Vec<u8>>, key: &RecordKey) -> Option<Record> {
        let bytes = bytes?;
        match codec::decode(&bytes, key) {
            Ok(rec) => Some(rec),
            Err(reason) => {
                tracing::warn!(target: "cachekeeper::state", kind = key.kind.name(), reason = %reason, "ignored a stored Redis value that is not a readable record");
                None
            }
        }
    }
}

impl Drop for RedisBackend {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Backend for RedisBackend {
    fn is_durable(&self) -> bool {
        true
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn location(&self) -> String {
        self.opts.url.redacted().to_owned()
    }

    fn put(&mut self, rec: &Record) -> Result<(), StateError> {
        self.put_all(std::slice::from_ref(rec))
    }

    fn put_all(&mut self, recs: &[Record]) -> Result<(), StateError> {
        if recs.is_empty() {
            return Ok(());
        }
        let mut pipe = ::redis::pipe();
        pipe.atomic();
        for rec in recs {
            self.add_put(&mut pipe, rec);
        }
        pipe.cmd("PUBLISH")
            .arg(changes::CHANNEL)
            .arg(changes::message(self.id, recs.iter().map(|r| &r.key)))
            .ignore();
        pipe.cmd("INCR").arg(codec::GENERATION_KEY);
        let mut c = self.conn.clone();
        let (generation,): (i64,) = self.block(async move { pipe.query_async(&mut c).await })?;
        self.wrote(generation);
        Ok(())
    }

    fn get(&mut self, key: &RecordKey) -> Result<Option<Record>, StateError> {
        let name = codec::record_key(key);
        let mut c = self.conn.clone();
        let wait = self.opts.read_timeout;
        let bytes: Option<Vec<u8>> = self.block_quiet(async move {
            match tokio::time::timeout(wait, c.get(name)).await {
                Ok(r) => r,
                Err(_) => Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer within [state] read_timeout_ms",
                ))),
            }
        })?;
        Ok(Self::decoded(bytes, key))
    }

    fn delete(&mut self, key: &RecordKey) -> Result<bool, StateError> {
        let member = codec::member(key);
        let mut pipe = ::redis::pipe();
        pipe.atomic()
            .cmd("DEL")
            .arg(codec::record_key_of(key.kind, &member))
            .cmd("ZREM")
            .arg(codec::index_key(key.kind))
            .arg(&member)
            .ignore()
            .cmd("HDEL")
            .arg(codec::sizes_key(key.kind))
            .arg(&member)
            .ignore()
            .cmd("PUBLISH")
            .arg(changes::CHANNEL)
            .arg(changes::message(self.id, [key]))
            .ignore()
            .cmd("INCR")
            .arg(codec::GENERATION_KEY);
        let mut c = self.conn.clone();
        let (deleted, generation): (i64, i64) =
            self.block(async move { pipe.query_async(&mut c).await })?;
        self.wrote(generation);
        Ok(deleted > 0)
    }

    fn scan(&mut self, kind: Kind) -> Result<Vec<Record>, StateError> {
        let mut c = self.conn.clone();
        let index = codec::index_key(kind);
        let members: Vec<String> = self.block(async move { c.zrange(index, 0, -1).await })?;
        let mut out = Vec::with_capacity(members.len());
        for chunk in members.chunks(SCAN_CHUNK) {
            let keys: Vec<Option<RecordKey>> =
                chunk.iter().map(|m| codec::parse_member(kind, m)).collect();
            let names: Vec<String> = chunk
                .iter()
                .map(|m| codec::record_key_of(kind, m))
                .collect();
            let mut c = self.conn.clone();
            let mut cmd = ::redis::cmd("MGET");
            cmd.arg(&names);
            let values: Vec<Option<Vec<u8>>> =
                self.block(async move { cmd.query_async(&mut c).await })?;
            for (key, value) in keys.iter().zip(values) {
                // An index entry whose record expired (TTL, or evicted by Redis) has no value;
                // the next prune removes the entry.
                if let (Some(key), Some(value)) = (key, value) {
                    out.extend(Self::decoded(Some(value), key));
                }
            }
        }
        out.sort_by(|a, b| (&a.key.scope, &a.key.key).cmp(&(&b.key.scope, &b.key.key)));
        Ok(out)
    }

    fn total_bytes(&mut self) -> Result<u64, StateError> {
        let mut total = 0u64;
        for kind in Kind::ALL {
            let mut c = self.conn.clone();
            let sizes: Vec<u64> =
                self.block(async move { c.hvals(codec::sizes_key(kind)).await })?;
            total = total.saturating_add(sizes.into_iter().sum::<u64>());
        }
        Ok(total)
    }

    fn oldest(
        &mut self,
        kinds: &[Kind],
        limit: usize,
    ) -> Result<Vec<(RecordKey, u64)>, StateError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let stop = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        let mut all: Vec<(i64, RecordKey, u64)> = Vec::new();
        for &kind in kinds {
            let index = codec::index_key(kind);
            let mut c = self.conn.clone();
            let mut first: Vec<(String, i64)> = self.block({
                let index = index.clone();
                async move { c.zrange_withscores(index, 0, stop).await }
            })?;
            // Entries tied with the last one may sort before it by kind, scope and key:
            // take every entry of that age.
            if first.len() == limit {
                if let Some(&(_, last)) = first.last() {
                    let mut c = self.conn.clone();
                    let ties: Vec<(String, i64)> =
                        self.block(
                            async move { c.zrangebyscore_withscores(index, last, last).await },
                        )?;
                    first.retain(|(_, s)| *s != last);
                    first.extend(ties);
                }
            }
            let members: Vec<&String> = first.iter().map(|(m, _)| m).collect();
            let mut c = self.conn.clone();
            let mut cmd = ::redis::cmd("HMGET");
            cmd.arg(codec::sizes_key(kind)).arg(&members);
            let sizes: Vec<Option<u64>> = if members.is_empty() {
                Vec::new()
            } else {
                self.block(async move { cmd.query_async(&mut c).await })?
            };
            for ((member, written_at), size) in first.iter().zip(sizes) {
                if let Some(key) = codec::parse_member(kind, member) {
                    all.push((*written_at, key, size.unwrap_or(0)));
                }
            }
        }
        all.sort_by(|a, b| {
            (a.0, a.1.kind.name(), &a.1.scope, &a.1.key).cmp(&(
                b.0,
                b.1.kind.name(),
                &b.1.scope,
                &b.1.key,
            ))
        });
        Ok(all
            .into_iter()
            .take(limit)
            .map(|(_, key, size)| (key, size))
            .collect())
    }

    fn prune(&mut self, kind: Kind, cutoff: i64) -> Result<usize, StateError> {
        let script = ::redis::Script::new(PRUNE_SCRIPT);
        let prefix = codec::record_key_of(kind, "");
        let mut deleted = 0usize;
        loop {
            let mut c = self.conn.clone();
            let mut call = script.key(codec::index_key(kind));
            call.key(codec::sizes_key(kind))
                .key(codec::GENERATION_KEY)
                .arg(&prefix)
                .arg(cutoff)
                .arg(PRUNE_CHUNK)
                .arg(changes::CHANNEL)
                .arg(changes::message_all(self.id));
            let (removed, gone, generation): (usize, usize, i64) =
                self.block(async move { call.invoke_async(&mut c).await })?;
            deleted += gone;
            if removed > 0 {
                self.wrote(generation);
            }
            if removed < PRUNE_CHUNK {
                return Ok(deleted);
            }
        }
    }

    fn changed_elsewhere(&mut self) -> Result<bool, StateError> {
        let mut c = self.conn.clone();
        let now: Option<i64> = self.block(async move { c.get(codec::GENERATION_KEY).await })?;
        let now = now.unwrap_or(0);
        // A subscription that is up has delivered (or is delivering) every other instance's
        // change since it last said "everything": the counter is the fallback for when it
        // is down.
        let subscribed = self
            .health
            .as_ref()
            .is_some_and(|h| h.up.load(Ordering::SeqCst));
        let changed = if subscribed {
            self.unsure
        } else {
            self.changed || self.unsure || now != self.seen_generation
        };
        self.seen_generation = now;
        self.changed = false;
        self.unsure = false;
        Ok(changed)
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "runs on the store's own reader/writer threads, never a request's task"
    )]
    fn watch(&mut self, sink: ChangeSink) -> bool {
        let Some(rt) = &self.rt else {
            return false;
        };
        let health = Arc::new(changes::Health::default());
        self.health = Some(Arc::clone(&health));
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        rt.spawn(changes::listen(
            self.client.clone(),
            self.id,
            sink,
            health,
            Some(first_tx),
        ));
        // Wait for the first attempt (bounded by the connect timeout inside it), so a store
        // that opens with Redis up is subscribed before it loads its records.
        let _ = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(2 * CONNECT_TIMEOUT_MS), first_rx).await
        });
        true
    }

    fn probe(&mut self) -> Option<Result<(), StateError>> {
        let mut c = self.conn.clone();
        Some(self.block(async move {
            ::redis::cmd("PING")
                .query_async::<::redis::Value>(&mut c)
                .await
                .map(|_| ())
        }))
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
    use super::test_server::RedisServer;
    use super::*;
    use crate::{Change, Store, VerdictLookup, DEFAULT_CACHE_BYTES};

    fn open(server: &RedisServer, retention_days: u32) -> RedisBackend {
        RedisBackend::open(&RedisOptions {
            url: server.url(0),
            read_timeout: Duration::from_secs(10),
            retention_days,
            ca_file: None,
        })
        .unwrap()
    }

    fn rec(kind: Kind, scope: &str, key: &str, value: &[u8]) -> Record {
        Record::new(kind, scope, key, value.to_vec())
    }

    #[test]
    fn keys_are_namespaced_and_expire_per_retention_except_verdicts() {
        let server = RedisServer::start();
        let mut b = open(&server, 30);
        let carrier = rec(Kind::Carrier, "cred-a", "turn-1", b"sealed");
        let verdict = rec(Kind::Verdict, "", "[\"h\",\"m\"]", b"{}");
        b.put_all(&[carrier.clone(), verdict.clone()]).unwrap();
        let mut raw = server.raw();
        let mut keys: Vec<String> = ::redis::cmd("KEYS").arg("*").query(&mut raw).unwrap();
        keys.sort();
        assert_eq!(
            keys,
            [
                "ck:v1:carrier:cred-a:turn-1",
                "ck:v1:meta:bytes:carrier",
                "ck:v1:meta:bytes:verdict",
                "ck:v1:meta:generation",
                "ck:v1:meta:index:carrier",
                "ck:v1:meta:index:verdict",
                "ck:v1:verdict::%5B\"h\",\"m\"%5D",
            ]
        );
        let ttl: i64 = ::redis::cmd("TTL")
            .arg("ck:v1:carrier:cred-a:turn-1")
            .query(&mut raw)
            .unwrap();
        assert!(ttl > 30 * 86_400 - 60 && ttl <= 30 * 86_400, "{ttl}");
        let ttl: i64 = ::redis::cmd("TTL")
            .arg(codec::record_key(&verdict.key))
            .query(&mut raw)
            .unwrap();
        assert_eq!(ttl, -1, "a verdict never expires");
        // Retention 0 keeps everything without a TTL.
        let mut b0 = open(&server, 0);
        b0.put(&carrier).unwrap();
        let ttl: i64 = ::redis::cmd("TTL")
            .arg(codec::record_key(&carrier.key))
            .query(&mut raw)
            .unwrap();
        assert_eq!(ttl, -1);
        // The stored value is the self-checking format, and reads back.
        let stored: Vec<u8> = ::redis::cmd("GET")
            .arg(codec::record_key(&carrier.key))
            .query(&mut raw)
            .unwrap();
        assert_eq!(stored, codec::encode(&carrier));
        assert_eq!(b.get(&carrier.key).unwrap(), Some(carrier));
    }

    /// A value cut short or written by something else under a record's name (with its index
    /// entry, so scans meet it) is ignored by get and scan; the other records still read.
    #[test]
    fn a_truncated_or_foreign_value_is_ignored_never_misread() {
        let server = RedisServer::start();
        let mut b = open(&server, 0);
        let good = rec(Kind::Session, "s", "good", b"{\"turns\":3}");
        let cut = rec(Kind::Session, "s", "cut", b"{\"turns\":4}");
        let foreign = rec(Kind::Session, "s", "foreign", b"{}");
        b.put_all(&[good.clone(), cut.clone(), foreign.clone()])
            .unwrap();
        let mut raw = server.raw();
        let whole = codec::encode(&cut);
        let _: () = ::redis::cmd("SET")
            .arg(codec::record_key(&cut.key))
            .arg(&whole[..whole.len() - 5])
            .query(&mut raw)
            .unwrap();
        let _: () = ::redis::cmd("SET")
            .arg(codec::record_key(&foreign.key))
            .arg("{\"turns\":99}")
            .query(&mut raw)
            .unwrap();
        // A valid record of another key copied under this name.
        let misplaced = rec(Kind::Session, "s", "misplaced", b"x");
        let _: () = ::redis::cmd("SET")
            .arg(codec::record_key(&misplaced.key))
            .arg(codec::encode(&good))
            .query(&mut raw)
            .unwrap();
        assert_eq!(b.get(&cut.key).unwrap(), None);
        assert_eq!(b.get(&foreign.key).unwrap(), None);
        assert_eq!(b.get(&misplaced.key).unwrap(), None);
        assert_eq!(b.scan(Kind::Session).unwrap(), vec![good.clone()]);
        assert_eq!(b.get(&good.key).unwrap(), Some(good));
    }

    #[test]
    fn another_instances_write_is_a_change_elsewhere_and_ours_is_not() {
        let server = RedisServer::start();
        let mut a = open(&server, 0);
        let mut b = open(&server, 0);
        a.put(&rec(Kind::Verdict, "", "v1", b"{}")).unwrap();
        assert!(!a.changed_elsewhere().unwrap());
        assert!(b.changed_elsewhere().unwrap());
        assert!(!b.changed_elsewhere().unwrap());
        // Interleaved: B writes after A's write; B's own write shows it.
        a.put(&rec(Kind::Carrier, "s", "k", b"1")).unwrap();
        b.put(&rec(Kind::Carrier, "s", "k", b"2")).unwrap();
        assert!(b.changed_elsewhere().unwrap());
        assert!(a.changed_elsewhere().unwrap());
        // A prune and a delete count too.
        assert!(b.delete(&rec(Kind::Carrier, "s", "k", b"").key).unwrap());
        assert_eq!(a.prune(Kind::Verdict, i64::MAX).unwrap(), 1);
        assert!(b.changed_elsewhere().unwrap());
        assert!(a.changed_elsewhere().unwrap());
        assert!(!a.changed_elsewhere().unwrap());
    }

    /// The shared store's point: a verdict learned through one instance is used by another
    /// (the other's writer notices the change within `RELOAD_INTERVAL` and reloads).
    #[test]
    fn a_verdict_learned_on_one_store_reaches_another() {
        use crate::verdicts::{Field, FieldSet};
        let server = RedisServer::start();
        let a = Store::with_backend(
            Box::new(open(&server, 30)),
            30,
            u64::MAX,
            DEFAULT_CACHE_BYTES,
        );
        let b = Store::with_backend(
            Box::new(open(&server, 30)),
            30,
            u64::MAX,
            DEFAULT_CACHE_BYTES,
        );
        let rc = FieldSet::from([Field::message("reasoning_content")]);
        a.verdicts().learn(
            "api.mistral.ai",
            "Mistral-Large",
            &rc,
            "Extra inputs are not permitted",
        );
        a.flush();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while b.omit("api.mistral.ai", "Mistral-Large").is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "B never saw A's verdict"
            );
            std::thread::sleep(Duration::from_millis(50));
            b.flush(); // lets B's writer run its periodic check
        }
        assert_eq!(b.omit("api.mistral.ai", "Mistral-Large"), rc);
        // A carrier A wrote is read through by B.
        let c = rec(Kind::Carrier, "cred", "turn-7", b"sealed");
        a.put(c.clone());
        a.flush();
        assert_eq!(b.get(&c.key, Duration::from_secs(10)), Some(c));
    }

    fn store(server: &RedisServer) -> Store {
        Store::with_backend(
            Box::new(open(server, 30)),
            30,
            u64::MAX,
            DEFAULT_CACHE_BYTES,
        )
    }

    /// Wait up to `limit` for `done`, polling every 10 ms; true if it came.
    fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if done() {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The one-second contract: a verdict A learned (and wrote) is in B's memory within a
    /// second, through the change messages (B is never flushed, and the polled counter is
    /// checked only every two seconds: five verdicts in a row all within a second are not
    /// the poll's luck). A carrier B had cached is forgotten when A rewrites it.
    #[test]
    fn a_verdict_learned_on_one_store_is_used_by_another_within_one_second() {
        use crate::verdicts::{Field, FieldSet};
        let server = RedisServer::start();
        let a = store(&server);
        let b = store(&server);
        let rc = FieldSet::from([Field::message("reasoning_content")]);
        for i in 0..5 {
            let model = format!("Mistral-Large-{i}");
            a.verdicts().learn(
                "api.mistral.ai",
                &model,
                &rc,
                "Extra inputs are not permitted",
            );
            a.flush();
            assert!(
                within(Duration::from_secs(1), || !b
                    .omit("api.mistral.ai", &model)
                    .is_empty()),
                "B did not see A's verdict {i} within 1 s"
            );
            assert_eq!(b.omit("api.mistral.ai", &model), rc);
        }
        // Cleared on A: gone from B's memory too.
        assert_eq!(
            a.verdicts()
                .clear("api.mistral.ai", Some("Mistral-Large-0")),
            1
        );
        a.flush();
        assert!(within(Duration::from_secs(1), || b
            .omit("api.mistral.ai", "Mistral-Large-0")
            .is_empty()));
        // A non-resident record: B's cached copy is forgotten, the next read gets A's.
        let c1 = rec(Kind::Carrier, "cred", "turn-1", b"one");
        a.put(c1.clone());
        a.flush();
        assert_eq!(b.get(&c1.key, Duration::from_secs(10)), Some(c1.clone()));
        let c2 = rec(Kind::Carrier, "cred", "turn-1", b"two");
        a.put(c2.clone());
        a.flush();
        assert!(within(Duration::from_secs(1), || b
            .get_cached(&c1.key)
            .is_none()));
        assert_eq!(b.get(&c1.key, Duration::from_secs(10)), Some(c2));
    }

    /// Last writer wins: two stores learning the same verdict key at the same moment (each a
    /// field of its own) end with the same verdict in memory as in Redis: the one written
    /// last (which may hold both fields, when the other's arrived before its learning).
    #[test]
    fn two_stores_learning_one_verdict_at_once_end_with_the_same_one() {
        use crate::verdicts::{Field, FieldSet, VerdictKey};
        let server = RedisServer::start();
        let a = store(&server);
        let b = store(&server);
        let mut reader = open(&server, 30);
        for round in 0..20 {
            let model = format!("m{round}");
            let barrier = std::sync::Barrier::new(2);
            std::thread::scope(|s| {
                for (st, field) in [(&a, "reasoning_content"), (&b, "reasoning_details")] {
                    let (barrier, model) = (&barrier, &model);
                    s.spawn(move || {
                        let fields = FieldSet::from([Field::message(field)]);
                        barrier.wait();
                        st.verdicts().learn("h", model, &fields, "Extra inputs");
                        st.flush();
                    });
                }
            });
            let key = VerdictKey::new("h", &model).record_key();
            let consistent = within(Duration::from_secs(1), || {
                let stored = reader.get(&key).unwrap().map(|r| r.value);
                stored.is_some()
                    && a.get_cached(&key).map(|r| r.value) == stored
                    && b.get_cached(&key).map(|r| r.value) == stored
            });
            assert!(consistent, "round {round}: A, B and Redis differ after 1 s");
            let fields = a.omit("h", &model);
            assert!(!fields.is_empty());
            assert!(fields.iter().all(|f| {
                *f == Field::message("reasoning_content")
                    || *f == Field::message("reasoning_details")
            }));
        }
    }

    /// The subscription after Redis restarts: it subscribes again, says "everything
    /// changed" (messages were missed meanwhile), and hears the next change.
    #[test]
    fn the_change_subscription_comes_back_after_redis_restarts_saying_everything_changed() {
        use std::sync::Mutex;
        let mut server = RedisServer::start();
        let mut a = open(&server, 0);
        let mut b = open(&server, 0);
        let heard: Arc<Mutex<Vec<Change>>> = Arc::default();
        let sink_heard = Arc::clone(&heard);
        assert!(b.watch(Arc::new(move |c| sink_heard.lock().unwrap().push(c))));
        let heard_now = || std::mem::take(&mut *heard.lock().unwrap());
        assert_eq!(heard_now(), vec![Change::All], "the first subscription");
        let v = rec(Kind::Verdict, "", "v", b"{}");
        a.put(&v).unwrap();
        assert!(within(Duration::from_secs(1), || !heard
            .lock()
            .unwrap()
            .is_empty()));
        assert_eq!(heard_now(), vec![Change::Key(v.key.clone())]);
        // Its own writes are not announced to itself.
        b.put(&rec(Kind::Carrier, "s", "mine", b"x")).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(heard_now(), vec![]);
        // A prune announces "anything".
        assert_eq!(a.prune(Kind::Carrier, i64::MAX).unwrap(), 1);
        assert!(within(Duration::from_secs(1), || !heard
            .lock()
            .unwrap()
            .is_empty()));
        assert_eq!(heard_now(), vec![Change::All]);

        server.kill();
        assert!(b.changed_elsewhere().is_err(), "Redis is down");
        server.restart();
        assert!(
            within(Duration::from_secs(10), || heard
                .lock()
                .unwrap()
                .contains(&Change::All)),
            "subscribed again"
        );
        heard_now();
        // The first command on a connection Redis dropped may fail; the next reconnects.
        let w = rec(Kind::Session, "s", "after", b"1");
        assert!(within(Duration::from_secs(10), || a.put(&w).is_ok()));
        assert!(within(Duration::from_secs(1), || !heard
            .lock()
            .unwrap()
            .is_empty()));
        assert_eq!(heard_now(), vec![Change::Key(w.key)]);
    }

    /// Redis down when the store opens: it serves from memory, holds its writes, and once
    /// Redis answers it writes them, loads what Redis holds, and is durable; one warning and
    /// one info line.
    #[test]
    fn a_store_opened_before_redis_is_up_switches_to_it_when_it_answers() {
        use crate::verdicts::{Field, FieldSet};
        let mut server = RedisServer::start();
        let url = server.url(0);
        server.kill();
        let opts = crate::StoreOptions {
            path: std::path::PathBuf::from("unused.db"),
            redis: Some(RedisOptions {
                url,
                read_timeout: Duration::from_secs(10),
                retention_days: 30,
                ca_file: None,
            }),
            retention_days: 30,
            max_bytes: u64::MAX,
            cache_bytes: DEFAULT_CACHE_BYTES,
        };
        let s = Store::open(&opts);
        assert!(!s.is_durable());
        let rc = FieldSet::from([Field::message("reasoning_content")]);
        s.verdicts().learn("h", "m-early", &rc, "Extra inputs");
        let early = rec(Kind::Session, "s", "early", b"1");
        s.put(early.clone());
        s.flush();
        assert_eq!(s.omit("h", "m-early"), rc, "served from memory meanwhile");
        assert!(!s.is_durable());

        server.restart();
        // Another instance wrote a verdict while this one could not reach Redis.
        let mut other = open(&server, 30);
        let theirs = FieldSet::from([Field::param("store")]);
        {
            let o = Store::with_backend(Box::new(open(&server, 30)), 30, u64::MAX, 1 << 20);
            o.verdicts()
                .learn("h", "m-theirs", &theirs, "Unknown parameter");
            o.flush();
        }
        assert!(
            within(Duration::from_secs(10), || s.is_durable()),
            "switched to Redis"
        );
        assert!(within(Duration::from_secs(5), || s.omit("h", "m-theirs") == theirs));
        assert_eq!(
            other.get(&early.key).unwrap(),
            Some(early),
            "held writes written"
        );
        let later = rec(Kind::Session, "s", "later", b"2");
        s.put(later.clone());
        s.flush();
        assert_eq!(other.get(&later.key).unwrap(), Some(later));
        assert_eq!(s.omit("h", "m-early"), rc);
    }

    #[test]
    fn a_read_that_redis_does_not_answer_in_read_timeout_fails() {
        let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
        let mut b = RedisBackend::open(&RedisOptions {
            url: server.url(0),
            read_timeout: Duration::from_millis(DEFAULT_READ_TIMEOUT_MS),
            retention_days: 0,
            ca_file: None,
        })
        .unwrap();
        let r = rec(Kind::Carrier, "s", "k", b"v");
        b.put(&r).unwrap();
        // Another client holds the server for 3 s.
        let url = server.url(0);
        let sleeper = std::thread::spawn(move || {
            let mut raw = ::redis::Client::open(url.expose())
                .unwrap()
                .get_connection()
                .unwrap();
            let _: () = ::redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(3)
                .query(&mut raw)
                .unwrap();
        });
        // Until the sleep has begun, reads answer.
        let err = loop {
            match b.get(&r.key) {
                Err(e) => break e,
                Ok(_) => assert!(!sleeper.is_finished(), "no read waited on the sleep"),
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(err.to_string().contains("read_timeout_ms"), "{err}");
        sleeper.join().unwrap();
        assert_eq!(b.get(&r.key).unwrap(), Some(r), "answers again after");
    }

    #[test]
    fn an_unreachable_server_fails_to_open_naming_the_url_without_its_password() {
        // A port nothing listens on (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = RedisUrl::parse(&format!("redis://:pa55word@127.0.0.1:{port}/0")).unwrap();
        let err = RedisBackend::open(&RedisOptions {
            url,
            read_timeout: Duration::from_millis(20),
            retention_days: 0,
            ca_file: None,
        })
        .err()
        .expect("nothing listens");
        let text = err.to_string();
        assert!(
            text.contains(&format!("redis://:***@127.0.0.1:{port}/0")),
            "{text}"
        );
        assert!(!text.contains("pa55word"), "{text}");
    }
}
