//! What a turn cost: billed-input equivalents from the provider table's cache multipliers,
//! and money where a `[[pricing]]` entry covers the model (`docs/accounting.md#pricing`).
//!
//! A **billed-input equivalent** is one uncached input token's price: a turn that read
//! 40,000 tokens from the cache at 0.1× and wrote 2,000 at 1.25× cost 4,000 + 2,500 = 6,500
//! equivalents, against 42,000 without a cache. The multipliers are the provider table's
//! ([`crate::provider::CacheRule`], each with its public source); a model with no known
//! multipliers is "not priced" (`None`), never guessed. Output tokens are priced only in
//! money (they cost the same with or without a cache).

use serde::{Deserialize, Serialize};

use super::record::{TurnRecord, UsageRecord};

/// A model family's cache prices relative to its uncached input price (1.0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Multipliers {
    /// A token read from the cache.
    pub read: f64,
    /// A token written with the default TTL (Anthropic's 5 minutes; the only write elsewhere).
    pub write_5m: f64,
    /// A token written with the longer TTL (Anthropic's 1 hour), when the provider has one.
    pub write_1h: Option<f64>,
    /// Public source of the figures.
    pub source: &'static str,
}

/// The multipliers of `model` on the provider row `provider` (a [`crate::provider`] row
/// name), or `None` when the table does not know them.
pub fn multipliers(provider: &str, model: &str) -> Option<Multipliers> {
    let rule = crate::provider::by_name(provider)?.cache_rule(model)?;
    let milli = |m: u32| f64::from(m) / 1000.0;
    Some(Multipliers {
        read: milli(rule.read_milli?),
        write_5m: milli(rule.write_milli?),
        // Only a one-hour long TTL is billed as `cache_write_1h_tokens` (Anthropic's).
        write_1h: rule
            .long_ttl
            .filter(|(ttl_s, _)| *ttl_s == 3600)
            .map(|(_, w)| milli(w)),
        source: rule.source,
    })
}

/// One `[[pricing]]` entry: a model's prices per million tokens.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    /// A glob over the model name as the request names it (`claude-sonnet-4*`, `*`).
    pub model: String,
    /// Uncached input, per million tokens.
    pub input_per_mtok: f64,
    /// Output (reasoning included), per million tokens.
    pub output_per_mtok: f64,
    /// Input read from the cache, per million tokens.
    pub cache_read_per_mtok: f64,
    /// Input written to the cache with the default TTL, per million tokens.
    pub cache_write_5m_per_mtok: f64,
    /// Input written with the one-hour TTL, per million tokens; unset = a turn with 1-hour
    /// writes has no money figure.
    #[serde(default)]
    pub cache_write_1h_per_mtok: Option<f64>,
    /// Currency code shown beside amounts. Default `"USD"`.
    #[serde(default = "default_currency")]
    pub currency: String,
}

fn default_currency() -> String {
    "USD".to_owned()
}

impl PriceEntry {
    /// Why the entry is unusable (a bad glob, a negative or non-finite price, an empty
    /// currency), for the config's error message.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.model.trim().is_empty() {
            return Some("model must not be empty (a glob such as \"claude-sonnet-4*\", or \"*\" for every model)".to_owned());
        }
        if let Err(e) = globset::Glob::new(&self.model) {
            return Some(format!("model {:?} is not a glob: {e}", self.model));
        }
        let prices = [
            ("input_per_mtok", Some(self.input_per_mtok)),
            ("output_per_mtok", Some(self.output_per_mtok)),
            ("cache_read_per_mtok", Some(self.cache_read_per_mtok)),
            (
                "cache_write_5m_per_mtok",
                Some(self.cache_write_5m_per_mtok),
            ),
            ("cache_write_1h_per_mtok", self.cache_write_1h_per_mtok),
        ];
        for (name, v) in prices {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return Some(format!("{name} must be a non-negative number, not {v}"));
                }
            }
        }
        if self.currency.trim().is_empty() {
            return Some("currency must not be empty".to_owned());
        }
        None
    }
}

/// The `[[pricing]]` entries, first matching glob wins.
#[derive(Debug, Clone, Default)]
pub struct Pricing {
    entries: Vec<(globset::GlobMatcher, PriceEntry)>,
}

impl Pricing {
    /// From the config's entries (an entry whose glob does not compile is skipped; the config
    /// rejects those at load).
    pub fn new(entries: &[PriceEntry]) -> Self {
        Self {
            entries: entries
                .iter()
                .filter_map(|e| {
                    let m = globset::Glob::new(&e.model).ok()?.compile_matcher();
                    Some((m, e.clone()))
                })
                .collect(),
        }
    }

    /// The entry covering `model`, if any.
    pub fn entry(&self, model: &str) -> Option<&PriceEntry> {
        self.entries
            .iter()
            .find(|(m, _)| m.is_match(model))
            .map(|(_, e)| e)
    }
}

/// A turn's (or a session's) money figures, in the entry's currency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Money {
    /// What the turn cost (input, cache and output).
    pub amount: f64,
    /// What it would have cost with every input token uncached.
    pub no_cache: f64,
    /// `no_cache − amount` (negative when cache writes cost more than reads saved).
    pub saving: f64,
    pub currency: String,
}

/// What one turn cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cost {
    /// Input tokens of every kind (uncached + cache read + cache write): what a cacheless
    /// provider would bill as input; `None` when no input number was reported.
    pub no_cache_equiv: Option<f64>,
    /// Billed-input equivalents; `None` = not priced (unknown multipliers) or not reported.
    pub billed_equiv: Option<f64>,
    /// `no_cache_equiv − billed_equiv`, net of the cache-write premium.
    pub saving_equiv: Option<f64>,
    /// Money, where a `[[pricing]]` entry covers the model and the figures it needs were
    /// reported.
    pub money: Option<Money>,
}

/// The write tokens split by TTL: (default TTL, one hour). A provider that reports no split
/// wrote with its default TTL.
fn write_split(u: &UsageRecord) -> (u64, u64) {
    let total = u.cache_write_tokens.unwrap_or(0);
    match (u.cache_write_5m_tokens, u.cache_write_1h_tokens) {
        (None, None) => (total, 0),
        (a, b) => {
            let long = b.unwrap_or(0);
            (a.unwrap_or(total.saturating_sub(long)), long)
        }
    }
}

/// Tokens as a float (exact below 2^53).
fn f(n: u64) -> f64 {
    n as f64
}

/// What `turn` cost under the provider table's multipliers and `pricing`.
pub fn cost(turn: &TurnRecord, pricing: &Pricing) -> Cost {
    let u = &turn.usage;
    let reported = u.uncached_input_tokens.is_some()
        || u.cache_read_tokens.is_some()
        || u.cache_write_tokens.is_some();
    let uncached = u.uncached_input_tokens.unwrap_or(0);
    let read = u.cache_read_tokens.unwrap_or(0);
    let (w5, w1) = write_split(u);
    let input = uncached
        .saturating_add(read)
        .saturating_add(w5)
        .saturating_add(w1);
    let no_cache_equiv = reported.then(|| f(input));
    let billed_equiv = multipliers(&turn.provider, &turn.model)
        .filter(|_| reported)
        .and_then(|m| {
            let long = if w1 > 0 { m.write_1h? * f(w1) } else { 0.0 };
            Some(f(uncached) + m.read * f(read) + m.write_5m * f(w5) + long)
        });
    let saving_equiv = match (no_cache_equiv, billed_equiv) {
        (Some(n), Some(b)) => Some(n - b),
        _ => None,
    };
    let money = pricing.entry(&turn.model).and_then(|e| {
        if !reported && u.output_tokens.is_none() {
            return None;
        }
        let per = |tokens: u64, price: f64| f(tokens) * price / 1_000_000.0;
        let long = if w1 > 0 {
            per(w1, e.cache_write_1h_per_mtok?)
        } else {
            0.0
        };
        let output = per(u.output_tokens.unwrap_or(0), e.output_per_mtok);
        let amount = per(uncached, e.input_per_mtok)
            + per(read, e.cache_read_per_mtok)
            + per(w5, e.cache_write_5m_per_mtok)
            + long
            + output;
        let no_cache = per(input, e.input_per_mtok) + output;
        Some(Money {
            amount,
            no_cache,
            saving: no_cache - amount,
            currency: e.currency.clone(),
        })
    });
    Cost {
        no_cache_equiv,
        billed_equiv,
        saving_equiv,
        money,
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;
    use std::collections::BTreeMap;

    fn turn(provider: &str, model: &str, usage: UsageRecord) -> TurnRecord {
        TurnRecord {
            session: "s".into(),
            turn: 1,
            ts_ms: 0,
            route: "r".into(),
            provider: provider.into(),
            model: model.into(),
            streamed: false,
            status: 200,
            usage,
            passes: BTreeMap::new(),
            collapse: None,
            idle_ms: None,
        }
    }

    fn anthropic_usage() -> UsageRecord {
        UsageRecord {
            uncached_input_tokens: Some(100),
            cache_read_tokens: Some(40_000),
            cache_write_tokens: Some(3_000),
            cache_write_5m_tokens: Some(2_000),
            cache_write_1h_tokens: Some(1_000),
            output_tokens: Some(500),
        }
    }

    #[test]
    fn anthropic_multipliers_come_from_the_provider_table() {
        let m = multipliers("anthropic", "claude-sonnet-4-5").unwrap();
        assert_eq!((m.read, m.write_5m, m.write_1h), (0.1, 1.25, Some(2.0)));
        // A model the table has no read price for is not priced.
        assert!(multipliers("deepseek", "deepseek-chat").is_none());
        assert!(multipliers("groq", "llama").is_none());
        // OpenAI's long TTL is a 24-hour retention, not a 1-hour write.
        assert_eq!(multipliers("openai", "gpt-5").unwrap().write_1h, None);
    }

    #[test]
    fn billed_equivalents_net_of_the_write_premium() {
        let c = cost(
            &turn("anthropic", "claude-x", anthropic_usage()),
            &Pricing::default(),
        );
        // 100 + 0.1 × 40000 + 1.25 × 2000 + 2 × 1000 = 8600; without a cache 43100.
        assert_eq!(c.billed_equiv, Some(8600.0));
        assert_eq!(c.no_cache_equiv, Some(43_100.0));
        assert_eq!(c.saving_equiv, Some(34_500.0));
        assert_eq!(c.money, None);
    }

    #[test]
    fn not_reported_and_not_priced_are_none_never_zero() {
        let c = cost(
            &turn("anthropic", "claude-x", UsageRecord::default()),
            &Pricing::default(),
        );
        assert_eq!((c.no_cache_equiv, c.billed_equiv), (None, None));
        let c = cost(
            &turn("groq", "llama", anthropic_usage()),
            &Pricing::default(),
        );
        assert_eq!(c.billed_equiv, None);
        assert_eq!(c.no_cache_equiv, Some(43_100.0));
    }

    #[test]
    fn money_from_the_first_matching_entry() {
        let entry = PriceEntry {
            model: "claude-*".into(),
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: 0.3,
            cache_write_5m_per_mtok: 3.75,
            cache_write_1h_per_mtok: Some(6.0),
            currency: "USD".into(),
        };
        let all = PriceEntry {
            model: "*".into(),
            input_per_mtok: 1.0,
            ..entry.clone()
        };
        let pricing = Pricing::new(&[entry, all]);
        let c = cost(&turn("anthropic", "claude-x", anthropic_usage()), &pricing);
        let m = c.money.unwrap();
        // (100×3 + 40000×0.3 + 2000×3.75 + 1000×6 + 500×15) / 1e6
        assert!((m.amount - 0.0333).abs() < 1e-9, "{}", m.amount);
        // (43100×3 + 500×15) / 1e6
        assert!((m.no_cache - 0.1368).abs() < 1e-9, "{}", m.no_cache);
        assert_eq!(m.currency, "USD");
        assert_eq!(pricing.entry("gpt-5").unwrap().input_per_mtok, 1.0);
        // 1-hour writes without a 1-hour price: no money figure.
        let mut e = pricing.entry("claude-x").unwrap().clone();
        e.cache_write_1h_per_mtok = None;
        let c = cost(
            &turn("anthropic", "claude-x", anthropic_usage()),
            &Pricing::new(&[e]),
        );
        assert_eq!(c.money, None);
    }

    #[test]
    fn entry_problems_are_named() {
        let mut e = PriceEntry {
            model: "[".into(),
            input_per_mtok: 1.0,
            output_per_mtok: 1.0,
            cache_read_per_mtok: 1.0,
            cache_write_5m_per_mtok: 1.0,
            cache_write_1h_per_mtok: None,
            currency: "EUR".into(),
        };
        assert!(e.problem().unwrap().contains("not a glob"));
        e.model = "*".into();
        assert_eq!(e.problem(), None);
        e.output_per_mtok = -1.0;
        assert!(e.problem().unwrap().contains("output_per_mtok"));
        // The failing input of a fresh-user pass: an empty model matched nothing, silently.
        e.output_per_mtok = 1.0;
        e.model = " ".into();
        assert!(e.problem().unwrap().contains("model must not be empty"));
    }
}
