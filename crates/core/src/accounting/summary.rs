//! Per-session sums of the stored turns: the one aggregation behind `cachekeeper report` and
//! the dashboard (`docs/guide/cache-money.md#cachekeeper-report`; pricing in `docs/accounting.md#pricing`).
//!
//! Every token sum is `None` when no turn of the session reported that number — "not
//! reported" is never shown as 0. The cache-read share is Σ read / Σ (uncached + read +
//! write) over the turns that reported a read figure (`None`: "n/a"). Billed-input
//! equivalents and money are [`pricing::cost`] summed over the turns it could price
//! (`None`: "not priced").

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::pricing::{self, Pricing};
use super::record::{TurnRecord, UsageRecord};
use super::{Cause, Collapse};

/// The collapses of one cause within a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseSum {
    /// The cause (serialized as [`Cause::as_str`]).
    pub cause: Cause,
    /// How many turns collapsed for it.
    pub collapses: u32,
    /// The cache-write tokens of those turns (`None`: none of them reported writes).
    pub write_tokens: Option<u64>,
}

/// Money of a session's turns priced in one currency by `[[pricing]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoneySum {
    /// ISO currency code as configured (`USD` by default).
    pub currency: String,
    /// What the turns cost, in `currency`.
    pub amount: f64,
    /// What they would have cost with no prompt cache, in `currency`.
    pub no_cache: f64,
    /// `no_cache - amount`, in `currency` (negative: the cache cost more than it saved).
    pub saving: f64,
    /// How many turns this covers.
    pub turns: u32,
}

/// One session's sums over its turns (in the `--since` window when one is given).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSummary {
    /// The session id (16 hex chars, or the client's `x-cachekeeper-session` value).
    pub session: String,
    /// The route of the most recent turn.
    pub route: String,
    /// The provider row of the most recent turn.
    pub provider: String,
    /// The model of the most recent turn.
    pub model: String,
    /// Every model the session used, in order of first use (one entry when it used one).
    pub models: Vec<String>,
    /// The first turn's request arrival, Unix ms.
    pub first_ts_ms: i64,
    /// The last turn's request arrival, Unix ms.
    pub last_ts_ms: i64,
    /// Number of turns.
    pub turns: u32,
    /// Σ uncached input tokens (`None`: not reported by any turn).
    pub uncached_input_tokens: Option<u64>,
    /// Σ cache-read tokens (`None`: not reported by any turn).
    pub cache_read_tokens: Option<u64>,
    /// Σ cache-write tokens, all TTLs (`None`: not reported by any turn).
    pub cache_write_tokens: Option<u64>,
    /// Σ output tokens (`None`: not reported by any turn).
    pub output_tokens: Option<u64>,
    /// Σ read / Σ (uncached + read + write) over the turns that reported a read figure,
    /// 0.0–1.0 (`None`: "n/a", no turn reported one).
    pub cache_read_share: Option<f64>,
    /// Number of turns that collapsed the prompt-cache prefix.
    pub collapses: u32,
    /// Σ cache-write tokens of those turns (`None`: no collapse, or none reported writes).
    pub collapse_write_tokens: Option<u64>,
    /// The collapses per cause, in [`Cause::ALL`] order, causes with none left out.
    pub by_cause: Vec<CauseSum>,
    /// How many turns [`pricing::cost`] could price in billed-input equivalents.
    pub priced_turns: u32,
    /// Σ billed-input equivalents of the priced turns: input tokens as billed, each cache
    /// read / write weighted by the provider's multiplier (`None`: "not priced").
    pub billed_equiv: Option<f64>,
    /// Σ what the priced turns' input would have been billed with no cache, input-token
    /// equivalents (`None`: "not priced").
    pub no_cache_equiv: Option<f64>,
    /// `no_cache_equiv - billed_equiv`, input-token equivalents (`None`: "not priced";
    /// negative: the cache-write premium outweighed the reads).
    pub saving_equiv: Option<f64>,
    /// Money per currency where `[[pricing]]` covers the model (empty: no entry covers it).
    pub money: Vec<MoneySum>,
}

/// One turn of a session, as the report's `--session` table and the dashboard's chart show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnRow {
    /// 1-based turn number.
    pub turn: u32,
    /// Request arrival, Unix ms.
    pub ts_ms: i64,
    /// The model the request named.
    pub model: String,
    /// HTTP status sent to the client.
    pub status: u16,
    /// The response was an event stream.
    pub streamed: bool,
    /// Uncached input tokens (`None`: not reported).
    pub uncached_input_tokens: Option<u64>,
    /// Cache-read tokens (`None`: not reported).
    pub cache_read_tokens: Option<u64>,
    /// Cache-write tokens, all TTLs (`None`: not reported).
    pub cache_write_tokens: Option<u64>,
    /// Output tokens (`None`: not reported).
    pub output_tokens: Option<u64>,
    /// The prefix collapse of this turn (its `write_tokens` filled from the usage when the
    /// record lacks them).
    pub collapse: Option<Collapse>,
    /// Milliseconds since the session's previous turn (`None` on its first).
    pub idle_ms: Option<u64>,
    /// Billed-input equivalents (`None`: not priced).
    pub billed_equiv: Option<f64>,
    /// Saving against no cache, input-token equivalents (`None`: not priced).
    pub saving_equiv: Option<f64>,
    /// The request passes' non-zero counters.
    pub passes: BTreeMap<String, u64>,
}

/// One session: its summary and its turns in turn order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionDetail {
    /// The sums.
    pub summary: SessionSummary,
    /// Every turn (in the window), by turn number.
    pub turns: Vec<TurnRow>,
}

/// A `--since` / `?since=` window that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?} (examples: 30m, 2h, 7d): {reason}")]
pub struct SinceError {
    /// What was given.
    pub text: String,
    /// `humantime`'s reason.
    pub reason: String,
}

/// The start of a window `text` long (a `humantime` duration: `30m`, `2h`, `7d`, `1h 30m`)
/// ending at `now_ms`, Unix ms.
///
/// # Errors
/// [`SinceError`] when `text` is not a duration.
pub fn since_ms(text: &str, now_ms: i64) -> Result<i64, SinceError> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| SinceError {
        text: text.to_owned(),
        reason: e.to_string(),
    })?;
    let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok(now_ms.saturating_sub(ms))
}

/// Now, Unix ms.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A turn's cache-write tokens: the total, else the sum of the per-TTL figures when only
/// those were reported (`None`: not reported).
fn write_tokens(u: &UsageRecord) -> Option<u64> {
    u.cache_write_tokens.or_else(
        || match (u.cache_write_5m_tokens, u.cache_write_1h_tokens) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        },
    )
}

/// `acc + v`, where `None` means "nothing reported yet" and stays `None` only while every
/// term is `None`.
fn add(acc: Option<u64>, v: Option<u64>) -> Option<u64> {
    match (acc, v) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

fn add_f(acc: Option<f64>, v: Option<f64>) -> Option<f64> {
    match (acc, v) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// The collapse of `t` with its write tokens filled from the usage when the record has none.
fn collapse_of(t: &TurnRecord) -> Option<Collapse> {
    t.collapse.as_ref().map(|c| Collapse {
        at: c.at.clone(),
        cause: c.cause,
        write_tokens: c.write_tokens.or_else(|| write_tokens(&t.usage)),
    })
}

/// The summary of one session's turns (non-empty, any order).
fn summarize(turns: &[&TurnRecord], pricing: &Pricing) -> Option<SessionSummary> {
    let first = turns.iter().min_by_key(|t| (t.ts_ms, t.turn))?;
    let last = turns.iter().max_by_key(|t| (t.ts_ms, t.turn))?;
    let mut s = opened(first, last);
    let mut ordered: Vec<&TurnRecord> = turns.to_vec();
    ordered.sort_by_key(|t| (t.ts_ms, t.turn));
    let mut sums = Sums::default();
    for t in ordered {
        sums.add(&mut s, t, pricing);
    }
    sums.close(&mut s);
    Some(s)
}

/// A session's summary before its turns are added: names from its last turn, times from its
/// first and last.
fn opened(first: &TurnRecord, last: &TurnRecord) -> SessionSummary {
    SessionSummary {
        session: last.session.clone(),
        route: last.route.clone(),
        provider: last.provider.clone(),
        model: last.model.clone(),
        models: Vec::new(),
        first_ts_ms: first.ts_ms,
        last_ts_ms: last.ts_ms,
        turns: 0,
        uncached_input_tokens: None,
        cache_read_tokens: None,
        cache_write_tokens: None,
        output_tokens: None,
        cache_read_share: None,
        collapses: 0,
        collapse_write_tokens: None,
        by_cause: Vec::new(),
        priced_turns: 0,
        billed_equiv: None,
        no_cache_equiv: None,
        saving_equiv: None,
        money: Vec::new(),
    }
}

/// What [`summarize`] sums over a session's turns beside the summary's own fields.
#[derive(Default)]
struct Sums {
    /// Σ read and Σ (uncached + read + write) over the turns that reported a read, and how
    /// many did: the cache-read share.
    share_read: u64,
    share_all: u64,
    share_turns: u32,
    /// Collapses and their write tokens by cause.
    causes: BTreeMap<Cause, (u32, Option<u64>)>,
    /// Money by currency.
    money: BTreeMap<String, MoneySum>,
}

impl Sums {
    /// Add turn `t` (in time order) to `s` and to the sums.
    fn add(&mut self, s: &mut SessionSummary, t: &TurnRecord, pricing: &Pricing) {
        s.turns = s.turns.saturating_add(1);
        if !s.models.contains(&t.model) {
            s.models.push(t.model.clone());
        }
        let u = &t.usage;
        let write = write_tokens(u);
        s.uncached_input_tokens = add(s.uncached_input_tokens, u.uncached_input_tokens);
        s.cache_read_tokens = add(s.cache_read_tokens, u.cache_read_tokens);
        s.cache_write_tokens = add(s.cache_write_tokens, write);
        s.output_tokens = add(s.output_tokens, u.output_tokens);
        if let Some(read) = u.cache_read_tokens {
            self.share_turns += 1;
            self.share_read = self.share_read.saturating_add(read);
            self.share_all = self
                .share_all
                .saturating_add(u.uncached_input_tokens.unwrap_or(0))
                .saturating_add(read)
                .saturating_add(write.unwrap_or(0));
        }
        if let Some(c) = collapse_of(t) {
            s.collapses += 1;
            s.collapse_write_tokens = add(s.collapse_write_tokens, c.write_tokens);
            let e = self.causes.entry(c.cause).or_insert((0, None));
            e.0 += 1;
            e.1 = add(e.1, c.write_tokens);
        }
        let cost = pricing::cost(t, pricing);
        if let Some(billed) = cost.billed_equiv {
            s.priced_turns += 1;
            s.billed_equiv = add_f(s.billed_equiv, Some(billed));
            s.no_cache_equiv = add_f(s.no_cache_equiv, cost.no_cache_equiv.or(Some(0.0)));
        }
        if let Some(m) = cost.money {
            let e = self.money.entry(m.currency.clone()).or_insert(MoneySum {
                currency: m.currency.clone(),
                amount: 0.0,
                no_cache: 0.0,
                saving: 0.0,
                turns: 0,
            });
            e.amount += m.amount;
            e.no_cache += m.no_cache;
            e.turns += 1;
        }
    }

    /// The summary's fields made from the sums.
    fn close(self, s: &mut SessionSummary) {
        if self.share_turns > 0 && self.share_all > 0 {
            s.cache_read_share = Some(self.share_read as f64 / self.share_all as f64);
        }
        if let (Some(b), Some(n)) = (s.billed_equiv, s.no_cache_equiv) {
            s.saving_equiv = Some(n - b);
        }
        s.by_cause = Cause::ALL
            .iter()
            .filter_map(|c| {
                self.causes
                    .get(c)
                    .map(|&(collapses, write_tokens)| CauseSum {
                        cause: *c,
                        collapses,
                        write_tokens,
                    })
            })
            .collect();
        s.money = self
            .money
            .into_values()
            .map(|mut m| {
                m.saving = m.no_cache - m.amount;
                m
            })
            .collect();
    }
}

/// The turns of each session at or after `since_ms` (Unix ms; `None`: all), by session id.
fn by_session(turns: &[TurnRecord], since_ms: Option<i64>) -> HashMap<&str, Vec<&TurnRecord>> {
    let mut out: HashMap<&str, Vec<&TurnRecord>> = HashMap::new();
    for t in turns {
        if since_ms.is_some_and(|since| t.ts_ms < since) {
            continue;
        }
        out.entry(t.session.as_str()).or_default().push(t);
    }
    out
}

/// Every session with a turn at or after `since_ms` (Unix ms; `None`: all), summed over
/// those turns, newest activity first (ties by session id).
pub fn sessions(
    turns: &[TurnRecord],
    pricing: &Pricing,
    since_ms: Option<i64>,
) -> Vec<SessionSummary> {
    let mut out: Vec<SessionSummary> = by_session(turns, since_ms)
        .values()
        .filter_map(|ts| summarize(ts, pricing))
        .collect();
    out.sort_by(|a, b| {
        b.last_ts_ms
            .cmp(&a.last_ts_ms)
            .then_with(|| a.session.cmp(&b.session))
    });
    out
}

/// One session's summary and turns (at or after `since_ms`; `None`: all), by turn number;
/// `None` when it has no turn there.
pub fn session_detail(
    turns: &[TurnRecord],
    pricing: &Pricing,
    session: &str,
    since_ms: Option<i64>,
) -> Option<SessionDetail> {
    let mut mine: Vec<&TurnRecord> = turns
        .iter()
        .filter(|t| t.session == session && since_ms.is_none_or(|since| t.ts_ms >= since))
        .collect();
    let summary = summarize(&mine, pricing)?;
    mine.sort_by_key(|t| (t.turn, t.ts_ms));
    let rows = mine
        .into_iter()
        .map(|t| {
            let cost = pricing::cost(t, pricing);
            TurnRow {
                turn: t.turn,
                ts_ms: t.ts_ms,
                model: t.model.clone(),
                status: t.status,
                streamed: t.streamed,
                uncached_input_tokens: t.usage.uncached_input_tokens,
                cache_read_tokens: t.usage.cache_read_tokens,
                cache_write_tokens: write_tokens(&t.usage),
                output_tokens: t.usage.output_tokens,
                collapse: collapse_of(t),
                idle_ms: t.idle_ms,
                billed_equiv: cost.billed_equiv,
                saving_equiv: cost.saving_equiv,
                passes: t.passes.clone(),
            }
        })
        .collect();
    Some(SessionDetail {
        summary,
        turns: rows,
    })
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

    const T0: i64 = 1_764_614_400_000;

    fn turn(session: &str, n: u32, ts_ms: i64, usage: UsageRecord) -> TurnRecord {
        TurnRecord {
            session: session.into(),
            turn: n,
            ts_ms,
            route: "anthropic".into(),
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            streamed: true,
            status: 200,
            usage,
            passes: BTreeMap::new(),
            collapse: None,
            idle_ms: None,
        }
    }

    fn usage(uncached: u64, read: u64, write: u64, output: u64) -> UsageRecord {
        UsageRecord {
            uncached_input_tokens: Some(uncached),
            cache_read_tokens: Some(read),
            cache_write_tokens: Some(write),
            cache_write_5m_tokens: Some(write),
            cache_write_1h_tokens: None,
            output_tokens: Some(output),
        }
    }

    /// Three Anthropic turns: a cold start, a warm read, and an eviction collapse.
    fn anthropic_session() -> Vec<TurnRecord> {
        let mut t3 = turn("a1", 3, T0 + 20_000, usage(12, 2_000, 127_720, 310));
        t3.collapse = Some(Collapse {
            at: "messages[12]".into(),
            cause: Cause::Eviction,
            write_tokens: Some(127_720),
        });
        vec![
            turn("a1", 1, T0, usage(3, 0, 130_000, 200)),
            turn("a1", 2, T0 + 10_000, usage(5, 130_000, 1_500, 250)),
            t3,
        ]
    }

    #[test]
    fn sums_share_and_collapses_of_one_session() {
        let s = sessions(&anthropic_session(), &Pricing::default(), None);
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!(s.session, "a1");
        assert_eq!(s.turns, 3);
        assert_eq!((s.first_ts_ms, s.last_ts_ms), (T0, T0 + 20_000));
        assert_eq!(s.uncached_input_tokens, Some(20));
        assert_eq!(s.cache_read_tokens, Some(132_000));
        assert_eq!(s.cache_write_tokens, Some(259_220));
        assert_eq!(s.output_tokens, Some(760));
        // 132_000 / (20 + 132_000 + 259_220)
        let share = s.cache_read_share.unwrap();
        assert!((share - 132_000.0 / 391_240.0).abs() < 1e-12, "{share}");
        assert_eq!(s.collapses, 1);
        assert_eq!(s.collapse_write_tokens, Some(127_720));
        assert_eq!(
            s.by_cause,
            vec![CauseSum {
                cause: Cause::Eviction,
                collapses: 1,
                write_tokens: Some(127_720)
            }]
        );
        assert_eq!(s.models, vec!["claude-sonnet-4-5".to_owned()]);
    }

    #[test]
    fn billed_equivalents_and_money() {
        let turns = anthropic_session();
        let s = &sessions(&turns, &Pricing::default(), None)[0];
        // Anthropic: read 0.1x, 5-minute write 1.25x the uncached input price.
        // (3 + 130_000 x 1.25) + (5 + 130_000 x 0.1 + 1_500 x 1.25) + (12 + 2_000 x 0.1 +
        // 127_720 x 1.25) = 162_503 + 14_880 + 159_862
        assert_eq!(s.priced_turns, 3);
        assert!((s.billed_equiv.unwrap() - 337_245.0).abs() < 1e-6, "{s:?}");
        assert!((s.no_cache_equiv.unwrap() - 391_240.0).abs() < 1e-6);
        assert!((s.saving_equiv.unwrap() - 53_995.0).abs() < 1e-6);
        assert!(s.money.is_empty(), "no [[pricing]]: no money");

        // $3 / $15 / $0.30 / $3.75 per million (input, output, read, 5-minute write).
        let pricing = Pricing::new(&[pricing::PriceEntry {
            model: "claude-sonnet-*".into(),
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: 0.3,
            cache_write_5m_per_mtok: 3.75,
            cache_write_1h_per_mtok: None,
            currency: "USD".into(),
        }]);
        let s = &sessions(&turns, &pricing, None)[0];
        assert_eq!(s.money.len(), 1);
        let m = &s.money[0];
        assert_eq!((m.currency.as_str(), m.turns), ("USD", 3));
        // Input as billed: 337_245 equivalents x $3/M; output 760 x $15/M.
        let output = 760.0 * 15.0 / 1e6;
        assert!(
            (m.amount - (337_245.0 * 3.0 / 1e6 + output)).abs() < 1e-9,
            "{m:?}"
        );
        assert!((m.no_cache - (391_240.0 * 3.0 / 1e6 + output)).abs() < 1e-9);
        assert!((m.saving - 53_995.0 * 3.0 / 1e6).abs() < 1e-9);
        // A model no entry covers has no money.
        let mut other = turns.clone();
        for t in &mut other {
            t.model = "claude-haiku-4-5".into();
        }
        assert!(sessions(&other, &pricing, None)[0].money.is_empty());
    }

    #[test]
    fn not_reported_stays_none_and_share_is_na() {
        // A provider that reports only totals: no cache figures at all.
        let u = UsageRecord {
            uncached_input_tokens: Some(900),
            output_tokens: Some(40),
            ..UsageRecord::default()
        };
        let mut turns = vec![turn("o1", 1, T0, u), turn("o1", 2, T0 + 5, u)];
        for t in &mut turns {
            t.provider = "mistral".into();
            t.model = "mistral-large".into();
        }
        let s = &sessions(&turns, &Pricing::default(), None)[0];
        assert_eq!(s.uncached_input_tokens, Some(1_800));
        assert_eq!(s.cache_read_tokens, None);
        assert_eq!(s.cache_write_tokens, None);
        assert_eq!(s.cache_read_share, None);
        assert_eq!(s.collapse_write_tokens, None);
        let json = serde_json::to_value(s).unwrap();
        assert_eq!(json["cache_read_tokens"], serde_json::Value::Null);
        assert_eq!(json["cache_read_share"], serde_json::Value::Null);
        assert_eq!(json["uncached_input_tokens"], 1_800);
    }

    #[test]
    fn share_counts_only_turns_that_reported_a_read() {
        // Turn 1 reported no read figure (an error, say); turn 2 read 300 of 400.
        let turns = vec![
            turn(
                "m",
                1,
                T0,
                UsageRecord {
                    uncached_input_tokens: Some(5_000),
                    ..UsageRecord::default()
                },
            ),
            turn(
                "m",
                2,
                T0 + 1,
                UsageRecord {
                    uncached_input_tokens: Some(100),
                    cache_read_tokens: Some(300),
                    ..UsageRecord::default()
                },
            ),
        ];
        let s = &sessions(&turns, &Pricing::default(), None)[0];
        assert_eq!(s.cache_read_share, Some(0.75));
        assert_eq!(s.cache_write_tokens, None);
        assert_eq!(s.uncached_input_tokens, Some(5_100));
    }

    #[test]
    fn since_durations() {
        assert_eq!(since_ms("30m", T0), Ok(T0 - 1_800_000));
        assert_eq!(since_ms("2h", T0), Ok(T0 - 7_200_000));
        assert_eq!(since_ms("7d", T0), Ok(T0 - 604_800_000));
        assert_eq!(since_ms(" 1h 30m ", T0), Ok(T0 - 5_400_000));
        let e = since_ms("soon", T0).unwrap_err();
        assert_eq!(e.text, "soon");
        assert!(e.to_string().contains("examples: 30m, 2h, 7d"), "{e}");
        assert!(since_ms("", T0).is_err());
    }

    #[test]
    fn write_tokens_from_per_ttl_figures_when_no_total() {
        let u = UsageRecord {
            cache_write_5m_tokens: Some(100),
            cache_write_1h_tokens: Some(2_000),
            ..UsageRecord::default()
        };
        assert_eq!(write_tokens(&u), Some(2_100));
        assert_eq!(write_tokens(&UsageRecord::default()), None);
    }

    #[test]
    fn newest_activity_first_since_window_and_models_in_order() {
        let mut turns = anthropic_session();
        let mut b1 = turn("b2", 1, T0 + 5_000, usage(1, 0, 10, 1));
        b1.model = "claude-haiku-4-5".into();
        let b2 = turn("b2", 2, T0 + 60_000, usage(1, 10, 0, 1));
        turns.push(b1);
        turns.push(b2);
        let all = sessions(&turns, &Pricing::default(), None);
        let ids: Vec<&str> = all.iter().map(|s| s.session.as_str()).collect();
        assert_eq!(ids, ["b2", "a1"]);
        assert_eq!(all[0].model, "claude-sonnet-4-5");
        assert_eq!(all[0].models, ["claude-haiku-4-5", "claude-sonnet-4-5"]);
        // Since T0 + 15 s: a1 keeps only turn 3, b2 only its turn 2.
        let recent = sessions(&turns, &Pricing::default(), Some(T0 + 15_000));
        assert_eq!(recent.len(), 2);
        let a1 = recent.iter().find(|s| s.session == "a1").unwrap();
        assert_eq!(a1.turns, 1);
        assert_eq!(a1.cache_read_tokens, Some(2_000));
        assert!(sessions(&turns, &Pricing::default(), Some(T0 + 61_000)).is_empty());
    }

    #[test]
    fn detail_rows_in_turn_order_with_collapse_tokens_filled() {
        let mut turns = anthropic_session();
        turns.reverse();
        if let Some(c) = turns[0].collapse.as_mut() {
            c.write_tokens = None; // recorded before the response ended
        }
        let d = session_detail(&turns, &Pricing::default(), "a1", None).unwrap();
        let n: Vec<u32> = d.turns.iter().map(|r| r.turn).collect();
        assert_eq!(n, [1, 2, 3]);
        let c = d.turns[2].collapse.as_ref().unwrap();
        assert_eq!((c.at.as_str(), c.cause), ("messages[12]", Cause::Eviction));
        assert_eq!(c.write_tokens, Some(127_720));
        assert_eq!(d.turns[1].cache_read_tokens, Some(130_000));
        assert_eq!(d.summary.collapse_write_tokens, Some(127_720));
        assert!(session_detail(&turns, &Pricing::default(), "nope", None).is_none());
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["turns"][2]["collapse"]["cause"], "eviction");
        assert_eq!(json["summary"]["by_cause"][0]["cause"], "eviction");
    }
}
