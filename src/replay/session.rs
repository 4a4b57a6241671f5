//! A replay in progress: one recorded session, its route's passes run through the shared
//! pipeline over a memory-only store, each turn fed to the three variants.

use std::sync::Arc;

use serde_json::Value;

use crate::accounting::cache_model::Rule;
use crate::accounting::prefix::DigestKey;
use crate::accounting::pricing::{self, Multipliers};
use crate::accounting::session::{SessionTracker, TurnInput};
use crate::config::{Config, ReasoningConfig};
use crate::dialect::Dialect;
use crate::images::cache::TranscodeCache;
use crate::pipeline::{self, Plan, RunFor, Step};
use crate::provider::CacheActivation;
use crate::rewrite::RewriteReport;
use crate::route::{Route, RouteTable};
use crate::state::load::Snapshot;
use crate::state::{MemoryBackend, Store};

use super::variant::{keep_newest, Sent, Variant};
use super::{Line, ReplayError, ReplayReport, RuleReport, KEEP_NEWEST};

/// A replay in progress.
pub(super) struct Session {
    pub(super) route: Arc<Route>,
    pub(super) reasoning: ReasoningConfig,
    pub(super) dialect: Dialect,
    pub(super) model: String,
    pub(super) rule: Rule,
    pub(super) multipliers: Option<Multipliers>,
    pub(super) unparsed: u32,
    /// The proxy's collapse detection, over an in-memory store.
    pub(super) tracker: Arc<SessionTracker>,
    /// The transcode cache of the `cachekeeper` variant's passes (`[images]
    /// transcode_cache_bytes`; the bytes are the same without it, only slower).
    pub(super) transcodes: Arc<TranscodeCache>,
    /// `[server] max_rewrite_bytes`.
    pub(super) limit: u64,
    /// Requests without a credential: the all-zero digest key.
    pub(super) key: DigestKey,
    /// The three ways of sending, as a bundle so [`Session::turn`] can lend `self`.
    pub(super) variants: Option<Box<[Variant; 3]>>,
}

impl Session {
    pub(super) fn start(
        table: &RouteTable,
        config: &Config,
        name: &str,
        first: &Line<'_>,
    ) -> Result<Session, ReplayError> {
        let route = table
            .routes()
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .ok_or_else(|| ReplayError::UnknownRoute {
                name: name.to_owned(),
                known: table.routes().iter().map(|r| r.name.clone()).collect(),
            })?;
        let body: Value = serde_json::from_str(first.body.get()).unwrap_or(Value::Null);
        let dialect = dialect_of(&route, first.path.as_deref(), &body);
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let cache = route
            .provider
            .cache_rule(&model)
            .ok_or_else(|| ReplayError::NoCacheRule {
                route: route.name.clone(),
                provider: route.provider.row.name.to_owned(),
                model: model.clone(),
            })?;
        let rule = Rule::from_cache_rule(cache);
        let multipliers = pricing::multipliers(route.provider.row.name, &model);
        let store = Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 30);
        Ok(Session {
            route,
            reasoning: config.reasoning.clone(),
            transcodes: Arc::new(TranscodeCache::new(config.images.transcode_cache_bytes)),
            limit: config.server.max_rewrite_bytes,
            dialect,
            model,
            rule,
            multipliers,
            unparsed: 0,
            tracker: Arc::new(SessionTracker::new(store)),
            key: DigestKey::for_credential(None),
            variants: Some(Box::new([
                Variant::new("as_sent", rule),
                Variant::new("cachekeeper", rule),
                Variant::new("keep_newest_3", rule),
            ])),
        })
    }

    /// The session tracker's input for one variant's turn (the variant's name is its
    /// session).
    pub(super) fn turn_input<'a>(
        &'a self,
        variant: &'static str,
        sent: &Sent<'a>,
    ) -> TurnInput<'a> {
        TurnInput {
            dialect: sent.dialect,
            route: &self.route.name,
            provider: &self.route.provider,
            model: &self.model,
            scope: "",
            key: &self.key,
            client_session: Some(variant),
            client: sent.client,
            forwarded: sent.forwarded,
            report: sent.report,
            now_ms: sent.ts,
            retired: None,
        }
    }

    /// The pipeline's plan for one turn of the `cachekeeper` variant (session `variant`) on
    /// `rest` (the recorded path, else the dialect's), arrived at `ts` (Unix ms): the proxy's
    /// own plan for a request without a credential, anthropic-beta or content-encoding.
    pub(super) fn plan(&self, variant: &str, rest: &str, ts: i64) -> Plan {
        Plan {
            dialect: self.dialect,
            route: Arc::clone(&self.route),
            upstream_uri: http::Uri::default(),
            upstream_path: format!("{}{}", self.route.base_path, rest),
            path_model: self
                .route
                .model_of(crate::route::model_from_path(rest).as_deref(), None),
            credential_scope: String::new(),
            sealing: None,
            digest_key: self.key.clone(),
            encoding: None,
            anthropic_beta: None,
            droppable: self.reasoning.droppable_params.clone().into(),
            droppable_betas: self.reasoning.droppable_betas.clone().into(),
            store: self.tracker.store().clone(),
            transcodes: Arc::clone(&self.transcodes),
            limit: self.limit,
            decode_wait: std::time::Duration::ZERO,
            sessions: Some(Arc::clone(&self.tracker)),
            client_session: Some(variant.to_owned()),
            arrived_ms: ts,
            signed: false,
        }
    }

    pub(super) fn turn(&mut self, line: &Line<'_>) {
        let Some(mut v) = self.variants.take() else {
            return;
        };
        let body = line.body.get().as_bytes();
        let dialect = self.dialect;
        let none = RewriteReport::default();
        fn sent<'a>(
            dialect: Dialect,
            client: &'a [u8],
            forwarded: &'a [u8],
            report: &'a RewriteReport,
            ts: i64,
        ) -> Sent<'a> {
            Sent {
                dialect,
                client,
                forwarded,
                report,
                ts,
            }
        }
        let ts = line.ts;
        v[0].turn(self, &sent(dialect, body, body, &none, ts), None);
        // As the proxy forwards it: the proxy's own pipeline (session opened from the one
        // parse, cold-cache eviction, restore, passes, accounting) over replay's memory store.
        let rest = line
            .path
            .clone()
            .unwrap_or_else(|| default_path(dialect).to_owned());
        let plan = self.plan(v[1].name, &rest, ts);
        let run_for = RunFor::whole_turn();
        // Replay's store is in memory: nothing to load.
        let memory = Snapshot::memory_only();
        let done = pipeline::prepare(&plan, &bytes::Bytes::copy_from_slice(body))
            .ok()
            .and_then(
                |parsed| match pipeline::run(&plan, &parsed, run_for, &memory) {
                    Ok(Step::Done(done)) => Some(*done),
                    // Replay defers nothing and its store is in memory: neither happens.
                    Ok(Step::Load(_) | Step::Deferred { .. }) | Err(_) => None,
                },
            );
        match done {
            Some((outcome, (turn, _), _)) => {
                let fwd = match &outcome.body {
                    Some(b) if !self.route.dry_run => b.as_slice(),
                    _ => body,
                };
                v[1].turn(self, &sent(dialect, body, fwd, &outcome.report, ts), turn);
            }
            None => {
                // The passes cannot read it: the proxy forwards it unchanged.
                self.unparsed += 1;
                v[1].turn(self, &sent(dialect, body, body, &none, ts), None);
            }
        }
        // Every image but the newest 3 replaced: an eviction, as the accounting sees it.
        let (kept, replaced) =
            keep_newest(dialect, body, KEEP_NEWEST).map_or((None, 0), |(b, n)| (Some(b), n));
        let mut evicted = RewriteReport::default();
        evicted.images.retired = replaced;
        let kept = kept.as_deref().unwrap_or(body);
        v[2].turn(self, &sent(dialect, body, kept, &evicted, ts), None);
        self.variants = Some(v);
    }

    pub(super) fn finish(self, file: String, skipped_lines: u32) -> ReplayReport {
        let m = self.multipliers.as_ref();
        let rule = self.rule;
        let [as_sent, cachekeeper, keep] = match self.variants {
            Some(v) => *v,
            None => [
                Variant::new("as_sent", rule),
                Variant::new("cachekeeper", rule),
                Variant::new("keep_newest_3", rule),
            ],
        };
        ReplayReport {
            file,
            route: self.route.name.clone(),
            provider: self.route.provider.row.name.to_owned(),
            model: self.model,
            dialect: self.dialect.as_str(),
            turns: as_sent.report.turns,
            rule: RuleReport {
                activation: match rule.activation {
                    CacheActivation::Explicit => "explicit",
                    CacheActivation::Automatic => "automatic",
                },
                ttl_s: rule.ttl_ms.map(|t| t / 1000),
                long_ttl_s: rule.long_ttl_ms.map(|t| t / 1000),
                min_tokens: rule.min_tokens,
                lookback_blocks: (rule.activation == CacheActivation::Explicit)
                    .then_some(rule.lookback),
            },
            unparsed_turns: self.unparsed,
            skipped_lines,
            as_sent: as_sent.finish(m),
            cachekeeper: cachekeeper.finish(m),
            keep_newest_3: keep.finish(m),
            multipliers: self.multipliers,
        }
    }
}

/// The dialect of a session's bodies: the route's pinned one, else the recorded path's,
/// else the body's shape.
pub(super) fn dialect_of(route: &Route, path: Option<&str>, body: &Value) -> Dialect {
    if let Some(d) = route.dialect {
        return d;
    }
    if let Some((d, _)) = path.and_then(|p| route.classify(p)) {
        return d;
    }
    let has = |k: &str| body.get(k).is_some();
    let serves = |d: Dialect| route.provider.row.dialects.contains(&d);
    if has("contents") {
        Dialect::Gemini
    } else if serves(Dialect::Converse)
        && [
            "toolConfig",
            "inferenceConfig",
            "additionalModelRequestFields",
        ]
        .iter()
        .any(|k| has(k))
    {
        // Members only Bedrock Converse has.
        Dialect::Converse
    } else if has("input") {
        Dialect::OpenaiResponses
    } else if serves(Dialect::Anthropic)
        && (has("system") || anthropic_blocks(body) || !serves(Dialect::Openai))
    {
        Dialect::Anthropic
    } else {
        Dialect::Openai
    }
}

/// Whether a message holds a content block only the Anthropic wire has (`tool_use`,
/// `tool_result`, `thinking`, `redacted_thinking`, or an image with a `source`). The failing
/// input: an Anthropic body without `system` was replayed as OpenAI Chat.
pub(super) fn anthropic_blocks(body: &Value) -> bool {
    let anthropic_only = |b: &Value| {
        matches!(
            b.get("type").and_then(Value::as_str),
            Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking")
        ) || b.get("source").is_some()
    };
    body.get("messages")
        .and_then(Value::as_array)
        .is_some_and(|ms| {
            ms.iter().any(|m| {
                m.get("content")
                    .and_then(Value::as_array)
                    .is_some_and(|bs| bs.iter().any(anthropic_only))
            })
        })
}

/// A request path of the dialect, for a line that recorded none.
pub(super) fn default_path(dialect: Dialect) -> &'static str {
    dialect.format().example_path()
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
    fn anthropic_blocks_tell_the_wire_without_a_system_prompt() {
        let tool = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]});
        assert!(anthropic_blocks(&tool));
        let image = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "data": "x"}}]}]});
        assert!(anthropic_blocks(&image));
        let chat = serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:"}}]}, {"role": "tool", "content": "x"}]});
        assert!(!anthropic_blocks(&chat));
        assert!(!anthropic_blocks(&serde_json::json!({"messages": "x"})));
    }
}
