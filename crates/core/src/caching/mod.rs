//! Prompt-cache passes: keep the prompt-cache prefix readable turn after turn
//! (`docs/caching.md`).
//!
//! - automatic cache breakpoints on the Anthropic wire (`cache_breakpoints = "auto"`,
//!   `cache_ttl`);
//! - prefix stabilisers (`stabilize = ["claude_code_billing_line"]`): remove per-request text
//!   a client puts at the head of the prompt, on routes whose provider does not handle it.
//!
//! Both are pure passes over one parsed body ([`crate::dialect::doc::Doc`]), returning edits
//! of the original bytes that the pipeline splices with the other passes' edits
//! ([`crate::rewrite`]). Both apply to Anthropic Messages bodies only.

pub(crate) mod breakpoints;
pub(crate) mod stabilize;
pub mod volatile;

use serde::Deserialize;

/// The `anthropic-beta` value that enables the 1-hour `cache_control` TTL on hosts that still
/// need it (Anthropic's beta name, listed in its SDK's beta parameter type; Anthropic's own API
/// now documents the 1-hour TTL without a header: `docs/caching.md#ttl`). Sent only when the
/// route's row says so ([`crate::provider::Provider::ttl_beta`]) and never for a (host, model)
/// that rejected it (learned as `beta:extended-cache-ttl-2025-04-11`).
pub const EXTENDED_CACHE_TTL_BETA: &str = "extended-cache-ttl-2025-04-11";

/// Whether the proxy places `cache_control` breakpoints (route key `cache_breakpoints`:
/// `"off"` or `"auto"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Breakpoints {
    /// Never (the default).
    #[default]
    Off,
    /// On the Anthropic wire, when the client set no `cache_control` anywhere.
    Auto,
}

/// A prompt-cache TTL a route asks for (route key `cache_ttl`: `"5m"` or `"1h"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum CacheTtl {
    /// 5 minutes (Anthropic's default `ephemeral` TTL).
    #[serde(rename = "5m")]
    FiveMinutes,
    /// 1 hour (`"ttl": "1h"`).
    #[serde(rename = "1h")]
    OneHour,
}

impl Breakpoints {
    /// The config value (`"off"`, `"auto"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Breakpoints::Off => "off",
            Breakpoints::Auto => "auto",
        }
    }
}

impl CacheTtl {
    /// The config value, also the marker's `ttl` (`"5m"`, `"1h"`).
    pub fn as_str(self) -> &'static str {
        match self {
            CacheTtl::FiveMinutes => "5m",
            CacheTtl::OneHour => "1h",
        }
    }

    /// The TTL, ms.
    pub fn ms(self) -> u64 {
        match self {
            CacheTtl::FiveMinutes => 5 * 60 * 1000,
            CacheTtl::OneHour => 60 * 60 * 1000,
        }
    }
}

/// A prefix stabiliser (route key `stabilize`, a list of these names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stabiliser {
    /// Remove Claude Code's `x-anthropic-billing-header: …` text block from `system`
    /// ([`volatile`]).
    ClaudeCodeBillingLine,
}

impl Stabiliser {
    /// The name in a route's `stabilize` list.
    pub fn as_str(self) -> &'static str {
        match self {
            Stabiliser::ClaudeCodeBillingLine => "claude_code_billing_line",
        }
    }
}

/// A route's prompt-cache settings, resolved when the route table is built (the route's keys,
/// else the provider row's defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheSettings {
    /// The route's `cache_breakpoints` (default off).
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

    /// A route's settings from its keys (`cache_breakpoints`, `cache_ttl`, `stabilize`; each
    /// `None` when unset) and its provider row: an unset `stabilize` is
    /// `["claude_code_billing_line"]` on a third-party Anthropic-wire row
    /// ([`crate::provider::Provider::third_party_anthropic_wire`]) that takes the Anthropic
    /// dialect at all ([`crate::provider::Provider::dialects`]), else `[]`. A listed
    /// stabiliser runs once, in the order first listed.
    pub fn resolve(
        breakpoints: Option<Breakpoints>,
        ttl: Option<CacheTtl>,
        stabilize: Option<&[Stabiliser]>,
        row: &crate::provider::Provider,
    ) -> CacheSettings {
        let stabilize = match stabilize {
            Some(list) => {
                let mut out: Vec<Stabiliser> = Vec::with_capacity(list.len());
                for s in list {
                    if !out.contains(s) {
                        out.push(*s);
                    }
                }
                out
            }
            None if row.third_party_anthropic_wire
                && row
                    .dialects
                    .iter()
                    .any(|d| d.format().system_billing_line()) =>
            {
                vec![Stabiliser::ClaudeCodeBillingLine]
            }
            None => Vec::new(),
        };
        CacheSettings {
            breakpoints: breakpoints.unwrap_or_default(),
            ttl,
            stabilize,
        }
    }
}

/// [`CacheSettings::OFF`] as a static, for contexts that borrow it.
pub static CACHE_OFF: CacheSettings = CacheSettings::OFF;

/// The `"cache_control":{…}` member a breakpoint writes: `{"type":"ephemeral"}` (the default
/// 5-minute TTL, written without `ttl` so hosts that know only the original marker accept it),
/// or with `"ttl":"1h"`.
pub(crate) fn marker_member(ttl: Option<CacheTtl>) -> &'static str {
    match ttl {
        Some(CacheTtl::OneHour) => "\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"1h\"}",
        _ => "\"cache_control\":{\"type\":\"ephemeral\"}",
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
    use super::*;
    use crate::provider::by_name;

    #[test]
    fn stabilize_defaults_by_row() {
        let billing = vec![Stabiliser::ClaudeCodeBillingLine];
        for name in [
            "deepseek",
            "kimi",
            "zai",
            "minimax",
            "dashscope",
            "mimo",
            "local",
            "fireworks",
            "novita",
        ] {
            let s = CacheSettings::resolve(None, None, None, by_name(name).unwrap());
            assert_eq!(s.stabilize, billing, "{name}");
            assert_eq!(s.breakpoints, Breakpoints::Off);
        }
        // The failing input of `check`: the shipped openai and gemini routes showed the
        // billing-line stabiliser on, though neither provider serves Anthropic wire.
        for name in [
            "anthropic",
            "openrouter",
            "copilot",
            "default",
            "openai",
            "gemini",
        ] {
            let s = CacheSettings::resolve(None, None, None, by_name(name).unwrap());
            assert!(s.stabilize.is_empty(), "{name}");
        }
        // `[]` turns the default off; a list given twice runs once.
        let deepseek = by_name("deepseek").unwrap();
        assert!(CacheSettings::resolve(None, None, Some(&[]), deepseek)
            .stabilize
            .is_empty());
        let twice = [Stabiliser::ClaudeCodeBillingLine; 2];
        let anthropic = by_name("anthropic").unwrap();
        let s = CacheSettings::resolve(
            Some(Breakpoints::Auto),
            Some(CacheTtl::OneHour),
            Some(&twice),
            anthropic,
        );
        assert_eq!(s.stabilize, billing);
        assert_eq!(s.breakpoints, Breakpoints::Auto);
        assert_eq!(s.ttl, Some(CacheTtl::OneHour));
    }

    /// The names `check` prints are the config values serde reads.
    #[test]
    fn names_round_trip_through_the_config_syntax() {
        #[derive(Deserialize)]
        struct Keys {
            b: Breakpoints,
            t: CacheTtl,
            s: Stabiliser,
        }
        for b in [Breakpoints::Off, Breakpoints::Auto] {
            for t in [CacheTtl::FiveMinutes, CacheTtl::OneHour] {
                let s = Stabiliser::ClaudeCodeBillingLine;
                let text = format!(
                    "b = {:?}\nt = {:?}\ns = {:?}\n",
                    b.as_str(),
                    t.as_str(),
                    s.as_str()
                );
                let k: Keys = toml::from_str(&text).unwrap();
                assert_eq!((k.b, k.t, k.s), (b, t, s));
            }
        }
    }

    #[test]
    fn markers_are_anthropic_cache_control() {
        let five: serde_json::Value =
            serde_json::from_str(&format!("{{{}}}", marker_member(None))).unwrap();
        assert_eq!(
            five,
            serde_json::json!({"cache_control": {"type": "ephemeral"}})
        );
        assert_eq!(
            marker_member(Some(CacheTtl::FiveMinutes)),
            marker_member(None)
        );
        let hour: serde_json::Value =
            serde_json::from_str(&format!("{{{}}}", marker_member(Some(CacheTtl::OneHour))))
                .unwrap();
        assert_eq!(
            hour,
            serde_json::json!({"cache_control": {"type": "ephemeral", "ttl": "1h"}})
        );
    }
}
