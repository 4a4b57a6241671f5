//! The one span scanner: a byte-offset scanner over JSON text that is already known to be
//! valid (validated once by [`super::parse`] before any scan). It lists an object's members and
//! an array's elements with their byte ranges in the original body, so edits can be spliced
//! ([`super::edit::splice`]) without re-serializing anything.
//!
//! Every function is total: on text that is not what it expects it returns `None` instead of
//! panicking, so a scanner bug can only make a pass skip a body, never crash the proxy.

use std::ops::Range;

/// One `"key": value` member of an object, with absolute byte offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// The key, decoded (JSON escapes resolved).
    pub key: String,
    /// Offset of the key's opening quote.
    pub key_start: usize,
    /// The value's bytes (no surrounding whitespace).
    pub value: Range<usize>,
}

/// A scanned object: its members in order, and the offsets of its braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Object {
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

/// `i` at an opening quote; returns the offset just past the closing quote.
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// `i` at the first byte of a value; returns the offset just past it.
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
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
    if !raw.contains('\\') {
        return raw
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .map(str::to_owned);
    }
    serde_json::from_str::<String>(raw).ok()
}

/// Scan the object whose `{` is at `start` (after optional whitespace) in `text`.
pub(crate) fn object_at(text: &str, start: usize) -> Option<Object> {
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
        let vend = skip_value(b, vstart)?;
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
        let end = skip_value(b, i)?;
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
