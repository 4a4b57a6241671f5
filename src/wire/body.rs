//! Request bodies: a bounded read that never refuses (an oversized body is streamed through
//! with the part already read), and `content-encoding` decoding for the passes.

use std::io::Read;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http_body::Frame;
use http_body_util::{BodyExt, BodyStream, Empty, Full, StreamBody};
use hyper::body::Incoming;

use crate::wire::upstream::{BoxError, UpstreamBody};

/// Result of [`read_bounded`].
pub(crate) enum ReadBody {
    /// The whole body, at most `limit` bytes.
    Buffered(Bytes),
    /// The body is larger than `limit`: what was read so far and the rest, to be streamed
    /// upstream untouched.
    TooLarge { head: Vec<Bytes>, rest: Incoming },
}

/// Why a client's body could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The client's stream failed (it went away, or sent a malformed body).
    #[error(transparent)]
    Client(#[from] hyper::Error),
    /// No body data arrived for this long, ms: the client stalled mid-body.
    #[error("no request body data for {0} ms")]
    Stalled(u64),
}

/// Read a body up to `limit` bytes, waiting at most `idle` for each chunk. A
/// `content-length` above the limit skips reading entirely.
///
/// Errors: [`ReadError::Client`] when the client's stream fails, [`ReadError::Stalled`] when
/// it sends nothing for `idle`.
pub(crate) async fn read_bounded(
    mut body: Incoming,
    limit: u64,
    content_length: Option<u64>,
    idle: std::time::Duration,
) -> Result<ReadBody, ReadError> {
    if content_length.is_some_and(|n| n > limit) {
        return Ok(ReadBody::TooLarge {
            head: Vec::new(),
            rest: body,
        });
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    loop {
        let next = tokio::time::timeout(idle, body.frame())
            .await
            .map_err(|_| ReadError::Stalled(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX)))?;
        let Some(frame) = next else { break };
        let frame = frame?;
        if let Ok(data) = frame.into_data() {
            total += data.len() as u64;
            chunks.push(data);
            if total > limit {
                return Ok(ReadBody::TooLarge {
                    head: chunks,
                    rest: body,
                });
            }
        }
    }
    Ok(ReadBody::Buffered(concat(chunks, total)))
}

fn concat(mut chunks: Vec<Bytes>, total: u64) -> Bytes {
    if chunks.len() == 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut buf = BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
    for c in chunks {
        buf.extend_from_slice(&c);
    }
    buf.freeze()
}

/// A buffered body for the upstream.
pub(crate) fn full(bytes: Bytes) -> UpstreamBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// The client's body streamed upstream as it arrives, after the chunks already read.
///
/// `sent` fires once the client's body has ended (whole, or with an error), so the caller can
/// start the first-byte timer only then: an upload may take longer than the timeout.
///
/// A request that has no body (nothing read and the client's body already at its end: no
/// `content-length` and no `transfer-encoding`, or `content-length: 0`) goes upstream without
/// one. A stream body of unknown length would make hyper's client add
/// `transfer-encoding: chunked` and an empty chunked body to every method but GET / HEAD /
/// CONNECT (found by testing: the openai and anthropic SDKs' body-less `DELETE`s).
pub(crate) fn streamed(
    head: Vec<Bytes>,
    rest: Incoming,
    sent: tokio::sync::oneshot::Sender<()>,
) -> UpstreamBody {
    if head.is_empty() && http_body::Body::is_end_stream(&rest) {
        let _ = sent.send(());
        return Empty::new().map_err(|never| match never {}).boxed_unsync();
    }
    let head = futures_util::stream::iter(head.into_iter().map(|b| Ok(Frame::data(b))));
    let rest = BodyStream::new(rest).map(|r| r.map_err(|e| Box::new(e) as BoxError));
    let end = futures_util::stream::once(async move {
        let _ = sent.send(());
    })
    .filter_map(|()| async { None::<Result<Frame<Bytes>, BoxError>> });
    StreamBody::new(head.chain(rest).chain(end)).boxed_unsync()
}

/// Read up to `limit` bytes of a response body. Returns what was read and, when the body
/// is longer, the unread rest (`None` when the body ended within the limit).
pub(crate) async fn read_prefix(
    mut body: UpstreamBody,
    limit: u64,
) -> Result<(Bytes, Option<UpstreamBody>), BoxError> {
    let mut chunks = Vec::new();
    let mut total = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            total += data.len() as u64;
            chunks.push(data);
            if total > limit {
                return Ok((concat(chunks, total), Some(body)));
            }
        }
    }
    Ok((concat(chunks, total), None))
}

/// `head` followed by the rest of a body.
pub(crate) fn prepend(head: Vec<Bytes>, rest: UpstreamBody) -> UpstreamBody {
    let head = futures_util::stream::iter(head.into_iter().map(|b| Ok(Frame::data(b))));
    StreamBody::new(head.chain(BodyStream::new(rest))).boxed_unsync()
}

/// Decode a body by its `content-encoding` (`gzip`, `x-gzip`, `deflate`, `br`, `zstd`;
/// `identity` or none returns it as is), reading at most `limit` decoded bytes.
///
/// `None` when the coding is unknown, the data is corrupt, or the decoded body is larger than
/// `limit` (a decompression bomb): the caller then forwards the original bytes.
pub(crate) fn decode(encoding: Option<&str>, data: &[u8], limit: u64) -> Option<Vec<u8>> {
    let enc = encoding.map(|e| e.trim().to_ascii_lowercase());
    let reader: Box<dyn Read + '_> = match enc.as_deref() {
        None | Some("") | Some("identity") => return Some(data.to_vec()),
        Some("gzip") | Some("x-gzip") => Box::new(flate2::read::MultiGzDecoder::new(data)),
        Some("deflate") => {
            // HTTP "deflate" is zlib-wrapped; some clients send raw deflate.
            if data.len() >= 2 && (u16::from(data[0]) << 8 | u16::from(data[1])) % 31 == 0 {
                Box::new(flate2::read::ZlibDecoder::new(data))
            } else {
                Box::new(flate2::read::DeflateDecoder::new(data))
            }
        }
        Some("br") => Box::new(brotli::Decompressor::new(data, 64 * 1024)),
        Some("zstd") => Box::new(zstd::stream::read::Decoder::new(data).ok()?),
        Some(_) => return None,
    };
    let mut out = Vec::new();
    let read = reader.take(limit.saturating_add(1)).read_to_end(&mut out);
    match read {
        Ok(n) if (n as u64) <= limit => Some(out),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gzip_roundtrip_and_bomb_limit() {
        let plain = br#"{"model":"m","messages":[]}"#;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(plain).unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(decode(Some("gzip"), &gz, 1024).unwrap(), plain);
        assert!(decode(Some("gzip"), &gz, 5).is_none());
        assert!(decode(Some("gzip"), b"not gzip", 1024).is_none());
        assert!(decode(Some("compress"), &gz, 1024).is_none());
        assert_eq!(decode(None, plain, 1024).unwrap(), plain);
    }

    #[test]
    fn br_zstd_deflate() {
        let plain = b"hello hello hello hello";
        let mut br = Vec::new();
        {
            let mut w = brotli::CompressorWriter::new(&mut br, 4096, 5, 22);
            w.write_all(plain).unwrap();
        }
        assert_eq!(decode(Some("br"), &br, 1024).unwrap(), plain);
        let z = zstd::stream::encode_all(&plain[..], 3).unwrap();
        assert_eq!(decode(Some("zstd"), &z, 1024).unwrap(), plain);
        let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zl.write_all(plain).unwrap();
        assert_eq!(
            decode(Some("deflate"), &zl.finish().unwrap(), 1024).unwrap(),
            plain
        );
        let mut raw =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        raw.write_all(plain).unwrap();
        assert_eq!(
            decode(Some("deflate"), &raw.finish().unwrap(), 1024).unwrap(),
            plain
        );
    }
}
