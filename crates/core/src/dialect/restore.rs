//! The vocabulary the per-wire restore edit builders speak (`restore` submodules of each wire:
//! [`super::anthropic::restore`], [`super::openai::restore`], [`super::gemini::restore`],
//! [`super::responses::restore`]): a request's turn list, one turn's edits and what they
//! restored, and the JSON writing helpers they share. The generic restore pass
//! (`crate::reasoning::restore`, `docs/reasoning.md#carrier-restore`) asks each wire through
//! [`super::format::WireFormat::restore_turn`].

use std::ops::Range;

use crate::json::scan::{self, Object};
use crate::json::Edit;
// The captured and echoed turns the builders compare.
pub(crate) use super::fingerprint::EchoedTurn;
pub use super::turn::CapturedTurn;

/// One kind of restored carrier (a counter of `reasoning::restore::RestoreCounts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Chat `reasoning_content`.
    ReasoningContent,
    /// Chat `reasoning`.
    Reasoning,
    /// Chat `reasoning_details` (the whole array).
    ReasoningDetails,
    /// A Gemini thought signature (native or in `extra_content`).
    ThoughtSignature,
    /// An Anthropic `thinking` block.
    Thinking,
    /// An Anthropic `redacted_thinking` block.
    RedactedThinking,
    /// A Responses `reasoning` input item.
    ReasoningItem,
    /// The placeholder signature on a function call whose own is unknown.
    PlaceholderSignature,
}

impl Kind {
    /// The name in reasons.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::ReasoningContent => "reasoning_content",
            Kind::Reasoning => "reasoning",
            Kind::ReasoningDetails => "reasoning_details",
            Kind::ThoughtSignature => "thought signature",
            Kind::Thinking => "thinking block",
            Kind::RedactedThinking => "redacted_thinking block",
            Kind::ReasoningItem => "reasoning item",
            Kind::PlaceholderSignature => "placeholder thought signature",
        }
    }
}

/// The edits of one turn and what they restored.
#[derive(Debug, Default)]
pub struct TurnEdit {
    /// Edits of the body as given.
    pub edits: Vec<Edit>,
    /// What they restored, with counts, in first-seen order.
    pub kinds: Vec<(Kind, usize)>,
    /// Responses: the turn's items were put back in the response's output order.
    pub reordered: bool,
}

impl TurnEdit {
    /// Add `edits`, counting one `kind` when there was any.
    pub(crate) fn push(&mut self, kind: Kind, edits: impl IntoIterator<Item = Edit>) {
        let before = self.edits.len();
        self.edits.extend(edits);
        if self.edits.len() > before {
            self.note(kind);
        }
    }

    /// Count one `kind`.
    pub(crate) fn note(&mut self, kind: Kind) {
        match self.kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.kinds.push((kind, 1)),
        }
    }
}

/// One request's turn list: the body text and the byte ranges of its entries.
pub struct List<'t> {
    /// The body text.
    pub text: &'t str,
    /// The byte ranges of the list's entries.
    pub entries: Vec<Range<usize>>,
}

impl List<'_> {
    /// Entry `i` as an object, if it is one.
    pub(crate) fn object(&self, i: usize) -> Option<Object> {
        scan::object_at(self.text, self.entries.get(i)?.start)
    }
}

// ---- JSON writing helpers -----------------------------------------------------------------

/// A JSON string literal of `s` (serde_json's escaping; non-ASCII and U+2028 written as is).
pub(crate) fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// Insert `members` (`(key, value JSON)`) at the end of `obj`, as one edit.
pub(crate) fn append_members(obj: &Object, members: &[(&str, String)]) -> Option<Edit> {
    if members.is_empty() {
        return None;
    }
    let (at, comma) = obj.append_point();
    let mut s = String::new();
    for (i, (k, v)) in members.iter().enumerate() {
        if comma || i > 0 {
            s.push(',');
        }
        s.push_str(&json_str(k));
        s.push(':');
        s.push_str(v);
    }
    Some(Edit {
        range: at..at,
        replacement: s.into_bytes(),
    })
}

/// Set `key` of `obj` to `value` (JSON): replace the value of its last member `key` (one the
/// pass found empty), else append the member.
pub(crate) fn set_member(obj: &Object, key: &str, value: String) -> Option<Edit> {
    match obj.get(key) {
        Some(m) => Some(Edit {
            range: m.value.clone(),
            replacement: value.into_bytes(),
        }),
        None => append_members(obj, &[(key, value)]),
    }
}

/// Insert `items` (JSON texts) into an array so they come before element `k` (after the last
/// one when `k` is past the end). `value` is the array's range (an empty array is rewritten).
pub(crate) fn insert_into_array(
    value: &Range<usize>,
    elements: &[Range<usize>],
    k: usize,
    items: &[String],
) -> Edit {
    let joined = items.join(",");
    if let Some(e) = elements.get(k) {
        Edit {
            range: e.start..e.start,
            replacement: format!("{joined},").into_bytes(),
        }
    } else if let Some(last) = elements.last() {
        Edit {
            range: last.end..last.end,
            replacement: format!(",{joined}").into_bytes(),
        }
    } else {
        Edit {
            range: value.clone(),
            replacement: format!("[{joined}]").into_bytes(),
        }
    }
}

/// Place carriers at their original positions among the items that are not carriers: a
/// carrier at position `p` (its index in the original list) preceded by `c` other carriers
/// goes before the `(p - c)`-th remaining item, never past `limit`. Returns, per insertion
/// point (in order), the carriers' indexes into `positions`.
pub(crate) fn insertion_groups(positions: &[usize], limit: usize) -> Vec<(usize, Vec<usize>)> {
    let mut order: Vec<usize> = (0..positions.len()).collect();
    order.sort_by_key(|&i| (positions[i], i));
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for (before, &i) in order.iter().enumerate() {
        let k = positions[i].saturating_sub(before).min(limit);
        match groups.last_mut() {
            Some((at, members)) if *at == k => members.push(i),
            _ => groups.push((k, vec![i])),
        }
    }
    groups
}
