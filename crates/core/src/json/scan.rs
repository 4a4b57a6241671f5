//! The one span scanner: a byte-offset scanner over JSON text that is already known to be
//! valid (validated once by [`super::parse`] before any scan). It lists an object's members and
//! an array's elements with their byte ranges in the original body, so edits can be spliced
//! ([`super::edit::splice`]) without re-serializing anything.
//!
//! Every function is total: on text that is not what it expects it returns `None` instead of
//! panicking, so a scanner bug can only make a pass skip a body, never crash the proxy.

use std::borrow::Cow;
use std::ops::Range;

/// One `"key": value` member of an object, with absolute byte offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The key, decoded (JSON escapes resolved).
    pub key: String,
    /// Offset of the key's opening quote.
    pub key_start: usize,
    /// The value's bytes (no surrounding whitespace).
    pub value: Range<usize>,
}

/// A scanned object: its members in order, and the offsets of its braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Offset of `{`.
    pub open: usize,
    /// Offset just past `}`.
    pub end: usize,
    pub members: Vec<Member>,
}

impl Object {
    /// The last member named `key` (JSON's "last one wins", as `serde_json` reads it).
    pub(crate) fn get(&self, key: &str) -> Option<&Member> {
        self.members.iter().rev().find(|m| m.key == key)
    }

    /// The first member named `key`.
    pub(crate) fn first(&self, key: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.key == key)
    }

    /// The last member named any of `keys` (a field with an alias, e.g. Gemini's
    /// `inlineData` / `inline_data`).
    pub(crate) fn get_any(&self, keys: &[&str]) -> Option<&Member> {
        self.members
            .iter()
            .rev()
            .find(|m| keys.contains(&m.key.as_str()))
    }

    /// Indexes of every member named `key`.
    pub(crate) fn indexes_of(&self, key: &str) -> Vec<usize> {
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.key == key)
            .map(|(i, _)| i)
            .collect()
    }

    /// Byte ranges that remove the members at `indexes` (any order, duplicates ignored) and
    /// leave valid JSON. Consecutive removed members are merged into one range.
    pub(crate) fn removal_ranges(&self, indexes: &[usize]) -> Vec<Range<usize>> {
        let spans: Vec<Range<usize>> = self
            .members
            .iter()
            .map(|m| m.key_start..m.value.end)
            .collect();
        super::edit::removal_ranges(&spans, indexes)
    }

    /// Where to insert a new member so it comes last, and whether it needs a leading comma.
    pub(crate) fn append_point(&self) -> (usize, bool) {
        match self.members.last() {
            Some(m) => (m.value.end, true),
            None => (self.open + 1, false),
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Strings at least this long, bytes with their quotes, get an entry in the [`Index`] (a
/// later scan jumps over them); shorter ones are cheaper to scan again than to look up.
const INDEXED_STRING: usize = 64;

/// Where every object, array and long string of a validated text ends: built by
/// [`validate`] in its one pass, so the scans after it jump over a nested value in
/// O(log n) instead of reading it again at every level (`docs/dev/architecture.md`). Offsets are
/// `u32` (a text over 4 GiB gets no entries and is scanned as without an index).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    /// `(start, end)`: the offset of the opening `{`, `[` or `"` and the offset just past the
    /// value, sorted by start.
    spans: Vec<(u32, u32)>,
}

impl Index {
    /// The offset just past the container or long string that opens at `start`.
    fn end_of(&self, start: usize) -> Option<usize> {
        let s = u32::try_from(start).ok()?;
        let i = self.spans.binary_search_by_key(&s, |&(a, _)| a).ok()?;
        self.spans.get(i).map(|&(_, e)| e as usize)
    }
}

/// Why [`validate`] refused a text: what it expected, and the byte offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {at}")]
pub(crate) struct SyntaxError {
    pub what: &'static str,
    pub at: usize,
}

fn syntax(what: &'static str, at: usize) -> SyntaxError {
    SyntaxError { what, at }
}

/// Bytes a string scan reads at once: a chunk with none of `"`, `\\` or a control byte is
/// skipped whole (the loop vectorizes).
const CHUNK: usize = 32;

/// Whether `chunk` holds a byte that ends the fast string scan.
fn special(chunk: &[u8; CHUNK]) -> bool {
    chunk.iter().fold(false, |acc, &c| {
        acc | (c == b'"') | (c == b'\\') | (c < 0x20)
    })
}

/// `i` at an opening quote of text not yet validated: the offset just past the closing quote,
/// checking escapes and rejecting control bytes (RFC 8259 §7; `\\u` escapes are not checked
/// for surrogate pairs, as `serde_json` does not when it skips a value).
fn string_end_checked(b: &[u8], i: usize) -> Result<usize, SyntaxError> {
    let mut j = i + 1;
    loop {
        while let Some(chunk) = b
            .get(j..j + CHUNK)
            .and_then(|c| <&[u8; CHUNK]>::try_from(c).ok())
        {
            if special(chunk) {
                break;
            }
            j += CHUNK;
        }
        match b.get(j) {
            None => return Err(syntax("EOF while parsing a string", j)),
            Some(b'"') => return Ok(j + 1),
            Some(b'\\') => match b.get(j + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => j += 2,
                Some(b'u') => {
                    let hex = b
                        .get(j + 2..j + 6)
                        .ok_or(syntax("EOF while parsing a string", j))?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return Err(syntax("invalid escape", j));
                    }
                    j += 6;
                }
                Some(_) => return Err(syntax("invalid escape", j)),
                None => return Err(syntax("EOF while parsing a string", j + 1)),
            },
            Some(&c) if c < 0x20 => {
                return Err(syntax("control character while parsing a string", j))
            }
            Some(_) => j += 1,
        }
    }
}

/// `i` at the first byte of a number: the offset just past it (RFC 8259 §6 grammar).
fn number_end_checked(b: &[u8], mut i: usize) -> Result<usize, SyntaxError> {
    let digits = |b: &[u8], mut i: usize| {
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(b, i + 1),
        _ => return Err(syntax("invalid number", i)),
    }
    if b.get(i) == Some(&b'.') {
        let end = digits(b, i + 1);
        if end == i + 1 {
            return Err(syntax("invalid number", end));
        }
        i = end;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = digits(b, i);
        if end == i {
            return Err(syntax("invalid number", end));
        }
        i = end;
    }
    Ok(i)
}

/// Validate `text` as one JSON value (RFC 8259; whitespace around it allowed; any depth: the
/// parser keeps its own stack) and index it in the same pass. Accepts exactly what
/// `serde_json` accepts when it skips a value (`serde::de::IgnoredAny`): tested against it.
///
/// Errors: the first [`SyntaxError`].
pub(crate) fn validate(text: &str) -> Result<Index, SyntaxError> {
    let mut v = Validator {
        b: text.as_bytes(),
        indexed: u32::try_from(text.len()).is_ok(),
        spans: Vec::new(),
        stack: Vec::new(),
    };
    let mut want = Want::Value;
    let mut i = 0usize;
    loop {
        i = skip_ws(v.b, i);
        let Some(&c) = v.b.get(i) else {
            return Err(syntax("EOF while parsing a value", i));
        };
        match want {
            Want::Value | Want::ValueOrClose => {
                match c {
                    b']' if want == Want::ValueOrClose => {
                        close(&mut v.stack, &mut v.spans, i)?;
                        i += 1;
                    }
                    b'{' | b'[' => {
                        v.open(c, i);
                        i += 1;
                        want = if c == b'{' {
                            Want::KeyOrClose
                        } else {
                            Want::ValueOrClose
                        };
                        continue;
                    }
                    _ => i = v.scalar(c, i)?,
                }
                if v.stack.is_empty() {
                    break;
                }
                want = Want::CommaOrClose;
            }
            Want::KeyOrClose | Want::Key => {
                if c == b'}' && want == Want::KeyOrClose {
                    close(&mut v.stack, &mut v.spans, i)?;
                    i += 1;
                    if v.stack.is_empty() {
                        break;
                    }
                    want = Want::CommaOrClose;
                    continue;
                }
                i = v.key(c, i)?;
                want = Want::Value;
            }
            Want::CommaOrClose => {
                let top = v.stack.last().map_or(0, |&(t, _)| t);
                match (c, top) {
                    (b',', b'{') => want = Want::Key,
                    (b',', _) => want = Want::Value,
                    (b'}', b'{') | (b']', b'[') => {
                        close(&mut v.stack, &mut v.spans, i)?;
                        if v.stack.is_empty() {
                            i += 1;
                            break;
                        }
                    }
                    _ => return Err(syntax("expected `,` or the closing bracket", i)),
                }
                i += 1;
            }
        }
    }
    if skip_ws(v.b, i) != v.b.len() {
        return Err(syntax("trailing characters", skip_ws(v.b, i)));
    }
    Ok(Index { spans: v.spans })
}

/// What [`validate`] reads next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A value (top level, after `:` or after `,` in an array).
    Value,
    /// A value or `]` (just after `[`).
    ValueOrClose,
    /// A key or `}` (just after `{`).
    KeyOrClose,
    /// A key (after `,` in an object).
    Key,
    /// `,` or the closing bracket of the innermost container.
    CommaOrClose,
}

/// [`validate`]'s state: the text, the index it builds and its open containers.
struct Validator<'a> {
    b: &'a [u8],
    /// Whether offsets fit the index's `u32`s (texts over 4 GiB are validated, not indexed).
    indexed: bool,
    spans: Vec<(u32, u32)>,
    /// Open containers: their bracket and their entry in `spans` (usize::MAX: none).
    stack: Vec<(u8, usize)>,
}

impl Validator<'_> {
    /// Open the container whose bracket `c` is at `i`.
    #[inline]
    fn open(&mut self, c: u8, i: usize) {
        let entry = if self.indexed {
            self.spans.push((i as u32, 0));
            self.spans.len() - 1
        } else {
            usize::MAX
        };
        self.stack.push((c, entry));
    }

    /// The end of the string, number or literal starting with `c` at `i`; a long string is
    /// indexed.
    #[inline]
    fn scalar(&mut self, c: u8, i: usize) -> Result<usize, SyntaxError> {
        let b = self.b;
        match c {
            b'"' => {
                let end = string_end_checked(b, i)?;
                if self.indexed && end - i >= INDEXED_STRING {
                    self.spans.push((i as u32, end as u32));
                }
                Ok(end)
            }
            b'-' | b'0'..=b'9' => number_end_checked(b, i),
            b't' | b'f' | b'n' => {
                let word: &[u8] = match c {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                if b.get(i..i + word.len()) != Some(word) {
                    return Err(syntax("expected ident", i));
                }
                Ok(i + word.len())
            }
            _ => Err(syntax("expected value", i)),
        }
    }

    /// Past the key starting with `c` at `i` and its `:`.
    #[inline]
    fn key(&self, c: u8, i: usize) -> Result<usize, SyntaxError> {
        if c != b'"' {
            return Err(syntax("key must be a string", i));
        }
        let i = skip_ws(self.b, string_end_checked(self.b, i)?);
        if self.b.get(i) != Some(&b':') {
            return Err(syntax("expected `:`", i));
        }
        Ok(i + 1)
    }
}

/// Pop the innermost container, closed by the bracket at `i`, and record its end.
fn close(
    stack: &mut Vec<(u8, usize)>,
    spans: &mut [(u32, u32)],
    i: usize,
) -> Result<(), SyntaxError> {
    let (_, entry) = stack.pop().ok_or(syntax("unbalanced bracket", i))?;
    if let Some(span) = spans.get_mut(entry) {
        span.1 = (i + 1) as u32;
    }
    Ok(())
}

/// `i` at an opening quote of valid JSON; returns the offset just past the closing quote.
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        j += memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
        match b[j] {
            b'\\' => j += 2,
            _ => return Some(j + 1),
        }
    }
}

/// `i` at the first byte of a value of valid JSON; returns the offset just past it (from
/// `ix` when it has the value).
fn skip_value(b: &[u8], ix: Option<&Index>, i: usize) -> Option<usize> {
    let first = *b.get(i)?;
    if first == b'"' {
        // A short string ends within the first INDEXED_STRING bytes and has no entry: found
        // there without a lookup.
        let window = b.get(i + 1..b.len().min(i + INDEXED_STRING))?;
        if let Some(q) = memchr::memchr2(b'"', b'\\', window) {
            if window[q] == b'"' {
                return Some(i + 1 + q + 1);
            }
        }
    }
    if matches!(first, b'"' | b'{' | b'[') {
        if let Some(end) = ix.and_then(|ix| ix.end_of(i)) {
            return Some(end);
        }
    }
    match first {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// Decode a JSON string literal (with quotes).
pub(crate) fn decode_str(raw: &str) -> Option<String> {
    decode_cow(raw).map(Cow::into_owned)
}

/// [`decode_str`], borrowing the text between the quotes when it holds no escape (a string
/// with one is decoded by serde_json, so a lone surrogate escape fails as it does there).
pub(crate) fn decode_cow(raw: &str) -> Option<Cow<'_, str>> {
    if !raw.contains('\\') {
        return raw
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .map(Cow::Borrowed);
    }
    serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
}

/// Scan the object whose `{` is at `start` (after optional whitespace) in `text`.
pub(crate) fn object_at(text: &str, start: usize) -> Option<Object> {
    object_in(text, None, start)
}

/// [`object_at`] with the text's [`Index`] (from [`validate`]), when there is one.
pub(crate) fn object_in(text: &str, ix: Option<&Index>, start: usize) -> Option<Object> {
    let b = text.as_bytes();
    let open = skip_ws(b, start);
    if b.get(open) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut i = skip_ws(b, open + 1);
    if b.get(i) == Some(&b'}') {
        return Some(Object {
            open,
            end: i + 1,
            members,
        });
    }
    loop {
        let key_start = i;
        let key_end = skip_string(b, key_start)?;
        let key = decode_str(text.get(key_start..key_end)?)?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let vstart = skip_ws(b, i + 1);
        let vend = skip_value(b, ix, vstart)?;
        members.push(Member {
            key,
            key_start,
            value: vstart..vend,
        });
        i = skip_ws(b, vend);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => {
                return Some(Object {
                    open,
                    end: i + 1,
                    members,
                })
            }
            _ => return None,
        }
    }
}

/// The element ranges of the array whose `[` is at `start` (after optional whitespace).
pub(crate) fn array_at(text: &str, start: usize) -> Option<Vec<Range<usize>>> {
    array_in(text, None, start)
}

/// [`array_at`] with the text's [`Index`] (from [`validate`]), when there is one.
pub(crate) fn array_in(text: &str, ix: Option<&Index>, start: usize) -> Option<Vec<Range<usize>>> {
    let b = text.as_bytes();
    let open = skip_ws(b, start);
    if b.get(open) != Some(&b'[') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = skip_ws(b, open + 1);
    if b.get(i) == Some(&b']') {
        return Some(out);
    }
    loop {
        let end = skip_value(b, ix, i)?;
        out.push(i..end);
        i = skip_ws(b, end);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b']' => return Some(out),
            _ => return None,
        }
    }
}

/// The text of `range` in `text` (empty when out of bounds).
pub(crate) fn slice<'t>(text: &'t str, range: &Range<usize>) -> &'t str {
    text.get(range.clone()).unwrap_or("")
}

/// The decoded string at `range`, when it is a JSON string.
pub(crate) fn string_at(text: &str, range: &Range<usize>) -> Option<String> {
    let raw = slice(text, range);
    if raw.starts_with('"') {
        decode_str(raw)
    } else {
        None
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
    use crate::json::edit::{splice, Edit};

    #[test]
    fn members_and_arrays() {
        let t = r#" { "a" : 1, "b\u0041":{"x":[1,"]}"]} ,"c":"s\"q" } "#;
        let o = object_at(t, 0).unwrap();
        let keys: Vec<&str> = o.members.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, vec!["a", "bA", "c"]);
        assert_eq!(slice(t, &o.members[1].value), r#"{"x":[1,"]}"]}"#);
        assert_eq!(string_at(t, &o.members[2].value).as_deref(), Some("s\"q"));
        let inner = object_at(t, o.members[1].value.start).unwrap();
        let arr = array_at(t, inner.members[0].value.start).unwrap();
        assert_eq!(arr.len(), 2);
        assert!(object_at("[1]", 0).is_none());
        assert!(object_at(r#"{"a":}"#, 0).is_none());
        assert_eq!(array_at("[ ]", 0).unwrap().len(), 0);
    }

    fn serde_accepts(t: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok()
    }

    #[test]
    fn validate_accepts_what_serde_json_accepts() {
        let cases = [
            "{}",
            "[]",
            " {\"a\" : [1, -0.5e+3, true, false, null, \"\\u00e9\\n\"]} ",
            "0",
            "-0",
            "\"s\"",
            "1.",
            "01",
            "-",
            "1e",
            "1e+",
            ".5",
            "[1,]",
            "{,}",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "[1 2]",
            "{\"a\":1 \"b\":2}",
            "{1:2}",
            "[\"a\\x\"]",
            "[\"\\u12\"]",
            "[\"\\ud800\"]",
            "[\"a\u{1}\"]",
            "[\"a\u{7f}\"]",
            "[tru]",
            "[nul]",
            "[true false]",
            "{} {}",
            "{}x",
            "",
            " ",
            "[",
            "]",
            "{\"a\":[}",
            "[{]}",
            "\"\\\"",
            "[1e5, 1E-5, 0.0]",
            "[-01]",
            "[1.5.5]",
            "[\"\\/\\b\\f\\r\\t\"]",
            "\t[\r\n]\n",
            "[1,\n2]",
        ];
        for t in cases {
            assert_eq!(validate(t).is_ok(), serde_accepts(t), "{t:?}");
        }
        // Deep nesting: no depth limit (serde_json skips values with its own stack too).
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(validate(&deep).is_ok() && serde_accepts(&deep));
        assert!(validate(&deep[1..]).is_err());
    }

    #[test]
    fn validate_agrees_with_serde_json_on_mutations() {
        // Every one-byte deletion, and replacements from an alphabet of JSON's bytes, of a
        // document that has every kind of token.
        let doc = r#"{"a":[1,-2.5e3,{"b":"x\"y\u0041"},true,false,null],"c":{},"d":[],"e":"long string of sixty-four bytes or more, so that it is indexed..."}"#;
        assert!(validate(doc).is_ok());
        let alphabet = b"{}[],:\" \\01-.eE+tfnu\x01 a";
        let mut checked = 0;
        for i in 0..doc.len() {
            let mut del = doc.as_bytes().to_vec();
            del.remove(i);
            let mut variants = vec![del];
            for &c in alphabet {
                let mut rep = doc.as_bytes().to_vec();
                rep[i] = c;
                variants.push(rep.clone());
                rep.insert(i, c);
                variants.push(rep);
            }
            for v in variants {
                let Ok(t) = std::str::from_utf8(&v) else {
                    continue;
                };
                assert_eq!(validate(t).is_ok(), serde_accepts(t), "{t}");
                checked += 1;
            }
        }
        assert!(checked > 5_000);
    }

    #[test]
    fn the_index_gives_every_container_and_long_string() {
        let long = "x".repeat(100);
        let t = format!(r#" {{"a":[1,{{"b":"{long}"}}],"c":"short"}} "#);
        let ix = validate(&t).unwrap();
        let o = object_in(&t, Some(&ix), 0).unwrap();
        assert_eq!(o, object_at(&t, 0).unwrap());
        let a = &o.members[0].value;
        assert_eq!(ix.end_of(a.start), Some(a.end));
        assert_eq!(ix.end_of(1), Some(t.len() - 1));
        let inner = array_in(&t, Some(&ix), a.start).unwrap();
        assert_eq!(inner, array_at(&t, a.start).unwrap());
        let b = object_in(&t, Some(&ix), inner[1].start).unwrap();
        assert_eq!(
            ix.end_of(b.members[0].value.start),
            Some(b.members[0].value.end)
        );
        // A short string has no entry.
        assert_eq!(ix.end_of(o.members[1].value.start), None);
    }

    fn remove(t: &str, idx: &[usize]) -> String {
        let o = object_at(t, 0).unwrap();
        let edits = o
            .removal_ranges(idx)
            .into_iter()
            .map(|range| Edit {
                range,
                replacement: vec![],
            })
            .collect();
        String::from_utf8(splice(t.as_bytes(), edits).unwrap()).unwrap()
    }

    #[test]
    fn removal_keeps_valid_json() {
        let t = r#"{"a":1, "b":2, "c":3, "d":4}"#;
        assert_eq!(remove(t, &[0]), r#"{"b":2, "c":3, "d":4}"#);
        assert_eq!(remove(t, &[3]), r#"{"a":1, "b":2, "c":3}"#);
        assert_eq!(remove(t, &[1, 2]), r#"{"a":1, "d":4}"#);
        assert_eq!(remove(t, &[2, 3]), r#"{"a":1, "b":2}"#);
        assert_eq!(remove(t, &[0, 3]), r#"{"b":2, "c":3}"#);
        assert_eq!(remove(t, &[0, 1, 2, 3]), r#"{}"#);
        assert_eq!(remove(t, &[0, 2]), r#"{"b":2, "d":4}"#);
        for idx in [&[0usize][..], &[1, 3], &[0, 1, 3], &[1, 2, 3]] {
            let out = remove(t, idx);
            assert!(
                serde_json::from_str::<serde_json::Value>(&out).is_ok(),
                "{out}"
            );
        }
    }
}
