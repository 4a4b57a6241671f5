//! The four usage numbers of one generation response, read from each dialect's usage object
//! (`docs/usage.md#the-four-numbers`).
//!
//! Every number is `None` when the provider did not report it — never `0` for "not
//! reported". Units: tokens, as the provider counts them.
//!
//! `uncached_input_tokens` = total prompt − cache read − cache write (saturating at 0). A
//! term the provider did not report is not subtracted (so with no write figure, uncached is
//! total − read); with no total it is `None`. Anthropic reports the uncached figure itself
//! (`input_tokens`), DeepSeek too (`prompt_cache_miss_tokens`).

use serde_json::Value;

/// Token usage of one generation, normalized across dialects (`docs/usage.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens neither read from nor written to the prompt cache.
    pub uncached_input_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    pub cache_read_tokens: Option<u64>,
    /// Prompt tokens written to the cache (all TTLs).
    pub cache_write_tokens: Option<u64>,
    /// Of `cache_write_tokens`, written with the 5-minute TTL (Anthropic only).
    pub cache_write_5m_tokens: Option<u64>,
    /// Of `cache_write_tokens`, written with the 1-hour TTL (Anthropic only).
    pub cache_write_1h_tokens: Option<u64>,
    /// Generated tokens, reasoning / thinking tokens included (as billed).
    pub output_tokens: Option<u64>,
}

impl Usage {
    /// Whether any number was reported.
    #[cfg(test)]
    pub(crate) fn is_reported(&self) -> bool {
        *self != Usage::default()
    }
}

/// A non-negative integer field of `obj` (`None` when absent, `null`, negative, fractional or
/// not a number: a wrong type is "not reported", never an error).
fn num(obj: &Value, key: &str) -> Option<u64> {
    obj.get(key).and_then(Value::as_u64)
}

/// total − read − write, saturating; unreported terms are not subtracted.
fn uncached(total: Option<u64>, read: Option<u64>, write: Option<u64>) -> Option<u64> {
    total.map(|t| {
        t.saturating_sub(read.unwrap_or(0))
            .saturating_sub(write.unwrap_or(0))
    })
}

/// Anthropic Messages usage, merged field by field: the stream's `message_start.message.usage`
/// first, then each `message_delta.usage`. The figures are cumulative, so the last reported
/// value of each field wins (never added); a field absent or `null` in a later object keeps the
/// earlier value. `input_tokens` already excludes cache reads and writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AnthropicUsage {
    input: Option<u64>,
    cache_creation: Option<u64>,
    cache_read: Option<u64>,
    ephemeral_5m: Option<u64>,
    ephemeral_1h: Option<u64>,
    output: Option<u64>,
}

impl AnthropicUsage {
    /// Merge one `usage` object (a non-object is ignored).
    pub(crate) fn merge(&mut self, usage: &Value) {
        let last = |slot: &mut Option<u64>, v: Option<u64>| {
            if v.is_some() {
                *slot = v;
            }
        };
        last(&mut self.input, num(usage, "input_tokens"));
        last(
            &mut self.cache_creation,
            num(usage, "cache_creation_input_tokens"),
        );
        last(&mut self.cache_read, num(usage, "cache_read_input_tokens"));
        if let Some(split) = usage.get("cache_creation") {
            last(
                &mut self.ephemeral_5m,
                num(split, "ephemeral_5m_input_tokens"),
            );
            last(
                &mut self.ephemeral_1h,
                num(split, "ephemeral_1h_input_tokens"),
            );
        }
        last(&mut self.output, num(usage, "output_tokens"));
    }

    /// The four numbers.
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            uncached_input_tokens: self.input,
            cache_read_tokens: self.cache_read,
            // A host that sends only the TTL split still reported the writes: their sum.
            cache_write_tokens: self.cache_creation.or(
                match (self.ephemeral_5m, self.ephemeral_1h) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
                },
            ),
            cache_write_5m_tokens: self.ephemeral_5m,
            cache_write_1h_tokens: self.ephemeral_1h,
            output_tokens: self.output,
        }
    }
}

/// OpenAI Chat Completions `usage` (also DeepSeek, OpenRouter and the other
/// OpenAI-compatible hosts). `None` when `usage` is not an object (`null` on every chunk
/// but the last of a stream with `stream_options.include_usage`).
///
/// - total = `prompt_tokens` (cache reads and writes included);
/// - read = `prompt_tokens_details.cached_tokens`; write =
///   `prompt_tokens_details.cache_write_tokens` (newer OpenAI models, OpenRouter);
/// - DeepSeek: when `prompt_cache_hit_tokens` or `prompt_cache_miss_tokens` is present, read =
///   hit, uncached = miss (else total − hit), write not reported;
/// - output = `completion_tokens` (reasoning tokens included).
pub(crate) fn openai_chat(usage: &Value) -> Option<Usage> {
    if !usage.is_object() {
        return None;
    }
    let total = num(usage, "prompt_tokens");
    let output = num(usage, "completion_tokens");
    let (hit, miss) = (
        num(usage, "prompt_cache_hit_tokens"),
        num(usage, "prompt_cache_miss_tokens"),
    );
    if hit.is_some() || miss.is_some() {
        return Some(Usage {
            uncached_input_tokens: miss.or_else(|| uncached(total, hit, None)),
            cache_read_tokens: hit,
            output_tokens: output,
            ..Usage::default()
        });
    }
    Some(openai_shape(
        total,
        usage.get("prompt_tokens_details"),
        output,
    ))
}

/// The OpenAI shape shared by Chat and Responses: a total that includes the cache, and a
/// details object with `cached_tokens` (read) and `cache_write_tokens` (write).
fn openai_shape(total: Option<u64>, details: Option<&Value>, output: Option<u64>) -> Usage {
    let read = details.and_then(|d| num(d, "cached_tokens"));
    let write = details.and_then(|d| num(d, "cache_write_tokens"));
    Usage {
        uncached_input_tokens: uncached(total, read, write),
        cache_read_tokens: read,
        cache_write_tokens: write,
        output_tokens: output,
        ..Usage::default()
    }
}

/// OpenAI Responses `usage` (a response object's, e.g. `response.completed`'s
/// `response.usage`): total = `input_tokens` (cached included), read =
/// `input_tokens_details.cached_tokens`, write = `input_tokens_details.cache_write_tokens`,
/// output = `output_tokens` (reasoning included). `None` when not an object.
pub(crate) fn responses(usage: &Value) -> Option<Usage> {
    if !usage.is_object() {
        return None;
    }
    Some(openai_shape(
        num(usage, "input_tokens"),
        usage.get("input_tokens_details"),
        num(usage, "output_tokens"),
    ))
}

/// Gemini `usageMetadata`: total = `promptTokenCount` (cached content included), read =
/// `cachedContentTokenCount`, write not reported (implicit caching reports none), output =
/// `candidatesTokenCount` + `thoughtsTokenCount` (the present ones; `None` when neither is).
/// `toolUsePromptTokenCount` (built-in tools' prompts) is not part of these numbers. Gemini
/// omits zero-valued fields (proto3 JSON), so an absent `cachedContentTokenCount` cannot be
/// told from "not reported" and stays `None`. `None` when not an object.
pub(crate) fn gemini(meta: &Value) -> Option<Usage> {
    if !meta.is_object() {
        return None;
    }
    let total = num(meta, "promptTokenCount");
    let read = num(meta, "cachedContentTokenCount");
    let output = match (
        num(meta, "candidatesTokenCount"),
        num(meta, "thoughtsTokenCount"),
    ) {
        (None, None) => None,
        (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
    };
    Some(Usage {
        uncached_input_tokens: uncached(total, read, None),
        cache_read_tokens: read,
        output_tokens: output,
        ..Usage::default()
    })
}

/// Bedrock Converse `usage` (`TokenUsage`, the JSON body's and the stream's `metadata`
/// event's): uncached = `inputTokens` (Bedrock reports the cache reads and writes apart from
/// it: total input = `inputTokens` + `cacheReadInputTokens` + `cacheWriteInputTokens`,
/// <https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html>), read =
/// `cacheReadInputTokens`, write = `cacheWriteInputTokens`, its TTL split from `cacheDetails`
/// (`[{"ttl": "5m" | "1h", "inputTokens": n}]`, the entries of one TTL summed), output =
/// `outputTokens`. `totalTokens` is not read. Source of the fields:
/// <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html>.
/// `None` when not an object.
pub(crate) fn converse(usage: &Value) -> Option<Usage> {
    if !usage.is_object() {
        return None;
    }
    let ttl = |want: &str| -> Option<u64> {
        let details = usage.get("cacheDetails")?.as_array()?;
        details
            .iter()
            .filter(|d| d.get("ttl").and_then(Value::as_str) == Some(want))
            .filter_map(|d| num(d, "inputTokens"))
            .reduce(u64::saturating_add)
    };
    Some(Usage {
        uncached_input_tokens: num(usage, "inputTokens"),
        cache_read_tokens: num(usage, "cacheReadInputTokens"),
        cache_write_tokens: num(usage, "cacheWriteInputTokens"),
        cache_write_5m_tokens: ttl("5m"),
        cache_write_1h_tokens: ttl("1h"),
        output_tokens: num(usage, "outputTokens"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converse_input_excludes_the_cache() {
        let u = converse(&json!({"inputTokens": 12, "outputTokens": 7, "totalTokens": 5387,
            "cacheReadInputTokens": 5120, "cacheWriteInputTokens": 248,
            "cacheDetails": [{"ttl": "1h", "inputTokens": 100}, {"ttl": "5m", "inputTokens": 148}]}))
        .unwrap();
        assert_eq!(
            u,
            Usage {
                uncached_input_tokens: Some(12),
                cache_read_tokens: Some(5120),
                cache_write_tokens: Some(248),
                cache_write_5m_tokens: Some(148),
                cache_write_1h_tokens: Some(100),
                output_tokens: Some(7),
            }
        );
        let plain =
            converse(&json!({"inputTokens": 3, "outputTokens": 1, "totalTokens": 4})).unwrap();
        assert_eq!(plain.cache_read_tokens, None);
        assert_eq!(plain.cache_write_5m_tokens, None);
        assert_eq!(converse(&json!(null)), None);
    }

    #[test]
    fn unreported_terms_are_not_subtracted() {
        assert_eq!(uncached(Some(100), None, None), Some(100));
        assert_eq!(uncached(Some(100), Some(30), None), Some(70));
        assert_eq!(uncached(Some(100), Some(30), Some(20)), Some(50));
        assert_eq!(uncached(Some(10), Some(30), Some(20)), Some(0));
        assert_eq!(uncached(None, Some(30), Some(20)), None);
    }

    #[test]
    fn wrong_types_are_not_reported() {
        let u = openai_chat(&json!({"prompt_tokens": "12", "completion_tokens": -1,
            "prompt_tokens_details": {"cached_tokens": 1.5}}))
        .unwrap();
        assert_eq!(u, Usage::default());
        assert!(!u.is_reported());
        assert_eq!(openai_chat(&json!(null)), None);
        assert_eq!(openai_chat(&json!([1])), None);
        assert_eq!(gemini(&json!("x")), None);
        assert_eq!(responses(&json!(3)), None);
        let mut a = AnthropicUsage::default();
        a.merge(&json!({"input_tokens": {}, "cache_creation": "x"}));
        a.merge(&json!(null));
        assert_eq!(a.usage(), Usage::default());
    }

    #[test]
    fn anthropic_split_alone_gives_the_write_total() {
        // The failing input: `cache_creation` split without `cache_creation_input_tokens`.
        let mut a = AnthropicUsage::default();
        a.merge(&json!({"input_tokens": 3, "cache_creation": {"ephemeral_5m_input_tokens": 40, "ephemeral_1h_input_tokens": 2}}));
        let u = a.usage();
        assert_eq!(u.cache_write_tokens, Some(42));
        assert_eq!(
            (u.cache_write_5m_tokens, u.cache_write_1h_tokens),
            (Some(40), Some(2))
        );
        let mut none = AnthropicUsage::default();
        none.merge(&json!({"input_tokens": 3}));
        assert_eq!(none.usage().cache_write_tokens, None);
    }

    #[test]
    fn gemini_output_sums_present_parts() {
        let u = gemini(&json!({"promptTokenCount": 10, "thoughtsTokenCount": 5})).unwrap();
        assert_eq!(u.output_tokens, Some(5));
        assert_eq!(u.uncached_input_tokens, Some(10));
        assert_eq!(u.cache_read_tokens, None);
        let u = gemini(&json!({"promptTokenCount": 10})).unwrap();
        assert_eq!(u.output_tokens, None);
    }
}
