//! One way of sending a replayed session (as sent, as cachekeeper forwards it, keeping the
//! newest images), fed turn by turn into its own cache model.

use serde_json::Value;

use crate::accounting::cache_model::{self, CacheModel, Rule};
use crate::accounting::pricing::Multipliers;
use crate::accounting::TurnAccount;
use crate::dialect::Dialect;
use crate::rewrite::RewriteReport;
use crate::state::load::{Reads, Snapshot};

use super::session::Session;
use super::{ExpiryWrite, ReplayCollapse, VariantReport, PLACEHOLDER};

/// One way of sending the session, fed turn by turn.
pub(super) struct Variant {
    /// The session name its turns are tracked under.
    pub(super) name: &'static str,
    pub(super) model: CacheModel,
    pub(super) report: VariantReport,
    pub(super) images: u64,
    pub(super) last_ts: Option<i64>,
}

/// What one variant sends for one turn.
pub(super) struct Sent<'a> {
    pub(super) dialect: Dialect,
    /// The client's bytes.
    pub(super) client: &'a [u8],
    /// The bytes this variant sends.
    pub(super) forwarded: &'a [u8],
    /// What changed them.
    pub(super) report: &'a RewriteReport,
    pub(super) ts: i64,
}

impl Variant {
    pub(super) fn new(name: &'static str, rule: Rule) -> Self {
        Self {
            name,
            model: CacheModel::new(rule),
            report: VariantReport {
                turns: 0,
                collapses: Vec::new(),
                expiry_writes: Vec::new(),
                input_tokens: 0,
                cache_write_tokens: 0,
                cache_write_1h_tokens: 0,
                cache_read_tokens: 0,
                uncached_tokens: 0,
                billed_input_equiv: None,
                no_cache_equiv: 0,
                mean_images: 0.0,
            },
            images: 0,
            last_ts: None,
        }
    }

    /// Feed one turn: the cache model's figures, and the proxy's own collapse detection.
    /// `turn`: the turn as the proxy's pipeline committed it (the `cachekeeper` variant), its
    /// collapse found here ([`SessionTracker::settle`]); `None`: the turn is begun here from
    /// `sent`.
    pub(super) fn turn(&mut self, s: &Session, sent: &Sent<'_>, turn: Option<TurnAccount>) {
        // A body the model cannot read counts as an empty turn (the provider would reject it).
        let t = self
            .model
            .turn(sent.dialect, sent.forwarded, sent.ts)
            .unwrap_or_default();
        let account = match turn {
            Some(mut a) => {
                s.tracker.settle(&mut a);
                Some(a)
            }
            None => {
                let input = s.turn_input(self.name, sent);
                let memory = Snapshot::memory_only();
                s.tracker
                    .begin(&input, &Reads::new(s.tracker.store(), &memory))
                    .map(|(a, _)| a)
            }
        };
        let r = &mut self.report;
        r.turns += 1;
        r.input_tokens += t.input;
        r.cache_write_tokens += t.write;
        r.cache_write_1h_tokens += t.write_long;
        r.cache_read_tokens += t.read;
        r.uncached_tokens += t.uncached;
        self.images += u64::from(t.images);
        match account.and_then(|a| a.collapse) {
            Some(c) => r.collapses.push(ReplayCollapse {
                turn: r.turns,
                at: c.at,
                cause: c.cause.as_str(),
                write_tokens: t.write,
            }),
            None if t.expired > 0 => r.expiry_writes.push(ExpiryWrite {
                turn: r.turns,
                idle_ms: self
                    .last_ts
                    .map_or(0, |p| u64::try_from(sent.ts.saturating_sub(p)).unwrap_or(0)),
                write_tokens: t.write,
                expired_tokens: t.expired,
            }),
            None => {}
        }
        self.last_ts = Some(sent.ts);
    }

    pub(super) fn finish(mut self, m: Option<&Multipliers>) -> VariantReport {
        let r = &mut self.report;
        r.no_cache_equiv = r.input_tokens;
        r.billed_input_equiv = m.map(|m| {
            let short = r.cache_write_tokens - r.cache_write_1h_tokens;
            r.uncached_tokens as f64
                + r.cache_read_tokens as f64 * m.read
                + short as f64 * m.write_5m
                + r.cache_write_1h_tokens as f64 * m.write_1h.unwrap_or(m.write_5m)
        });
        r.mean_images = if r.turns == 0 {
            0.0
        } else {
            self.images as f64 / f64::from(r.turns)
        };
        self.report
    }
}

/// `body` with every image but the newest `keep` replaced by [`PLACEHOLDER`] text (a
/// `cache_control` the image had stays on the text), and how many were replaced; `None`
/// when the body is not JSON. Images are counted in document order of the message list.
/// The body is always re-serialized (keys sorted), so every turn of the comparison has the
/// same key order and only the replacements change its prefix.
pub fn keep_newest(dialect: Dialect, body: &[u8], keep: usize) -> Option<(Vec<u8>, usize)> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let key = dialect.format().conversation().key;
    let mut replaced = 0;
    if let Some(list) = value.get_mut(key) {
        let total = count_images(list);
        replaced = total.saturating_sub(keep);
        let mut to_replace = replaced;
        replace_images(dialect, list, &mut to_replace);
    }
    serde_json::to_vec(&value).ok().map(|b| (b, replaced))
}

pub(super) fn count_images(v: &Value) -> usize {
    match v {
        Value::Object(obj) if cache_model::is_image(obj) => 1,
        Value::Object(obj) => obj.values().map(count_images).sum(),
        Value::Array(items) => items.iter().map(count_images).sum(),
        _ => 0,
    }
}

pub(super) fn replace_images(dialect: Dialect, v: &mut Value, left: &mut usize) {
    if *left == 0 {
        return;
    }
    match v {
        Value::Object(obj) if cache_model::is_image(obj) => {
            let keep = obj.get("cache_control").map(Value::to_string);
            let keep = keep.as_deref().map(|raw| ("cache_control", raw));
            let style = dialect.format().image_placeholder_style();
            let Ok(text) = serde_json::from_str(&style.block(PLACEHOLDER, keep)) else {
                return;
            };
            *v = text;
            *left -= 1;
        }
        Value::Object(obj) => {
            for (_, child) in obj.iter_mut() {
                replace_images(dialect, child, left);
            }
        }
        Value::Array(items) => {
            for child in items {
                replace_images(dialect, child, left);
            }
        }
        _ => {}
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

    #[test]
    fn keep_newest_replaces_the_oldest_images() {
        let img = |n: u8| {
            serde_json::json!({"type": "image", "source": {"type": "base64",
                "media_type": "image/png", "data": format!("AAA{n}")}})
        };
        let body = serde_json::json!({"messages": [
            {"role": "user", "content": [img(1), {"type": "text", "text": "x"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                "content": [img(2)]}]},
            {"role": "user", "content": [img(3), img(4)]},
        ]});
        let bytes = serde_json::to_vec(&body).unwrap();
        let out: Value =
            serde_json::from_slice(&keep_newest(Dialect::Anthropic, &bytes, 3).unwrap().0).unwrap();
        assert_eq!(
            out["messages"][0]["content"][0],
            serde_json::json!({"type": "text", "text": PLACEHOLDER})
        );
        assert_eq!(out["messages"][1]["content"][0]["content"][0], img(2));
        assert_eq!(out["messages"][2]["content"][1], img(4));
        assert_eq!(keep_newest(Dialect::Anthropic, &bytes, 4).unwrap().1, 0);
        assert_eq!(keep_newest(Dialect::Anthropic, &bytes, 3).unwrap().1, 1);
        assert!(keep_newest(Dialect::Anthropic, b"{", 3).is_none());
    }
}
