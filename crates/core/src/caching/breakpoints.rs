//! Automatic cache breakpoints (`cache_breakpoints = "auto"`;
//! `docs/caching.md#automatic-breakpoints`): `cache_control` members on the Anthropic Messages
//! wire (below), `cachePoint` blocks on Bedrock Converse ([`points`], the same slots).
//!
//! When the client set no `cache_control` anywhere (top level, a tool, a `system` block, a
//! message block or a block inside a `tool_result`), at most 4 markers are added, each on one
//! block, in this order (the provider's limit is 4 per request):
//!
//! 1. the last tool of `tools`;
//! 2. the last non-empty text block of `system`; a non-empty string `system` becomes one text
//!    block holding the same string (the same bytes on every turn);
//! 3. the user message before the newest one, and 4. the newest user message: each on its last
//!    block that may carry a marker. A user message whose content is a string is never turned
//!    into blocks (it would turn back once it is no longer marked, changing more than the
//!    marker); its slot goes to the last markable block of the assistant message right before
//!    it when that one has blocks, else the slot stays empty.
//!
//! A block may carry a marker unless it is `thinking` / `redacted_thinking` (cached with their
//! turn, refused a marker), a text block whose text is empty or blank, or of a type the
//! provider's docs do not list as markable (`text`, `image`, `document`, `tool_use`,
//! `tool_result`, `search_result`).
//!
//! Deterministic and idempotent: the markers depend on the body alone; a body that already
//! has markers (ours included) is left as it is. On the next turn the two message markers
//! move forward by one user message: the new request's prefix differs from this one's only by
//! the marker that was dropped, so the provider reads everything up to this turn's newest
//! breakpoint. All markers have the route's one TTL, so a 1-hour marker never follows a
//! 5-minute one (the provider's ordering rule).

use std::ops::Range;

mod points;

use super::{marker_member, CacheTtl};
use crate::dialect::doc::{Block, Doc, Turn};
use crate::dialect::format::MarkerStyle;
use crate::json::edit::append_member;
use crate::json::scan::{self, Object};
use crate::json::Edit;
use crate::provider::BreakpointTargets;

/// Most breakpoints one request may carry (Anthropic: "A maximum of 4 blocks with
/// cache_control may be provided"; `docs/caching.md#automatic-breakpoints`).
pub(crate) const MAX_BREAKPOINTS: usize = 4;

/// Block types the provider's prompt-caching docs list as markable.
const MARKABLE: &[&str] = &[
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "search_result",
];

/// What the breakpoint pass did to one body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placed {
    /// Edits of the original bytes (insertions, and the string `system` turned into a block).
    pub edits: Vec<Edit>,
    /// Markers added (≤ [`MAX_BREAKPOINTS`]).
    pub added: usize,
    /// The client's own `cache_control` was found: nothing placed.
    pub stood_down: bool,
    /// One reason line (placement or stand-down); empty when nothing applied.
    pub reasons: Vec<String>,
}

/// Place the breakpoints on `doc` with `ttl` (`None` or 5 minutes: the default marker), in
/// the wire's marker style: `cache_control` members (Anthropic Messages) or `cachePoint`
/// blocks ([`points`], Bedrock Converse); nothing on a wire without markers. `skip`: spans of
/// `system` blocks another pass removes (never marked). `targets`: what the model's cache
/// takes (`crate::provider::ResolvedProvider::breakpoints_for`).
pub(crate) fn place(
    doc: &Doc<'_>,
    ttl: Option<CacheTtl>,
    skip: &[Range<usize>],
    targets: BreakpointTargets,
) -> Placed {
    match doc.dialect.format().cache_markers() {
        MarkerStyle::CacheControl => place_cache_control(doc, ttl, skip, targets),
        MarkerStyle::CachePoint => points::place(doc, ttl, targets),
        MarkerStyle::Unmarked => Placed::default(),
    }
}

/// [`place`] on the Anthropic wire.
fn place_cache_control(
    doc: &Doc<'_>,
    ttl: Option<CacheTtl>,
    skip: &[Range<usize>],
    targets: BreakpointTargets,
) -> Placed {
    let mut out = Placed::default();
    let text = doc.text;
    if let Some(at) = client_marker(doc) {
        out.stood_down = true;
        out.reasons.push(format!(
            "cache_breakpoints: the client set its own cache_control ({at}); none added"
        ));
        return out;
    }
    let member = marker_member(ttl);
    let mut at: Vec<String> = Vec::new();
    // 1. The last tool.
    if let Some(tools) = doc.top.get("tools").filter(|_| targets.tools) {
        let last = scan::array_at(text, tools.value.start)
            .and_then(|t| t.into_iter().enumerate().next_back());
        if let Some((i, obj)) = last.and_then(|(i, r)| Some((i, scan::object_at(text, r.start)?))) {
            out.edits.push(append_member(&obj, member));
            at.push(format!("tools[{i}]"));
        }
    }
    // 2. The end of `system`.
    if let Some(system) = doc.top.get("system") {
        let raw = scan::slice(text, &system.value);
        if raw.starts_with('"') {
            if scan::string_at(text, &system.value).is_some_and(|s| !s.trim().is_empty()) {
                out.edits.push(Edit {
                    range: system.value.clone(),
                    replacement: format!("[{{\"type\":\"text\",\"text\":{raw},{member}}}]")
                        .into_bytes(),
                });
                at.push("system (as one text block)".to_owned());
            }
        } else if let Some(blocks) = scan::array_at(text, system.value.start) {
            let last = blocks
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, r)| !skip.contains(r))
                .find_map(|(i, r)| {
                    let obj = scan::object_at(text, r.start)?;
                    let kind = crate::dialect::kind(text, &obj);
                    (kind.as_deref() == Some("text") && has_text(text, &obj)).then_some((i, obj))
                });
            if let Some((i, obj)) = last {
                out.edits.push(append_member(&obj, member));
                at.push(format!("system[{i}]"));
            }
        }
    }
    // 3–4. The user message before the newest one, then the newest.
    let users: Vec<&Turn> = doc
        .turns
        .iter()
        .filter(|t| t.role.as_deref() == Some("user"))
        .collect();
    for user in users.iter().rev().take(2).rev() {
        let target = match &user.content {
            Some(c) => last_markable(text, &c.blocks).map(|(j, o)| (user.index, j, o)),
            // String content: the assistant message right before it, when it has blocks.
            None => doc
                .turns
                .get(user.index.wrapping_sub(1))
                .filter(|t| t.role.as_deref() == Some("assistant"))
                .and_then(|t| {
                    let c = t.content.as_ref()?;
                    last_markable(text, &c.blocks).map(|(j, o)| (t.index, j, o))
                }),
        };
        if let Some((i, j, obj)) = target {
            out.edits.push(append_member(obj, member));
            at.push(format!("messages[{i}].content[{j}]"));
        }
    }
    out.edits.truncate(MAX_BREAKPOINTS);
    at.truncate(MAX_BREAKPOINTS);
    out.added = out.edits.len();
    if out.added > 0 {
        let ttl = ttl.unwrap_or(CacheTtl::FiveMinutes).as_str();
        out.reasons.push(format!(
            "cache_breakpoints: {} cache_control marker(s) added ({ttl}; the client set none) at {}",
            out.added,
            at.join(", ")
        ));
    }
    out
}

/// Where the client set a `cache_control` (the first found, for the reason line), if it did.
fn client_marker(doc: &Doc<'_>) -> Option<String> {
    let text = doc.text;
    let marked = |r: &Range<usize>| {
        scan::object_at(text, r.start).is_some_and(|o| o.get("cache_control").is_some())
    };
    if doc.top.get("cache_control").is_some() {
        return Some("top level".to_owned());
    }
    for key in ["tools", "system"] {
        let items = doc
            .top
            .get(key)
            .and_then(|m| scan::array_at(text, m.value.start))
            .unwrap_or_default();
        if let Some(i) = items.iter().position(marked) {
            return Some(format!("{key}[{i}]"));
        }
    }
    for turn in &doc.turns {
        let Some(content) = &turn.content else {
            continue;
        };
        for (j, block) in content.blocks.iter().enumerate() {
            let Some(obj) = &block.obj else {
                continue;
            };
            if obj.get("cache_control").is_some() {
                return Some(format!("messages[{}].content[{j}]", turn.index));
            }
            // Blocks inside a tool_result may carry markers too.
            let inner = obj
                .get("content")
                .and_then(|m| scan::array_at(text, m.value.start))
                .unwrap_or_default();
            if let Some(k) = inner.iter().position(marked) {
                return Some(format!(
                    "messages[{}].content[{j}].content[{k}]",
                    turn.index
                ));
            }
        }
    }
    None
}

/// The last block of `blocks` that may carry a marker, with its index.
fn last_markable<'b>(text: &str, blocks: &'b [Block]) -> Option<(usize, &'b Object)> {
    blocks.iter().enumerate().rev().find_map(|(j, b)| {
        let obj = b.obj.as_ref()?;
        let kind = b.kind.as_deref()?;
        let ok = MARKABLE.contains(&kind) && (kind != "text" || has_text(text, obj));
        ok.then_some((j, obj))
    })
}

/// The block's `text` is a string with something besides white space.
fn has_text(text: &str, obj: &Object) -> bool {
    obj.get("text")
        .and_then(|m| scan::string_at(text, &m.value))
        .is_some_and(|t| !t.trim().is_empty())
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests;
