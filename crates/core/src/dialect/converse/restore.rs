//! Bedrock Converse: `reasoningContent` blocks back into the assistant message's `content`,
//! byte-exact strings, at their original positions (before the first `toolUse` block), as the
//! Anthropic wire restores `thinking` blocks (`docs/reasoning.md#carrier-restore`).
//!
//! "Already has": an echoed message with any `reasoningContent` block keeps what it sent
//! (adding blocks to a partly kept set would edit the turn's reasoning, which a signed model
//! refuses). Converse `content` is always a list; any other shape is left alone.

use crate::dialect::fingerprint::EchoedTurn;
use crate::dialect::restore::{
    insert_into_array, insertion_groups, json_str, Kind, List, TurnEdit,
};
use crate::dialect::turn::{CapturedTurn, Carrier};
use crate::json::scan;

/// A captured block, as JSON text, with its position and kind.
fn block(c: &Carrier) -> Option<(usize, String, Kind)> {
    match c {
        Carrier::ConverseReasoning {
            position,
            text,
            signature,
        } => {
            let mut s = format!(
                r#"{{"reasoningContent":{{"reasoningText":{{"text":{}"#,
                json_str(text)
            );
            if let Some(sig) = signature {
                s.push_str(&format!(r#","signature":{}"#, json_str(sig)));
            }
            s.push_str("}}}");
            Some((*position, s, Kind::Thinking))
        }
        Carrier::ConverseRedacted { position, data } => Some((
            *position,
            format!(
                r#"{{"reasoningContent":{{"redactedContent":{}}}}}"#,
                json_str(data)
            ),
            Kind::RedactedThinking,
        )),
        _ => None,
    }
}

/// The edits that put `captured`'s reasoning blocks back into the echoed turn `turn`.
pub(crate) fn restore_turn(
    list: &List<'_>,
    turn: &EchoedTurn,
    captured: &CapturedTurn,
) -> TurnEdit {
    let mut out = TurnEdit::default();
    let kept = turn.turn.carriers.iter().any(|c| block(c).is_some());
    let blocks: Vec<(usize, String, Kind)> = captured.carriers.iter().filter_map(block).collect();
    if kept || blocks.is_empty() {
        return out;
    }
    let Some(content) = list
        .object(turn.index)
        .and_then(|m| m.get("content").cloned())
    else {
        return out;
    };
    let text = list.text;
    let Some(elements) = scan::array_at(text, content.value.start) else {
        return out;
    };
    let first_tool_use = elements
        .iter()
        .position(|e| scan::object_at(text, e.start).is_some_and(|o| o.get("toolUse").is_some()))
        .unwrap_or(elements.len());
    let positions: Vec<usize> = blocks.iter().map(|b| b.0).collect();
    out.edits = insertion_groups(&positions, first_tool_use)
        .into_iter()
        .map(|(k, members)| {
            let items: Vec<String> = members.iter().map(|&i| blocks[i].1.clone()).collect();
            insert_into_array(&content.value, &elements, k, &items)
        })
        .collect();
    for b in &blocks {
        out.note(b.2);
    }
    out
}
