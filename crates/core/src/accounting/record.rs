//! The stored record of one generation turn: [`TurnRecord`], a [`Kind::Usage`] record with
//! the turn's credential scope (it holds numbers, names and ids, no user content; the scope
//! keeps two credentials' turns of one session name apart: turn numbers are per credential
//! scope) and key `"{session}\n{turn:08}"`, JSON payload
//! (`docs/accounting.md#what-is-stored`). Records written before the scope was part of the
//! key have scope `""` and are read as before.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Collapse;
use crate::dialect::usage::Usage;
use crate::state::{Kind, Record, Store};

/// The six usage numbers as stored (each absent when the provider did not report it; the
/// names of [`crate::dialect::usage::Usage`]). Tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncached_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_5m_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

impl UsageRecord {
    /// Whether the provider reported any number.
    pub fn is_reported(&self) -> bool {
        *self != UsageRecord::default()
    }
}

impl From<Usage> for UsageRecord {
    fn from(u: Usage) -> Self {
        Self {
            uncached_input_tokens: u.uncached_input_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cache_write_5m_tokens: u.cache_write_5m_tokens,
            cache_write_1h_tokens: u.cache_write_1h_tokens,
            output_tokens: u.output_tokens,
        }
    }
}

/// One generation turn as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// The session id (16 hex chars when derived; the client's `x-cachekeeper-session`
    /// value when it sent one).
    pub session: String,
    /// 1-based turn number within the session.
    pub turn: u32,
    /// When the request arrived, Unix ms.
    pub ts_ms: i64,
    /// The route's name.
    pub route: String,
    /// The route's provider row name (`crate::provider`; pricing multipliers come from it).
    pub provider: String,
    /// The model as the request named it.
    pub model: String,
    /// The response was an event stream.
    pub streamed: bool,
    /// HTTP status sent to the client.
    pub status: u16,
    /// What the provider reported.
    pub usage: UsageRecord,
    /// The request passes' non-zero counters (`RewriteReport::counters` names).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub passes: BTreeMap<String, u64>,
    /// The prefix collapse of this turn, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collapse: Option<Collapse>,
    /// Milliseconds since the session's previous turn (`None` on its first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
}

impl TurnRecord {
    /// The record's key within [`Kind::Usage`]: `"{session}\n{turn:08}"` (sorts by session,
    /// then turn).
    pub fn key(&self) -> String {
        format!("{}\n{:08}", self.session, self.turn)
    }

    /// As a store record under `scope`, the credential scope of the turn (`""` without a
    /// credential): two credentials naming one session each number their turns from 1, so
    /// without the scope their records would share keys and one would replace the other.
    pub fn to_record(&self, scope: &str) -> Option<Record> {
        let value = serde_json::to_vec(self).ok()?;
        Some(Record::new(Kind::Usage, scope, &self.key(), value))
    }
}

/// The turns stored in `records` (of [`Kind::Usage`], current version or older), in record
/// order; a record that cannot be read is skipped.
pub fn turns_from(records: &[Record]) -> Vec<TurnRecord> {
    records
        .iter()
        .filter(|r| r.key.kind == Kind::Usage && r.version <= Kind::Usage.version())
        .filter_map(|r| serde_json::from_slice(&r.value).ok())
        .collect()
}

/// Every stored turn (the running proxy's dashboard; the CLI opens its own store): read
/// through the store's writer thread, waiting at most `timeout`, else what is in memory.
pub fn load_turns(store: &Store, timeout: Duration) -> Vec<TurnRecord> {
    let records = store
        .scan(Kind::Usage, timeout)
        .unwrap_or_else(|| store.scan_cached(Kind::Usage));
    turns_from(&records)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;
    use crate::accounting::Cause;

    fn sample() -> TurnRecord {
        TurnRecord {
            session: "0123456789abcdef".into(),
            turn: 7,
            ts_ms: 1_764_614_400_000,
            route: "anthropic".into(),
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            streamed: true,
            status: 200,
            usage: UsageRecord {
                uncached_input_tokens: Some(12),
                cache_read_tokens: Some(40_000),
                cache_write_tokens: Some(127_720),
                cache_write_5m_tokens: Some(127_720),
                cache_write_1h_tokens: None,
                output_tokens: Some(310),
            },
            passes: BTreeMap::from([("images_retired".to_owned(), 8)]),
            collapse: Some(Collapse {
                at: "messages[12]".into(),
                cause: Cause::Eviction,
                write_tokens: Some(127_720),
            }),
            idle_ms: Some(4_100),
        }
    }

    #[test]
    fn a_turn_round_trips_through_a_record() {
        let t = sample();
        let rec = t.to_record("scope-a").unwrap();
        assert_eq!(rec.key.key, "0123456789abcdef\n00000007");
        assert_eq!(rec.key.scope, "scope-a");
        let json: serde_json::Value = serde_json::from_slice(&rec.value).unwrap();
        assert_eq!(json["collapse"]["cause"], "eviction");
        assert_eq!(json["usage"].get("cache_write_1h_tokens"), None);
        assert_eq!(turns_from(&[rec]), vec![t]);
    }

    #[test]
    fn unreadable_records_are_skipped() {
        let good = sample().to_record("").unwrap();
        let bad = Record::new(Kind::Usage, "", "x\n00000001", b"{not json".to_vec());
        let other = Record::new(Kind::Session, "", "x", b"{}".to_vec());
        assert_eq!(turns_from(&[bad, good, other]).len(), 1);
    }
}
