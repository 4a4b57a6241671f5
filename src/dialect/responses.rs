//! OpenAI Responses (`/responses`): where images live (`docs/wire-formats.md#openai-responses`).
//!
//! - `input` is a string (no images) or a list of items.
//! - Agent images (carriers): `input_image` parts in a `function_call_output` item's `output`
//!   list (one carrier per item), and — when `agent_images_in_user_turns` is on — in a `user`
//!   message item right after a `function_call_output` item that holds only images and short
//!   text (the same rule as OpenAI Chat, see [`super::openai::SHORT_TEXT_CHARS`]).
//! - Every other `input_image` is an upload. `image_url` data URLs are read; remote URLs and
//!   `file_id` images are counted, never fetched.
//! - Replacement texts are `{"type":"input_text","text":…}` (valid in both places).

use serde_json::value::RawValue;

use super::openai::{agent_label, Part};
use super::{parse_body, raw_is, string_value, Items, List};
use crate::dialect::doc::{TextStyle, Walk};
use crate::dialect::ParseError;

const DIALECT: &str = "openai-responses";

#[derive(serde::Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<Items<'a>>,
}

#[derive(serde::Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    role: Option<&'a RawValue>,
    #[serde(borrow, default)]
    call_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<Items<'a>>,
    #[serde(borrow, default)]
    output: Option<Items<'a>>,
}

fn internal() -> ParseError {
    ParseError::Shape {
        dialect: DIALECT,
        detail: "internal: a part does not point into the body".to_owned(),
    }
}

/// Walk an OpenAI Responses body: its `model` and every `input_image`, with spans.
pub fn walk(body: &[u8], agent_images_in_user_turns: bool) -> Result<Walk<'_>, ParseError> {
    let (text, parsed): (&str, Body<'_>) = parse_body(body, DIALECT)?;
    let mut walk = Walk::new(string_value(parsed.model), TextStyle::InputText);
    let Some(List(Some(items))) = parsed.input else {
        return Ok(walk);
    };
    let mut after_output = false;
    for (ii, raw) in items.iter().enumerate() {
        let Ok(item) = serde_json::from_str::<Item<'_>>(raw.get()) else {
            after_output = false;
            continue;
        };
        let is_output = raw_is(item.kind, "function_call_output");
        let was_after_output = after_output;
        after_output = is_output;
        let (parts, field) = if is_output {
            (item.output.as_ref(), "output")
        } else {
            (item.content.as_ref(), "content")
        };
        let Some(List(Some(parts))) = parts else {
            continue;
        };
        let mut images = Vec::new();
        let mut only_images_and_text = true;
        let mut text_len = 0usize;
        for (pi, praw) in parts.iter().enumerate() {
            let Ok(part) = serde_json::from_str::<Part<'_>>(praw.get()) else {
                only_images_and_text = false;
                continue;
            };
            if raw_is(part.kind, "input_image") {
                let path = format!("input[{ii}].{field}[{pi}]");
                images.push(part.image_site(text, praw, path).ok_or_else(internal)?);
            } else if raw_is(part.kind, "input_text") {
                text_len += part.text_len();
            } else {
                only_images_and_text = false;
            }
        }
        if images.is_empty() {
            continue;
        }
        let is_user = raw_is(item.role, "user");
        let label = agent_label(
            is_output,
            || {
                string_value(item.call_id).map_or_else(
                    || "function_call_output".to_owned(),
                    |id| format!("call_id {id}"),
                )
            },
            is_user && agent_images_in_user_turns && was_after_output,
            only_images_and_text,
            text_len,
        );
        let carrier = label.map(|label| walk.push_carrier(format!("input[{ii}]"), Some(label)));
        walk.extend_sites(images, carrier);
    }
    Ok(walk)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::dialect::doc::Payload;

    #[test]
    fn outputs_are_carriers_messages_uploads() {
        let body = br#"{"model":"gpt-5","input":[
          {"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"data:image/png;base64,AAAA","detail":"high"}]},
          {"type":"function_call","call_id":"c1","name":"shot","arguments":"{}"},
          {"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"ok"},{"type":"input_image","image_url":"data:image/png;base64,BBBB"}]},
          {"type":"function_call_output","call_id":"c2","output":"plain"},
          {"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]},
          {"type":"message","role":"user","content":[{"type":"input_image","file_id":"file_1"}]},
          7
        ]}"#;
        let w = walk(body, true).unwrap();
        assert_eq!(w.model.as_deref(), Some("gpt-5"));
        assert_eq!(w.sites.len(), 4);
        assert_eq!(w.sites[0].carrier, None);
        assert_eq!(w.sites[1].carrier, Some(0));
        assert_eq!(w.sites[1].path, "input[2].output[1]");
        assert_eq!(w.carriers[0].label.as_deref(), Some("call_id c1"));
        // A user message right after a function_call_output (c2) holding only an image.
        assert_eq!(w.sites[2].carrier, Some(1));
        assert_eq!(w.sites[2].payload, Payload::Opaque { bytes: 15 });
        assert_eq!(w.sites[3].carrier, None);
        assert_eq!(w.sites[3].payload, Payload::Opaque { bytes: 0 });
        let w = walk(body, false).unwrap();
        assert_eq!(w.sites[2].carrier, None);
        assert_eq!(walk(br#"{"input":"hi"}"#, true).unwrap().sites.len(), 0);
        assert!(matches!(
            walk(br#"{"input":[1"#, true),
            Err(ParseError::NotJson(_))
        ));
    }
}
