//! One module per wire format: where images, turns and the model live in its JSON.
//!
//! A body is parsed once per run of the passes ([`parse`]: [`crate::json::parse`] and, for the
//! dialects with a `messages` list, one scan of its turns) into a [`Doc`]. Each dialect module
//! builds the views the policies need from that one parse: the image sites ([`image_sites`],
//! a [`doc::Walk`]), the turns ([`doc::Turn`], for reasoning shaping) and the top-level object
//! (parameters). Every view is byte ranges of the original text, so edits are spliced
//! ([`crate::json::splice`]) and fields a module does not name are always preserved.

use std::ops::Range;

use crate::json::{self, scan, JsonError};
use doc::{Block, Content, Doc, StrAt, Turn, Walk};

/// A request body's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dialect {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`/chat/completions`).
    Openai,
    /// OpenAI Responses (`/responses`).
    OpenaiResponses,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
    /// Amazon Bedrock Converse (`/model/{modelId}/converse`, `/converse-stream`).
    Converse,
}

impl Dialect {
    /// The name used in config and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Anthropic => "anthropic",
            Dialect::Openai => "openai",
            Dialect::OpenaiResponses => "openai-responses",
            Dialect::Gemini => "gemini",
            Dialect::Converse => "converse",
        }
    }
}

/// Why a body was left alone: what reading it as its dialect found.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not valid JSON (truncated, wrong encoding, ...).
    #[error("body is not valid JSON: {0}")]
    NotJson(String),
    /// Valid JSON of a shape the dialect does not describe (e.g. `messages` not an array).
    #[error("body does not have the {dialect} shape: {detail}")]
    Shape {
        dialect: &'static str,
        detail: String,
    },
}

pub(crate) mod anthropic;
pub(crate) mod converse;
pub mod doc;
pub mod format;
pub(crate) mod gemini;
pub(crate) mod openai;
pub(crate) mod responses;
pub(crate) mod restore;

/// Every dialect, in the order [`classify_path`] asks them (Converse's Bedrock paths and
/// Anthropic's InvokeModel paths never overlap: the operation tells them apart).
pub(crate) const ALL: [Dialect; 5] = [
    Dialect::Anthropic,
    Dialect::Converse,
    Dialect::Openai,
    Dialect::OpenaiResponses,
    Dialect::Gemini,
];

/// The dialect a request path speaks and which endpoint it is, from the path alone (trailing
/// `/` ignored): the first wire whose [`format::WireFormat::classify_path`] claims it, or
/// `None` for paths that are not parsed (files, batches, model lists, ...).
pub(crate) fn classify_path(path: &str) -> Option<(Dialect, format::Endpoint)> {
    let path = path.trim_end_matches('/');
    ALL.into_iter()
        .map(Dialect::format)
        .find_map(|f| f.classify_path(path).map(|e| (f.dialect(), e)))
}

/// Every wire's member holding the model's own request parameters
/// ([`format::WireFormat::model_fields`]: Converse's `additionalModelRequestFields`).
pub(crate) fn model_field_members() -> impl Iterator<Item = &'static str> {
    ALL.into_iter().filter_map(|d| d.format().model_fields())
}

/// Parse `body` as `dialect`: the one parse of a run of the passes.
///
/// Errors: invalid UTF-8 or JSON ⇒ [`ParseError::NotJson`]; valid JSON that is not an object,
/// or (Anthropic Messages, OpenAI Chat) whose `messages` is neither absent, `null` nor an
/// array of objects ⇒ [`ParseError::Shape`].
pub fn parse(body: &[u8], dialect: Dialect) -> Result<Doc<'_>, ParseError> {
    let shape = |detail: String| ParseError::Shape {
        dialect: dialect.as_str(),
        detail,
    };
    let parsed = json::parse(body).map_err(|e| match e {
        JsonError::Invalid(m) => ParseError::NotJson(m),
        JsonError::NotObject => shape("the body is not a JSON object".to_owned()),
    })?;
    let (text, top, index) = (parsed.text, parsed.top, parsed.index);
    let model = top
        .get("model")
        .and_then(|m| scan::string_at(text, &m.value));
    let turns = if dialect.format().prompt_layout().parsed_turns {
        turns(text, Some(&index), &top).map_err(shape)?
    } else {
        Vec::new()
    };
    Ok(Doc {
        dialect,
        text,
        top,
        model,
        turns,
        index,
    })
}

/// The `messages` list of `top` as turns; `Err(detail)` when it has the wrong type.
fn turns(text: &str, ix: Option<&scan::Index>, top: &scan::Object) -> Result<Vec<Turn>, String> {
    let Some(messages) = top.get("messages") else {
        return Ok(Vec::new());
    };
    if scan::slice(text, &messages.value) == "null" {
        return Ok(Vec::new());
    }
    let elements = scan::array_in(text, ix, messages.value.start)
        .ok_or_else(|| "invalid type for messages: expected an array".to_owned())?;
    let mut out = Vec::with_capacity(elements.len());
    for (index, el) in elements.iter().enumerate() {
        let obj = scan::object_in(text, ix, el.start)
            .ok_or_else(|| format!("messages[{index}] is not an object"))?;
        let role = obj
            .get("role")
            .and_then(|m| scan::string_at(text, &m.value));
        let content = obj.get("content").and_then(|c| {
            let blocks = scan::array_in(text, ix, c.value.start)?;
            Some(Content {
                value: c.value.clone(),
                blocks: blocks.into_iter().map(|r| block(text, ix, r)).collect(),
            })
        });
        out.push(Turn {
            index,
            obj,
            role,
            content,
        });
    }
    Ok(out)
}

/// Byte range of the message a response to this request answers: the last element of
/// `messages` (Anthropic, OpenAI Chat), of `contents` (Gemini) or of `input` (Responses; a
/// string `input` is itself that message). `None` when the list is absent or empty.
pub fn last_message(doc: &Doc<'_>) -> Option<Range<usize>> {
    doc.dialect.format().last_message(doc)
}

/// The last of the parsed turns ([`Doc::turns`]), as a byte range.
fn last_turn(doc: &Doc<'_>) -> Option<Range<usize>> {
    let t = doc.turns.last()?;
    Some(t.obj.open..t.obj.end)
}

/// One element of a content list.
pub(crate) fn block(text: &str, ix: Option<&scan::Index>, span: Range<usize>) -> Block {
    let obj = scan::object_in(text, ix, span.start);
    let kind = obj.as_ref().and_then(|o| kind(text, o));
    Block { span, obj, kind }
}

/// An object's `type`, decoded.
pub(crate) fn kind(text: &str, obj: &scan::Object) -> Option<String> {
    obj.get("type")
        .and_then(|m| scan::string_at(text, &m.value))
}

/// Every image of `doc`, with spans: the view the image passes work on.
pub(crate) fn image_sites<'a>(doc: &Doc<'a>, agent_images_in_user_turns: bool) -> Walk<'a> {
    doc.dialect
        .format()
        .image_sites(doc, agent_images_in_user_turns)
}

/// A JSON string value at `range` of `text`: its text as sent (escapes kept) and the span of
/// that text (between the quotes); `None` when the value is not a string.
pub(crate) fn str_at<'a>(text: &'a str, range: &Range<usize>) -> Option<StrAt<'a>> {
    let raw = text.get(range.clone())?;
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    Some(StrAt {
        text: inner,
        span: range.start + 1..range.end - 1,
    })
}

/// The most of a provider's 4xx body that is read to learn from it (unknown-field verdicts,
/// image rejections), bytes: 1 MiB. Providers such as Mistral echo the offending input in a
/// 422, which can be a long reasoning text; a longer body goes to the client unread.
pub const MAX_ERROR_BODY_BYTES: usize = 1024 * 1024;

// The response side's plain types and readers (issue 28): what a response or an echoed turn
// holds, read by each dialect's observer and by the fingerprints.
pub(crate) mod canonical;
pub(crate) mod conversation;
pub mod fingerprint;
pub(crate) mod lenient;
pub(crate) mod observed;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod turn;
pub mod usage;

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
    fn parse_errors_are_classified() {
        let r = parse(b"{\"model\": \"x\"", Dialect::Gemini);
        assert!(matches!(r, Err(ParseError::NotJson(_))));
        let r = parse(b"[1,2]", Dialect::Gemini);
        assert!(matches!(r, Err(ParseError::Shape { .. })));
        let r = parse(b"[1,2", Dialect::Gemini);
        assert!(matches!(r, Err(ParseError::NotJson(_))));
        let r = parse(b"\xff{}", Dialect::Gemini);
        assert!(matches!(r, Err(ParseError::NotJson(_))));
        let r = parse(b"", Dialect::Gemini);
        assert!(matches!(r, Err(ParseError::NotJson(_))));
        for body in [
            &br#"{"messages":"x"}"#[..],
            br#"{"messages":[1]}"#,
            br#"{"messages":{}}"#,
        ] {
            assert!(matches!(
                parse(body, Dialect::Openai),
                Err(ParseError::Shape { .. })
            ));
            assert!(parse(body, Dialect::Gemini).is_ok());
        }
    }

    #[test]
    fn the_message_a_response_answers_is_the_last_one() {
        let last = |body: &str, d: Dialect| {
            let doc = parse(body.as_bytes(), d).unwrap();
            last_message(&doc).map(|r| body[r].to_owned())
        };
        let chat = r#"{"messages":[{"role":"user","content":"a"},{"role":"tool","content":"b"}]}"#;
        assert_eq!(
            last(chat, Dialect::Openai).unwrap(),
            r#"{"role":"tool","content":"b"}"#
        );
        assert_eq!(
            last(chat, Dialect::Anthropic).unwrap(),
            r#"{"role":"tool","content":"b"}"#
        );
        let g =
            r#"{"contents":[{"role":"user","parts":[{"text":"a"}]}, {"role":"user","parts":[]} ]}"#;
        assert_eq!(
            last(g, Dialect::Gemini).unwrap(),
            r#"{"role":"user","parts":[]}"#
        );
        let r = r#"{"input":[{"role":"user","content":"a"},{"type":"function_call_output","call_id":"c","output":"x"}]}"#;
        assert_eq!(
            last(r, Dialect::OpenaiResponses).unwrap(),
            r#"{"type":"function_call_output","call_id":"c","output":"x"}"#
        );
        assert_eq!(
            last(r#"{"input":"hi"}"#, Dialect::OpenaiResponses).unwrap(),
            r#""hi""#
        );
        assert_eq!(last(r#"{"messages":[]}"#, Dialect::Openai), None);
        assert_eq!(last(r#"{"model":"m"}"#, Dialect::Gemini), None);
    }

    #[test]
    fn turns_and_model() {
        let d = parse(
            br#"{"model":"m\u0031","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"a"},7]}]}"#,
            Dialect::Anthropic,
        )
        .unwrap();
        assert_eq!(d.model.as_deref(), Some("m1"));
        assert_eq!(d.turns.len(), 2);
        assert!(d.turns[0].content.is_none());
        let c = d.turns[1].content.as_ref().unwrap();
        assert_eq!(c.blocks[0].kind.as_deref(), Some("text"));
        assert!(c.blocks[1].obj.is_none());
        assert!(parse(br#"{"messages":null}"#, Dialect::Openai)
            .unwrap()
            .turns
            .is_empty());
    }

    #[test]
    fn strings_at() {
        let t = r#"{"a":"x\"y","b":5}"#;
        let top = scan::object_at(t, 0).unwrap();
        let at = str_at(t, &top.members[0].value).unwrap();
        assert_eq!(at.text, r#"x\"y"#);
        assert_eq!(&t[at.span], r#"x\"y"#);
        assert!(str_at(t, &top.members[1].value).is_none());
    }
}
