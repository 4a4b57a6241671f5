//! The restore pass: put back the reasoning carriers an agent dropped from the assistant turns
//! it echoes (`docs/reasoning.md#carrier-restore`).
//!
//! Pure (no I/O, no clock, no randomness): the same body and the same [`TurnLookup`] answers
//! give the same edits. Per assistant turn the request echoes
//! ([`crate::response::fingerprint::echoed_turns`]), the lookup is asked for the turn captured
//! with the same fingerprint; when that turn had carriers the echo lacks, edits re-attach them
//! where each [`Carrier`] variant says (one module per wire: [`chat`], [`anthropic`],
//! [`gemini`], [`responses`]). A turn that already carries its own is left byte-identical.
//! On a route that validates Gemini 3 thought signatures, a function call whose signature is
//! unknown gets the documented placeholder ([`gemini::PLACEHOLDER_SIGNATURE`]).
//!
//! The edits are byte ranges of the body as given ([`crate::json::splice`] keeps every other
//! byte identical); new JSON is written with `serde_json` from the captured values (opaque
//! strings come back as the same strings; a Responses reasoning item as the JSON text received).

mod anthropic;
mod chat;
mod gemini;
mod responses;
#[cfg(test)]
mod tests;

use std::ops::Range;

use crate::dialect::Dialect;
use crate::json::scan::{self, Object};
use crate::json::Edit;
use crate::provider::ResolvedProvider;
use crate::reasoning::carriers::TurnLookup;
use crate::response::fingerprint::{echoed_turns_in, EchoedTurn};
use crate::response::turn::CapturedTurn;

/// What the restore pass reads besides the body.
pub(crate) struct RestoreContext<'a> {
    /// The body's wire format.
    pub dialect: Dialect,
    /// The captured turns this request may see (its credential scope and upstream host).
    pub lookup: &'a dyn TurnLookup,
    /// The model as the request names it (the body's `model`, else the Gemini path's).
    pub model: &'a str,
    /// The route's provider row (decides the Gemini placeholder signature).
    pub provider: &'a ResolvedProvider,
}

/// How many carriers of each kind a run restored, and in how many assistant turns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RestoreCounts {
    /// Assistant turns changed (a restored carrier, a placeholder signature, or Responses
    /// items put back in their output order).
    pub turns: usize,
    /// Chat messages given back their `reasoning_content`.
    pub reasoning_content: usize,
    /// Chat messages given back their `reasoning`.
    pub reasoning: usize,
    /// Chat messages given back their `reasoning_details` array (all entries at once).
    pub reasoning_details: usize,
    /// Thought signatures put back: Gemini `thoughtSignature` parts, and on Gemini's
    /// OpenAI-compatible endpoint the message's and each tool call's `extra_content` one.
    pub thought_signature: usize,
    /// Anthropic `thinking` blocks.
    pub thinking: usize,
    /// Anthropic `redacted_thinking` blocks.
    pub redacted_thinking: usize,
    /// Responses `reasoning` input items.
    pub reasoning_item: usize,
    /// Placeholder signatures on function calls whose own signature is unknown.
    pub placeholder_signature: usize,
}

/// One kind of restored carrier (a counter of [`RestoreCounts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ReasoningContent,
    Reasoning,
    ReasoningDetails,
    ThoughtSignature,
    Thinking,
    RedactedThinking,
    ReasoningItem,
    PlaceholderSignature,
}

impl Kind {
    /// The name in reasons.
    fn label(self) -> &'static str {
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

impl RestoreCounts {
    /// Every counter with its report name (`restored_<kind>`), in a fixed order.
    pub(crate) fn kinds(&self) -> [(&'static str, usize); 8] {
        [
            ("restored_reasoning_content", self.reasoning_content),
            ("restored_reasoning", self.reasoning),
            ("restored_reasoning_details", self.reasoning_details),
            ("restored_thought_signature", self.thought_signature),
            ("restored_thinking", self.thinking),
            ("restored_redacted_thinking", self.redacted_thinking),
            ("restored_reasoning_item", self.reasoning_item),
            ("restored_placeholder_signature", self.placeholder_signature),
        ]
    }

    fn add(&mut self, kind: Kind, n: usize) {
        let c = match kind {
            Kind::ReasoningContent => &mut self.reasoning_content,
            Kind::Reasoning => &mut self.reasoning,
            Kind::ReasoningDetails => &mut self.reasoning_details,
            Kind::ThoughtSignature => &mut self.thought_signature,
            Kind::Thinking => &mut self.thinking,
            Kind::RedactedThinking => &mut self.redacted_thinking,
            Kind::ReasoningItem => &mut self.reasoning_item,
            Kind::PlaceholderSignature => &mut self.placeholder_signature,
        };
        *c += n;
    }
}

/// What the pass produced: edits of the body as given (empty: nothing restored), the counts,
/// and one reason per changed turn (no reasoning text in them).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Restored {
    pub edits: Vec<Edit>,
    pub counts: RestoreCounts,
    pub reasons: Vec<String>,
}

/// The edits of one turn and what they restored.
#[derive(Debug, Default)]
struct TurnEdit {
    edits: Vec<Edit>,
    kinds: Vec<(Kind, usize)>,
    /// Responses: the turn's items were put back in the response's output order.
    reordered: bool,
}

impl TurnEdit {
    fn push(&mut self, kind: Kind, edits: impl IntoIterator<Item = Edit>) {
        let before = self.edits.len();
        self.edits.extend(edits);
        if self.edits.len() > before {
            self.note(kind);
        }
    }

    fn note(&mut self, kind: Kind) {
        match self.kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.kinds.push((kind, 1)),
        }
    }
}

/// The list the turns live in, per dialect.
pub(crate) fn list_key(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Anthropic | Dialect::Openai => "messages",
        Dialect::Gemini => "contents",
        Dialect::OpenaiResponses => "input",
    }
}

/// One request's turn list: the body text and the byte ranges of its entries.
pub(super) struct List<'t> {
    pub text: &'t str,
    pub entries: Vec<Range<usize>>,
}

impl List<'_> {
    /// Entry `i` as an object, if it is one.
    fn object(&self, i: usize) -> Option<Object> {
        scan::object_at(self.text, self.entries.get(i)?.start)
    }
}

/// Restore the carriers of the assistant turns `body` echoes (see the module doc). Never
/// fails: a body that is not JSON, or has no turn list, gives no edits.
#[cfg_attr(not(test), allow(dead_code))] // the standalone form; the pipeline has parsed already
pub(crate) fn restore(ctx: &RestoreContext<'_>, body: &[u8]) -> Restored {
    match crate::json::parse(body) {
        Ok(parsed) => restore_parsed(ctx, parsed.text, &parsed.top),
        Err(_) => Restored::default(),
    }
}

/// [`restore`] over a body already parsed: its text and top-level object (the pipeline's one
/// parse, [`crate::dialect::doc::Doc`]).
pub(crate) fn restore_parsed(ctx: &RestoreContext<'_>, text: &str, top: &Object) -> Restored {
    let mut out = Restored::default();
    let key = list_key(ctx.dialect);
    let Some(entries) = top
        .get(key)
        .and_then(|m| scan::array_at(text, m.value.start))
    else {
        return out;
    };
    let list = List { text, entries };
    let texts: Vec<&str> = list
        .entries
        .iter()
        .filter_map(|r| text.get(r.clone()))
        .collect();
    let echoed = if texts.len() == list.entries.len() {
        echoed_turns_in(ctx.dialect, &texts)
    } else {
        Vec::new()
    };
    // Entries whose first call got its signature back here (no placeholder there).
    let mut first_call_signed = Vec::new();
    for turn in &echoed {
        if turn.index + turn.len > list.entries.len() {
            continue;
        }
        let Some(captured) = ctx.lookup.find(ctx.model, &turn.fingerprint) else {
            continue;
        };
        if !same_turn(&captured, &turn.turn) {
            continue;
        }
        let edit = match ctx.dialect {
            Dialect::Openai => chat::restore_turn(&list, turn, &captured),
            Dialect::Anthropic => anthropic::restore_turn(&list, turn, &captured),
            Dialect::Gemini => gemini::restore_turn(&list, turn, &captured),
            Dialect::OpenaiResponses => responses::restore_turn(&list, turn, &captured),
        };
        if edit.edits.is_empty() {
            continue;
        }
        if gemini::signs_first_call(ctx.dialect, turn, &captured) {
            first_call_signed.push(turn.index);
        }
        let kinds: Vec<String> = edit
            .kinds
            .iter()
            .map(|(k, n)| format!("{} x{n}", k.label()))
            .collect();
        let mut what = Vec::new();
        if !kinds.is_empty() {
            what.push(format!("restored {}", kinds.join(", ")));
        }
        if edit.reordered {
            what.push(
                "put its items back in the response's output order (a reasoning item right \
                 before the item it produced)"
                    .to_owned(),
            );
        }
        out.reasons.push(format!(
            "{} on {key}[{}] (captured turn {})",
            what.join(", "),
            turn.index,
            short(turn)
        ));
        finish(&mut out, edit);
    }
    if ctx.provider.wants_placeholder_signature(ctx.model) {
        for (index, edit) in gemini::placeholders(ctx.dialect, &list, &first_call_signed) {
            out.reasons.push(format!(
                "placeholder thought signature on the first function call of {key}[{index}] \
                 (no signature known for it; Gemini 3 rejects an unsigned call)"
            ));
            finish(&mut out, edit);
        }
    }
    out
}

fn finish(out: &mut Restored, edit: TurnEdit) {
    out.counts.turns += 1;
    for (k, n) in edit.kinds {
        out.counts.add(k, n);
    }
    out.edits.extend(edit.edits);
}

/// The first 8 hex digits of the turn's fingerprint (for reasons).
fn short(turn: &EchoedTurn) -> String {
    let mut s = turn.fingerprint.to_string();
    s.truncate(8);
    s
}

/// The captured turn is the echoed one (a fingerprint matched; checked again so a collision
/// or a store mix-up cannot graft carriers onto another turn): the same calls, or for a
/// text-only turn the same text.
fn same_turn(captured: &CapturedTurn, echoed: &CapturedTurn) -> bool {
    captured.calls == echoed.calls && (!echoed.calls.is_empty() || captured.text == echoed.text)
}

// ---- JSON writing helpers -----------------------------------------------------------------

/// A JSON string literal of `s` (serde_json's escaping; non-ASCII and U+2028 written as is).
fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// Insert `members` (`(key, value JSON)`) at the end of `obj`, as one edit.
fn append_members(obj: &Object, members: &[(&str, String)]) -> Option<Edit> {
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
fn set_member(obj: &Object, key: &str, value: String) -> Option<Edit> {
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
fn insert_into_array(
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
fn insertion_groups(positions: &[usize], limit: usize) -> Vec<(usize, Vec<usize>)> {
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
