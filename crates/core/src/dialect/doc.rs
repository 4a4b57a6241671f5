//! Where each image of a body sits: the vocabulary the dialect walkers produce and the image
//! passes (`crate::images`) edit.
//!
//! A [`Walk`] lists every image block / part ([`Site`]) in document order with the byte spans
//! needed to edit it in place: the media-type string, the base64 / data-URL string, the whole
//! block (for a text replacement), and where a note goes after it. Spans point into the
//! original body, so edits are spliced ([`crate::json::splice`]) and every other byte
//! stays as sent.

use std::ops::Range;

use super::Dialect;
use crate::json::scan::{Index, Object};

/// One body, parsed once ([`super::parse`]): its text, top-level object and `model`, and —
/// for the dialects with a `messages` list — its turns. Every range is a byte range of `text`.
#[derive(Debug, Clone)]
pub struct Doc<'a> {
    pub dialect: Dialect,
    pub text: &'a str,
    /// The top-level object (request parameters).
    pub top: Object,
    /// The request's `model`, decoded, when it is a string.
    pub model: Option<String>,
    /// The `messages` list (Anthropic Messages, OpenAI Chat); empty for the other dialects.
    pub turns: Vec<Turn>,
    /// Where every nested value of `text` ends ([`crate::json::scan::validate`]).
    pub index: Index,
}

impl Doc<'_> {
    /// The index, as the scanner takes it.
    pub(crate) fn ix(&self) -> Option<&Index> {
        Some(&self.index)
    }
}

self_cell::self_cell!(
    /// A request body, decoded (`content-encoding` undone), with its one parse: the
    /// [`Doc`] every run of the request's passes reads ([`ParsedBody::parse_named`]); shared between
    /// runs (an `Arc`), so a run after the load phase or on the image lane parses nothing
    /// (`crate::pipeline`).
    pub struct ParsedBody {
        owner: bytes::Bytes,
        #[covariant]
        dependent: Doc,
    }

    impl {Debug}
);

impl ParsedBody {
    /// Parse `bytes` as `dialect` ([`super::parse`]), keeping both, with the parse's `model`
    /// (the body's) replaced by what `name` makes of it: the request's model as its route
    /// reads it ([`crate::route::Route::model_of`]).
    ///
    /// Errors: as [`super::parse`].
    pub(crate) fn parse_named(
        bytes: bytes::Bytes,
        dialect: Dialect,
        name: impl FnOnce(Option<String>) -> Option<String>,
    ) -> Result<Self, super::ParseError> {
        Self::try_new(bytes, |b| {
            super::parse(b, dialect).map(|mut doc| {
                doc.model = name(doc.model.take());
                doc
            })
        })
    }

    /// The decoded body's bytes (what the passes edit).
    pub(crate) fn bytes(&self) -> &[u8] {
        self.borrow_owner()
    }

    /// Its parse.
    pub(crate) fn doc(&self) -> &Doc<'_> {
        self.borrow_dependent()
    }
}

/// One message of a `messages` list.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Its index in `messages` (for report paths).
    pub index: usize,
    /// The message object.
    pub obj: Object,
    /// Its `role`, decoded.
    pub role: Option<String>,
    /// Its `content`, when that is an array.
    pub content: Option<Content>,
}

/// A `content` array.
#[derive(Debug, Clone)]
pub struct Content {
    /// Byte range of the array value.
    pub value: Range<usize>,
    pub blocks: Vec<Block>,
}

/// One element of a content array: a block (Anthropic) or part (OpenAI).
#[derive(Debug, Clone)]
pub struct Block {
    /// Byte range of the element.
    pub span: Range<usize>,
    /// The element, when it is an object.
    pub obj: Option<Object>,
    /// Its `type`, decoded.
    pub kind: Option<String>,
}

/// How a replacement text block / part is written in a dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextStyle {
    /// `{"type":"text","text":…}` (Anthropic Messages, OpenAI Chat).
    Text,
    /// `{"type":"input_text","text":…}` (OpenAI Responses).
    InputText,
    /// `{"text":…}` (Gemini).
    Bare,
}

impl TextStyle {
    /// A text block holding `text`, with `keep` (a `"key":raw value` member the image had, such
    /// as its `cache_control`) appended.
    pub fn block(self, text: &str, keep: Option<(&str, &str)>) -> String {
        let quoted = serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned());
        let mut out = String::with_capacity(quoted.len() + 48);
        match self {
            TextStyle::Text => out.push_str("{\"type\":\"text\",\"text\":"),
            TextStyle::InputText => out.push_str("{\"type\":\"input_text\",\"text\":"),
            TextStyle::Bare => out.push_str("{\"text\":"),
        }
        out.push_str(&quoted);
        if let Some((key, value)) = keep {
            out.push_str(",\"");
            out.push_str(key);
            out.push_str("\":");
            out.push_str(value);
        }
        out.push('}');
        out
    }
}

/// An image carrier (an image-bearing tool result) as the walker found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarrierInfo {
    /// Position for reports, e.g. `messages[3].content[1]`.
    pub path: String,
    /// What identifies it, e.g. `tool_use_id toolu_01`.
    pub label: Option<String>,
}

/// A JSON string inside the body: its text as sent (escapes kept) and the byte span of that
/// text (between the quotes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrAt<'a> {
    pub text: &'a str,
    pub span: Range<usize>,
}

/// How a base64 payload's separate type field names the image's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeSpelling {
    /// A media type, `image/png` (Anthropic `media_type`, Gemini `mimeType`).
    Mime,
    /// The format's bare name, `png`, `jpeg`, `gif`, `webp` (Bedrock Converse's image
    /// `format`, `docs/wire-formats.md#amazon-bedrock-converse`).
    FormatName,
}

/// What an image holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Base64 in its own string with a separate type field (Anthropic `source`, Gemini
    /// `inlineData`, Converse `image`).
    Base64 {
        data: StrAt<'a>,
        /// The declared type, when the field is a string.
        media_type: Option<StrAt<'a>>,
        /// How that field names the format.
        spelling: TypeSpelling,
    },
    /// A `data:<mime>;base64,<data>` URL (OpenAI Chat / Responses).
    DataUrl(StrAt<'a>),
    /// Counted, never read: a remote URL, a file id, a missing or odd source. `bytes` as sent.
    Opaque { bytes: u64 },
}

impl Payload<'_> {
    /// Length as sent of the base64 / data-URL string (the unit of every byte limit).
    pub(crate) fn sent_len(&self) -> u64 {
        match self {
            Payload::Base64 { data, .. } => data.text.len() as u64,
            Payload::DataUrl(url) => url.text.len() as u64,
            Payload::Opaque { bytes } => *bytes,
        }
    }

    /// How the declared type of [`Self::base64`] is spelled (a data URL's is a media type).
    pub(crate) fn spelling(&self) -> TypeSpelling {
        match self {
            Payload::Base64 { spelling, .. } => *spelling,
            Payload::DataUrl(_) | Payload::Opaque { .. } => TypeSpelling::Mime,
        }
    }

    /// The base64 text (raw JSON string text) and, for a data URL, the header length.
    pub(crate) fn base64(&self) -> Option<(&str, Option<&str>)> {
        match self {
            Payload::Base64 {
                data, media_type, ..
            } => Some((data.text, media_type.as_ref().map(|m| m.text))),
            Payload::DataUrl(url) => {
                let (mime, data) = split_data_url(url.text)?;
                Some((data, Some(mime)))
            }
            Payload::Opaque { .. } => None,
        }
    }
}

/// `data:<mime>[;params];base64,<data>` → (`<mime>[;params]` without `;base64`, `<data>`).
/// `None` for anything else (a remote URL, a non-base64 data URL).
pub(crate) fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url
        .get(..5)
        .filter(|p| p.eq_ignore_ascii_case("data:"))
        .map(|_| &url[5..])?;
    let (meta, data) = rest.split_once(',')?;
    let mime = meta
        .len()
        .checked_sub(7)
        .filter(|&i| {
            meta.get(i..)
                .is_some_and(|t| t.eq_ignore_ascii_case(";base64"))
        })
        .map(|i| &meta[..i])?;
    Some((mime, data))
}

/// Where an image sits in its array, which decides how a text replacement is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In a content list that accepts text: the block is replaced by a text block, and a note
    /// is inserted right after it.
    InList,
    /// In an array that accepts no text (Gemini `functionResponse.parts`): a replaced image is
    /// removed from `Walk::arrays[array]` (element `index`) and its text goes, like a note, into
    /// the enclosing parts list right after the function response, at byte `after`.
    Nested {
        array: usize,
        index: usize,
        after: usize,
    },
}

/// One image block / part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site<'a> {
    /// Position for reports, e.g. `messages[3].content[1].content[0]`.
    pub path: String,
    /// Index into [`Walk::carriers`] for an agent image; `None` for an upload.
    pub carrier: Option<usize>,
    /// Byte span of the whole block / part.
    pub block: Range<usize>,
    pub payload: Payload<'a>,
    /// A member carried over to a text replacement: `(key, raw JSON value)`.
    pub keep: Option<(&'static str, &'a str)>,
    pub placement: Placement,
    /// True for a part that is an image only if its bytes sniff as one (a Gemini
    /// `inlineData` whose declared type is not `image/*`: PDF, audio and video parts are not
    /// images). The image policy drops such a site when its bytes are not an image.
    pub needs_sniff: bool,
}

/// Every image of one body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk<'a> {
    /// The request's `model`.
    pub model: Option<String>,
    /// Images in document order.
    pub sites: Vec<Site<'a>>,
    /// Carriers in document order (oldest first).
    pub carriers: Vec<CarrierInfo>,
    /// Element spans of the arrays images may be removed from ([`Placement::Nested`]).
    pub arrays: Vec<Vec<Range<usize>>>,
    /// How this dialect writes a text block.
    pub style: TextStyle,
}

impl Walk<'_> {
    /// An empty walk for `style`.
    pub(crate) fn new(model: Option<String>, style: TextStyle) -> Self {
        Self {
            model,
            sites: Vec::new(),
            carriers: Vec::new(),
            arrays: Vec::new(),
            style,
        }
    }

    /// Record a carrier; returns its index.
    pub(crate) fn push_carrier(&mut self, path: String, label: Option<String>) -> usize {
        self.carriers.push(CarrierInfo { path, label });
        self.carriers.len() - 1
    }
}

impl<'a> Walk<'a> {
    /// Record one message's images, attached to `carrier` when they are agent images.
    pub(crate) fn extend_sites(&mut self, mut images: Vec<Site<'a>>, carrier: Option<usize>) {
        if carrier.is_some() {
            for site in &mut images {
                site.carrier = carrier;
            }
        }
        self.sites.extend(images);
    }
}

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
    fn data_urls() {
        assert_eq!(
            split_data_url("data:image/png;base64,AAAA"),
            Some(("image/png", "AAAA"))
        );
        assert_eq!(
            split_data_url("DATA:image/png;BASE64,AA"),
            Some(("image/png", "AA"))
        );
        assert_eq!(split_data_url("data:;base64,AA"), Some(("", "AA")));
        assert_eq!(split_data_url("data:image/png,AA"), None);
        assert_eq!(split_data_url("https://x/y.png"), None);
        assert_eq!(split_data_url("dat"), None);
    }

    #[test]
    fn text_blocks() {
        assert_eq!(
            TextStyle::Text.block("a\"b", Some(("cache_control", "{\"type\":\"ephemeral\"}"))),
            r#"{"type":"text","text":"a\"b","cache_control":{"type":"ephemeral"}}"#
        );
        assert_eq!(
            TextStyle::InputText.block("x", None),
            r#"{"type":"input_text","text":"x"}"#
        );
        assert_eq!(TextStyle::Bare.block("x", None), r#"{"text":"x"}"#);
    }
}
