//! Test helpers over recorded responses: the fixtures, an SSE splitter standing in for the
//! real framer, and the byte mutations the differential tests feed the readers.

use std::path::PathBuf;

/// A fixture under `tests/fixtures/responses/`.
pub(crate) fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/fixtures/responses")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A recorded event stream split at blank lines (`\n\n` or `\r\n\r\n`): per event its
/// `event:` field and its `data:` lines joined with `\n`; comment lines skipped. A minimal
/// stand-in for the real framer.
pub(crate) fn split_sse(raw: &[u8]) -> Vec<(Option<String>, Vec<u8>)> {
    let mut events = Vec::new();
    let (mut name, mut data, mut has_data) = (None, Vec::new(), false);
    for line in raw.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if has_data || name.is_some() {
                events.push((name.take(), std::mem::take(&mut data)));
            }
            has_data = false;
            continue;
        }
        if line.starts_with(b":") {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => name = Some(String::from_utf8_lossy(value).into_owned()),
            b"data" => {
                if has_data {
                    data.push(b'\n');
                }
                data.extend_from_slice(value);
                has_data = true;
            }
            _ => {}
        }
    }
    if has_data {
        events.push((name, data));
    }
    events
}

/// The bytes [`one_byte_mutations`] writes at each position: JSON's structural and escape
/// bytes, digits, letters of the literals and of `\u` escapes, a byte that is never UTF-8.
const MUTATION_BYTES: &[u8] = br#"{}[]",:01-.\ ntxued8"#;

/// Every copy of `base` with one byte replaced by one of [`MUTATION_BYTES`] or `0xff`, or
/// removed: the inputs a typed view and the `Value` path must read alike (differential
/// tests of `dialect::lenient`).
pub(crate) fn one_byte_mutations(base: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for at in 0..base.len() {
        for &b in MUTATION_BYTES.iter().chain(&[0xff]) {
            if base[at] != b {
                let mut bytes = base.to_vec();
                bytes[at] = b;
                out.push(bytes);
            }
        }
        let mut bytes = base.to_vec();
        bytes.remove(at);
        out.push(bytes);
    }
    out
}

/// Copies of `base` with a member `"zz":X` added at the start of each of its objects, for X
/// a value the `Value` parse rejects though serde's `IgnoredAny` would skip it (a lone
/// surrogate escape, a number out of range, a byte that is not UTF-8, nesting past
/// serde_json's limit of 128) and for the valid values next to them: a view must reject and
/// accept exactly the same.
pub(crate) fn skipped_value_hazards(base: &[u8]) -> Vec<Vec<u8>> {
    let deep = |n: usize| format!("{}0{}", "[".repeat(n), "]".repeat(n)).into_bytes();
    let values: Vec<Vec<u8>> = vec![
        br#""\ud800""#.to_vec(),
        br#""\udc00x""#.to_vec(),
        br#""\ud83d\ude00""#.to_vec(),
        b"1e400".to_vec(),
        b"-1e999".to_vec(),
        b"1e300".to_vec(),
        b"\"\xff\"".to_vec(),
        b"\"\xed\xa0\x80\"".to_vec(),
        "\"é\"".as_bytes().to_vec(),
        br#"{"\ud800":1}"#.to_vec(),
        deep(127),
        deep(200),
        deep(40),
    ];
    let mut out = Vec::new();
    for (at, _) in base.iter().enumerate().filter(|(_, &b)| b == b'{') {
        for v in &values {
            let mut bytes = base[..=at].to_vec();
            bytes.extend_from_slice(b"\"zz\":");
            bytes.extend_from_slice(v);
            if base.get(at + 1) != Some(&b'}') {
                bytes.push(b',');
            }
            bytes.extend_from_slice(&base[at + 1..]);
            out.push(bytes);
        }
    }
    out
}
