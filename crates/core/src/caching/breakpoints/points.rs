//! Automatic breakpoints on Bedrock Converse: `{"cachePoint": {"type": "default"}}` blocks
//! (`docs/caching.md#automatic-breakpoints`; the block:
//! <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_CachePointBlock.html>).
//!
//! The same policy as the `cache_control` markers ([`super`]), in the same slots and the same
//! order, at most [`MAX_BREAKPOINTS`] (Bedrock allows 4 checkpoints per request for Claude
//! and Nova, <https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html>). A
//! cache point is a block of its own that ends the prefix before it, so it is inserted right
//! after the block the Anthropic marker would sit on:
//!
//! 1. after the last tool of `toolConfig.tools` (not for a model whose cache takes none there:
//!    Amazon Nova);
//! 2. after the last non-empty `text` block of `system`;
//! 3. and 4. after the last block of the user message before the newest one, and of the
//!    newest user message, when that block is one a point may follow (`text` with text,
//!    `image`, `document`, `toolUse`, `toolResult`; never after `reasoningContent`).
//!
//! A request that holds any `cachePoint` block already (the client's own, or ours from an
//! earlier pass) is left as it is. A 1-hour TTL writes `"ttl": "1h"`.

use super::{CacheTtl, Placed, MAX_BREAKPOINTS};
use crate::dialect::doc::{Doc, Turn};
use crate::json::scan::{self, Object};
use crate::json::Edit;
use crate::provider::BreakpointTargets;

/// The key of a cache point block.
const CACHE_POINT: &str = "cachePoint";

/// Block keys a cache point may follow (the content blocks Bedrock's prompt-caching guide
/// shows cached: text, images, documents, tool use and results).
const MARKABLE: &[&str] = &["text", "image", "document", "toolUse", "toolResult"];

/// The cache point block for `ttl`: `{"type":"default"}` (5 minutes), or with `"ttl":"1h"`.
fn point(ttl: Option<CacheTtl>) -> &'static str {
    match ttl {
        Some(CacheTtl::OneHour) => r#"{"cachePoint":{"type":"default","ttl":"1h"}}"#,
        _ => r#"{"cachePoint":{"type":"default"}}"#,
    }
}

/// Place the cache points on `doc` (see the module doc).
pub(super) fn place(doc: &Doc<'_>, ttl: Option<CacheTtl>, targets: BreakpointTargets) -> Placed {
    let mut out = Placed::default();
    if let Some(at) = client_point(doc) {
        out.stood_down = true;
        out.reasons.push(format!(
            "cache_breakpoints: the client set its own cachePoint ({at}); none added"
        ));
        return out;
    }
    let text = doc.text;
    let block = point(ttl);
    let mut at: Vec<String> = Vec::new();
    let mut after = |end: usize, label: String, out: &mut Placed| {
        out.edits.push(Edit {
            range: end..end,
            replacement: format!(",{block}").into_bytes(),
        });
        at.push(label);
    };
    // 1. After the last tool.
    let tools = doc
        .top
        .get("toolConfig")
        .and_then(|m| scan::object_at(text, m.value.start))
        .and_then(|c| scan::array_at(text, c.get("tools")?.value.start));
    if let Some((i, last)) = tools
        .filter(|_| targets.tools)
        .and_then(|t| t.into_iter().enumerate().next_back())
    {
        after(last.end, format!("toolConfig.tools[{i}]"), &mut out);
    }
    // 2. After the last text of `system`.
    let system = doc
        .top
        .get("system")
        .and_then(|m| scan::array_at(text, m.value.start))
        .unwrap_or_default();
    let last_text =
        system.iter().enumerate().rev().find(|(_, r)| {
            scan::object_at(text, r.start).is_some_and(|o| non_empty_text(text, &o))
        });
    if let Some((i, r)) = last_text {
        after(r.end, format!("system[{i}]"), &mut out);
    }
    // 3–4. After the user message before the newest one, then the newest.
    let users: Vec<&Turn> = doc
        .turns
        .iter()
        .filter(|t| t.role.as_deref() == Some("user"))
        .collect();
    for user in users.iter().rev().take(2).rev() {
        let Some(content) = &user.content else {
            continue;
        };
        let Some((j, b)) = content.blocks.iter().enumerate().next_back() else {
            continue;
        };
        if b.obj.as_ref().is_some_and(|o| markable(text, o)) {
            let label = format!("messages[{}].content[{j}]", user.index);
            after(b.span.end, label, &mut out);
        }
    }
    out.edits.truncate(MAX_BREAKPOINTS);
    at.truncate(MAX_BREAKPOINTS);
    out.added = out.edits.len();
    if out.added > 0 {
        let ttl = ttl.unwrap_or(CacheTtl::FiveMinutes).as_str();
        out.reasons.push(format!(
            "cache_breakpoints: {} cachePoint block(s) added ({ttl}; the client set none) after {}",
            out.added,
            at.join(", ")
        ));
    }
    out
}

/// Where the request holds a `cachePoint` block already (the first found), if it does.
fn client_point(doc: &Doc<'_>) -> Option<String> {
    let text = doc.text;
    let is_point = |r: &std::ops::Range<usize>| {
        scan::object_at(text, r.start).is_some_and(|o| o.get(CACHE_POINT).is_some())
    };
    let system = doc
        .top
        .get("system")
        .and_then(|m| scan::array_at(text, m.value.start))
        .unwrap_or_default();
    if let Some(i) = system.iter().position(is_point) {
        return Some(format!("system[{i}]"));
    }
    let tools = doc
        .top
        .get("toolConfig")
        .and_then(|m| scan::object_at(text, m.value.start))
        .and_then(|c| scan::array_at(text, c.get("tools")?.value.start))
        .unwrap_or_default();
    if let Some(i) = tools.iter().position(is_point) {
        return Some(format!("toolConfig.tools[{i}]"));
    }
    doc.turns.iter().find_map(|t| {
        let j = t
            .content
            .as_ref()?
            .blocks
            .iter()
            .position(|b| is_point(&b.span))?;
        Some(format!("messages[{}].content[{j}]", t.index))
    })
}

/// A block a cache point may follow: one of [`MARKABLE`], a `text` block only with text.
fn markable(text: &str, obj: &Object) -> bool {
    obj.members.len() == 1
        && MARKABLE.contains(&obj.members[0].key.as_str())
        && (obj.get("text").is_none() || non_empty_text(text, obj))
}

/// The block is `{"text": …}` with something besides white space.
fn non_empty_text(text: &str, obj: &Object) -> bool {
    obj.get("text")
        .and_then(|m| scan::string_at(text, &m.value))
        .is_some_and(|t| !t.trim().is_empty())
}
