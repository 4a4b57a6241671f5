//! Prefix stabilisers (`docs/caching.md#prefix-stabilisers`): remove text a client puts at the
//! head of the prompt that differs between requests, on routes whose provider does not handle
//! it, so the rest of the prefix can be read from the cache.
//!
//! [`Stabiliser::ClaudeCodeBillingLine`]: on an Anthropic Messages body whose `system` is an
//! array starting with Claude Code's billing block (found by
//! [`super::volatile::billing_block`], the one detector), that element is removed
//! with its comma. When it is the only element, the whole `system` member goes (a request
//! without a system prompt, rather than an empty list a strict host might refuse). Nothing else
//! in `system`, and nothing in any message, is touched; a body without the block gives no edit.

use std::ops::Range;

use super::volatile;
use super::Stabiliser;
use crate::dialect::doc::Doc;
use crate::json::edit::removal_edits;
use crate::json::scan;
use crate::json::Edit;

/// What the stabilisers did to one body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stabilised {
    /// Edits of the original bytes.
    pub edits: Vec<Edit>,
    /// Spans of the `system` blocks removed (the breakpoint pass never marks them).
    pub removed: Vec<Range<usize>>,
    /// One reason line per removal.
    pub reasons: Vec<String>,
}

/// Run `stabilisers` on `doc`; `provider` is the route's row name, for the reason line.
pub(crate) fn stabilize(stabilisers: &[Stabiliser], doc: &Doc<'_>, provider: &str) -> Stabilised {
    let mut out = Stabilised::default();
    if !doc.dialect.format().system_billing_line() {
        return out;
    }
    for s in stabilisers {
        match s {
            Stabiliser::ClaudeCodeBillingLine => billing_line(doc, provider, &mut out),
        }
    }
    out
}

/// Remove Claude Code's billing block from `system[0]`.
fn billing_line(doc: &Doc<'_>, provider: &str, out: &mut Stabilised) {
    let text = doc.text;
    let Some(idx) = doc.top.members.iter().rposition(|m| m.key == "system") else {
        return;
    };
    let system = &doc.top.members[idx];
    let Some(block) = volatile::billing_block(text, Some(&doc.index), &system.value) else {
        return;
    };
    let Some(elements) = scan::array_at(text, system.value.start) else {
        return;
    };
    // A `system` named twice: JSON's last one wins, and only it is edited.
    if doc.top.members.iter().filter(|m| m.key == "system").count() != 1 {
        return;
    }
    let edits = if elements.len() == 1 {
        doc.top
            .removal_ranges(&[idx])
            .into_iter()
            .map(|range| Edit {
                range,
                replacement: Vec::new(),
            })
            .collect()
    } else {
        removal_edits(&elements, &[0])
    };
    out.edits.extend(edits);
    out.removed.push(block);
    out.reasons.push(format!(
        "stabilize: removed Claude Code's billing line from system[0] (it differs between \
         conversations, and on every request when it carries cch=; it busts the prompt-cache \
         prefix on {provider})"
    ));
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
    use crate::dialect::Dialect;
    use crate::json::splice;
    use serde_json::Value;

    const BILLING: &[Stabiliser] = &[Stabiliser::ClaudeCodeBillingLine];

    fn run(body: &str) -> (Stabilised, Option<String>) {
        let doc = crate::dialect::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
        let s = stabilize(BILLING, &doc, "deepseek");
        let new = (!s.edits.is_empty())
            .then(|| String::from_utf8(splice(body.as_bytes(), s.edits.clone()).unwrap()).unwrap());
        (s, new)
    }

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/tests/fixtures/agents/claude_code/{name}",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../..")
        ))
        .unwrap()
    }

    fn fixtures() -> Vec<(String, String)> {
        let dir = concat!(
            concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
            "/tests/fixtures/agents/claude_code"
        );
        let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name.clone(), fixture(&name))
            })
            .collect();
        out.sort();
        out
    }

    /// On every recorded Claude Code body: exactly the billing block goes, every other byte
    /// stays (the output is the input with that element and its comma cut out), and the parsed
    /// JSON equals the input's minus `system[0]`.
    #[test]
    fn the_exact_line_is_removed_and_nothing_else() {
        let all = fixtures();
        assert_eq!(all.len(), 13);
        for (name, body) in all {
            let (s, new) = run(&body);
            let new = new.expect(&name);
            assert_eq!(s.reasons.len(), 1, "{name}");
            assert!(s.reasons[0]
                .starts_with("stabilize: removed Claude Code's billing line from system[0]"));
            assert!(s.reasons[0].ends_with("on deepseek)"));
            let block = &body[s.removed[0].clone()];
            assert!(block.starts_with("{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: "));
            assert_eq!(new, body.replacen(&format!("{block},"), "", 1), "{name}");
            let mut before: Value = serde_json::from_str(&body).unwrap();
            let after: Value = serde_json::from_str(&new).unwrap();
            before["system"].as_array_mut().unwrap().remove(0);
            assert_eq!(before, after, "{name}");
            assert!(!new.contains("x-anthropic-billing-header"), "{name}");
            // Applying it again finds nothing: idempotent.
            assert_eq!(run(&new).1, None, "{name}");
        }
    }

    #[test]
    fn without_the_block_nothing_changes() {
        for body in [
            r#"{"model":"m","messages":[]}"#,
            r#"{"model":"m","system":"x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;","messages":[]}"#,
            r#"{"model":"m","system":[{"type":"text","text":"You are helpful."},{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;"}],"messages":[]}"#,
            r#"{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli; and more"}],"messages":[]}"#,
            r#"{"model":"m","system":[],"messages":[{"role":"user","content":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;"}]}]}"#,
        ] {
            let (s, new) = run(body);
            assert_eq!(new, None, "{body}");
            assert!(s.reasons.is_empty());
        }
    }

    #[test]
    fn a_lone_billing_block_takes_the_system_member_with_it() {
        let body = r#"{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;"}],"messages":[{"role":"user","content":"hi"}]}"#;
        let (_, new) = run(body);
        assert_eq!(
            new.as_deref(),
            Some(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#)
        );
        let last = r#"{"model":"m","messages":[],"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.7b2; cc_entrypoint=sdk-cli;"}]}"#;
        assert_eq!(
            run(last).1.as_deref(),
            Some(r#"{"model":"m","messages":[]}"#)
        );
    }

    #[test]
    fn other_dialects_and_an_empty_list_do_nothing() {
        let body = fixture("direct-1-hello.json");
        let doc = crate::dialect::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
        assert_eq!(stabilize(&[], &doc, "deepseek"), Stabilised::default());
        let doc = crate::dialect::parse(body.as_bytes(), Dialect::Openai).unwrap();
        assert_eq!(stabilize(BILLING, &doc, "deepseek"), Stabilised::default());
    }
}
