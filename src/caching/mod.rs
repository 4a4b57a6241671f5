//! Prompt-cache passes: keep the prompt-cache prefix readable turn after turn
//! (`docs/caching.md`).
//!
//! - automatic cache breakpoints on the Anthropic wire (`cache_breakpoints = "auto"`,
//!   `cache_ttl`);
//! - prefix stabilisers (`stabilize = ["claude_code_billing_line"]`): remove per-request text
//!   a client puts at the head of the prompt, on routes whose provider does not handle it.
//!
//! Both are pure passes over one parsed body, returning edits of the original bytes.

/// Whether the proxy places `cache_control` breakpoints (route key `cache_breakpoints`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Breakpoints {
    /// Never (the default).
    #[default]
    Off,
    /// On the Anthropic wire, when the client set no `cache_control` anywhere.
    Auto,
}

/// A prompt-cache TTL a route asks for (route key `cache_ttl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheTtl {
    /// 5 minutes (Anthropic's default `ephemeral` TTL).
    FiveMinutes,
    /// 1 hour (`"ttl": "1h"`).
    OneHour,
}

impl CacheTtl {
    /// The TTL, ms.
    pub fn ms(self) -> u64 {
        match self {
            CacheTtl::FiveMinutes => 5 * 60 * 1000,
            CacheTtl::OneHour => 60 * 60 * 1000,
        }
    }
}

/// A prefix stabiliser (route key `stabilize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stabiliser {
    /// Remove Claude Code's `x-anthropic-billing-header: …` text block from `system`
    /// ([`crate::accounting::volatile`]).
    ClaudeCodeBillingLine,
}

/// A route's prompt-cache settings, resolved when the route table is built (the route's keys,
/// else the provider row's defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheSettings {
    pub breakpoints: Breakpoints,
    /// The route's `cache_ttl`; `None` when it sets none.
    pub ttl: Option<CacheTtl>,
    /// Stabilisers that run on the route, in order.
    pub stabilize: Vec<Stabiliser>,
}

impl CacheSettings {
    /// Nothing on: no breakpoints, no TTL, no stabiliser.
    pub const OFF: CacheSettings = CacheSettings {
        breakpoints: Breakpoints::Off,
        ttl: None,
        stabilize: Vec::new(),
    };
}

/// [`CacheSettings::OFF`] as a static, for contexts that borrow it.
pub static CACHE_OFF: CacheSettings = CacheSettings::OFF;
