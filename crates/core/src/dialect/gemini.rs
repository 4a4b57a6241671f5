//! Gemini `generateContent` / `streamGenerateContent` / `countTokens`: where images live
//! (`docs/wire-formats.md#gemini`).
//!
//! - Images: `inlineData` parts (`{"mimeType","data"}`, snake_case `inline_data` /
//!   `mime_type` accepted too) whose declared type is `image/*` or whose bytes sniff as an
//!   image (PDF, audio and video parts are not images and are never touched).
//! - Agent images: a `contents[i]` that holds a `functionResponse` part is one carrier; its
//!   images are the `inlineData` parts next to the function response and those inside
//!   `functionResponse.parts` (Gemini 3 multimodal function responses). Every other image is
//!   an upload. `fileData` parts are remote and not counted.
//! - Replacement texts are `{"text":…}` parts. `functionResponse.parts` accepts no text, so an
//!   image replaced there is removed from that list and its text goes into the content's
//!   `parts` right after the function response (as does the downscale note).

pub(crate) mod restore;

use super::restore::{CapturedTurn, EchoedTurn, List, TurnEdit};
use crate::json::Edit;
use std::ops::Range;

use super::doc::{CarrierInfo, Doc, Payload, Placement, Site, TextStyle, Walk};
use super::format::{Endpoint, ImageRules, MarkerStyle, PromptLayout, ReasoningCarriers};
use super::str_at;
use crate::json::scan::{self, Index, Object};

const INLINE_DATA: [&str; 2] = ["inlineData", "inline_data"];
const FUNCTION_RESPONSE: [&str; 2] = ["functionResponse", "function_response"];
const THOUGHT_SIGNATURE: [&str; 2] = ["thoughtSignature", "thought_signature"];
const MIME_TYPE: [&str; 2] = ["mimeType", "mime_type"];

/// The image payload of a part's `inlineData`, and whether it is an image only if its bytes
/// sniff as one (declared type not `image/*`; the image policy decides). `None` when the part
/// has no `inlineData` object, or a non-image type without base64 data.
fn image_payload<'a>(
    text: &'a str,
    ix: Option<&Index>,
    part: &Object,
) -> Option<(Payload<'a>, bool)> {
    let blob = part.get_any(&INLINE_DATA)?;
    let blob = scan::object_in(text, ix, blob.value.start)?;
    let media_type = blob
        .get_any(&MIME_TYPE)
        .and_then(|m| str_at(text, &m.value));
    let declared_image = media_type
        .as_ref()
        .is_some_and(|m| m.text.to_ascii_lowercase().starts_with("image/"));
    let data = blob.get("data");
    let Some(at) = data.and_then(|d| str_at(text, &d.value)) else {
        return declared_image.then(|| {
            let bytes = data.map_or(0, |d| d.value.len() as u64);
            (Payload::Opaque { bytes }, false)
        });
    };
    Some((
        Payload::Base64 {
            data: at,
            media_type,
            spelling: super::doc::TypeSpelling::Mime,
        },
        !declared_image,
    ))
}

/// Every image of a Gemini body, with spans (its `model` is rarely in the body: the path
/// names it).
pub(crate) fn walk<'a>(doc: &Doc<'a>) -> Walk<'a> {
    let text = doc.text;
    let ix = doc.ix();
    let mut walk = Walk::new(doc.model.clone(), TextStyle::Bare);
    let Some(contents) = doc
        .top
        .get("contents")
        .and_then(|m| scan::array_in(text, ix, m.value.start))
    else {
        return walk;
    };
    for (ci, cspan) in contents.iter().enumerate() {
        let Some(parts) = scan::object_in(text, ix, cspan.start)
            .and_then(|c| c.get("parts").map(|p| p.value.start))
            .and_then(|at| scan::array_in(text, ix, at))
        else {
            continue;
        };
        let parsed: Vec<Option<Object>> = parts
            .iter()
            .map(|p| scan::object_in(text, ix, p.start))
            .collect();
        let carrier = push_carrier(&mut walk, text, ix, ci, &parsed);
        let mut images = 0usize;
        for (pi, (pspan, part)) in parts.iter().zip(&parsed).enumerate() {
            let Some(part) = part else { continue };
            if let Some((payload, needs_sniff)) = image_payload(text, ix, part) {
                images += 1;
                walk.sites.push(Site {
                    path: format!("contents[{ci}].parts[{pi}]"),
                    carrier,
                    block: pspan.clone(),
                    payload,
                    keep: part
                        .get_any(&THOUGHT_SIGNATURE)
                        .map(|t| ("thoughtSignature", scan::slice(text, &t.value))),
                    placement: Placement::InList,
                    needs_sniff,
                });
            }
            let at = (ci, pi, pspan.end);
            images += nested_images(&mut walk, text, ix, part, at, carrier);
        }
        if images == 0 && carrier.is_some() {
            walk.carriers.pop();
        }
    }
    walk
}

/// The carrier of a content whose parts (`parsed`) hold `functionResponse`s, pushed to
/// `walk` and labelled with their names; `None` when it holds none.
fn push_carrier(
    walk: &mut Walk<'_>,
    text: &str,
    ix: Option<&scan::Index>,
    ci: usize,
    parsed: &[Option<Object>],
) -> Option<usize> {
    let responses: Vec<Option<String>> = parsed
        .iter()
        .flatten()
        .filter_map(|p| p.get_any(&FUNCTION_RESPONSE))
        .map(|fr| {
            scan::object_in(text, ix, fr.value.start)
                .and_then(|f| f.get("name").and_then(|n| scan::string_at(text, &n.value)))
        })
        .collect();
    if responses.is_empty() {
        return None;
    }
    let names: Vec<String> = responses.into_iter().flatten().collect();
    walk.carriers.push(CarrierInfo {
        path: format!("contents[{ci}]"),
        label: Some(if names.is_empty() {
            "functionResponse".to_owned()
        } else {
            format!("functionResponse {}", names.join(","))
        }),
    });
    Some(walk.carriers.len() - 1)
}

/// The images inside `part`'s `functionResponse.parts`, pushed to `walk` as nested sites;
/// `at` is the part's (content index, part index, end byte). Returns how many.
fn nested_images<'a>(
    walk: &mut Walk<'a>,
    text: &'a str,
    ix: Option<&scan::Index>,
    part: &Object,
    at: (usize, usize, usize),
    carrier: Option<usize>,
) -> usize {
    let (ci, pi, after) = at;
    let Some(inner) = part
        .get_any(&FUNCTION_RESPONSE)
        .and_then(|fr| scan::object_in(text, ix, fr.value.start))
        .and_then(|fr| fr.get("parts").map(|p| p.value.start))
        .and_then(|at| scan::array_in(text, ix, at))
    else {
        return 0;
    };
    let mut images = 0;
    let array = walk.arrays.len();
    for (ni, nspan) in inner.iter().enumerate() {
        let Some(np) = scan::object_in(text, ix, nspan.start) else {
            continue;
        };
        let Some((payload, needs_sniff)) = image_payload(text, ix, &np) else {
            continue;
        };
        images += 1;
        walk.sites.push(Site {
            path: format!("contents[{ci}].parts[{pi}].functionResponse.parts[{ni}]"),
            carrier,
            block: nspan.clone(),
            payload,
            keep: None,
            placement: Placement::Nested {
                array,
                index: ni,
                after,
            },
            needs_sniff,
        });
    }
    walk.arrays.push(inner);
    images
}

/// Gemini generateContent as a [`WireFormat`](super::format::WireFormat).
pub(crate) struct Gemini;

impl super::format::WireFormat for Gemini {
    fn dialect(&self) -> super::Dialect {
        super::Dialect::Gemini
    }

    // ---- request side: the view of a request body, prompt positions, paths, restore edits ----

    fn prompt_layout(&self) -> PromptLayout {
        PromptLayout {
            tools: "tools",
            tools_list: None,
            system: &["systemInstruction", "system_instruction"],
            turns: "contents",
            parts: "parts",
            system_parts: Some("parts"),
            string_turns: false,
            default_role: Some("user"),
            parsed_turns: false,
        }
    }

    /// The last element of `contents`.
    fn last_message(&self, doc: &Doc<'_>) -> Option<Range<usize>> {
        scan::array_in(doc.text, doc.ix(), doc.top.get("contents")?.value.start)?.pop()
    }

    fn image_sites<'a>(&self, doc: &Doc<'a>, _agent_images_in_user_turns: bool) -> Walk<'a> {
        walk(doc)
    }

    fn default_image_rules(&self) -> ImageRules {
        ImageRules::Gemini
    }

    fn reasoning_carriers(&self) -> ReasoningCarriers {
        ReasoningCarriers::Untouched
    }

    fn cache_markers(&self) -> MarkerStyle {
        MarkerStyle::Unmarked
    }

    fn system_billing_line(&self) -> bool {
        false
    }

    fn stream_usage_option(&self) -> bool {
        false
    }

    fn previous_response_key(&self) -> Option<&'static str> {
        None
    }

    fn model_fields(&self) -> Option<&'static str> {
        None
    }

    /// A last path segment ending in `:generateContent` or `:streamGenerateContent`
    /// (generation) or `:countTokens`.
    fn classify_path(&self, path: &str) -> Option<Endpoint> {
        let last = path.rsplit('/').next().unwrap_or("");
        if last.ends_with(":generateContent") || last.ends_with(":streamGenerateContent") {
            return Some(Endpoint::Generate);
        }
        last.ends_with(":countTokens")
            .then_some(Endpoint::CountTokens)
    }

    /// Gemini's API version segments, `/v1beta/` and `/v1alpha/`.
    fn path_hint(&self, path: &str) -> bool {
        path.contains("/v1beta/") || path.contains("/v1alpha/")
    }

    fn restore_turn(
        &self,
        list: &List<'_>,
        turn: &EchoedTurn,
        captured: &CapturedTurn,
    ) -> TurnEdit {
        restore::restore_turn(list, turn, captured)
    }

    fn first_call_signed(&self, captured: &CapturedTurn) -> bool {
        restore::first_call_signed(captured)
    }

    fn placeholder_signature(
        &self,
        list: &List<'_>,
        entry: &Object,
        value: &serde_json::Value,
    ) -> Option<Edit> {
        restore::placeholder(list, entry, value)
    }

    // ---- response side: echoed turns, the response reader, error shapes ----

    fn conversation(&self) -> &'static super::conversation::Conversation {
        &super::conversation::Conversation {
            key: "contents",
            assistant_role: "model",
            items: None,
            string_content_is_text_block: false,
            bare_input: false,
            marker_block: None,
        }
    }

    fn echoed_turn(&self, entries: &[&str]) -> Option<super::turn::CapturedTurn> {
        super::conversation::one_message(entries, response::content_turn)
    }

    fn error_body(&self, status: u16, message: &str, _code: &str) -> String {
        errors::body(status, message)
    }

    fn error_kind_header(&self, _: u16) -> Option<(&'static str, &'static str)> {
        None
    }

    fn stream_error_event(&self, _: &str, _: &str, _: Option<u64>) -> Option<String> {
        None
    }

    fn rejected_signature(&self, _: u16, _: &[u8]) -> Option<String> {
        None
    }

    fn example_path(&self) -> &'static str {
        "/v1beta/models/model:generateContent"
    }

    fn image_placeholder_style(&self) -> super::doc::TextStyle {
        super::doc::TextStyle::Bare
    }

    fn response_reader(&self) -> Box<dyn super::observed::ResponseReader> {
        Box::<response::Stream>::default()
    }
}

// The response side's submodules (issue 28).
pub(crate) mod errors;
pub(crate) mod response;

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;

    #[test]
    fn function_responses_carry_agent_images() {
        let body = br#"{"contents":[
          {"role":"user","parts":[{"text":"look"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}}]},
          {"role":"model","parts":[{"functionCall":{"name":"shot","args":{}}}]},
          {"role":"user","parts":[{"functionResponse":{"name":"shot","response":{"output":"ok"},"parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}},{"inline_data":{"mime_type":"image/jpeg","data":"BBBB"}}]},
          {"role":"user","parts":[{"inlineData":{"mimeType":"application/pdf","data":"JVBERi0="}}]},
          {"role":"user","parts":[{"functionResponse":{"name":"noimg","response":{}}}]}
        ]}"#;
        let doc = crate::dialect::parse(body, crate::dialect::Dialect::Gemini).unwrap();
        let w = walk(&doc);
        // The PDF part is listed for the image policy to sniff (it drops it: not an image).
        assert_eq!(w.sites.len(), 4);
        assert!(w.sites[3].needs_sniff && !w.sites[0].needs_sniff);
        assert_eq!(w.sites[0].carrier, None);
        assert_eq!(w.carriers.len(), 1);
        assert_eq!(
            w.carriers[0].label.as_deref(),
            Some("functionResponse shot")
        );
        assert_eq!(
            w.sites[1].path,
            "contents[2].parts[0].functionResponse.parts[0]"
        );
        assert!(matches!(
            w.sites[1].placement,
            Placement::Nested {
                array: 0,
                index: 0,
                ..
            }
        ));
        assert_eq!(w.sites[2].carrier, Some(0));
        assert_eq!(w.sites[2].path, "contents[2].parts[1]");
        assert_eq!(w.arrays.len(), 1);
    }
}
