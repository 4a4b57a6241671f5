//! Request-head limits: what hyper's parser accepts, and the proxy's own, lower limits that are
//! answered in the dialect's error shape (`docs/dev/architecture.md#request-head-limits`).
//!
//! Two layers, so a client learns what went wrong in the shape its SDK reads:
//! - hyper's parser caps ([`PARSER_MAX_HEADER_FIELDS`], [`PARSER_MAX_HEAD_BYTES`]), raised
//!   from hyper's defaults (100 fields; a ~400 KiB connection buffer over HTTP/1.1, 16 KiB of
//!   header list over HTTP/2). A request over them gets hyper's own bare `431` before the proxy
//!   sees its path. hyper's request-target limit (65,534 bytes, fixed in hyper) answers `414`
//!   the same way and cannot be raised.
//! - the proxy's limits ([`MAX_HEADER_FIELDS`], [`MAX_HEADER_BYTES`]), checked by
//!   [`head_excess`] once the path is known: a request over them is answered `431` in the
//!   route's dialect.
//!
//! The proxy's limits sit well above what the providers' own front ends accept (the CDNs in
//! front of them take tens of KiB of headers: Fastly documents 69 KB and 255 fields, Vercel
//! 32 KB), so a request refused here would have been refused upstream anyway: the proxy is
//! never the reason a request fails.

use http::HeaderMap;

// The proxy's limits must sit below hyper's caps, or they would never be reached.
const _: () = assert!(MAX_HEADER_FIELDS < PARSER_MAX_HEADER_FIELDS);
const _: () = assert!(MAX_HEADER_BYTES < PARSER_MAX_HEAD_BYTES);

/// The most header fields hyper's HTTP/1.1 parser accepts (hyper's default: 100). Past it,
/// hyper answers a bare `431`.
pub(crate) const PARSER_MAX_HEADER_FIELDS: usize = 1000;

/// The most bytes of request head hyper accepts, bytes: over HTTP/1.1 the request line and
/// header block must fit in the connection's read buffer (hyper's `max_buf_size`, which this
/// sets; the buffer grows to it only when a client sends that much at once); over HTTP/2 the
/// header list as RFC 9113 counts it (`SETTINGS_MAX_HEADER_LIST_SIZE`). Past it, hyper
/// answers a bare `431`.
pub(crate) const PARSER_MAX_HEAD_BYTES: usize = 1024 * 1024;

/// The most header fields the proxy forwards; past it the request is answered `431` in the
/// dialect's shape ([`head_excess`]).
pub const MAX_HEADER_FIELDS: usize = 500;

/// The most header bytes the proxy forwards, bytes, counted as HTTP/1.1 writes them: each
/// field's name and value plus 4 (`": "` and CRLF). Past it the request is answered `431` in
/// the dialect's shape ([`head_excess`]).
pub const MAX_HEADER_BYTES: usize = 256 * 1024;

/// How a request's headers exceed the proxy's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadExcess {
    /// Header fields in the request.
    pub fields: usize,
    /// Header bytes in the request, counted as [`MAX_HEADER_BYTES`] says.
    pub bytes: usize,
}

/// `Some` when `headers` exceed [`MAX_HEADER_FIELDS`] or [`MAX_HEADER_BYTES`].
pub fn head_excess(headers: &HeaderMap) -> Option<HeadExcess> {
    let fields = headers.len();
    let bytes = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>();
    (fields > MAX_HEADER_FIELDS || bytes > MAX_HEADER_BYTES).then_some(HeadExcess { fields, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn map(fields: usize, value_len: usize) -> HeaderMap {
        let mut h = HeaderMap::new();
        let value = HeaderValue::from_str(&"v".repeat(value_len)).unwrap();
        for i in 0..fields {
            let name = HeaderName::from_bytes(format!("x-h{i}").as_bytes()).unwrap();
            h.append(name, value.clone());
        }
        h
    }

    #[test]
    fn counts_fields_and_bytes_as_http1_writes_them() {
        // "x-h0: vvv\r\n" = 3 + 3 + 4 bytes.
        assert_eq!(head_excess(&map(1, 3)), None);
        assert_eq!(head_excess(&map(MAX_HEADER_FIELDS, 1)), None);
        assert_eq!(
            head_excess(&map(MAX_HEADER_FIELDS + 1, 1)),
            Some(HeadExcess {
                fields: 501,
                // names x-h0..x-h9 (4 bytes), x-h10..x-h99 (5), x-h100..x-h500 (6).
                bytes: 10 * 9 + 90 * 10 + 401 * 11,
            })
        );
        // Two fields whose bytes pass the limit: 2 × (4 + 131,072 + 4) > 262,144.
        let big = head_excess(&map(2, 128 * 1024)).unwrap();
        assert_eq!(big.fields, 2);
        assert_eq!(big.bytes, 2 * (4 + 128 * 1024 + 4));
        // Exactly at the limit passes.
        assert_eq!(head_excess(&map(1, MAX_HEADER_BYTES - 8)), None);
        assert!(head_excess(&map(1, MAX_HEADER_BYTES - 7)).is_some());
    }
}
