//! OpenAI Responses: `reasoning` items back into `input`, as the JSON text received (same
//! `id`, `encrypted_content`, summary), at their original position in the turn's run of items:
//! before the item they preceded.
//!
//! "Already has": a turn whose run holds any `reasoning` item keeps its own (the client's
//! items are not merged with captured ones: an item's `encrypted_content` is bound to its id).

use serde_json::Value;

use super::{insert_into_array, insertion_groups, Kind, List, TurnEdit};
use crate::response::fingerprint::EchoedTurn;
use crate::response::turn::{CapturedTurn, Carrier};

pub(super) fn restore_turn(
    list: &List<'_>,
    turn: &EchoedTurn,
    captured: &CapturedTurn,
) -> TurnEdit {
    let mut out = TurnEdit::default();
    let kept = turn
        .turn
        .carriers
        .iter()
        .any(|c| matches!(c, Carrier::ResponsesReasoning { .. }));
    if kept {
        return out;
    }
    // Only items that are JSON objects of type `reasoning` go back (a stored value that is not
    // one would make the body invalid).
    let items: Vec<(usize, &str)> = captured
        .carriers
        .iter()
        .filter_map(|c| match c {
            Carrier::ResponsesReasoning { position, item, .. } if is_reasoning_item(item) => {
                Some((*position, item.trim()))
            }
            _ => None,
        })
        .collect();
    if items.is_empty() {
        return out;
    }
    let Some(run) = list.entries.get(turn.index..turn.index + turn.len) else {
        return out;
    };
    let positions: Vec<usize> = items.iter().map(|i| i.0).collect();
    for (k, members) in insertion_groups(&positions, run.len()) {
        let texts: Vec<String> = members.iter().map(|&i| items[i].1.to_owned()).collect();
        // `run` is never empty, so the array's own range is not needed.
        let edit = insert_into_array(&(0..0), run, k, &texts);
        out.edits.push(edit);
        members.iter().for_each(|_| out.note(Kind::ReasoningItem));
    }
    out
}

fn is_reasoning_item(item: &str) -> bool {
    serde_json::from_str::<Value>(item)
        .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("reasoning"))
}
