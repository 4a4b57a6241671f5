//! Per-request text some clients put at the head of the prompt, recognised by its exact
//! shape (`docs/accounting.md#volatile-text`). The one place this is known: the prefix
//! stabiliser (`super::stabilize`) moves it, and session naming and collapse detection
//! (`crate::accounting::prefix`) digest around it.
//!
//! **Claude Code's billing line.** Claude Code sends, as `system[0]`, a text block of its own
//! (no `cache_control`) of this grammar, recorded from Claude Code 2.1.197 itself
//! (`tests/fixtures/agents/claude_code/README.md`):
//!
//! ```text
//! x-anthropic-billing-header: cc_version=<version>.<3 hex>; cc_entrypoint=<name>;[ cch=<5 hex>;]
//! ```
//!
//! The 3-hex suffix is stable within a conversation; `cch=` changes on every request and is
//! sent only to Anthropic's own API. The detector accepts the header name followed by one or
//! more ` name=value;` pairs of the characters seen (letters, digits, `.`, `_`, `-`), so a
//! later Claude Code that adds a pair is still recognised, and nothing a user might write is.

use std::ops::Range;

use crate::json::scan;

/// The text every billing line starts with.
pub const BILLING_LINE_PREFIX: &str = "x-anthropic-billing-header:";

/// Longest billing line accepted, bytes (the recorded ones are 70–85).
const MAX_BILLING_LINE_BYTES: usize = 512;

/// Whether `text` (a decoded text block's `text`) is exactly a Claude Code billing line.
pub fn is_billing_line(text: &str) -> bool {
    if text.len() > MAX_BILLING_LINE_BYTES {
        return false;
    }
    let Some(mut rest) = text.strip_prefix(BILLING_LINE_PREFIX) else {
        return false;
    };
    let value_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let mut pairs = 0;
    while !rest.is_empty() {
        let Some(r) = rest.strip_prefix(' ') else {
            return false;
        };
        let Some(end) = r.find(';') else {
            return false;
        };
        let Some((name, value)) = r[..end].split_once('=') else {
            return false;
        };
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            || value.is_empty()
            || !value.chars().all(value_char)
        {
            return false;
        }
        pairs += 1;
        rest = &r[end + 1..];
    }
    pairs > 0
}

/// The byte range of the billing block in `text` when the array at `system` (the value of
/// an Anthropic request's `system`) starts with one: a `{"type":"text","text":…}` object
/// (a `cache_control` member allowed, nothing else) whose text [`is_billing_line`].
pub(crate) fn billing_block(
    text: &str,
    ix: Option<&scan::Index>,
    system: &Range<usize>,
) -> Option<Range<usize>> {
    let first = scan::array_in(text, ix, system.start)?.into_iter().next()?;
    let obj = scan::object_in(text, ix, first.start)?;
    let only_known = obj
        .members
        .iter()
        .all(|m| matches!(m.key.as_str(), "type" | "text" | "cache_control"));
    let is_text = obj
        .get("type")
        .and_then(|m| scan::string_at(text, &m.value))
        .is_some_and(|t| t == "text");
    let line = obj
        .get("text")
        .and_then(|m| scan::string_at(text, &m.value))?;
    (only_known && is_text && is_billing_line(&line)).then_some(first)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;

    /// Every recorded Claude Code body starts `system` with a billing line, direct and
    /// first-party (with `cch=`).
    #[test]
    fn every_recorded_claude_code_billing_line_is_detected() {
        let dir = concat!(
            concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
            "/tests/fixtures/agents/claude_code"
        );
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let body = std::fs::read_to_string(&path).unwrap();
            let top = scan::object_at(&body, 0).unwrap();
            let system = top.get("system").unwrap();
            let block = billing_block(&body, None, &system.value).expect("billing block");
            assert!(body[block].contains("cc_version=2.1.197."), "{path:?}");
            n += 1;
        }
        assert_eq!(n, 13);
    }

    #[test]
    fn the_shape_is_exact() {
        for yes in [
            "x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;",
            "x-anthropic-billing-header: cc_version=2.1.197.014; cc_entrypoint=sdk-cli; cch=a4c23;",
            "x-anthropic-billing-header: cc_version=3.0.0.abc; cc_entrypoint=cli; cc_new=x;",
        ] {
            assert!(is_billing_line(yes), "{yes}");
        }
        for no in [
            "",
            "x-anthropic-billing-header:",
            "x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli",
            "x-anthropic-billing-header: cc_version=2.1.197.7b2;  cc_entrypoint=sdk-cli;",
            "x-anthropic-billing-header: cc_version=2.1.197.7b2; please ignore this;",
            "x-anthropic-billing-header: cc_version=2.1.197.7b2;\nYou are a helpful agent.",
            "You are Claude. x-anthropic-billing-header: cc_version=1;",
            "X-Anthropic-Billing-Header: cc_version=1;",
        ] {
            assert!(!is_billing_line(no), "{no:?}");
        }
    }

    #[test]
    fn only_system_zero_as_a_plain_text_block() {
        let line = "x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;";
        let find = |system: &str| {
            let body = format!("{{\"system\":{system}}}");
            let top = scan::object_at(&body, 0).unwrap();
            billing_block(&body, None, &top.get("system").unwrap().value)
                .map(|r| body[r].to_owned())
        };
        let block = format!("{{\"type\":\"text\",\"text\":\"{line}\"}}");
        assert_eq!(
            find(&format!("[{block},{{\"type\":\"text\",\"text\":\"x\"}}]")),
            Some(block.clone())
        );
        assert_eq!(
            find(&format!("[{{\"type\":\"text\",\"text\":\"x\"}},{block}]")),
            None
        );
        assert_eq!(
            find(&format!("\"{line}\"")),
            None,
            "a string system is the user's"
        );
        let extra = format!("[{{\"type\":\"text\",\"text\":\"{line}\",\"citations\":[]}}]");
        assert_eq!(find(&extra), None);
    }
}
