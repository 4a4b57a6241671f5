//! Cache accounting: which turn of which conversation paid for which cache write, and why
//! (`docs/accounting.md`).
//!
//! - [`volatile`]: per-request text some clients put at the head of the prompt (Claude Code's
//!   billing line), detected by its exact shape.
//! - [`prefix`]: a request's positions in the provider's cache order (tools → system →
//!   messages), each reduced to a keyed digest with `cache_control` markers ignored, and the
//!   first position where two turns differ.
//! - [`session`]: naming sessions, numbering turns, finding prefix collapses and their cause.
//! - [`record`]: the stored record of one turn (usage, passes, collapse).
//! - [`pricing`]: billed-input equivalents from the provider table, money from `[[pricing]]`.
//! - [`summary`]: per-session sums for `cachekeeper report` and the dashboard.
//! - [`cache_model`]: an exact-prefix cache model for `cachekeeper replay`.

pub mod cache_model;
pub mod prefix;
pub mod pricing;
pub mod record;
pub mod session;
pub mod summary;

use serde::{Deserialize, Serialize};

/// Why a turn's prompt-cache prefix collapsed: the cause its cache-write tokens are
/// attributed to (`docs/accounting.md#prefix-collapses`). Stored, logged and used as a metrics label
/// as [`Cause::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The session was idle longer than the provider's cache TTL: the cache was gone anyway
    /// (wins when causes coincide).
    ProviderExpiry,
    /// cachekeeper retired images (an eviction batch).
    Eviction,
    /// cachekeeper repaired, downscaled or replaced an image.
    Repair,
    /// cachekeeper restored reasoning carriers differently from the previous turn.
    Restore,
    /// A prefix stabiliser changed the head of the prompt (not built yet: never assigned).
    Stabiliser,
    /// The client changed its tools.
    ClientTools,
    /// The client changed its system prompt.
    ClientSystem,
    /// The client changed an earlier message.
    ClientHistory,
}

impl Cause {
    /// Every cause, in declaration order.
    pub const ALL: [Cause; 8] = [
        Cause::ProviderExpiry,
        Cause::Eviction,
        Cause::Repair,
        Cause::Restore,
        Cause::Stabiliser,
        Cause::ClientTools,
        Cause::ClientSystem,
        Cause::ClientHistory,
    ];

    /// The name in logs, records, `report` and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::ProviderExpiry => "provider_expiry",
            Cause::Eviction => "eviction",
            Cause::Repair => "repair",
            Cause::Restore => "restore",
            Cause::Stabiliser => "stabiliser",
            Cause::ClientTools => "client_tools",
            Cause::ClientSystem => "client_system",
            Cause::ClientHistory => "client_history",
        }
    }
}

/// A turn whose forwarded prefix changed before the previous turn's end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collapse {
    /// Where the forwarded bytes first differ from the previous turn's, in cache order:
    /// `tools`, `system` or `messages[N]`.
    pub at: String,
    pub cause: Cause,
    /// The turn's cache-write tokens as the provider reported them (`None`: not reported, or
    /// the response has not ended yet).
    pub write_tokens: Option<u64>,
}

/// What the proxy knows of a generation turn while it is in flight (`RequestCtx::turn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnAccount {
    /// The session id: the client's `x-cachekeeper-session` value, or one derived from the
    /// request ([`session`]).
    pub session: String,
    /// 1-based turn number within the session.
    pub turn: u32,
    /// The prefix collapse this turn caused, if any.
    pub collapse: Option<Collapse>,
    /// Milliseconds since the session's previous turn (`None` on its first).
    pub idle_ms: Option<u64>,
    /// The accounting left for after the response (`None` once settled:
    /// [`session::SessionTracker::settle`]).
    pub(crate) pending: Option<session::Pending>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cause_names_round_trip_through_serde() {
        for c in Cause::ALL {
            let json = serde_json::to_string(&c).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            let back: Cause = serde_json::from_str(&json).unwrap_or(Cause::Stabiliser);
            assert_eq!(back, c);
        }
    }
}
