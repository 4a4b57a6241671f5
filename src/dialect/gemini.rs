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

use serde_json::value::RawValue;

use super::{parse_body, str_at, string_value, Items, List};
use crate::dialect::doc::{CarrierInfo, Payload, Placement, Site, TextStyle, Walk};
use crate::dialect::ParseError;
use crate::json_edit::span_of;

const DIALECT: &str = "gemini";

#[derive(serde::Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    contents: Option<Items<'a>>,
}

#[derive(serde::Deserialize)]
struct Content<'a> {
    #[serde(borrow, default)]
    parts: Option<Items<'a>>,
}

#[derive(serde::Deserialize)]
struct Part<'a> {
    #[serde(rename = "inlineData", alias = "inline_data", borrow, default)]
    inline_data: Option<&'a RawValue>,
    #[serde(
        rename = "functionResponse",
        alias = "function_response",
        borrow,
        default
    )]
    function_response: Option<&'a RawValue>,
    #[serde(
        rename = "thoughtSignature",
        alias = "thought_signature",
        borrow,
        default
    )]
    thought_signature: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct Blob<'a> {
    #[serde(rename = "mimeType", alias = "mime_type", borrow, default)]
    mime_type: Option<&'a RawValue>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct FunctionResponse<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    parts: Option<Items<'a>>,
}

fn internal() -> ParseError {
    ParseError::Shape {
        dialect: DIALECT,
        detail: "internal: a part does not point into the body".to_owned(),
    }
}

/// The image payload of an `inlineData` value and whether it is an image only if its bytes
/// sniff as one (declared type not `image/*`; the image policy decides). `None` when it is
/// not an image (a non-image type without base64 data).
fn image_payload<'a>(text: &'a str, blob_raw: &'a RawValue) -> Option<(Payload<'a>, bool)> {
    let blob = serde_json::from_str::<Blob<'_>>(blob_raw.get()).ok()?;
    let media_type = blob.mime_type.and_then(|m| str_at(text, m));
    let declared_image = media_type
        .as_ref()
        .is_some_and(|m| m.text.to_ascii_lowercase().starts_with("image/"));
    let Some(data) = blob.data.and_then(|d| str_at(text, d)) else {
        return declared_image.then(|| {
            let bytes = blob.data.map_or(0, |d| d.get().len() as u64);
            (Payload::Opaque { bytes }, false)
        });
    };
    Some((Payload::Base64 { data, media_type }, !declared_image))
}

/// Walk a Gemini body: its `model` (rarely present; the path names it) and every image.
pub fn walk(body: &[u8]) -> Result<Walk<'_>, ParseError> {
    let (text, parsed): (&str, Body<'_>) = parse_body(body, DIALECT)?;
    let mut walk = Walk::new(string_value(parsed.model), TextStyle::Bare);
    let Some(List(Some(contents))) = parsed.contents else {
        return Ok(walk);
    };
    for (ci, craw) in contents.iter().enumerate() {
        let Ok(content) = serde_json::from_str::<Content<'_>>(craw.get()) else {
            continue;
        };
        let Some(List(Some(parts))) = content.parts else {
            continue;
        };
        let parsed_parts: Vec<Option<Part<'_>>> = parts
            .iter()
            .map(|p| serde_json::from_str::<Part<'_>>(p.get()).ok())
            .collect();
        let responses: Vec<Option<String>> = parsed_parts
            .iter()
            .flatten()
            .filter_map(|p| p.function_response)
            .map(|fr| {
                serde_json::from_str::<FunctionResponse<'_>>(fr.get())
                    .ok()
                    .and_then(|f| string_value(f.name))
            })
            .collect();
        let carrier = if responses.is_empty() {
            None
        } else {
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
        };
        let mut images = 0usize;
        for (pi, (praw, part)) in parts.iter().zip(&parsed_parts).enumerate() {
            let Some(part) = part else { continue };
            if let Some(blob) = part.inline_data {
                if let Some((payload, needs_sniff)) = image_payload(text, blob) {
                    images += 1;
                    walk.sites.push(Site {
                        path: format!("contents[{ci}].parts[{pi}]"),
                        carrier,
                        block: span_of(text, praw.get()).ok_or_else(internal)?,
                        payload,
                        keep: part
                            .thought_signature
                            .map(|t| ("thoughtSignature", t.get())),
                        placement: Placement::InList,
                        needs_sniff,
                    });
                }
            }
            let Some(fr) = part.function_response else {
                continue;
            };
            let Ok(fr) = serde_json::from_str::<FunctionResponse<'_>>(fr.get()) else {
                continue;
            };
            let Some(List(Some(inner))) = fr.parts else {
                continue;
            };
            let after = span_of(text, praw.get()).ok_or_else(internal)?.end;
            let array = walk.arrays.len();
            let mut spans = Vec::with_capacity(inner.len());
            for (ni, nraw) in inner.iter().enumerate() {
                let span = span_of(text, nraw.get()).ok_or_else(internal)?;
                spans.push(span.clone());
                let Ok(np) = serde_json::from_str::<Part<'_>>(nraw.get()) else {
                    continue;
                };
                let Some((payload, needs_sniff)) =
                    np.inline_data.and_then(|b| image_payload(text, b))
                else {
                    continue;
                };
                images += 1;
                walk.sites.push(Site {
                    path: format!("contents[{ci}].parts[{pi}].functionResponse.parts[{ni}]"),
                    carrier,
                    block: span,
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
            walk.arrays.push(spans);
        }
        if images == 0 && carrier.is_some() {
            walk.carriers.pop();
        }
    }
    Ok(walk)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
        let w = walk(body).unwrap();
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
