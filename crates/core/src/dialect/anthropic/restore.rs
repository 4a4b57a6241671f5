//! Anthropic Messages: `thinking` / `redacted_thinking` blocks back into the assistant
//! message's `content`, byte-exact strings, at their original positions (before the first
//! `tool_use` block). A string `content` becomes a block list (`[carriers…, text]`).
//!
//! "Already has": an echoed message with any thinking or redacted_thinking block keeps what it
//! sent (adding blocks to a partly kept set would edit the turn's thinking, which the API
//! refuses).

use crate::dialect::fingerprint::EchoedTurn;
use crate::dialect::restore::{
    insert_into_array, insertion_groups, json_str, Kind, List, TurnEdit,
};
use crate::dialect::turn::{CapturedTurn, Carrier};
use crate::json::scan;
use crate::json::Edit;

/// A captured block, as JSON text, with its position and kind.
fn block(c: &Carrier) -> Option<(usize, String, Kind)> {
    match c {
        Carrier::AnthropicThinking {
            position,
            thinking,
            signature,
        } => {
            let mut s = format!(r#"{{"type":"thinking","thinking":{}"#, json_str(thinking));
            if let Some(sig) = signature {
                s.push_str(&format!(r#","signature":{}"#, json_str(sig)));
            }
            s.push('}');
            Some((*position, s, Kind::Thinking))
        }
        Carrier::AnthropicRedacted { position, data } => Some((
            *position,
            format!(
                r#"{{"type":"redacted_thinking","data":{}}}"#,
                json_str(data)
            ),
            Kind::RedactedThinking,
        )),
        _ => None,
    }
}

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
    let Some(message) = list.object(turn.index) else {
        return out;
    };
    let Some(content) = message.get("content") else {
        return out;
    };
    let text = list.text;
    let positions: Vec<usize> = blocks.iter().map(|b| b.0).collect();
    let edits: Vec<Edit> = if let Some(s) = scan::string_at(text, &content.value) {
        // A string content: the blocks around one text block (none for an empty string: the
        // API refuses empty text blocks).
        let mut others = Vec::new();
        if !s.is_empty() {
            others.push(format!(
                r#"{{"type":"text","text":{}}}"#,
                scan::slice(text, &content.value)
            ));
        }
        let mut items: Vec<String> = Vec::new();
        let groups = insertion_groups(&positions, others.len());
        let mut next_other = 0;
        for (k, members) in groups {
            while next_other < k {
                items.extend(others.get(next_other).cloned());
                next_other += 1;
            }
            items.extend(members.iter().map(|&i| blocks[i].1.clone()));
        }
        items.extend(others.into_iter().skip(next_other));
        vec![Edit {
            range: content.value.clone(),
            replacement: format!("[{}]", items.join(",")).into_bytes(),
        }]
    } else if let Some(elements) = scan::array_at(text, content.value.start) {
        let first_tool_use = elements
            .iter()
            .position(|e| block_type(text, e).as_deref() == Some("tool_use"))
            .unwrap_or(elements.len());
        insertion_groups(&positions, first_tool_use)
            .into_iter()
            .map(|(k, members)| {
                let items: Vec<String> = members.iter().map(|&i| blocks[i].1.clone()).collect();
                insert_into_array(&content.value, &elements, k, &items)
            })
            .collect()
    } else if scan::slice(text, &content.value) == "null" {
        let items: Vec<String> = blocks.iter().map(|b| b.1.clone()).collect();
        vec![Edit {
            range: content.value.clone(),
            replacement: format!("[{}]", items.join(",")).into_bytes(),
        }]
    } else {
        return out;
    };
    out.edits = edits;
    for b in &blocks {
        out.note(b.2);
    }
    out
}

/// The `type` of a content block (when it is an object with a string `type`).
fn block_type(text: &str, element: &std::ops::Range<usize>) -> Option<String> {
    let o = scan::object_at(text, element.start)?;
    scan::string_at(text, &o.get("type")?.value)
}
