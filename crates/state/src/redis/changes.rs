//! Cross-instance invalidation over Redis pub/sub (`docs/state.md#redis`).
//!
//! Every write, delete and prune of the Redis backend publishes, inside its `MULTI` (or its
//! script), one message on [`CHANNEL`] naming what it changed: `<instance id>` then one line
//! per record, `<kind> <member>` (the member escaped as [`codec::member`] makes it, so it
//! holds no space and no newline), or the one line `*` for "anything may have changed" (a
//! prune). Redis delivers a message published in a transaction when the transaction commits,
//! in commit order, to every connection subscribed at that moment.
//!
//! Each backend that the store watches ([`super::RedisBackend`]'s `watch`) subscribes on a
//! connection of its own ([`listen`]) and hands other instances' changes to the store's sink.
//! Every (re)subscription also hands over [`Change::All`]: messages published while the
//! subscription was down (Redis restarting, a network cut) are lost, so the store then
//! reloads what it keeps and forgets the rest. A `PING` on the subscription every
//! [`PING_INTERVAL`] that gets no answer within [`PING_TIMEOUT`] drops it and subscribes
//! again (a connection cut without a reset would otherwise look alive). While the
//! subscription is down ([`Health::up`] false), the backend's polled generation counter is the
//! fallback ([`super::RedisBackend`]'s `changed_elsewhere`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::codec;
use crate::{Change, ChangeSink, Kind, RecordKey};

/// The channel every instance publishes its changes on (`ck:v1:`: the key layout's version,
/// [`codec::PREFIX`]).
pub(crate) const CHANNEL: &str = "ck:v1:changes";

/// Pause before subscribing again after a failed or lost subscription. Half a second keeps a
/// down Redis from being asked more than twice a second and resumes well within the
/// one-second invalidation target once it is back.
pub(crate) const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(500);

/// How often the subscription is checked with a `PING`.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(1);

/// How long that `PING` may wait for its answer before the subscription counts as lost (the
/// backend's write timeout, [`super::WRITE_TIMEOUT_MS`]).
pub(crate) const PING_TIMEOUT: Duration = Duration::from_millis(super::WRITE_TIMEOUT_MS);

/// The line of a message that means "anything may have changed".
const ALL: &str = "*";

/// The subscription's state, shared with the backend.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Subscribed now, and every message since the last [`Change::All`] handed over was
    /// delivered.
    pub up: AtomicBool,
}

/// The message announcing that instance `from` changed `keys`.
pub(crate) fn message<'a>(from: u64, keys: impl IntoIterator<Item = &'a RecordKey>) -> String {
    let mut out = format!("{from:016x}");
    for key in keys {
        out.push('\n');
        out.push_str(key.kind.name());
        out.push(' ');
        out.push_str(&codec::member(key));
    }
    out
}

/// The message announcing that instance `from` may have changed anything (a prune).
pub(crate) fn message_all(from: u64) -> String {
    format!("{from:016x}\n{ALL}")
}

/// The instance and the changes a [`message`] or [`message_all`] names; `None` for anything
/// else. Lines that name no known kind or no valid member are skipped (a newer build's kind).
pub(crate) fn parse(text: &str) -> Option<(u64, Vec<Change>)> {
    let mut lines = text.split('\n');
    let from = lines.next()?;
    if from.len() != 16 {
        return None;
    }
    let from = u64::from_str_radix(from, 16).ok()?;
    let mut changes = Vec::new();
    for line in lines {
        if line == ALL {
            return Some((from, vec![Change::All]));
        }
        let Some((kind, member)) = line.split_once(' ') else {
            continue;
        };
        let Some(kind) = Kind::from_name(kind) else {
            continue;
        };
        if let Some(key) = codec::parse_member(kind, member) {
            changes.push(Change::Key(key));
        }
    }
    Some((from, changes))
}

/// Subscribe to [`CHANNEL`] and hand every other instance's change to `sink`, until the
/// runtime shuts down. Each subscription starts with [`Change::All`] (messages may have been
/// missed before it). `first` is told when the first attempt is over, subscribed or not.
pub(crate) async fn listen(
    client: ::redis::Client,
    me: u64,
    sink: ChangeSink,
    health: Arc<Health>,
    mut first: Option<tokio::sync::oneshot::Sender<()>>,
) {
    loop {
        let subscribed =
            tokio::time::timeout(Duration::from_millis(super::CONNECT_TIMEOUT_MS), async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(CHANNEL).await?;
                Ok::<_, ::redis::RedisError>(pubsub)
            })
            .await;
        if let Ok(Ok(pubsub)) = subscribed {
            health.up.store(true, Ordering::SeqCst);
            sink(Change::All);
            if let Some(tx) = first.take() {
                let _ = tx.send(());
            }
            follow(pubsub, me, &sink).await;
            health.up.store(false, Ordering::SeqCst);
            tracing::debug!(target: "cachekeeper::state", "Redis change subscription lost; subscribing again");
        }
        if let Some(tx) = first.take() {
            let _ = tx.send(());
        }
        tokio::time::sleep(RESUBSCRIBE_DELAY).await;
    }
}

/// Hand the subscription's messages to `sink` until the connection ends or a `PING` goes
/// unanswered.
async fn follow(pubsub: ::redis::aio::PubSub, me: u64, sink: &ChangeSink) {
    let (mut control, mut stream) = pubsub.split();
    let mut ping = tokio::time::interval(PING_INTERVAL);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await; // the first tick is immediate
    loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else { return };
                let Ok(text) = msg.get_payload::<String>() else { continue };
                let Some((from, changes)) = parse(&text) else { continue };
                if from == me {
                    continue;
                }
                for change in changes {
                    sink(change);
                }
            }
            _ = ping.tick() => {
                let answered = tokio::time::timeout(PING_TIMEOUT, control.ping::<::redis::Value>()).await;
                if !matches!(answered, Ok(Ok(_))) {
                    return;
                }
            }
        }
    }
}

/// A random instance id (the OS random number generator, as the carriers' nonces), so an
/// instance skips its own messages and no other's.
pub(crate) fn instance_id() -> u64 {
    use chacha20poly1305::aead::rand_core::RngCore;
    chacha20poly1305::aead::OsRng.next_u64()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_keys_and_parse_back() {
        let a = RecordKey {
            kind: Kind::Verdict,
            scope: String::new(),
            key: "[\"h\",\"m\"]".into(),
        };
        let b = RecordKey {
            kind: Kind::Carrier,
            scope: "s c:o%pe".into(),
            key: "host\nmodel\nfp".into(),
        };
        let text = message(7, [&a, &b]);
        assert_eq!(text.lines().count(), 3, "{text}");
        let (from, changes) = parse(&text).unwrap();
        assert_eq!(from, 7);
        assert_eq!(changes, vec![Change::Key(a), Change::Key(b)]);
        assert_eq!(parse(&message_all(9)).unwrap(), (9, vec![Change::All]));
        // Not ours: no id, or an unknown kind (skipped).
        assert_eq!(parse("hello"), None);
        assert_eq!(
            parse(&format!("{:016x}\nnewkind s:k", 1)).unwrap(),
            (1, vec![])
        );
    }
}
