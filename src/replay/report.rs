//! What a replay finds: per variant, its collapses, cache expiries and token figures.

use serde::Serialize;

use crate::accounting::pricing::Multipliers;

/// One collapse in a replay: a turn whose prefix changed before the previous turn's end,
/// found and attributed by the proxy's own accounting
/// ([`crate::accounting::session::SessionTracker`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayCollapse {
    /// 1-based.
    pub turn: u32,
    /// `tools`, `system` or `messages[N]` (cache order).
    pub at: String,
    /// `provider_expiry`, `eviction`, `repair`, `restore`, `client_tools`, `client_system`,
    /// `client_history` ([`crate::accounting::Cause::as_str`]).
    pub cause: &'static str,
    /// The turn's cache-write tokens (model estimate).
    pub write_tokens: u64,
}

/// A turn whose prefix did not change but whose cache entries had expired (idle longer
/// than the TTL): an expiry-driven write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpiryWrite {
    /// 1-based.
    pub turn: u32,
    /// Since the previous turn, ms.
    pub idle_ms: u64,
    /// The turn's cache-write tokens (model estimate).
    pub write_tokens: u64,
    /// Tokens a live entry would have let it read.
    pub expired_tokens: u64,
}

/// The figures of one way of sending the session (tokens are the model's estimates).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantReport {
    pub turns: u32,
    pub collapses: Vec<ReplayCollapse>,
    pub expiry_writes: Vec<ExpiryWrite>,
    /// Summed over the turns, tokens.
    pub input_tokens: u64,
    pub cache_write_tokens: u64,
    /// Of `cache_write_tokens`, those written at 1-hour breakpoints.
    pub cache_write_1h_tokens: u64,
    pub cache_read_tokens: u64,
    pub uncached_tokens: u64,
    /// Billed-input equivalents: uncached + read × read multiplier + write × write multiplier,
    /// in uncached-input tokens; `None`: not priced.
    pub billed_input_equiv: Option<f64>,
    /// What the same input would bill with no cache (= `input_tokens`).
    pub no_cache_equiv: u64,
    /// Images the model sees per turn, mean.
    pub mean_images: f64,
}

/// A replay's result (`--json` prints it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    pub file: String,
    pub route: String,
    pub provider: String,
    pub model: String,
    pub dialect: &'static str,
    pub turns: u32,
    pub rule: RuleReport,
    /// The multipliers the billed-input equivalents use
    /// ([`crate::accounting::pricing::multipliers`]); `None`: not priced.
    pub multipliers: Option<Multipliers>,
    /// Turns whose body the passes could not read (forwarded as sent).
    pub unparsed_turns: u32,
    /// Lines of other routes that `--only` skipped.
    pub skipped_lines: u32,
    pub as_sent: VariantReport,
    pub cachekeeper: VariantReport,
    pub keep_newest_3: VariantReport,
}

/// The cache rule applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleReport {
    /// `explicit` or `automatic`.
    pub activation: &'static str,
    pub ttl_s: Option<u64>,
    pub long_ttl_s: Option<u64>,
    pub min_tokens: u64,
    pub lookback_blocks: Option<usize>,
}
