//! The restore pass: put back the reasoning carriers an agent dropped from the assistant turns
//! it echoes (`docs/reasoning.md#carrier-restore`).
//!
//! Pure (no I/O, no clock, no randomness): the same body and the same [`TurnLookup`] answers
//! give the same edits. Per assistant turn the request echoes
//! ([`crate::dialect::fingerprint::echoed_turns`]), the lookup is asked for the turn captured
//! with the same fingerprint; when that turn had carriers the echo lacks, edits re-attach them
//! where each [`Carrier`] variant says (one `restore` module per wire, asked through
//! [`crate::dialect::format::WireFormat::restore_turn`]: [`crate::dialect::openai::restore`],
//! [`crate::dialect::anthropic::restore`], [`crate::dialect::gemini::restore`],
//! [`crate::dialect::responses::restore`]). A turn that already carries its own is left
//! byte-identical. On a route that validates Gemini 3 thought signatures, a function call whose signature is
//! unknown gets the documented placeholder
//! ([`crate::dialect::gemini::restore::PLACEHOLDER_SIGNATURE`]).
//!
//! The edits are byte ranges of the body as given ([`crate::json::splice`] keeps every other
//! byte identical); new JSON is written with `serde_json` from the captured values (opaque
//! strings come back as the same strings; a Responses reasoning item as the JSON text received).

#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::dialect::fingerprint::{echoed_turns_in, EchoedTurn};
use crate::dialect::restore::{Kind, List, TurnEdit};
use crate::dialect::turn::CapturedTurn;
use crate::dialect::Dialect;
use crate::json::scan::{self, Object};
use crate::json::Edit;
use crate::provider::ResolvedProvider;
use crate::reasoning::carriers::TurnLookup;

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

/// The list the turns live in, per dialect.
pub(crate) fn list_key(dialect: Dialect) -> &'static str {
    dialect.format().prompt_layout().turns
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
        let wire = ctx.dialect.format();
        let edit = wire.restore_turn(&list, turn, &captured);
        if edit.edits.is_empty() {
            continue;
        }
        if wire.first_call_signed(&captured) {
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
        for (index, edit) in placeholders(ctx.dialect, &list, &first_call_signed) {
            out.reasons.push(format!(
                "placeholder thought signature on the first function call of {key}[{index}] \
                 (no signature known for it; Gemini 3 rejects an unsigned call)"
            ));
            finish(&mut out, edit);
        }
    }
    out
}

/// Placeholder signatures ([`crate::dialect::gemini::restore::PLACEHOLDER_SIGNATURE`]): on
/// every model content (Gemini) / assistant message (Gemini's OpenAI-compatible endpoint) with
/// function calls whose first call has no signature, after the restore, that call gets the
/// placeholder ([`crate::dialect::format::WireFormat::placeholder_signature`]). Every such
/// turn, not only the current one the API validates: the placeholder a turn gets stays on it
/// in later requests, so the prefix the provider caches does not change when the next user
/// message arrives. `signed`: entries whose first call's signature the restore put back.
fn placeholders(dialect: Dialect, list: &List<'_>, signed: &[usize]) -> Vec<(usize, TurnEdit)> {
    let wire = dialect.format();
    let mut out = Vec::new();
    for (i, range) in list.entries.iter().enumerate() {
        if signed.contains(&i) {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(scan::slice(list.text, range)) else {
            continue;
        };
        let Some(entry) = list.object(i) else {
            continue;
        };
        let mut t = TurnEdit::default();
        t.push(
            Kind::PlaceholderSignature,
            wire.placeholder_signature(list, &entry, &v),
        );
        if !t.edits.is_empty() {
            out.push((i, t));
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
