//! Cross-instance invalidation over Redis pub/sub (`docs/state.md#redis`).
//!
//! Every write, delete and prune of the Redis backend publishes, in its `MULTI`, one message per
//! record on [`CHANNEL`]: `<instance id> <kind> <member>` (the member escaped as in
//! [`super::codec::member`], so it holds no space). Each backend subscribes on a connection of
//! its own and hands every other instance's change to the store ([`super::super::Change`]): a
//! resident record (a verdict) is read again and replaced in memory, any other is forgotten, so
//! the next read goes to Redis. Delivery is immediate; the generation counter that
//! [`super::RedisBackend::changed_elsewhere`] checks every two seconds stays as the backstop for
//! messages lost while the subscription was down (a lost subscription marks the store unsure,
//! which reloads it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::codec;
use crate::state::{Change, Kind, OnChange, RecordKey};

/// The channel every instance publishes its changes on.
pub(crate) const CHANNEL: &str = "ck:v1:meta:changes";

/// Pause before subscribing again after the subscription was lost, ms.
const RESUBSCRIBE_DELAY_MS: u64 = 500;

/// The message announcing that instance `from` changed `key`.
pub(crate) fn message(from: u64, key: &RecordKey) -> String {
    format!("{from:016x} {} {}", key.kind.name(), codec::member(key))
}

/// The instance and key a [`message`] names; `None` for anything else.
pub(crate) fn parse(text: &str) -> Option<(u64, RecordKey)> {
    let mut parts = text.splitn(3, ' ');
    let from = u64::from_str_radix(parts.next()?, 16).ok()?;
    let kind = Kind::from_name(parts.next()?)?;
    let key = codec::parse_member(kind, parts.next()?)?;
    Some((from, key))
}

/// Subscribe to [`CHANNEL`] and hand other instances' changes to `on_change` until the runtime
/// shuts down; `lost` is set whenever messages may have been missed (before the first
/// subscription, and each time it drops).
pub(crate) async fn listen(
    client: ::redis::Client,
    mut reader: ::redis::aio::ConnectionManager,
    me: u64,
    on_change: OnChange,
    lost: Arc<AtomicBool>,
) {
    loop {
        if let Ok(mut pubsub) = client.get_async_pubsub().await {
            if pubsub.subscribe(CHANNEL).await.is_ok() {
                // Changes made before the subscription are not in the stream.
                lost.store(true, Ordering::Relaxed);
                let mut stream = pubsub.on_message();
                while let Some(msg) = stream.next().await {
                    let Ok(text) = msg.get_payload::<String>() else {
                        continue;
                    };
                    let Some((from, key)) = parse(&text) else {
                        continue;
                    };
                    if from == me {
                        continue;
                    }
                    let record = if key.kind.is_resident() {
                        let name = codec::record_key(&key);
                        let read = tokio::time::timeout(
                            Duration::from_millis(super::WRITE_TIMEOUT_MS),
                            ::redis::AsyncCommands::get::<_, Option<Vec<u8>>>(&mut reader, name),
                        )
                        .await;
                        match read {
                            Ok(Ok(bytes)) => {
                                bytes.and_then(|b| codec::decode(&b, &key).ok())
                            }
                            // Not read: keep what memory has; the reload catches up.
                            _ => {
                                lost.store(true, Ordering::Relaxed);
                                continue;
                            }
                        }
                    } else {
                        None
                    };
                    on_change(Change { key, record });
                }
            }
        }
        lost.store(true, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(RESUBSCRIBE_DELAY_MS)).await;
    }
}
