//! Push-based `content-encoding` decoding, the one decoder of both directions (a copy of a
//! response body for its observer; a whole request body for the passes, through
//! [`crate::body::decode`]): compressed bytes in, in any split, decoded bytes out through
//! a callback, never more than a fixed total.
//!
//! Codings (RFC 9110 §8.4.1 and the IANA HTTP Content Coding Registry): `gzip` / `x-gzip`
//! (RFC 1952, every member of a multi-member stream), `deflate` (RFC 1950 zlib-wrapped; raw
//! RFC 1951 deflate when the first two bytes are not a zlib header, since servers send both),
//! `br` (RFC 7932) and `zstd` (RFC 8878). `identity` or no header means nothing to decode.
//!
//! Memory is bounded: each coding decodes into a fixed output buffer that is handed to the
//! callback before more input is decoded, and [`MAX_DECODED_BYTES`] bounds the total, so a
//! decompression bomb stops the decoder instead of allocating.

use std::io::Write;

/// The most decoded bytes one response may produce, bytes (256 MiB).
///
/// Source: our own bound. Real responses are far smaller (a long streamed generation is tens
/// of MB of event stream; the JSON cap of the tee is 16 MiB), while a decompression bomb
/// (gzip reaches ~1000:1, brotli and zstd far more) is stopped here after at most this much
/// work, with no allocation beyond the decoder's fixed buffers.
pub(crate) const MAX_DECODED_BYTES: u64 = 256 * 1024 * 1024;

/// The output buffer each decoder fills before handing it on, bytes (32 KiB: one deflate
/// window; larger buffers gain nothing measurable).
const OUT_BUF: usize = 32 * 1024;

/// Compressed bytes given to the gzip decoder per write, bytes. flate2's write-side gzip
/// decoder writes what one write decodes into a staging buffer; deflate expands at most
/// 1032:1 (RFC 1951: a 258-byte match per 2 bits at best), so a slice of 512 bytes stages at
/// most ~0.5 MiB plus flate2's 32 KiB buffer.
const GZIP_SLICE: usize = 512;

/// The largest zstd window accepted, as a power of two (23: 8 MiB). RFC 9659 §3 limits the
/// window of the `zstd` content coding to 8 MB, so a frame asking more is not valid HTTP zstd
/// and would make the decoder allocate up to 128 MiB (zstd's own default).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// A content coding this module decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// `gzip` or `x-gzip`.
    Gzip,
    /// `deflate`: zlib-wrapped, or raw deflate.
    Deflate,
    /// `br`.
    Brotli,
    /// `zstd`.
    Zstd,
}

impl Coding {
    /// The coding's token as HTTP names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// The coding named by a `content-encoding` header value (tokens are case-insensitive;
    /// `identity` and empty list members are no coding).
    ///
    /// `Ok(None)`: nothing to decode (absent, empty, `identity`). Errors:
    /// [`DecodeError::Unsupported`] for a coding not listed in the module doc (e.g.
    /// `compress`), [`DecodeError::Stacked`] for more than one coding (`gzip, br`).
    pub(crate) fn from_header(value: Option<&str>) -> Result<Option<Coding>, DecodeError> {
        let Some(value) = value else { return Ok(None) };
        let mut found = None;
        for token in value.split(',').map(str::trim) {
            if token.is_empty() || token.eq_ignore_ascii_case("identity") {
                continue;
            }
            let coding =
                if token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip") {
                    Coding::Gzip
                } else if token.eq_ignore_ascii_case("deflate") {
                    Coding::Deflate
                } else if token.eq_ignore_ascii_case("br") {
                    Coding::Brotli
                } else if token.eq_ignore_ascii_case("zstd") {
                    Coding::Zstd
                } else {
                    return Err(DecodeError::Unsupported(short(token)));
                };
            if found.is_some() {
                return Err(DecodeError::Stacked(short(value)));
            }
            found = Some(coding);
        }
        Ok(found)
    }
}

/// A header value for an error message: at most 40 characters.
fn short(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Why decoding stopped. After any error the decoder must not be pushed again.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The `content-encoding` names a coding this module does not decode.
    #[error("unsupported content-encoding {0:?}")]
    Unsupported(String),
    /// The `content-encoding` lists more than one coding.
    #[error("stacked content-encoding {0:?} (more than one coding)")]
    Stacked(String),
    /// The data is not valid for its coding.
    #[error("corrupt {coding} data: {detail}")]
    Corrupt {
        /// The coding's name.
        coding: &'static str,
        /// What the decoder reported.
        detail: String,
    },
    /// The decoded bytes would exceed the limit (bytes): a decompression bomb, or a body
    /// larger than anything observed.
    #[error("decoded body exceeds {0} bytes")]
    TooLarge(u64),
    /// The body ended inside a compressed stream.
    #[error("{0} stream ends before its end marker")]
    Truncated(&'static str),
}

/// Why a [`Decoder::push`] stopped: the data, or the callback.
#[derive(Debug)]
pub(crate) enum PushError<E> {
    /// Decoding failed ([`DecodeError`]).
    Decode(DecodeError),
    /// The callback returned this error.
    Output(E),
}

impl<E> From<DecodeError> for PushError<E> {
    fn from(e: DecodeError) -> Self {
        PushError::Decode(e)
    }
}

/// The state of one coding.
enum State {
    /// flate2's write-side multi-member gzip decoder, writing into a staging buffer.
    Gzip(Box<flate2::write::MultiGzDecoder<Vec<u8>>>),
    /// `deflate`: the first bytes until the wrapping is known, then the inflater.
    Deflate {
        head: Vec<u8>,
        inflate: Option<flate2::Decompress>,
        ended: bool,
    },
    Brotli {
        state: Box<
            brotli::BrotliState<
                brotli::enc::StandardAlloc,
                brotli::enc::StandardAlloc,
                brotli::enc::StandardAlloc,
            >,
        >,
        ended: bool,
    },
    /// Created on the first push (creating a zstd context can fail).
    Zstd {
        ctx: Option<zstd::stream::raw::Decoder<'static>>,
        /// The last frame is complete (a frame boundary).
        frame_done: bool,
    },
}

/// A push-based decoder of one body (a response copy, or a request body for the passes).
///
/// Shape: [`Decoder::push`] each chunk of compressed bytes as it arrives, then
/// [`Decoder::finish`] once at the body's end; decoded bytes reach the callback in order, in
/// pieces of at most 32 KiB, before `push` returns (nothing is held back between pushes).
pub(crate) struct Decoder {
    coding: Coding,
    state: State,
    out: Vec<u8>,
    limit: u64,
    decoded: u64,
    seen_input: bool,
    /// An error or `finish` happened: later calls do nothing.
    done: bool,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("coding", &self.coding)
            .field("decoded", &self.decoded)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder for `coding`, producing at most `limit` decoded bytes (the tee passes
    /// [`MAX_DECODED_BYTES`]).
    pub(crate) fn new(coding: Coding, limit: u64) -> Self {
        let state = match coding {
            Coding::Gzip => State::Gzip(Box::new(flate2::write::MultiGzDecoder::new(Vec::new()))),
            Coding::Deflate => State::Deflate {
                head: Vec::with_capacity(2),
                inflate: None,
                ended: false,
            },
            Coding::Brotli => {
                let mut state = brotli::BrotliState::new(
                    brotli::enc::StandardAlloc::default(),
                    brotli::enc::StandardAlloc::default(),
                    brotli::enc::StandardAlloc::default(),
                );
                // RFC 7932 windows only (at most 16 MiB); large windows are not HTTP `br`.
                state.large_window = false;
                State::Brotli {
                    state: Box::new(state),
                    ended: false,
                }
            }
            Coding::Zstd => State::Zstd {
                ctx: None,
                frame_done: false,
            },
        };
        Self {
            coding,
            state,
            out: Vec::new(),
            limit,
            decoded: 0,
            seen_input: false,
            done: false,
        }
    }

    /// Decoded bytes produced so far.
    #[cfg(test)]
    pub(crate) fn decoded_bytes(&self) -> u64 {
        self.decoded
    }

    /// Decode `input` (the next compressed bytes), handing every decoded piece to `out`.
    ///
    /// Errors: [`PushError::Decode`] when the data is corrupt or the total would exceed the
    /// limit (then nothing past the limit was handed on); [`PushError::Output`] when `out`
    /// fails. After an error, or after [`Decoder::finish`], pushes do nothing. Bytes after the
    /// end of a deflate or brotli stream are ignored.
    pub(crate) fn push<E>(
        &mut self,
        input: &[u8],
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), PushError<E>> {
        if input.is_empty() || self.done {
            return Ok(());
        }
        let r = self.decode(input, out);
        self.done = r.is_err();
        r
    }

    fn decode<E>(
        &mut self,
        input: &[u8],
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), PushError<E>> {
        self.seen_input = true;
        if self.out.len() < OUT_BUF {
            self.out.resize(OUT_BUF, 0);
        }
        let mut sink = Emit {
            decoded: &mut self.decoded,
            limit: self.limit,
            out,
        };
        let coding = self.coding.name();
        match &mut self.state {
            State::Gzip(gz) => gzip_push(gz, input, &mut sink),
            State::Deflate {
                head,
                inflate,
                ended,
            } => {
                if *ended {
                    return Ok(());
                }
                let mut input = input;
                let inflater = match inflate {
                    Some(i) => i,
                    None => {
                        // Two bytes decide the wrapping; keep the first if it comes alone.
                        let take = (2 - head.len()).min(input.len());
                        head.extend_from_slice(&input[..take]);
                        input = &input[take..];
                        if head.len() < 2 {
                            return Ok(());
                        }
                        let inflater = inflate.insert(flate2::Decompress::new(zlib_header(head)));
                        let h = std::mem::take(head);
                        if inflate_push(inflater, &h, &mut self.out, &mut sink)? {
                            *ended = true;
                            return Ok(());
                        }
                        inflater
                    }
                };
                if inflate_push(inflater, input, &mut self.out, &mut sink)? {
                    *ended = true;
                }
                Ok(())
            }
            State::Brotli { state, ended } => {
                if *ended {
                    return Ok(());
                }
                let mut available_in = input.len();
                let mut input_offset = 0;
                let mut total_out = 0;
                loop {
                    let mut available_out = self.out.len();
                    let mut output_offset = 0;
                    let result = brotli::BrotliDecompressStream(
                        &mut available_in,
                        &mut input_offset,
                        input,
                        &mut available_out,
                        &mut output_offset,
                        &mut self.out,
                        &mut total_out,
                        state,
                    );
                    sink.emit(self.out.get(..output_offset).unwrap_or_default())?;
                    match result {
                        brotli::BrotliResult::NeedsMoreOutput => continue,
                        brotli::BrotliResult::NeedsMoreInput => return Ok(()),
                        brotli::BrotliResult::ResultSuccess => {
                            *ended = true;
                            return Ok(());
                        }
                        brotli::BrotliResult::ResultFailure => {
                            return Err(corrupt(coding, &"invalid brotli data").into())
                        }
                    }
                }
            }
            State::Zstd { ctx, frame_done } => {
                let ctx = match ctx {
                    Some(c) => c,
                    None => ctx.insert(zstd_context().map_err(|e| corrupt(coding, &e))?),
                };
                zstd_push(ctx, frame_done, input, &mut self.out, &mut sink)
            }
        }
    }

    /// The body ended: hand on what the decoder still holds and check that the compressed
    /// stream was complete. A body with no bytes at all is complete (a `HEAD` or `204`).
    ///
    /// Errors: [`DecodeError::Truncated`] when the body stopped inside the stream, and those of
    /// [`Decoder::push`].
    pub(crate) fn finish<E>(
        &mut self,
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), PushError<E>> {
        if self.done || !self.seen_input {
            self.done = true;
            return Ok(());
        }
        self.done = true;
        let name = self.coding.name();
        let mut sink = Emit {
            decoded: &mut self.decoded,
            limit: self.limit,
            out,
        };
        let complete = match &mut self.state {
            State::Gzip(gz) => {
                let r = gz.try_finish();
                sink.emit(gz.get_ref())?;
                gz.get_mut().clear();
                r.is_ok()
            }
            State::Deflate { ended, .. } => *ended,
            State::Brotli { ended, .. } => *ended,
            State::Zstd { frame_done, .. } => *frame_done,
        };
        if complete {
            Ok(())
        } else {
            Err(DecodeError::Truncated(name).into())
        }
    }
}

/// Hands decoded bytes on, enforcing the limit on their total.
struct Emit<'a, F> {
    decoded: &'a mut u64,
    limit: u64,
    out: &'a mut F,
}

impl<F> Emit<'_, F> {
    fn emit<E>(&mut self, bytes: &[u8]) -> Result<(), PushError<E>>
    where
        F: FnMut(&[u8]) -> Result<(), E>,
    {
        if bytes.is_empty() {
            return Ok(());
        }
        let total = self.decoded.saturating_add(bytes.len() as u64);
        if total > self.limit {
            return Err(DecodeError::TooLarge(self.limit).into());
        }
        *self.decoded = total;
        (self.out)(bytes).map_err(PushError::Output)
    }
}

fn corrupt(coding: &'static str, detail: &dyn std::fmt::Display) -> DecodeError {
    DecodeError::Corrupt {
        coding,
        detail: detail.to_string(),
    }
}

/// Whether two bytes open an RFC 1950 zlib stream: method 8 (deflate), a window of at most
/// 32 KiB, no preset dictionary, and the header check (`CMF*256 + FLG` divisible by 31).
fn zlib_header(head: &[u8]) -> bool {
    let &[cmf, flg] = head else { return false };
    cmf & 0x0f == 8
        && cmf >> 4 <= 7
        && flg & 0x20 == 0
        && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0
}

/// Inflate `input`; `Ok(true)` when the deflate stream ended (the rest is ignored).
fn inflate_push<F, E>(
    inflater: &mut flate2::Decompress,
    mut input: &[u8],
    buf: &mut [u8],
    sink: &mut Emit<'_, F>,
) -> Result<bool, PushError<E>>
where
    F: FnMut(&[u8]) -> Result<(), E>,
{
    loop {
        let (before_in, before_out) = (inflater.total_in(), inflater.total_out());
        let status = inflater
            .decompress(input, buf, flate2::FlushDecompress::None)
            .map_err(|e| corrupt("deflate", &e))?;
        let consumed = usize::try_from(inflater.total_in() - before_in).unwrap_or(usize::MAX);
        let produced = usize::try_from(inflater.total_out() - before_out).unwrap_or(usize::MAX);
        sink.emit(buf.get(..produced).unwrap_or_default())?;
        input = input.get(consumed..).unwrap_or_default();
        if status == flate2::Status::StreamEnd {
            return Ok(true);
        }
        // A full buffer may leave output pending; otherwise all input is taken.
        if produced < buf.len() && input.is_empty() {
            return Ok(false);
        }
        if produced == 0 && consumed == 0 {
            // Input left, room left, and no progress: never spin, never drop input.
            return Err(corrupt("deflate", &"inflater makes no progress").into());
        }
    }
}

/// Feed `input` to the gzip decoder in slices, handing on what each slice decodes.
fn gzip_push<F, E>(
    gz: &mut flate2::write::MultiGzDecoder<Vec<u8>>,
    input: &[u8],
    sink: &mut Emit<'_, F>,
) -> Result<(), PushError<E>>
where
    F: FnMut(&[u8]) -> Result<(), E>,
{
    for mut slice in input.chunks(GZIP_SLICE) {
        while !slice.is_empty() {
            let n = gz.write(slice).map_err(|e| corrupt("gzip", &e))?;
            if n == 0 {
                return Err(corrupt("gzip", &"decoder accepts no more input").into());
            }
            slice = slice.get(n..).unwrap_or_default();
            sink.emit(gz.get_ref())?;
            gz.get_mut().clear();
        }
    }
    // What the last write decoded is still in flate2's own buffer: hand it on now.
    gz.flush().map_err(|e| corrupt("gzip", &e))?;
    sink.emit(gz.get_ref())?;
    gz.get_mut().clear();
    Ok(())
}

fn zstd_context() -> std::io::Result<zstd::stream::raw::Decoder<'static>> {
    let mut ctx = zstd::stream::raw::Decoder::new()?;
    ctx.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(
        ZSTD_WINDOW_LOG_MAX,
    ))?;
    Ok(ctx)
}

fn zstd_push<F, E>(
    ctx: &mut zstd::stream::raw::Decoder<'static>,
    frame_done: &mut bool,
    input: &[u8],
    buf: &mut [u8],
    sink: &mut Emit<'_, F>,
) -> Result<(), PushError<E>>
where
    F: FnMut(&[u8]) -> Result<(), E>,
{
    use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
    let mut src = InBuffer::around(input);
    loop {
        if *frame_done && src.pos < input.len() {
            // Concatenated frames: the next one starts here.
            ctx.reinit().map_err(|e| corrupt("zstd", &e))?;
        }
        let before = src.pos;
        let mut dst = OutBuffer::around(&mut *buf);
        let hint = ctx
            .run(&mut src, &mut dst)
            .map_err(|e| corrupt("zstd", &e))?;
        let produced = dst.pos();
        *frame_done = hint == 0;
        sink.emit(buf.get(..produced).unwrap_or_default())?;
        if produced < buf.len() && src.pos >= input.len() {
            return Ok(());
        }
        if produced == 0 && src.pos == before && !*frame_done {
            // No progress at all (cannot happen with libzstd): never spin.
            return Ok(());
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
pub(super) mod tests {
    use super::*;
    use std::io::Write;

    fn plain() -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..2000 {
            v.extend_from_slice(
                format!("event: content_block_delta\ndata: {{\"index\":{i},\"text\":\"hello world {i}\"}}\n\n")
                    .as_bytes(),
            );
        }
        v
    }

    pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    pub(crate) fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    pub(crate) fn raw_deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    pub(crate) fn brotli(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
            w.write_all(data).unwrap();
        }
        out
    }

    pub(crate) fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).unwrap()
    }

    fn decode_in(coding: Coding, data: &[u8], piece: usize) -> Result<Vec<u8>, DecodeError> {
        let mut d = Decoder::new(coding, MAX_DECODED_BYTES);
        let mut got = Vec::new();
        let mut out = |b: &[u8]| -> Result<(), ()> {
            got.extend_from_slice(b);
            Ok(())
        };
        for c in data.chunks(piece) {
            d.push(c, &mut out).map_err(|e| match e {
                PushError::Decode(e) => e,
                PushError::Output(()) => unreachable!(),
            })?;
        }
        d.finish(&mut out).map_err(|e| match e {
            PushError::Decode(e) => e,
            PushError::Output(()) => unreachable!(),
        })?;
        Ok(got)
    }

    #[test]
    fn header_values() {
        assert_eq!(Coding::from_header(None).unwrap(), None);
        assert_eq!(Coding::from_header(Some("")).unwrap(), None);
        assert_eq!(Coding::from_header(Some("identity")).unwrap(), None);
        assert_eq!(
            Coding::from_header(Some(" GZIP ")).unwrap(),
            Some(Coding::Gzip)
        );
        assert_eq!(
            Coding::from_header(Some("x-gzip")).unwrap(),
            Some(Coding::Gzip)
        );
        assert_eq!(
            Coding::from_header(Some("deflate")).unwrap(),
            Some(Coding::Deflate)
        );
        assert_eq!(
            Coding::from_header(Some("br")).unwrap(),
            Some(Coding::Brotli)
        );
        assert_eq!(
            Coding::from_header(Some("zstd")).unwrap(),
            Some(Coding::Zstd)
        );
        assert_eq!(
            Coding::from_header(Some("identity, br")).unwrap(),
            Some(Coding::Brotli)
        );
        assert!(matches!(
            Coding::from_header(Some("compress")),
            Err(DecodeError::Unsupported(s)) if s == "compress"
        ));
        assert!(matches!(
            Coding::from_header(Some("gzip, br")),
            Err(DecodeError::Stacked(s)) if s == "gzip, br"
        ));
    }

    #[test]
    fn every_coding_in_every_piece_size_gives_the_plain_bytes() {
        let plain = plain();
        let cases = [
            (Coding::Gzip, gzip(&plain)),
            (Coding::Deflate, zlib(&plain)),
            (Coding::Deflate, raw_deflate(&plain)),
            (Coding::Brotli, brotli(&plain)),
            (Coding::Zstd, zstd(&plain)),
        ];
        for (coding, enc) in &cases {
            for piece in [1, 7, 4096, enc.len()] {
                let got = decode_in(*coding, enc, piece).unwrap();
                assert!(got == plain, "{coding:?} in pieces of {piece}");
            }
        }
    }

    #[test]
    fn multi_member_gzip_and_concatenated_zstd_frames() {
        let mut gz = gzip(b"data: one\n\n");
        gz.extend_from_slice(&gzip(b"data: two\n\n"));
        for piece in [1, 3, 100] {
            assert_eq!(
                decode_in(Coding::Gzip, &gz, piece).unwrap(),
                b"data: one\n\ndata: two\n\n"
            );
        }
        let mut z = zstd(b"data: one\n\n");
        z.extend_from_slice(&zstd(b"data: two\n\n"));
        for piece in [1, 3, 100] {
            assert_eq!(
                decode_in(Coding::Zstd, &z, piece).unwrap(),
                b"data: one\n\ndata: two\n\n"
            );
        }
    }

    #[test]
    fn every_decoded_byte_is_handed_on_by_the_push_that_completes_it() {
        // Nothing is held back until finish: after the last push, everything is out.
        let plain = plain();
        for (coding, enc) in [
            (Coding::Gzip, gzip(&plain)),
            (Coding::Deflate, zlib(&plain)),
            (Coding::Brotli, brotli(&plain)),
            (Coding::Zstd, zstd(&plain)),
        ] {
            let mut d = Decoder::new(coding, MAX_DECODED_BYTES);
            let mut got = Vec::new();
            for c in enc.chunks(4096) {
                d.push(c, &mut |b: &[u8]| -> Result<(), ()> {
                    got.extend_from_slice(b);
                    Ok(())
                })
                .unwrap();
            }
            assert!(got == plain, "{coding:?}");
        }
    }

    #[test]
    fn corrupt_and_truncated_streams_are_errors() {
        for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            let e = decode_in(
                coding,
                b"this is not compressed at all, not even a little",
                7,
            );
            assert!(
                matches!(e, Err(DecodeError::Corrupt { .. })),
                "{coding:?}: {e:?}"
            );
        }
        let plain = plain();
        for (coding, enc) in [
            (Coding::Gzip, gzip(&plain)),
            (Coding::Deflate, zlib(&plain)),
            (Coding::Brotli, brotli(&plain)),
            (Coding::Zstd, zstd(&plain)),
        ] {
            let half = &enc[..enc.len() / 2];
            let e = decode_in(coding, half, 4096);
            assert!(
                matches!(e, Err(DecodeError::Truncated(_))),
                "{coding:?}: {e:?}"
            );
        }
        // An empty body (HEAD, 204) with a coding is complete.
        assert_eq!(decode_in(Coding::Gzip, b"", 1).unwrap(), b"");
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        let bomb = gzip(&vec![0u8; 64 * 1024 * 1024]);
        assert!(bomb.len() < 100_000);
        let limit = 1024 * 1024;
        let mut d = Decoder::new(Coding::Gzip, limit);
        let mut handed = 0u64;
        let mut err = None;
        for c in bomb.chunks(4096) {
            if let Err(e) = d.push(c, &mut |b: &[u8]| -> Result<(), ()> {
                handed += b.len() as u64;
                Ok(())
            }) {
                err = Some(e);
                break;
            }
        }
        assert!(matches!(err, Some(PushError::Decode(DecodeError::TooLarge(l))) if l == limit));
        assert!(handed <= limit);
        assert!(d.decoded_bytes() <= limit);
    }

    #[test]
    fn zstd_and_brotli_bombs_stop_at_the_limit() {
        let zeros = vec![0u8; 64 * 1024 * 1024];
        for (coding, enc) in [
            (Coding::Zstd, zstd(&zeros)),
            (Coding::Brotli, brotli(&zeros)),
        ] {
            let limit = 1024 * 1024;
            let mut d = Decoder::new(coding, limit);
            let r = d.push(&enc, &mut |_: &[u8]| -> Result<(), ()> { Ok(()) });
            assert!(
                matches!(r, Err(PushError::Decode(DecodeError::TooLarge(_)))),
                "{coding:?}"
            );
            assert!(d.decoded_bytes() <= limit);
        }
    }

    #[test]
    fn damaged_streams_and_noise_never_panic() {
        // Every coding, its valid stream with one byte flipped at many offsets, and noise, in
        // odd piece sizes: an error or some bytes, never a panic or a hang.
        let plain = plain();
        let plain = &plain[..8000];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let noise: Vec<u8> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        for (coding, enc) in [
            (Coding::Gzip, gzip(plain)),
            (Coding::Deflate, zlib(plain)),
            (Coding::Deflate, raw_deflate(plain)),
            (Coding::Brotli, brotli(plain)),
            (Coding::Zstd, zstd(plain)),
        ] {
            for at in (0..enc.len()).step_by(13) {
                let mut bad = enc.clone();
                bad[at] ^= 0x5a;
                if let Ok(out) = decode_in(coding, &bad, 7) {
                    assert!(out.len() as u64 <= MAX_DECODED_BYTES);
                }
            }
            let _ = decode_in(coding, &noise, 3);
            let _ = decode_in(coding, &noise, 4096);
        }
    }

    #[test]
    fn the_callbacks_error_is_returned() {
        let enc = gzip(&plain());
        let mut d = Decoder::new(Coding::Gzip, MAX_DECODED_BYTES);
        let r = d.push(&enc, &mut |_: &[u8]| Err("full"));
        assert!(matches!(r, Err(PushError::Output("full"))));
    }
}
