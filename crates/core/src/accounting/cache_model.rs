//! An exact-prefix prompt-cache model: what a provider's cache would read, write and leave
//! uncached, turn by turn, for a sequence of requests. Pure and deterministic (no clock: the
//! requests carry their timestamps), for `cachekeeper replay` (`docs/replay.md`).
//!
//! A request is cut into **blocks** in the provider's cache order — tools, then the system
//! prompt, then the messages — whatever the JSON key order: each tool definition, each system
//! block, each content block of each message (a message's other fields, such as its `role`,
//! count with its first block). Each block gets a token estimate ([`text_tokens`],
//! [`image_tokens`]) and a digest of its canonical JSON without `cache_control` markers
//! (clients move them every turn; the provider matches content), chained so that block `i`'s
//! digest stands for the whole prefix `0..=i`.
//!
//! Then the provider's rule ([`Rule`], from a [`CacheRule`]) decides:
//! - [`CacheActivation::Explicit`] (Anthropic): entries are written only at `cache_control`
//!   breakpoints (and at the last block for a top-level `cache_control`); a read looks back
//!   from each breakpoint over at most [`ANTHROPIC_LOOKBACK_BLOCKS`] blocks (the breakpoint
//!   included) for a live entry. A request without markers caches nothing.
//! - [`CacheActivation::Automatic`] (OpenAI, DeepSeek, Gemini implicit caching): the longest
//!   live entry at any block boundary is read, and the whole prompt is written.
//!
//! An entry lives [`Rule::ttl_ms`] (an Anthropic `"ttl": "1h"` breakpoint: [`Rule::long_ttl_ms`])
//! after it was last written or read; a read refreshes it. Prefixes shorter than
//! [`Rule::min_tokens`] are neither written nor read. Not modelled: the delay before a written
//! entry is usable, per-request parameters that invalidate the messages cache (`tool_choice`,
//! thinking settings), OpenAI's 128-token hit increments, and provider-side downscaling of
//! large images (the estimate is of the image as sent).

use std::collections::HashMap;

use serde_json::{Map, Value};
use xxhash_rust::xxh3::xxh3_64;

use crate::dialect::{Dialect, ParseError};
use crate::provider::{CacheActivation, CacheRule};

/// Bytes of text per token in the estimate (≈ 4 for English text and JSON). Source: OpenAI,
/// "What are tokens and how to count them" (https://help.openai.com/en/articles/4936856),
/// `docs/replay.md#estimates`.
pub const TEXT_BYTES_PER_TOKEN: u64 = 4;

/// Pixels per image token: an image costs about `width × height / 750` tokens. Source:
/// Anthropic, "Vision — Evaluate image size"
/// (https://docs.claude.com/en/docs/build-with-claude/vision), `docs/replay.md#estimates`.
pub const IMAGE_PX_PER_TOKEN: u64 = 750;

/// Tokens assumed for an image whose size cannot be read from its header (a remote URL, a
/// file id, another container): about the most Anthropic bills after its own resize
/// (≈ 1.15 megapixels / 750). Source: as [`IMAGE_PX_PER_TOKEN`].
pub const UNKNOWN_IMAGE_TOKENS: u64 = 1_600;

/// How many blocks an Anthropic read looks back from each breakpoint, the breakpoint itself
/// counted as the first. Source: Anthropic, "Prompt caching — How automatic prefix checking
/// works" (https://docs.claude.com/en/docs/build-with-claude/prompt-caching).
pub const ANTHROPIC_LOOKBACK_BLOCKS: usize = 20;

/// The shortest prefix cached, tokens, by default: 1,024 (OpenAI's documented minimum;
/// Anthropic's for the Sonnet / Opus 4 families — from 512 to 4,096 by model; Gemini 2.5
/// Flash's). Sources: the prompt-caching pages above and
/// https://ai.google.dev/gemini-api/docs/caching; `docs/replay.md#rules`.
pub const DEFAULT_MIN_TOKENS: u64 = 1_024;

/// A provider's cache rule as the model applies it (durations in ms, lengths in tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub activation: CacheActivation,
    /// Lifetime of an unread entry, ms; `None` (not published): entries never expire.
    pub ttl_ms: Option<u64>,
    /// Lifetime of an entry written at a `"ttl": "1h"` breakpoint (Explicit only), ms; `None`:
    /// such markers get [`Rule::ttl_ms`].
    pub long_ttl_ms: Option<u64>,
    /// Shortest prefix written or read, tokens.
    pub min_tokens: u64,
    /// Blocks a read looks back from a breakpoint (Explicit only).
    pub lookback: usize,
}

impl Rule {
    /// The model's view of a provider table rule, with [`DEFAULT_MIN_TOKENS`] and
    /// [`ANTHROPIC_LOOKBACK_BLOCKS`].
    pub fn from_cache_rule(rule: &CacheRule) -> Rule {
        Rule {
            activation: rule.activation,
            ttl_ms: rule.ttl_s.map(|s| u64::from(s) * 1000),
            long_ttl_ms: match rule.activation {
                CacheActivation::Explicit => rule.long_ttl.map(|(s, _)| u64::from(s) * 1000),
                // OpenAI's 24 h retention is asked for per request, not by a marker.
                CacheActivation::Automatic => None,
            },
            min_tokens: DEFAULT_MIN_TOKENS,
            lookback: ANTHROPIC_LOOKBACK_BLOCKS,
        }
    }
}

/// What the model says of one request, in tokens (estimates: [`text_tokens`],
/// [`image_tokens`]). `read + write + uncached == input`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TurnCache {
    /// Input tokens of the whole request.
    pub input: u64,
    /// Tokens read from the cache.
    pub read: u64,
    /// Tokens written to the cache.
    pub write: u64,
    /// Of `write`, those written at `"ttl": "1h"` breakpoints.
    pub write_long: u64,
    /// Tokens neither read nor written.
    pub uncached: u64,
    /// Tokens that a live entry would have let the request read, lost because the entry
    /// expired (idle longer than the TTL): an expiry-driven write.
    pub expired: u64,
    /// Images in the request.
    pub images: u32,
    /// Where the request's prefix first differs from the previous request's, when that is
    /// before the previous request's end (`tools`, `system`, `messages[N]`; `input[N]` on the
    /// OpenAI Responses wire, `contents[N]` on Gemini's); `None` for a pure extension.
    pub changed_at: Option<String>,
}

/// The section of the cache order a block is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Tools,
    System,
    /// The N-th element of the message list.
    Message(usize),
}

/// One block of a request in cache order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    section: Section,
    /// Chained digest of blocks `0..=this`.
    prefix: u64,
    /// Estimated tokens of this block.
    tokens: u64,
    /// `Some(long)` at a `cache_control` breakpoint (`long`: `"ttl": "1h"`).
    breakpoint: Option<bool>,
    images: u32,
}

/// One live (or expired) cache entry.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Unix ms after which it is gone (`i64::MAX`: never).
    expires_ms: i64,
    /// Its lifetime, ms (a read refreshes it by as much).
    ttl_ms: Option<u64>,
}

/// The cache of one session under one rule: feed it the requests in order ([`Self::turn`]).
#[derive(Debug, Clone)]
pub struct CacheModel {
    rule: Rule,
    entries: HashMap<u64, Entry>,
    /// The previous request's blocks (for [`TurnCache::changed_at`]).
    previous: Vec<Block>,
}

impl CacheModel {
    /// An empty cache.
    pub fn new(rule: Rule) -> Self {
        Self {
            rule,
            entries: HashMap::new(),
            previous: Vec::new(),
        }
    }

    /// The next request of the session: `body` (JSON of `dialect`) arriving at `ts_ms` (Unix
    /// ms, not before the previous one's).
    ///
    /// Errors: the body is not JSON, or not an object ([`ParseError`]); the cache is left as
    /// it was.
    pub fn turn(
        &mut self,
        dialect: Dialect,
        body: &[u8],
        ts_ms: i64,
    ) -> Result<TurnCache, ParseError> {
        let blocks = blocks(dialect, body)?;
        let mut out = match self.rule.activation {
            CacheActivation::Explicit => self.explicit(&blocks, ts_ms),
            CacheActivation::Automatic => self.automatic(&blocks, ts_ms),
        };
        out.images = blocks.iter().map(|b| b.images).sum();
        out.changed_at = changed_at(dialect, &self.previous, &blocks);
        self.previous = blocks;
        Ok(out)
    }

    fn live(&self, digest: u64, now: i64) -> Option<&Entry> {
        self.entries.get(&digest).filter(|e| e.expires_ms >= now)
    }

    fn ttl_for(&self, long: bool) -> Option<u64> {
        if long {
            self.rule.long_ttl_ms.or(self.rule.ttl_ms)
        } else {
            self.rule.ttl_ms
        }
    }

    fn put(&mut self, digest: u64, ttl_ms: Option<u64>, now: i64) {
        let expires_ms = ttl_ms.map_or(i64::MAX, |t| {
            now.saturating_add(i64::try_from(t).unwrap_or(i64::MAX))
        });
        let e = self
            .entries
            .entry(digest)
            .or_insert(Entry { expires_ms, ttl_ms });
        // A rewrite or read never shortens a longer-lived entry.
        if expires_ms >= e.expires_ms {
            *e = Entry { expires_ms, ttl_ms };
        }
    }

    /// Refresh the entry read at `digest` by its own lifetime.
    fn refresh(&mut self, digest: u64, now: i64) {
        if let Some(ttl) = self.entries.get(&digest).map(|e| e.ttl_ms) {
            self.put(digest, ttl, now);
        }
    }

    fn explicit(&mut self, blocks: &[Block], now: i64) -> TurnCache {
        let cum = cumulative(blocks);
        let input = cum.last().copied().unwrap_or(0);
        let min = self.rule.min_tokens;
        let breakpoints: Vec<(usize, bool)> = blocks
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.breakpoint.map(|long| (i, long)))
            .collect();
        // The read: the longest entry found looking back from any breakpoint.
        let back = self.rule.lookback.max(1);
        let mut hit: Option<usize> = None;
        let mut hit_ignoring_expiry: Option<usize> = None;
        for &(b, _) in &breakpoints {
            let window = (b + 1).saturating_sub(back)..=b;
            let live = window
                .clone()
                .rev()
                .find(|&j| cum[j] >= min && self.live(blocks[j].prefix, now).is_some());
            let any = window
                .rev()
                .find(|&j| cum[j] >= min && self.entries.contains_key(&blocks[j].prefix));
            hit = hit.max(live);
            hit_ignoring_expiry = hit_ignoring_expiry.max(any);
        }
        let read = hit.map_or(0, |j| cum[j]);
        let would_read = hit_ignoring_expiry.map_or(0, |j| cum[j]);
        if let Some(j) = hit {
            self.refresh(blocks[j].prefix, now);
        }
        // The writes: every breakpoint past the read, each segment at its breakpoint's TTL.
        let (mut write, mut write_long, mut upto) = (0u64, 0u64, read);
        for &(b, long) in &breakpoints {
            if cum[b] < min {
                continue;
            }
            if cum[b] > upto {
                let seg = cum[b] - upto;
                write += seg;
                if long && self.rule.long_ttl_ms.is_some() {
                    write_long += seg;
                }
                upto = cum[b];
            }
            let ttl = self.ttl_for(long);
            self.put(blocks[b].prefix, ttl, now);
        }
        TurnCache {
            input,
            read,
            write,
            write_long,
            uncached: input - read - write,
            expired: would_read.saturating_sub(read),
            ..TurnCache::default()
        }
    }

    fn automatic(&mut self, blocks: &[Block], now: i64) -> TurnCache {
        let cum = cumulative(blocks);
        let input = cum.last().copied().unwrap_or(0);
        let min = self.rule.min_tokens;
        let hit = (0..blocks.len())
            .rev()
            .find(|&j| cum[j] >= min && self.live(blocks[j].prefix, now).is_some());
        let would = (0..blocks.len())
            .rev()
            .find(|&j| cum[j] >= min && self.entries.contains_key(&blocks[j].prefix));
        let read = hit.map_or(0, |j| cum[j]);
        let would_read = would.map_or(0, |j| cum[j]);
        let ttl = self.rule.ttl_ms;
        let mut written = false;
        for (j, b) in blocks.iter().enumerate() {
            if cum[j] >= min {
                self.put(b.prefix, ttl, now);
                written = true;
            }
        }
        let write = if written { input - read } else { 0 };
        TurnCache {
            input,
            read,
            write,
            write_long: 0,
            uncached: input - read - write,
            expired: would_read.saturating_sub(read),
            ..TurnCache::default()
        }
    }
}

/// Run a whole session through a fresh [`CacheModel`]: one [`TurnCache`] per request
/// (`(dialect, body, ts_ms)`), or the first body's error with its index.
pub fn simulate<'a>(
    rule: Rule,
    requests: impl IntoIterator<Item = (Dialect, &'a [u8], i64)>,
) -> Result<Vec<TurnCache>, (usize, ParseError)> {
    let mut model = CacheModel::new(rule);
    requests
        .into_iter()
        .enumerate()
        .map(|(i, (d, body, ts))| model.turn(d, body, ts).map_err(|e| (i, e)))
        .collect()
}

/// Running token totals: `out[i]` = tokens of blocks `0..=i`.
fn cumulative(blocks: &[Block]) -> Vec<u64> {
    blocks
        .iter()
        .scan(0u64, |acc, b| {
            *acc += b.tokens;
            Some(*acc)
        })
        .collect()
}

/// Where `cur` first differs from `prev`, if before `prev`'s end.
fn changed_at(dialect: Dialect, prev: &[Block], cur: &[Block]) -> Option<String> {
    if prev.is_empty() {
        return None;
    }
    let i = prev
        .iter()
        .zip(cur)
        .position(|(a, b)| a.prefix != b.prefix)
        .or((cur.len() < prev.len()).then_some(cur.len()))?;
    let section = cur.get(i).or_else(|| prev.get(i))?.section;
    Some(position_label(dialect, section))
}

fn position_label(dialect: Dialect, section: Section) -> String {
    match section {
        Section::Tools => "tools".to_owned(),
        Section::System => "system".to_owned(),
        Section::Message(n) => format!("{}[{n}]", list_key(dialect)),
    }
}

/// The name of a dialect's message list.
fn list_key(dialect: Dialect) -> &'static str {
    dialect.format().prompt_layout().turns
}

/// Estimated tokens of `bytes` bytes of text: ⌈bytes / [`TEXT_BYTES_PER_TOKEN`]⌉.
pub fn text_tokens(bytes: u64) -> u64 {
    bytes.div_ceil(TEXT_BYTES_PER_TOKEN)
}

/// Estimated tokens of an image of `(width, height)` px: ⌈w × h / [`IMAGE_PX_PER_TOKEN`]⌉;
/// [`UNKNOWN_IMAGE_TOKENS`] when the size is unknown.
pub fn image_tokens(dims: Option<(u32, u32)>) -> u64 {
    dims.map_or(UNKNOWN_IMAGE_TOKENS, |(w, h)| {
        (u64::from(w) * u64::from(h)).div_ceil(IMAGE_PX_PER_TOKEN)
    })
}

/// A request's blocks in cache order.
fn blocks(dialect: Dialect, body: &[u8]) -> Result<Vec<Block>, ParseError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
    let Value::Object(top) = value else {
        return Err(ParseError::Shape {
            dialect: dialect.as_str(),
            detail: "the body is not a JSON object".to_owned(),
        });
    };
    let mut out = Blocks::default();
    let layout = dialect.format().prompt_layout();
    let tools = top.get(layout.tools).and_then(|t| match layout.tools_list {
        Some(list) => t.get(list),
        None => Some(t),
    });
    for t in tools.and_then(Value::as_array).into_iter().flatten() {
        out.push(Section::Tools, None, t);
    }
    let system = layout.system.iter().find_map(|k| top.get(*k));
    match (system, layout.system_parts) {
        (Some(Value::Object(s)), Some(parts)) => out.message(Section::System, s, parts),
        (other, _) => out.list_or_text(Section::System, other),
    }
    match top.get(layout.turns) {
        // A string `input` (Responses) is one user message.
        Some(v) if layout.string_turns && !v.is_array() => {
            out.list_or_text(Section::Message(0), Some(v))
        }
        list => out.messages(list, layout.parts),
    }
    // A top-level `cache_control` (Anthropic's automatic caching) marks the last block.
    if let (Some(marker), Some(last)) = (top.get("cache_control"), out.0.last_mut()) {
        last.breakpoint = Some(last.breakpoint.unwrap_or(false) || is_long(marker));
    }
    Ok(out.0)
}

/// Blocks being collected, digests chained as they are pushed.
#[derive(Default)]
struct Blocks(Vec<Block>);

impl Blocks {
    /// Push one block: `head` (a message's other fields, for its first block) and `value`.
    /// A Converse `{"cachePoint": …}` block is no block: it marks the block before it as a
    /// breakpoint (`"ttl": "1h"` the long TTL).
    fn push(&mut self, section: Section, head: Option<&Map<String, Value>>, value: &Value) {
        if let Some(point) = cache_point(value) {
            if let Some(last) = self.0.last_mut() {
                last.breakpoint = Some(last.breakpoint.unwrap_or(false) || is_long(point));
            }
            return;
        }
        let mut images = 0u32;
        let mut image_tok = 0u64;
        let mut marker: Option<bool> = None;
        let canon = canonical(value, true, &mut images, &mut image_tok, &mut marker);
        let mut text = String::new();
        if let Some(h) = head {
            text.push_str(&serde_json::to_string(h).unwrap_or_default());
        }
        let section_tag = match section {
            Section::Tools => "t",
            Section::System => "s",
            Section::Message(_) => "m",
        };
        text.push_str(section_tag);
        let block_text = serde_json::to_string(&canon).unwrap_or_default();
        let tokens =
            text_tokens((text.len() - section_tag.len() + block_text.len()) as u64) + image_tok;
        text.push_str(&block_text);
        let parent = self.0.last().map_or(0, |b| b.prefix);
        let mut chained = parent.to_le_bytes().to_vec();
        chained.extend_from_slice(text.as_bytes());
        self.0.push(Block {
            section,
            prefix: xxh3_64(&chained),
            tokens,
            breakpoint: marker,
            images,
        });
    }

    /// A string (one block) or an array (one block per element).
    fn list_or_text(&mut self, section: Section, value: Option<&Value>) {
        match value {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    self.push(section, None, item);
                }
            }
            Some(v) => self.push(section, None, v),
        }
    }

    /// A message list: each message's content blocks (its other fields with the first).
    fn messages(&mut self, list: Option<&Value>, content_key: &str) {
        let items = list.and_then(Value::as_array);
        for (i, m) in items.into_iter().flatten().enumerate() {
            match m {
                Value::Object(obj) => self.message(Section::Message(i), obj, content_key),
                other => self.push(Section::Message(i), None, other),
            }
        }
    }

    fn message(&mut self, section: Section, obj: &Map<String, Value>, content_key: &str) {
        let mut head = obj.clone();
        let content = head.remove(content_key);
        match content {
            Some(Value::Array(items)) if !items.is_empty() => {
                for (k, item) in items.iter().enumerate() {
                    self.push(section, (k == 0).then_some(&head), item);
                }
            }
            Some(v) => self.push(section, Some(&head), &v),
            None => self.push(section, None, &Value::Object(head)),
        }
    }
}

/// The value of a Converse cache point block (`{"cachePoint": {…}}` and nothing else).
fn cache_point(value: &Value) -> Option<&Value> {
    let obj = value.as_object().filter(|o| o.len() == 1)?;
    obj.get("cachePoint")
}

/// Whether a `cache_control` value asks for the long TTL (`"ttl": "1h"`).
fn is_long(marker: &Value) -> bool {
    marker.get("ttl").and_then(Value::as_str) == Some("1h")
}

/// `value` without `cache_control` members and with each image replaced by `{"image":
/// <digest>}` (so its base64 is hashed but not counted as text); counts images and their
/// tokens, and notes a `cache_control` marker at the top level (`top`).
fn canonical(
    value: &Value,
    top: bool,
    images: &mut u32,
    image_tok: &mut u64,
    marker: &mut Option<bool>,
) -> Value {
    match value {
        Value::Object(obj) => {
            if let Some(data) = image_payload(obj) {
                *images += 1;
                *image_tok += image_tokens(data.and_then(crate::images::probe::dimensions));
                if top {
                    if let Some(m) = obj.get("cache_control") {
                        *marker = Some(is_long(m));
                    }
                }
                let digest = xxh3_64(serde_json::to_string(obj).unwrap_or_default().as_bytes());
                return Value::String(format!("image:{digest:016x}"));
            }
            let mut out = Map::new();
            for (k, v) in obj {
                if k == "cache_control" {
                    if top {
                        *marker = Some(is_long(v));
                    }
                    continue;
                }
                out.insert(k.clone(), canonical(v, false, images, image_tok, marker));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| canonical(v, false, images, image_tok, marker))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Whether `obj` is an image block / part. Shapes: Anthropic `{"type":"image","source":…}`,
/// OpenAI Chat `{"type":"image_url","image_url":{"url":…}}`, Responses
/// `{"type":"input_image","image_url":…}`, Gemini `{"inlineData":{"mimeType":"image/…",
/// "data":…}}` (or `inline_data`, `fileData`).
pub fn is_image(obj: &Map<String, Value>) -> bool {
    image_payload(obj).is_some()
}

/// If `obj` is an image block / part: `Some(payload)`, the base64 or data URL when inline
/// (`None` for a URL or file reference); shapes as [`is_image`].
fn image_payload(obj: &Map<String, Value>) -> Option<Option<&str>> {
    match obj.get("type").and_then(Value::as_str) {
        Some("image") => {
            let source = obj.get("source");
            let kind = source.and_then(|s| s.get("type")).and_then(Value::as_str);
            return Some(match kind {
                Some("base64") => source.and_then(|s| s.get("data")).and_then(Value::as_str),
                _ => None,
            });
        }
        Some("image_url") => {
            let url = obj.get("image_url");
            let url = url
                .and_then(|u| u.get("url"))
                .or(url)
                .and_then(Value::as_str);
            return Some(url.filter(|u| u.starts_with("data:")));
        }
        Some("input_image") => {
            let url = obj.get("image_url").and_then(Value::as_str);
            return Some(url.filter(|u| u.starts_with("data:")));
        }
        _ => {}
    }
    // Converse: `{"image": {"format", "source": {"bytes"}}}`.
    if let Some(image) = obj.get("image").filter(|_| obj.len() == 1) {
        return Some(
            image
                .get("source")
                .and_then(|s| s.get("bytes"))
                .and_then(Value::as_str),
        );
    }
    for key in ["inlineData", "inline_data"] {
        if let Some(inline) = obj.get(key) {
            let mime = inline
                .get("mimeType")
                .or_else(|| inline.get("mime_type"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if mime.starts_with("image/") {
                return Some(inline.get("data").and_then(Value::as_str));
            }
        }
    }
    for key in ["fileData", "file_data"] {
        if let Some(file) = obj.get(key) {
            let mime = file
                .get("mimeType")
                .or_else(|| file.get("mime_type"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if mime.starts_with("image/") {
                return Some(None);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
