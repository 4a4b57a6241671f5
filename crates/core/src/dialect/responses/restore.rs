//! OpenAI Responses: `reasoning` items back into `input`, as the JSON text received (same
//! `id`, `encrypted_content`, summary), at their original position in the turn's run of items:
//! before the item they preceded.
//!
//! "Already has": a turn whose run holds any `reasoning` item keeps its own (the client's
//! items are not merged with captured ones: an item's `encrypted_content` is bound to its id).
//!
//! Order: a reasoning item must come right before the item it produced; OpenAI answers 400
//! "Item 'msg_…' was provided without its required 'reasoning' item: 'rs_…'." otherwise. When
//! every item of the echoed run has an `id` the response carried
//! ([`CapturedTurn::item_ids`], the output order the proxy relayed) and the run is not in that
//! order, the run (with any reasoning item restored into it) is written back in the output
//! order, as one edit of the run's bytes: each item's text as the client sent it, joined with
//! `,` (`docs/reasoning.md#carrier-restore`). A run with an item the response did not carry,
//! an item without an `id`, or an `id` twice is left in the client's order.

use serde_json::Value;

use crate::dialect::fingerprint::EchoedTurn;
use crate::dialect::restore::{insert_into_array, insertion_groups, Kind, List, TurnEdit};
use crate::dialect::turn::{CapturedTurn, Carrier};
use crate::json::scan;
use crate::json::Edit;

pub(crate) fn restore_turn(
    list: &List<'_>,
    turn: &EchoedTurn,
    captured: &CapturedTurn,
) -> TurnEdit {
    let mut out = TurnEdit::default();
    let Some(run) = list.entries.get(turn.index..turn.index + turn.len) else {
        return out;
    };
    let kept = turn
        .turn
        .carriers
        .iter()
        .any(|c| matches!(c, Carrier::ResponsesReasoning { .. }));
    // Only items that are JSON objects of type `reasoning` go back (a stored value that is not
    // one would make the body invalid).
    let items: Vec<(usize, Option<&str>, &str)> = if kept {
        Vec::new()
    } else {
        captured
            .carriers
            .iter()
            .filter_map(|c| match c {
                Carrier::ResponsesReasoning { position, id, item } if is_reasoning_item(item) => {
                    Some((*position, id.as_deref(), item.trim()))
                }
                _ => None,
            })
            .collect()
    };
    if let Some(edit) = reordered(list, run, captured, &items) {
        out.edits.push(edit);
        out.reordered = true;
        items.iter().for_each(|_| out.note(Kind::ReasoningItem));
        return out;
    }
    if items.is_empty() {
        return out;
    }
    let positions: Vec<usize> = items.iter().map(|i| i.0).collect();
    for (k, members) in insertion_groups(&positions, run.len()) {
        let texts: Vec<String> = members.iter().map(|&i| items[i].2.to_owned()).collect();
        // `run` is never empty, so the array's own range is not needed.
        let edit = insert_into_array(&(0..0), run, k, &texts);
        out.edits.push(edit);
        members.iter().for_each(|_| out.note(Kind::ReasoningItem));
    }
    out
}

/// The edit writing `run` plus the reasoning items to restore (`restored`: position, id,
/// JSON text) in the response's output order, when the run is out of that order and every
/// item involved has an `id` the response carried, once (see the module doc). `None`
/// otherwise.
fn reordered(
    list: &List<'_>,
    run: &[std::ops::Range<usize>],
    captured: &CapturedTurn,
    restored: &[(usize, Option<&str>, &str)],
) -> Option<Edit> {
    let rank = |id: &str| captured.item_ids.iter().position(|i| i == id);
    let mut items: Vec<(usize, &str)> = Vec::with_capacity(run.len() + restored.len());
    for r in run {
        let obj = scan::object_at(list.text, r.start)?;
        let id = scan::string_at(list.text, &obj.get("id")?.value)?;
        items.push((rank(&id)?, scan::slice(list.text, r)));
    }
    if items.windows(2).all(|w| w[0].0 < w[1].0) {
        return None;
    }
    for (_, id, text) in restored {
        items.push((rank((*id)?)?, text));
    }
    let mut ranks: Vec<usize> = items.iter().map(|i| i.0).collect();
    ranks.sort_unstable();
    if ranks.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    items.sort_by_key(|i| i.0);
    let texts: Vec<&str> = items.iter().map(|i| i.1).collect();
    let (first, last) = (run.first()?, run.last()?);
    Some(Edit {
        range: first.start..last.end,
        replacement: texts.join(",").into_bytes(),
    })
}

fn is_reasoning_item(item: &str) -> bool {
    serde_json::from_str::<Value>(item)
        .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("reasoning"))
}
