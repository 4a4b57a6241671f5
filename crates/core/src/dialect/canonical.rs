//! Canonical JSON: one text per JSON value, whatever spelling it was sent in (object keys
//! sorted by their UTF-8 bytes, one member per key, no whitespace, strings and numbers as
//! serde_json writes them). What a turn's call arguments are compared by
//! ([`super::turn::Call::arguments`]) and what a message digest hashes
//! (`crate::dialect::fingerprint`); [`Node`] is the borrowed tree the digest normalizes
//! before writing it.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value;

use crate::json::scan;

/// Canonical JSON text of `v`: object keys sorted (by their UTF-8 bytes), no whitespace,
/// strings and numbers as serde_json writes them.
pub(crate) fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_node(&Node::from_value(v), &mut out);
    out
}

/// A JSON value as the canonical form reads it, borrowing from the text it was read from
/// (or from a `serde_json::Value`): objects hold one member per key (the last one, as
/// serde_json keeps it), sorted by the key's UTF-8 bytes; strings decoded; numbers and
/// literals in the text serde_json writes for them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node<'a> {
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
    Array(Vec<Node<'a>>),
    Str(Cow<'a, str>),
    /// A number or `true` / `false` / `null`, as serde_json writes it.
    Atom(Cow<'a, str>),
}

/// Deepest nesting the scanned read ([`Node::scanned`]) takes, levels; a deeper message is
/// read through a `serde_json::Value` instead (whose own limit, 128, then decides).
const MAX_SCAN_DEPTH: usize = 100;

/// JSON whitespace (RFC 8259 §2).
const JSON_WS: [char; 4] = [' ', '\t', '\n', '\r'];

impl<'a> Node<'a> {
    /// `v` as a node.
    pub(crate) fn from_value(v: &'a Value) -> Node<'a> {
        match v {
            Value::Object(map) => Node::Object(
                // A serde_json map is already one entry per key, sorted by the key's bytes.
                map.iter()
                    .map(|(k, v)| (Cow::Borrowed(k.as_str()), Node::from_value(v)))
                    .collect(),
            ),
            Value::Array(items) => Node::Array(items.iter().map(Node::from_value).collect()),
            Value::String(s) => Node::Str(Cow::Borrowed(s)),
            scalar => Node::Atom(Cow::Owned(scalar.to_string())),
        }
    }

    /// `json` read by the span scanner (`crate::json::scan`) without building a
    /// `serde_json::Value`: `Some` only when serde_json parses `json` and the node is the one
    /// [`Node::from_value`] gives for its `Value`. The scanner validates the syntax as
    /// serde_json's `IgnoredAny` does; what that lets through and a `Value` parse refuses is
    /// refused here too: every string with an escape is decoded by serde_json (a lone
    /// surrogate fails), every number that is not a plain integer is parsed by serde_json
    /// (out of range fails), and nesting past [`MAX_SCAN_DEPTH`] is not taken.
    pub(crate) fn scanned(json: &'a [u8]) -> Option<Node<'a>> {
        let text = std::str::from_utf8(json).ok()?;
        let ix = scan::validate(text).ok()?;
        let start = text.len() - text.trim_start_matches(JSON_WS).len();
        let end = text.trim_end_matches(JSON_WS).len();
        Node::scanned_at(text, &ix, start..end, 0)
    }

    fn scanned_at(
        text: &'a str,
        ix: &scan::Index,
        r: Range<usize>,
        depth: usize,
    ) -> Option<Node<'a>> {
        if depth > MAX_SCAN_DEPTH {
            return None;
        }
        let raw = text.get(r.clone())?;
        match raw.as_bytes().first()? {
            b'{' => {
                let obj = scan::object_in(text, Some(ix), r.start)?;
                let mut members = Vec::with_capacity(obj.members.len());
                for m in obj.members {
                    let value = Node::scanned_at(text, ix, m.value, depth + 1)?;
                    members.push((Cow::Owned(m.key), value));
                }
                Some(Node::Object(one_per_key(members)))
            }
            b'[' => {
                let elements = scan::array_in(text, Some(ix), r.start)?;
                let mut items = Vec::with_capacity(elements.len());
                for el in elements {
                    items.push(Node::scanned_at(text, ix, el, depth + 1)?);
                }
                Some(Node::Array(items))
            }
            b'"' => scan::decode_cow(raw).map(Node::Str),
            b't' | b'f' | b'n' => Some(Node::Atom(Cow::Borrowed(raw))),
            _ => canonical_number(raw).map(Node::Atom),
        }
    }

    /// The member `key` of an object.
    pub(crate) fn get(&self, key: &str) -> Option<&Node<'a>> {
        let Node::Object(members) = self else {
            return None;
        };
        let at = members
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()?;
        members.get(at).map(|(_, v)| v)
    }

    /// The string member `key` of an object (`Value::get(key).and_then(Value::as_str)`).
    pub(crate) fn str_member(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// An object's members, one per key (the last one, as serde_json's map keeps), sorted by
/// the key's UTF-8 bytes.
fn one_per_key<'a>(mut members: Vec<(Cow<'a, str>, Node<'a>)>) -> Vec<(Cow<'a, str>, Node<'a>)> {
    // Reversed, then a stable sort: of equal keys, the last one sent comes first and stays.
    members.reverse();
    members.sort_by(|a, b| a.0.cmp(&b.0));
    members.dedup_by(|later, kept| later.0 == kept.0);
    members
}

/// The sorted members of an object node, to change.
pub(crate) fn members_mut<'n, 'a>(
    n: &'n mut Node<'a>,
) -> Option<&'n mut Vec<(Cow<'a, str>, Node<'a>)>> {
    match n {
        Node::Object(members) => Some(members),
        _ => None,
    }
}

/// Remove the member `key` of sorted `members`.
pub(crate) fn remove_member(members: &mut Vec<(Cow<'_, str>, Node<'_>)>, key: &str) {
    if let Ok(at) = members.binary_search_by(|(k, _)| k.as_ref().cmp(key)) {
        members.remove(at);
    }
}

/// A number's text as serde_json writes the number it parses it to: a plain integer that
/// fits its `u64` / `i64` as sent, anything else (a fraction, an exponent, `-0`, an integer
/// past 64 bits: an `f64` to serde_json) parsed and written by serde_json. `None` when
/// serde_json refuses it (out of range).
fn canonical_number(raw: &str) -> Option<Cow<'_, str>> {
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let plain = if raw.starts_with('-') {
            raw != "-0" && raw.parse::<i64>().is_ok()
        } else {
            raw.parse::<u64>().is_ok()
        };
        if plain {
            return Some(Cow::Borrowed(raw));
        }
    }
    let n: serde_json::Number = serde_json::from_str(raw).ok()?;
    Some(Cow::Owned(Value::Number(n).to_string()))
}

/// Write `n` as canonical JSON text (object members already in key order).
pub(crate) fn write_node(n: &Node<'_>, out: &mut String) {
    match n {
        Node::Object(members) => {
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(k, out);
                out.push(':');
                write_node(v, out);
            }
            out.push('}');
        }
        Node::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_node(item, out);
            }
            out.push(']');
        }
        Node::Str(s) => write_str(s, out),
        Node::Atom(a) => out.push_str(a),
    }
}

/// A string as serde_json writes it: quoted, with `"`, `\\` and the control characters
/// escaped (and nothing else).
fn write_str(s: &str, out: &mut String) {
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    out.push_str(&Value::String(s.to_owned()).to_string());
}

/// The member `key` of an object node, to change.
pub(crate) fn member_mut<'n, 'a>(n: &'n mut Node<'a>, key: &str) -> Option<&'n mut Node<'a>> {
    let members = members_mut(n)?;
    let at = members
        .binary_search_by(|(k, _)| k.as_ref().cmp(key))
        .ok()?;
    members.get_mut(at).map(|(_, v)| v)
}

/// Replace the value of the existing member `key` of an object node.
pub(crate) fn set_member<'a>(n: &mut Node<'a>, key: &str, value: Node<'a>) {
    if let Some(v) = member_mut(n, key) {
        *v = value;
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
    fn canonical_sorts_keys_at_every_depth() {
        let v: Value =
            serde_json::from_str(r#"{"b":1,"a":{"d":[{"z":1,"y":"é\n"}],"c":null}}"#).unwrap();
        assert_eq!(
            canonical(&v),
            r#"{"a":{"c":null,"d":[{"y":"é\n","z":1}]},"b":1}"#
        );
    }
}
