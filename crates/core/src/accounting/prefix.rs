//! A request's positions in the provider's cache order — `tools`, then `system`, then each
//! message (`messages[N]`) — whatever the order of the body's keys, each reduced to a keyed
//! 16-byte digest, and the first position where two turns differ
//! (`docs/accounting.md#positions`).
//!
//! Per dialect: Anthropic `tools` / `system` / `messages`; OpenAI Chat `tools` / — /
//! `messages` (its system and developer messages are messages, flagged); OpenAI Responses
//! `tools` / `instructions` / `input` (a string `input` is `messages[0]`); Gemini `tools` /
//! `systemInstruction` / `contents`.
//!
//! A digest ignores every `cache_control` member at any depth (clients move their markers
//! every turn) and the JSON whitespace between tokens; everything else counts byte for byte
//! (scalars as sent, keys decoded). The system digest comes in two kinds: with and without
//! Claude Code's billing line ([`crate::caching::volatile`]), so a caller can ignore it where the
//! provider does. Digests are keyed ([`DigestKey`], derived from the credential), so a stored
//! digest says nothing about the text without the credential.

use std::ops::Range;

use xxhash_rust::xxh3::Xxh3;

use crate::caching::volatile;
use crate::dialect::Dialect;
use crate::json;
use crate::json::scan::{self, Index};

pub use crate::digest::{DigestKey, PosDigest};

/// A position in cache order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Position {
    Tools,
    System,
    /// The message (Gemini content, Responses input item) at this index.
    Message(usize),
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Tools => f.write_str("tools"),
            Position::System => f.write_str("system"),
            Position::Message(i) => write!(f, "messages[{i}]"),
        }
    }
}

/// A request's positions, digested.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Prefix {
    /// `tools` (absent when the request has none).
    pub tools: Option<PosDigest>,
    /// The system prompt as sent.
    pub system: Option<PosDigest>,
    /// The system prompt without Claude Code's billing line (= `system` when it has none;
    /// `None` when the billing line was all of it).
    pub system_stable: Option<PosDigest>,
    /// One digest per message.
    pub messages: Vec<PosDigest>,
    /// Which messages are system prompts in the list (OpenAI Chat `system` / `developer`).
    pub system_like: Vec<bool>,
    /// Index of the first user message (the first turn), if any.
    pub first_user: Option<usize>,
    /// One digest per tool definition (when `tools` is an array), so a collapse can name
    /// the first tool that changed ([`Prefix::location`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_parts: Vec<PosDigest>,
    /// One digest per system block (when the system prompt is an array).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_parts: Vec<PosDigest>,
    /// Index of Claude Code's billing line among the system blocks, if present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing_at: Option<usize>,
}

impl Prefix {
    /// The positions of `body` read as `dialect`; `None` when it is not a JSON object.
    pub(crate) fn of(dialect: Dialect, body: &[u8], key: &DigestKey) -> Option<Prefix> {
        let parsed = json::parse(body).ok()?;
        Some(Self::of_parsed(dialect, &parsed, key))
    }

    /// The positions of an already parsed body. Every scan below jumps over nested values
    /// with the parse's index, so a deeply nested body costs one pass, not one per level.
    pub(crate) fn of_parsed(
        dialect: Dialect,
        parsed: &json::Parsed<'_>,
        key: &DigestKey,
    ) -> Prefix {
        Self::of_doc_parts(dialect, parsed.text, &parsed.top, &parsed.index, key)
    }

    /// The positions of the request's one parse ([`crate::dialect::doc::Doc`]): no parse of
    /// its own.
    pub(crate) fn of_doc(doc: &crate::dialect::doc::Doc<'_>, key: &DigestKey) -> Prefix {
        Self::of_doc_parts(doc.dialect, doc.text, &doc.top, &doc.index, key)
    }

    /// The positions of `forwarded`, made from the parse `doc` (whose positions are `self`)
    /// by one splice whose `changes` are given ([`crate::json::edit::changes`]), without
    /// parsing `forwarded`: what no change touches keeps its digest; a touched tool list,
    /// system prompt or list element is digested again from `forwarded` (its range moved by
    /// the changes before it). `None` when a change could alter the structure the positions
    /// describe (one that covers or crosses a tool list, system prompt or element boundary,
    /// adds or removes an element, or writes one of those members' names at the top level);
    /// the caller then parses `forwarded` ([`Self::of`]).
    pub(crate) fn after_changes(
        &self,
        doc: &crate::dialect::doc::Doc<'_>,
        changes: &[crate::json::edit::Change],
        forwarded: &[u8],
        key: &DigestKey,
    ) -> Option<Prefix> {
        let text = std::str::from_utf8(forwarded).ok()?;
        let units = Units::of(doc);
        if units.elements.len() != self.messages.len() {
            return None;
        }
        let touched = units.touched(changes, text)?;
        let new_range = |r: &Range<usize>| {
            let start = moved(changes, r.start);
            let grown: isize = changes
                .iter()
                .filter(|c| matches!(place(&c.range, Some(r)), Some(Place::Inside)))
                .map(|c| c.new_len as isize - c.range.len() as isize)
                .sum();
            let len = r.len().checked_add_signed(grown)?;
            Some(start..start + len)
        };
        let dialect = doc.dialect;
        let mut out = self.clone();
        if touched.tools {
            let r = new_range(units.tools_at.as_ref()?)?;
            out.tools = Some(key.digest(b"tools", &[&canonical(text, None, &r)]));
            out.tool_parts = parts(text, None, &r, key);
        }
        if touched.system {
            let r = new_range(units.system_at.as_ref()?)?;
            (out.system, out.system_stable) = system_digests(dialect, text, None, &r, key);
            out.system_parts = parts(text, None, &r, key);
            out.billing_at = billing_index(dialect, text, None, &r);
        }
        let elements = units.elements.iter().enumerate();
        for (i, el) in elements.filter(|(i, _)| touched.elements[*i]) {
            let r = new_range(el)?;
            out.messages[i] = key.digest(b"message", &[&canonical(text, None, &r)]);
            let role = role_of(dialect, text, None, &r);
            let was_user = out.first_user == Some(i);
            let is_user = role.as_deref() == Some("user");
            if was_user != is_user && out.first_user.is_none_or(|f| i <= f) {
                // The first user message moved: rare enough to read the whole body again.
                return None;
            }
            out.system_like[i] = matches!(role.as_deref(), Some("system" | "developer"));
        }
        Some(out)
    }

    /// [`Self::of_parsed`] over the parts of a parse: its text, top-level object and index.
    fn of_doc_parts(
        dialect: Dialect,
        text: &str,
        top: &scan::Object,
        index: &scan::Index,
        key: &DigestKey,
    ) -> Prefix {
        let ix = Some(index);
        let member = |names: &[&str]| top.get_any(names).map(|m| m.value.clone());
        let (system_key, list_key) = member_names(dialect);
        let tools_at = member(&[dialect.format().prompt_layout().tools]);
        let tools = tools_at
            .as_ref()
            .map(|r| key.digest(b"tools", &[&canonical(text, ix, r)]));
        let tool_parts = tools_at
            .as_ref()
            .map(|r| parts(text, ix, r, key))
            .unwrap_or_default();
        let system_at = member(system_key);
        let (system, system_stable) = match &system_at {
            None => (None, None),
            Some(r) => system_digests(dialect, text, ix, r, key),
        };
        let system_parts = system_at
            .as_ref()
            .map(|r| parts(text, ix, r, key))
            .unwrap_or_default();
        let billing_at = system_at
            .as_ref()
            .and_then(|r| billing_index(dialect, text, ix, r));
        let mut messages = Vec::new();
        let mut system_like = Vec::new();
        let mut first_user = None;
        if let Some(list) = member(&list_key) {
            let elements = if scan::slice(text, &list).starts_with('[') {
                scan::array_in(text, ix, list.start).unwrap_or_default()
            } else {
                // A string `input` (Responses) is one user message.
                vec![list]
            };
            for (i, el) in elements.iter().enumerate() {
                let role = role_of(dialect, text, ix, el);
                if first_user.is_none() && role.as_deref() == Some("user") {
                    first_user = Some(i);
                }
                system_like.push(matches!(role.as_deref(), Some("system" | "developer")));
                messages.push(key.digest(b"message", &[&canonical(text, ix, el)]));
            }
        }
        Prefix {
            tools,
            system,
            system_stable,
            messages,
            system_like,
            first_user,
            tool_parts,
            system_parts,
            billing_at,
        }
    }

    /// Where, within `at` (a position where `self` and `prev` differ), the first differing
    /// element is: `tools[2]` (the first changed tool), `system[0]` (the first changed system
    /// block; Claude Code's billing line skipped when `ignore_billing_line`), else `at` itself
    /// (`tools` / `system` when either side is not an array, `messages[3]`). What `report`
    /// and the log's `collapse_at` show.
    pub(crate) fn location(
        &self,
        prev: &Prefix,
        at: Position,
        ignore_billing_line: bool,
    ) -> String {
        let (mine, theirs, name) = match at {
            Position::Tools => (
                indexed(&self.tool_parts, None),
                indexed(&prev.tool_parts, None),
                "tools",
            ),
            Position::System => {
                let skip = |p: &Prefix| p.billing_at.filter(|_| ignore_billing_line);
                (
                    indexed(&self.system_parts, skip(self)),
                    indexed(&prev.system_parts, skip(prev)),
                    "system",
                )
            }
            Position::Message(_) => return at.to_string(),
        };
        if mine.is_empty() || theirs.is_empty() {
            return name.to_owned();
        }
        let first = mine
            .iter()
            .zip(&theirs)
            .position(|(a, b)| a.1 != b.1)
            .or_else(|| (mine.len() != theirs.len()).then(|| mine.len().min(theirs.len())));
        match first {
            // The original index of the element in this request (past its end: one was
            // removed at the end).
            Some(i) => format!("{name}[{}]", mine.get(i).map_or(mine.len(), |e| e.0)),
            None => name.to_owned(),
        }
    }

    /// The first position both turns have whose digests differ, in cache order (`tools` and
    /// `system` count as present in both when either has them); `None` when `self` keeps all
    /// of `prev` that it has — an appended turn, the same request again, or a shorter one.
    /// `ignore_billing_line`: compare the system prompts without Claude Code's billing line.
    pub(crate) fn first_difference(
        &self,
        prev: &Prefix,
        ignore_billing_line: bool,
    ) -> Option<Position> {
        if self.tools != prev.tools {
            return Some(Position::Tools);
        }
        let system = |p: &Prefix| {
            if ignore_billing_line {
                p.system_stable
            } else {
                p.system
            }
        };
        if system(self) != system(prev) {
            return Some(Position::System);
        }
        self.messages
            .iter()
            .zip(&prev.messages)
            .position(|(a, b)| a != b)
            .map(Position::Message)
    }

    /// Whether the message at `index` is a system prompt in the list.
    pub(crate) fn is_system_like(&self, index: usize) -> bool {
        self.system_like.get(index).copied().unwrap_or(false)
    }

    /// The digest that names this request's session: tools, system prompt (without the
    /// billing line) and the messages up to and including the first user message, with the
    /// route and model (`None`: no message at all).
    pub(crate) fn session_anchor(
        &self,
        key: &DigestKey,
        route: &str,
        model: &str,
    ) -> Option<PosDigest> {
        let last = self
            .first_user
            .unwrap_or(self.messages.len().checked_sub(1)?);
        let mut parts: Vec<&[u8]> = vec![route.as_bytes(), model.as_bytes()];
        let none: &[u8] = b"";
        parts.push(self.tools.as_ref().map_or(none, |d| d.as_slice()));
        parts.push(self.system_stable.as_ref().map_or(none, |d| d.as_slice()));
        for m in self.messages.iter().take(last + 1) {
            parts.push(m.as_slice());
        }
        Some(key.digest(b"session", &parts))
    }
}

/// The members that hold the system prompt and the message list on `dialect`
/// ([`crate::dialect::format::WireFormat::prompt_layout`]).
fn member_names(dialect: Dialect) -> (&'static [&'static str], [&'static str; 1]) {
    let layout = dialect.format().prompt_layout();
    (layout.system, [layout.turns])
}

/// The index of Claude Code's billing block among the system blocks at `r` (Anthropic only).
fn billing_index(
    dialect: Dialect,
    text: &str,
    ix: Option<&Index>,
    r: &Range<usize>,
) -> Option<usize> {
    if !dialect.format().system_billing_line() {
        return None;
    }
    let billing = volatile::billing_block(text, ix, r)?;
    scan::array_in(text, ix, r.start)?
        .iter()
        .position(|el| *el == billing)
}

/// The units of a parsed body whose digests [`Prefix::after_changes`] keeps or recomputes:
/// the tool list, the system prompt, the message list and its elements (value spans in the
/// parse's text).
struct Units {
    tools_at: Option<Range<usize>>,
    system_at: Option<Range<usize>>,
    list_at: Option<Range<usize>>,
    elements: Vec<Range<usize>>,
    /// The member names of the system prompt and the message list in this dialect.
    names: (&'static [&'static str], [&'static str; 1]),
}

/// Which units some changes touch ([`Units::touched`]).
struct Touched {
    tools: bool,
    system: bool,
    /// One per element of the message list.
    elements: Vec<bool>,
}

impl Units {
    fn of(doc: &crate::dialect::doc::Doc<'_>) -> Units {
        let (old, ix) = (doc.text, Some(&doc.index));
        let names = member_names(doc.dialect);
        let member = |names: &[&str]| doc.top.get_any(names).map(|m| m.value.clone());
        let list_at = member(&names.1);
        let elements = match &list_at {
            Some(list) if scan::slice(old, list).starts_with('[') => {
                scan::array_in(old, ix, list.start).unwrap_or_default()
            }
            Some(list) => vec![list.clone()],
            None => Vec::new(),
        };
        Units {
            tools_at: member(&[doc.dialect.format().prompt_layout().tools]),
            system_at: member(names.0),
            list_at,
            elements,
            names,
        }
    }

    /// Where each of `changes` lies: inside one unit (to recompute), or at the top level
    /// outside all of them (`text` is the forwarded body). `None` when one could alter the
    /// structure: it crosses a unit's edge, lies between two elements, or writes a unit's
    /// member name at the top level.
    fn touched(&self, changes: &[crate::json::edit::Change], text: &str) -> Option<Touched> {
        let mut out = Touched {
            tools: false,
            system: false,
            elements: vec![false; self.elements.len()],
        };
        for (n, c) in changes.iter().enumerate() {
            if let Place::Inside = place(&c.range, self.tools_at.as_ref())? {
                out.tools = true;
                continue;
            }
            if let Place::Inside = place(&c.range, self.system_at.as_ref())? {
                out.system = true;
                continue;
            }
            // The list: a change inside it must be inside one element.
            let in_list = matches!(place(&c.range, self.list_at.as_ref())?, Place::Inside);
            let at = self.elements.partition_point(|el| el.end <= c.range.start);
            match self.elements.get(at).map(|el| place(&c.range, Some(el))) {
                Some(Some(Place::Inside)) => {
                    out.elements[at] = true;
                    continue;
                }
                Some(None) => return None,
                _ => {}
            }
            if in_list {
                // Between elements: one may have been added or removed.
                return None;
            }
            // At the top level, outside every unit: a parameter. It must not name one.
            // Where its bytes start: moved by the changes before it (an insertion at the same
            // byte sorted before it is written first).
            let from = moved(&changes[..n], c.range.start);
            let written = text.get(from..from + c.new_len)?;
            let (system_key, list_key) = self.names;
            let tools = ["tools", "toolConfig"];
            let names = system_key.iter().chain(&list_key).chain(&tools);
            for name in names {
                if written.contains(&format!("\"{name}\"")) {
                    return None;
                }
            }
        }
        Some(out)
    }
}

/// Where a change lies against a unit's range ([`Prefix::after_changes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Within the unit's bytes (an insertion at either edge is outside it).
    Inside,
    /// Apart from it, or no unit.
    Outside,
}

/// Where the change `c` lies against `unit`; `None` when it covers or crosses an edge.
fn place(c: &Range<usize>, unit: Option<&Range<usize>>) -> Option<Place> {
    let Some(u) = unit else {
        return Some(Place::Outside);
    };
    if c.is_empty() {
        // An insertion: inside only strictly between the unit's first and last byte.
        return Some(if c.start > u.start && c.start < u.end {
            Place::Inside
        } else {
            Place::Outside
        });
    }
    if c.end <= u.start || c.start >= u.end {
        Some(Place::Outside)
    } else if c.start >= u.start && c.end <= u.end {
        Some(Place::Inside)
    } else {
        None
    }
}

/// Where byte `p` of the original is in the spliced output: `p` moved by every change that
/// ends at or before it (an insertion at `p` included: it is written before that byte).
fn moved(changes: &[crate::json::edit::Change], p: usize) -> usize {
    let mut at = p as isize;
    for c in changes.iter().take_while(|c| c.range.start <= p) {
        if c.range.end <= p {
            at += c.new_len as isize - c.range.len() as isize;
        }
    }
    at.max(0) as usize
}

/// One keyed digest per element of the array at `r` (empty when it is not an array).
fn parts(text: &str, ix: Option<&Index>, r: &Range<usize>, key: &DigestKey) -> Vec<PosDigest> {
    if !scan::slice(text, r).starts_with('[') {
        return Vec::new();
    }
    scan::array_in(text, ix, r.start)
        .unwrap_or_default()
        .iter()
        .map(|el| key.digest(b"part", &[&canonical(text, ix, el)]))
        .collect()
}

/// `parts` with their indexes, without the one at `skip`.
fn indexed(parts: &[PosDigest], skip: Option<usize>) -> Vec<(usize, PosDigest)> {
    parts
        .iter()
        .copied()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .collect()
}

/// The system digests (as sent, without the billing line).
fn system_digests(
    dialect: Dialect,
    text: &str,
    ix: Option<&Index>,
    r: &Range<usize>,
    key: &DigestKey,
) -> (Option<PosDigest>, Option<PosDigest>) {
    let full = canonical(text, ix, r);
    let billing = (dialect.format().system_billing_line())
        .then(|| volatile::billing_block(text, ix, r))
        .flatten();
    let Some(billing) = billing else {
        let d = key.digest(b"system", &[&full]);
        return (Some(d), Some(d));
    };
    // The same array without its first element.
    let rest: Vec<Range<usize>> = scan::array_in(text, ix, r.start)
        .unwrap_or_default()
        .into_iter()
        .filter(|el| *el != billing)
        .collect();
    let stable = if rest.is_empty() {
        None
    } else {
        let mut h = Xxh3::new();
        h.update(b"[");
        for (i, el) in rest.iter().enumerate() {
            if i > 0 {
                h.update(b",");
            }
            feed(text, ix, el, &mut h);
        }
        h.update(b"]");
        Some(h.digest128().to_le_bytes())
    };
    // `stable` is digested from the same canonical form the full array would have had
    // without its first element, so a client that drops the line keeps its digest.
    (
        Some(key.digest(b"system", &[&full])),
        stable.map(|s| key.digest(b"system", &[&s])),
    )
}

/// The role of a list element (`role`; Gemini's absent role is the user's; a Responses item
/// of another type has none).
fn role_of(dialect: Dialect, text: &str, ix: Option<&Index>, el: &Range<usize>) -> Option<String> {
    let layout = dialect.format().prompt_layout();
    if layout.string_turns && scan::slice(text, el).starts_with('"') {
        return Some("user".to_owned());
    }
    let obj = scan::object_in(text, ix, el.start)?;
    obj.get("role")
        .and_then(|m| scan::string_at(text, &m.value))
        .or_else(|| layout.default_role.map(str::to_owned))
}

/// The xxh3-128 of the value at `r` in canonical form, as 16 bytes.
fn canonical(text: &str, ix: Option<&Index>, r: &Range<usize>) -> [u8; 16] {
    let mut h = Xxh3::new();
    feed(text, ix, r, &mut h);
    h.digest128().to_le_bytes()
}

/// Feed the value at `r` to `h` in canonical form: objects and arrays by their structure
/// (keys decoded, no whitespace, `cache_control` members and Converse's `{"cachePoint": …}`
/// blocks left out: both are markers clients move from turn to turn), scalars as sent.
fn feed(text: &str, ix: Option<&Index>, r: &Range<usize>, h: &mut Xxh3) {
    feed_at(text, ix, r, h, 0);
}

/// The element at `r` is a cache point block, `{"cachePoint": …}` and nothing else.
fn is_cache_point(text: &str, ix: Option<&Index>, r: &Range<usize>) -> bool {
    text.as_bytes().get(r.start) == Some(&b'{')
        && scan::object_in(text, ix, r.start)
            .is_some_and(|o| o.members.len() == 1 && o.members[0].key == "cachePoint")
}

/// Deepest nesting [`feed`] canonicalises, levels; deeper values are hashed as sent (serde_json's
/// own recursion limit is 128; the failing input: 100,000 nested arrays overflowed the stack).
const MAX_FEED_DEPTH: usize = 128;

fn feed_at(text: &str, ix: Option<&Index>, r: &Range<usize>, h: &mut Xxh3, depth: usize) {
    let raw = scan::slice(text, r);
    if depth >= MAX_FEED_DEPTH {
        h.update(raw.as_bytes());
        return;
    }
    match raw.as_bytes().first() {
        Some(b'{') => match scan::object_in(text, ix, r.start) {
            Some(obj) => {
                h.update(b"{");
                let mut first = true;
                for m in obj.members.iter().filter(|m| m.key != "cache_control") {
                    if !first {
                        h.update(b",");
                    }
                    first = false;
                    // Length-prefixed key, then the value.
                    h.update(&(m.key.len() as u64).to_le_bytes());
                    h.update(m.key.as_bytes());
                    h.update(b":");
                    feed_at(text, ix, &m.value, h, depth + 1);
                }
                h.update(b"}");
            }
            None => h.update(raw.as_bytes()),
        },
        Some(b'[') => match scan::array_in(text, ix, r.start) {
            Some(elements) => {
                h.update(b"[");
                let kept = elements.iter().filter(|el| !is_cache_point(text, ix, el));
                for (i, el) in kept.enumerate() {
                    if i > 0 {
                        h.update(b",");
                    }
                    feed_at(text, ix, el, h, depth + 1);
                }
                h.update(b"]");
            }
            None => h.update(raw.as_bytes()),
        },
        _ => h.update(raw.as_bytes()),
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
    use crate::state::seal::SealKey;

    fn key() -> DigestKey {
        DigestKey::for_credential(None)
    }

    fn of(dialect: Dialect, body: &str) -> Prefix {
        Prefix::of(dialect, body.as_bytes(), &key()).unwrap()
    }

    const BILLING: &str = r#"{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.014; cc_entrypoint=sdk-cli; cch=a4c23;"}"#;

    #[test]
    fn markers_whitespace_and_key_order_do_not_count() {
        let a = of(
            Dialect::Anthropic,
            r#"{"model":"m","system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"t"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#,
        );
        let b = of(
            Dialect::Anthropic,
            r#"{ "messages": [ {"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role":"assistant","content":"ok"} ], "tools": [{"name": "t", "cache_control": {"type": "ephemeral"}}], "system": [{"type": "text", "text": "S"}], "model": "m" }"#,
        );
        assert_eq!(b.first_difference(&a, false), None);
        assert_eq!(a.messages[0], b.messages[0]);
        assert_eq!(a.tools, b.tools);
        assert_eq!(a.first_user, Some(0));
    }

    /// Converse: `cachePoint` blocks are markers too (a client moves them every turn), and the
    /// tool definitions are `toolConfig`, first in cache order.
    #[test]
    fn converse_cache_points_do_not_count_and_tools_are_tool_config() {
        let a = of(
            Dialect::Converse,
            r#"{"system":[{"text":"S"},{"cachePoint":{"type":"default"}}],"toolConfig":{"tools":[{"toolSpec":{"name":"t"}},{"cachePoint":{"type":"default"}}]},"messages":[{"role":"user","content":[{"text":"hi"},{"cachePoint":{"type":"default","ttl":"1h"}}]}]}"#,
        );
        let b = of(
            Dialect::Converse,
            r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"t"}}]},"system":[{"text":"S"}]}"#,
        );
        assert_eq!(b.first_difference(&a, false), None);
        assert!(a.tools.is_some());
        let c = of(
            Dialect::Converse,
            r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"u"}}]},"system":[{"text":"S"}]}"#,
        );
        assert_eq!(c.first_difference(&b, false), Some(Position::Tools));
    }

    #[test]
    fn the_first_changed_position_in_cache_order() {
        let base = r#"{"system":"S","tools":[{"name":"t"}],"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}"#;
        let p = of(Dialect::Anthropic, base);
        let edit3 = base.replace("\"d\"", "\"D\"");
        assert_eq!(
            of(Dialect::Anthropic, &edit3).first_difference(&p, false),
            Some(Position::Message(3))
        );
        // Tools come first in cache order even when the body lists them after messages.
        let both = edit3.replace("\"t\"", "\"t2\"");
        assert_eq!(
            of(Dialect::Anthropic, &both).first_difference(&p, false),
            Some(Position::Tools)
        );
        let sys = base.replace("\"S\"", "\"S2\"");
        assert_eq!(
            of(Dialect::Anthropic, &sys).first_difference(&p, false),
            Some(Position::System)
        );
        // A scalar's bytes count as sent: an escape is a change.
        let esc = base.replace("\"c\"", "\"\\u0063\"");
        assert_eq!(
            of(Dialect::Anthropic, &esc).first_difference(&p, false),
            Some(Position::Message(2))
        );
        // Appending or truncating is no difference.
        let longer = base.replace("\"d\"}]", "\"d\"},{\"role\":\"user\",\"content\":\"e\"}]");
        assert_eq!(
            of(Dialect::Anthropic, &longer).first_difference(&p, false),
            None
        );
        assert_eq!(
            p.first_difference(&of(Dialect::Anthropic, &longer), false),
            None
        );
        assert_eq!(format!("{}", Position::Message(12)), "messages[12]");
    }

    #[test]
    fn the_billing_line_is_ignored_only_when_asked() {
        let body = |cch: &str| {
            format!(
                r#"{{"system":[{},{{"type":"text","text":"You are Claude Code."}}],"messages":[{{"role":"user","content":"hi"}}]}}"#,
                BILLING.replace("a4c23", cch)
            )
        };
        let a = of(Dialect::Anthropic, &body("a4c23"));
        let b = of(Dialect::Anthropic, &body("6b943"));
        assert_eq!(b.first_difference(&a, false), Some(Position::System));
        assert_eq!(b.first_difference(&a, true), None);
        // Without the line at all: the same stable digest.
        let none = of(
            Dialect::Anthropic,
            r#"{"system":[{"type":"text","text":"You are Claude Code."}],"messages":[{"role":"user","content":"hi"}]}"#,
        );
        assert_eq!(none.system_stable, a.system_stable);
        assert_eq!(
            a.session_anchor(&key(), "r", "m"),
            b.session_anchor(&key(), "r", "m")
        );
        // On the OpenAI wire the same text is the user's system message, never skipped.
        let chat = |cch: &str| {
            format!(
                r#"{{"messages":[{{"role":"system","content":"{}"}},{{"role":"user","content":"hi"}}]}}"#,
                "x-anthropic-billing-header: cc_version=1.a; cch=X;".replace('X', cch)
            )
        };
        let c1 = of(Dialect::Openai, &chat("11111"));
        let c2 = of(Dialect::Openai, &chat("22222"));
        assert_eq!(c2.first_difference(&c1, true), Some(Position::Message(0)));
        assert!(c1.is_system_like(0));
        assert_eq!(c1.first_user, Some(1));
    }

    #[test]
    fn every_dialect_has_its_positions() {
        let r = of(
            Dialect::OpenaiResponses,
            r#"{"instructions":"I","tools":[],"input":[{"type":"message","role":"user","content":"a"},{"type":"function_call","call_id":"c"}]}"#,
        );
        assert!(r.system.is_some() && r.tools.is_some());
        assert_eq!((r.messages.len(), r.first_user), (2, Some(0)));
        let s = of(Dialect::OpenaiResponses, r#"{"input":"just text"}"#);
        assert_eq!((s.messages.len(), s.first_user), (1, Some(0)));
        let g = of(
            Dialect::Gemini,
            r#"{"systemInstruction":{"parts":[{"text":"S"}]},"contents":[{"parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]}]}"#,
        );
        assert!(g.system.is_some());
        assert_eq!((g.messages.len(), g.first_user), (2, Some(0)));
        assert!(Prefix::of(Dialect::Gemini, b"[1]", &key()).is_none());
    }

    #[test]
    fn digests_are_keyed_by_credential() {
        let body = br#"{"messages":[{"role":"user","content":"a"}]}"#;
        let k1 = DigestKey::for_credential(Some(&SealKey::from_bytes([1; 32])));
        let k2 = DigestKey::for_credential(Some(&SealKey::from_bytes([2; 32])));
        let a = Prefix::of(Dialect::Openai, body, &k1).unwrap();
        let b = Prefix::of(Dialect::Openai, body, &k2).unwrap();
        assert_ne!(a.messages[0], b.messages[0]);
        assert_ne!(
            a.session_anchor(&k1, "r", "m"),
            b.session_anchor(&k2, "r", "m")
        );
        assert_ne!(
            a.session_anchor(&k1, "r", "m"),
            a.session_anchor(&k1, "r", "m2")
        );
    }

    #[test]
    fn a_collapse_names_the_first_changed_tool_or_system_block() {
        let k = key();
        let of = |b: &str| Prefix::of(Dialect::Anthropic, b.as_bytes(), &k).unwrap();
        let billing = |cch: &str| {
            format!(
                r#"{{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.014; cc_entrypoint=sdk-cli; cch={cch};"}}"#
            )
        };
        let body = |tools: &str, system: &str| {
            format!(
                r#"{{"model":"m","tools":[{tools}],"system":[{system}],"messages":[{{"role":"user","content":"hi"}}]}}"#
            )
        };
        let a = of(&body(
            r#"{"name":"a"},{"name":"b"}"#,
            r#"{"type":"text","text":"S"}"#,
        ));
        let b = of(&body(
            r#"{"name":"a"},{"name":"B"}"#,
            r#"{"type":"text","text":"S"}"#,
        ));
        assert_eq!(b.location(&a, Position::Tools, false), "tools[1]");
        let c = of(&body(
            r#"{"name":"a"},{"name":"b"},{"name":"c"}"#,
            r#"{"type":"text","text":"S"}"#,
        ));
        assert_eq!(
            c.location(&a, Position::Tools, false),
            "tools[2]",
            "one appended"
        );
        // The billing line is system[0]; ignoring it, the block after it is named.
        let sys = |cch: &str, text: &str| {
            format!(r#"{},{{"type":"text","text":"{text}"}}"#, billing(cch))
        };
        let d = of(&body(r#"{"name":"a"}"#, &sys("aaaaa", "S")));
        let e = of(&body(r#"{"name":"a"}"#, &sys("bbbbb", "S2")));
        assert_eq!(e.location(&d, Position::System, false), "system[0]");
        assert_eq!(e.location(&d, Position::System, true), "system[1]");
        assert_eq!(e.location(&d, Position::Message(0), false), "messages[0]");
        // A string system prompt has no blocks to name.
        let f = of(r#"{"model":"m","system":"S","messages":[]}"#);
        let g = of(r#"{"model":"m","system":"T","messages":[]}"#);
        assert_eq!(g.location(&f, Position::System, false), "system");
    }

    #[test]
    fn deep_nesting_is_digested_without_recursing_past_the_limit() {
        // The failing input (tests/e2e/test_adversarial_inputs.py deep_nesting): 100,000 nested
        // arrays as `messages` overflowed the stack of the thread that opens the session.
        let body = format!(
            r#"{{"model":"m","messages":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let p = Prefix::of(Dialect::Anthropic, body.as_bytes(), &key()).unwrap();
        assert_eq!(p.messages.len(), 1);
    }

    #[test]
    fn the_index_changes_no_digest() {
        // The parse's index only lets the scans jump over nested values: every digest is the
        // one a scan without it computes.
        let body = r#"{"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1; cch=00000;"},{"type":"text","text":"s"}],"tools":[{"name":"t","input_schema":{"type":"object","properties":{"a":{"type":"array","items":[[[1,{"b":"\u0063"}]]]}}}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[[[[{"k":[1,2,{"x":"y"}]}]]]]}]}"#;
        let parsed = crate::json::parse(body.as_bytes()).unwrap();
        let (text, ix) = (parsed.text, Some(&parsed.index));
        for m in &parsed.top.members {
            assert_eq!(
                canonical(text, ix, &m.value),
                canonical(text, None, &m.value),
                "{}",
                m.key
            );
            assert_eq!(
                parts(text, ix, &m.value, &key()),
                parts(text, None, &m.value, &key())
            );
            assert_eq!(
                system_digests(Dialect::Anthropic, text, ix, &m.value, &key()),
                system_digests(Dialect::Anthropic, text, None, &m.value, &key())
            );
        }
        assert!(
            system_digests(
                Dialect::Anthropic,
                text,
                ix,
                &parsed.top.members[0].value,
                &key()
            )
            .0 != system_digests(
                Dialect::Anthropic,
                text,
                ix,
                &parsed.top.members[0].value,
                &key()
            )
            .1
        );
    }

    /// [`Prefix::after_changes`] declines (the caller parses) where a change may alter the
    /// structure the positions describe, and agrees with a parse where it derives.
    #[test]
    fn positions_after_changes_decline_structural_changes() {
        use crate::json::edit::{changes, splice_all, Edit};
        let body = r#"{"model":"m","system":"s","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#;
        let doc = crate::dialect::parse(body.as_bytes(), Dialect::Anthropic).unwrap();
        let client = Prefix::of_doc(&doc, &key());
        let at = |needle: &str| body.find(needle).unwrap();
        let run = |edits: Vec<Edit>| {
            let out = splice_all(body.as_bytes(), &[&edits]).unwrap();
            let ch = changes(body.as_bytes(), &[&edits]);
            (
                client.after_changes(&doc, &ch, &out, &key()),
                Prefix::of(Dialect::Anthropic, &out, &key()),
            )
        };
        let edit = |start: usize, end: usize, with: &str| Edit {
            range: start..end,
            replacement: with.as_bytes().to_vec(),
        };
        // Inside one message: derived, as a parse gives it.
        let a = at("\"a\"");
        let (got, want) = run(vec![edit(a, a + 3, "\"changed\"")]);
        assert_eq!(got, want);
        assert_ne!(got.unwrap().messages[0], client.messages[0]);
        // A top-level parameter before everything: derived, nothing moved but the ranges.
        let (got, want) = run(vec![edit(1, 1, r#""stream":true,"#)]);
        assert_eq!(got, want);
        // A new message between the two: declined.
        let between = at(r#"},{"role":"assistant""#) + 1;
        assert_eq!(
            run(vec![edit(
                between,
                between,
                r#",{"role":"user","content":"x"}"#
            )])
            .0,
            None
        );
        // A change across a message's edge: declined.
        assert_eq!(run(vec![edit(between - 2, between + 2, "\"}, {")]).0, None);
        // A top-level member the positions read, added: declined.
        assert_eq!(run(vec![edit(1, 1, r#""tools":[],"#)]).0, None);
        // The system prompt replaced whole (its value): derived.
        let s = at("\"s\"");
        let (got, want) = run(vec![edit(s, s + 3, r#"[{"type":"text","text":"t"}]"#)]);
        assert_eq!(got, want);
    }
}
