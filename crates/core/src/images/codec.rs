//! Decode, resize and encode one image, deterministically (`docs/images.md#downscale`).
//!
//! Same input bytes and [`Target`] ⇒ same output bytes: one pinned resize filter, integer
//! size arithmetic, the `image` crate's single-threaded encoders, no metadata copied. The
//! golden tests pin output hashes, so a codec upgrade that would change them fails CI.

use std::io::Cursor;

use base64::Engine as _;
use image::{DynamicImage, GenericImageView, ImageReader, RgbImage};

use crate::images::format::{decode_all, sniff, Format};

/// The one resize filter (pinned: changing it changes every transcoded byte). Lanczos3 keeps
/// small text in screenshots legible.
pub(crate) const RESIZE_FILTER: image::imageops::FilterType = image::imageops::FilterType::Lanczos3;
/// JPEG quality ladder tried at each size (`docs/images.md#downscale`).
pub(crate) const QUALITY_LADDER: [u8; 3] = [85, 70, 50];
/// Most halvings after the quality ladder fails at the fitted size (`docs/images.md#downscale`).
pub(crate) const MAX_HALVINGS: u32 = 4;
/// A halving never takes the shorter side below this, px (`docs/images.md#downscale`).
pub(crate) const MIN_SHORT_SIDE: u32 = 64;
/// Most pixels (width × height) decoded from one image for a repair ([`Mode::Repair`]: an
/// image the provider would certainly reject): a decompression-bomb guard
/// (`docs/images.md#decode-bounds`, 100,000,000 aggregate pixels).
pub(crate) const MAX_PIXELS: u64 = 100_000_000;
/// Most pixels (width × height) decoded from one image to downscale it for cost
/// ([`Mode::Downscale`]), px: 16,000,000. A screenshot of the largest common display, 5K
/// (5120 × 2880 = 14.7 MP), fits with 9% to spare; a 4K one (3840 × 2160) is 8.3 MP. Decoding
/// costs up to 4 bytes per pixel (RGBA8) plus 3 for the flattened RGB copy: about 112 MB for
/// one downscale at this bound, 700 MB at the repair bound (`docs/images.md#decode-bounds`). An agent image over it is forwarded as sent
/// unless the provider would reject it (then it is repaired, up to [`MAX_PIXELS`]).
pub(crate) const DOWNSCALE_MAX_PIXELS: u64 = 16_000_000;
/// Most frames an animated GIF / WebP may declare (`docs/images.md#decode-bounds`); only the
/// first is decoded (providers use the first frame).
pub(crate) const MAX_FRAMES: usize = 100;
/// Most bytes the decoder may allocate (the `image` crate's default, 512 MiB).
pub(crate) const MAX_ALLOC: u64 = 512 * 1024 * 1024;

/// Bytes per pixel charged for the decoded frame and for its working copy
/// ([`decode_cost`]): RGBA8, what a screenshot (8-bit RGB or RGBA) decodes to at most. A
/// 16-bit image decodes to twice that; the frame and its copy together still fit the charge.
pub(crate) const FRAME_BYTES_PER_PIXEL: u64 = 4;

/// Bytes per pixel of the resize's working buffer ([`decode_cost`]): the `image` crate's
/// separable resize filters through an `f32` RGBA buffer of width × new height (4 × 4 bytes).
pub(crate) const RESIZE_BYTES_PER_PIXEL: u64 = 16;

/// What transcoding an image of `dims` (width, height, px, from its header) to `target` may
/// allocate at once, bytes: the decoded frame and one working copy
/// ([`FRAME_BYTES_PER_PIXEL`] each: the flattened RGB copy, or the clone a lossless repair
/// keeps), the resize's working buffer (width × fitted height, [`RESIZE_BYTES_PER_PIXEL`]) and
/// the resized frame. 0 for an image over [`MAX_PIXELS`] (never decoded). An image over its
/// mode's own bound ([`Mode::max_pixels`]) is charged as a repair, since a downscale the bound
/// refuses may be retried as one. Known before any pixel is decoded; the proxy reserves it in
/// its memory budget (`[server] max_buffered_bytes`) before the decode, and the decoder runs
/// with it as its allocation limit ([`transcode_within`]).
pub(crate) fn decode_cost((w, h): (u32, u32), target: &Target) -> u64 {
    let pixels = u64::from(w) * u64::from(h);
    if pixels > MAX_PIXELS {
        return 0;
    }
    // Over its mode's own bound a downscale is not decoded but may be retried as a repair,
    // whose size cap is not known here: charged as the largest resize (to the same size).
    let max_side = if pixels > target.mode.max_pixels() {
        u32::MAX
    } else {
        target.max_side
    };
    let (fw, fh) = fit((w, h), max_side);
    let frame = pixels * FRAME_BYTES_PER_PIXEL;
    let resize = u64::from(w) * u64::from(fh) * RESIZE_BYTES_PER_PIXEL;
    let resized = u64::from(fw) * u64::from(fh) * FRAME_BYTES_PER_PIXEL;
    2 * frame + resize + resized
}

/// Most bytes checking that an image of `(w, h)` px decodes may allocate at once, bytes: the
/// decoded frame and room for a 16-bit one (2 × [`FRAME_BYTES_PER_PIXEL`] per pixel), what
/// the image-rejection recovery for corrupt data (`Corrupt`) reserves in the proxy's memory
/// budget before it decodes. 0 for an image over [`MAX_PIXELS`] (never decoded).
pub(crate) fn check_cost((w, h): (u32, u32)) -> u64 {
    let pixels = u64::from(w) * u64::from(h);
    if pixels > MAX_PIXELS {
        return 0;
    }
    2 * pixels * FRAME_BYTES_PER_PIXEL
}

/// What the transcode must achieve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target {
    /// Longest side of the output, px.
    pub max_side: u32,
    /// Most characters of the output string: base64, plus the `data:<mime>;base64,` header when
    /// [`Target::data_url`] is set (the unit of `embed_target_bytes`, `docs/images.md#downscale`).
    pub max_len: u64,
    /// Count the data-URL header in `max_len`.
    pub data_url: bool,
    /// How to encode.
    pub mode: Mode,
}

/// Encoding strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Agent images over the budget: alpha flattened onto white, the JPEG quality ladder, then
    /// halvings; at each size the PNG of the same pixels is kept instead when it is not longer
    /// (`docs/images.md#downscale`). Decodes at most [`DOWNSCALE_MAX_PIXELS`].
    Downscale,
    /// A repair: the smallest change that fits. A lossless source (PNG, GIF, BMP, TIFF) is
    /// tried as PNG first at the fitted size; otherwise (or when PNG is too long) as
    /// [`Mode::Downscale`] does. Decodes at most [`MAX_PIXELS`].
    Repair,
}

impl Mode {
    /// Most pixels decoded in this mode (`docs/images.md#decode-bounds`).
    pub(crate) fn max_pixels(self) -> u64 {
        match self {
            Mode::Downscale => DOWNSCALE_MAX_PIXELS,
            Mode::Repair => MAX_PIXELS,
        }
    }
}

/// A transcoded image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcoded {
    /// Output format (PNG or JPEG).
    pub format: Format,
    /// Output as standard base64 (no data-URL header).
    pub b64: String,
    /// Source size, px.
    pub from: (u32, u32),
    /// Output size, px.
    pub to: (u32, u32),
}

impl Transcoded {
    /// Length of the output string as sent (with the data-URL header when `data_url`).
    pub(crate) fn sent_len(&self, data_url: bool) -> u64 {
        self.b64.len() as u64 + if data_url { header_len(self.format) } else { 0 }
    }
}

/// Why an image could not be transcoded (it is then forwarded unchanged: fail open).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscodeError {
    #[error("not valid base64")]
    Base64,
    #[error("unknown or undecodable format")]
    Format,
    /// The header's width × height is over the mode's bound ([`Mode::max_pixels`]), px.
    #[error("{pixels} px exceed the {limit}-pixel decode limit")]
    TooManyPixels { pixels: u64, limit: u64 },
    #[error("more than {MAX_FRAMES} frames")]
    TooManyFrames,
    /// Decoding would allocate `need` bytes ([`decode_cost`]), more than the proxy's memory
    /// budget let it reserve (`allowed`; `[server] max_buffered_bytes`). Never cached: room
    /// may come later.
    #[error("decoding would take {need} bytes of memory, and the memory budget (max_buffered_bytes) could not reserve that much for it{}", reserved_note(*allowed))]
    OverBudget { need: u64, allowed: u64 },
    #[error("decode failed: {0}")]
    Decode(String),
    #[error("encode failed: {0}")]
    Encode(String),
}

/// What [`TranscodeError::OverBudget`] adds about the reservation: nothing when there was none.
fn reserved_note(allowed: u64) -> String {
    if allowed > 0 {
        format!(" (it reserved {allowed} bytes)")
    } else {
        String::new()
    }
}

/// Length of `data:<mime>;base64,`.
pub(crate) fn header_len(format: Format) -> u64 {
    ("data:".len() + format.mime().len() + ";base64,".len()) as u64
}

/// Decode `raw_b64` (raw JSON string text, `\/` allowed) and transcode it to `target`.
///
/// The output always has its longest side ≤ `target.max_side`. It is ≤ `target.max_len` unless
/// even the last candidate (the shorter of quality 50 and PNG after [`MAX_HALVINGS`]
/// halvings) is longer; that last candidate is returned then. At the size it is returned at,
/// a JPEG output is always shorter than the PNG of the same pixels.
///
/// Errors: [`TranscodeError`]; [`TranscodeError::TooManyPixels`] when the header's size is
/// over [`Mode::max_pixels`] of `target.mode`.
pub fn transcode(raw_b64: &str, target: &Target) -> Result<Transcoded, TranscodeError> {
    transcode_within(raw_b64, target, MAX_ALLOC)
}

/// [`transcode`] with the decoder's allocation limit at `max_alloc` bytes (at most
/// [`MAX_ALLOC`]): what the proxy reserved for it ([`decode_cost`]). A frame larger than that
/// is [`TranscodeError::Decode`] (the `image` crate's limit error), nothing allocated.
pub(crate) fn transcode_within(
    raw_b64: &str,
    target: &Target,
    max_alloc: u64,
) -> Result<Transcoded, TranscodeError> {
    let bytes = decode_all(raw_b64).ok_or(TranscodeError::Base64)?;
    transcode_bytes(&bytes, target, max_alloc)
}

/// [`transcode_within`] on decoded bytes.
pub(crate) fn transcode_bytes(
    bytes: &[u8],
    target: &Target,
    max_alloc: u64,
) -> Result<Transcoded, TranscodeError> {
    let format = sniff(bytes).ok_or(TranscodeError::Format)?;
    let img = decode_within(bytes, format, target.mode.max_pixels(), max_alloc)?;
    let from = img.dimensions();
    let fitted = fit(from, target.max_side);
    let lossless = matches!(
        format,
        Format::Png | Format::Gif | Format::Bmp | Format::Tiff
    );
    if target.mode == Mode::Repair && lossless {
        let resized = if fitted == from {
            img.clone()
        } else {
            img.resize_exact(fitted.0, fitted.1, RESIZE_FILTER)
        };
        let png = encode_png(&resized)?;
        let out = Transcoded {
            format: Format::Png,
            b64: base64::engine::general_purpose::STANDARD.encode(&png),
            from,
            to: fitted,
        };
        if out.sent_len(target.data_url) <= target.max_len {
            return Ok(out);
        }
    }
    // `DynamicImage::resize_exact` (not the generic `imageops::resize`) so the filter runs as
    // compiled in the `image` crate.
    let rgb = DynamicImage::ImageRgb8(flatten_onto_white(&img));
    let mut size = fitted;
    let mut last = None;
    for attempt in 0..=MAX_HALVINGS {
        if attempt > 0 {
            let next = halve(size);
            if next == size {
                break;
            }
            size = next;
        }
        let resized = if size == from {
            rgb.to_rgb8()
        } else {
            rgb.resize_exact(size.0, size.1, RESIZE_FILTER).to_rgb8()
        };
        // The same pixels as PNG: what a JPEG must beat (flat graphics compress far better
        // losslessly; the failing input was a 9000×300 banner whose JPEG was 2.3× its PNG).
        let png = Transcoded {
            format: Format::Png,
            b64: base64::engine::general_purpose::STANDARD
                .encode(encode_png(&DynamicImage::ImageRgb8(resized.clone()))?),
            from,
            to: size,
        };
        let mut jpeg = None;
        for q in QUALITY_LADDER {
            let bytes = encode_jpeg(&resized, q)?;
            let out = Transcoded {
                format: Format::Jpeg,
                b64: base64::engine::general_purpose::STANDARD.encode(&bytes),
                from,
                to: size,
            };
            let fits = out.sent_len(target.data_url) <= target.max_len;
            jpeg = Some(out);
            if fits {
                break;
            }
        }
        let best = smaller(jpeg, png, target.data_url);
        if best.sent_len(target.data_url) <= target.max_len {
            return Ok(best);
        }
        last = Some(best);
    }
    last.ok_or_else(|| TranscodeError::Encode("no candidate".to_owned()))
}

/// The JPEG candidate when it is strictly shorter as sent than the PNG of the same pixels,
/// else the PNG (so a downscale is never longer than its pixels cost losslessly).
fn smaller(jpeg: Option<Transcoded>, png: Transcoded, data_url: bool) -> Transcoded {
    match jpeg {
        Some(j) if j.sent_len(data_url) < png.sent_len(data_url) => j,
        _ => png,
    }
}

/// Decode the first frame with the bomb guards: the header's pixel count (at most
/// `max_pixels`) and the frame count are checked before any pixel is decoded, and the decoder's
/// allocations are capped at `max_alloc` bytes (at most [`MAX_ALLOC`]).
pub(crate) fn decode_within(
    bytes: &[u8],
    format: Format,
    max_pixels: u64,
    max_alloc: u64,
) -> Result<DynamicImage, TranscodeError> {
    let codec = format.codec().ok_or(TranscodeError::Format)?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(max_alloc.min(MAX_ALLOC));
    let mut reader = ImageReader::with_format(Cursor::new(bytes), codec);
    reader.limits(limits.clone());
    let (w, h) = reader
        .into_dimensions()
        .map_err(|e| TranscodeError::Decode(e.to_string()))?;
    let pixels = u64::from(w) * u64::from(h);
    if pixels > max_pixels {
        return Err(TranscodeError::TooManyPixels {
            pixels,
            limit: max_pixels,
        });
    }
    let frames = match format {
        Format::Gif => gif_frames(bytes),
        Format::Webp => webp_frames(bytes),
        _ => 1,
    };
    if frames > MAX_FRAMES {
        return Err(TranscodeError::TooManyFrames);
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), codec);
    reader.limits(limits);
    reader
        .decode()
        .map_err(|e| TranscodeError::Decode(e.to_string()))
}

/// `(w, h)` scaled so the longest side is ≤ `max_side` (aspect kept, rounded, ≥ 1 px).
pub(crate) fn fit((w, h): (u32, u32), max_side: u32) -> (u32, u32) {
    let longest = w.max(h);
    if longest <= max_side || longest == 0 {
        return (w, h);
    }
    let scale = |v: u32| {
        let num = u64::from(v) * u64::from(max_side) + u64::from(longest) / 2;
        u32::try_from(num / u64::from(longest))
            .unwrap_or(max_side)
            .max(1)
    };
    (scale(w), scale(h))
}

/// Half the size, aspect kept, the shorter side floored at [`MIN_SHORT_SIDE`]; unchanged when
/// it is already at or below the floor.
pub(crate) fn halve((w, h): (u32, u32)) -> (u32, u32) {
    let short = w.min(h);
    if short <= MIN_SHORT_SIDE {
        return (w, h);
    }
    let new_short = (short / 2).max(MIN_SHORT_SIDE);
    let scale = |v: u32| {
        let num = u64::from(v) * u64::from(new_short) + u64::from(short) / 2;
        u32::try_from(num / u64::from(short)).unwrap_or(v).max(1)
    };
    (scale(w), scale(h))
}

/// RGB with any alpha composited onto white (JPEG has no alpha, `docs/images.md#downscale`).
fn flatten_onto_white(img: &DynamicImage) -> RgbImage {
    if !img.color().has_alpha() {
        return img.to_rgb8();
    }
    let rgba = img.to_rgba8();
    let (w, h) = rgba.dimensions();
    let mut out = RgbImage::new(w, h);
    for (dst, src) in out.pixels_mut().zip(rgba.pixels()) {
        let a = u32::from(src[3]);
        for c in 0..3 {
            let v = (u32::from(src[c]) * a + 255 * (255 - a) + 127) / 255;
            dst[c] = u8::try_from(v).unwrap_or(255);
        }
    }
    out
}

fn encode_jpeg(img: &RgbImage, quality: u8) -> Result<Vec<u8>, TranscodeError> {
    let mut buf = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut buf, quality)
        .encode(
            img.as_raw(),
            img.width(),
            img.height(),
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| TranscodeError::Encode(e.to_string()))?;
    Ok(buf)
}

fn encode_png(img: &DynamicImage) -> Result<Vec<u8>, TranscodeError> {
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    let img = if img.color().has_alpha() {
        DynamicImage::ImageRgba8(img.to_rgba8())
    } else {
        DynamicImage::ImageRgb8(img.to_rgb8())
    };
    let mut buf = Vec::new();
    img.write_with_encoder(PngEncoder::new_with_quality(
        &mut buf,
        CompressionType::Default,
        FilterType::Adaptive,
    ))
    .map_err(|e| TranscodeError::Encode(e.to_string()))?;
    Ok(buf)
}

/// Frames a GIF declares: image descriptors counted by walking the blocks (data sub-blocks are
/// skipped, nothing is decompressed). Stops counting past [`MAX_FRAMES`]; a truncated file
/// counts what it has.
pub(crate) fn gif_frames(b: &[u8]) -> usize {
    let Some(&flags) = b.get(10) else { return 0 };
    let mut i = 13usize;
    if flags & 0x80 != 0 {
        i += 3 * (1usize << ((flags & 0x07) + 1));
    }
    let skip_sub_blocks = |mut i: usize| -> Option<usize> {
        loop {
            let n = usize::from(*b.get(i)?);
            i += 1;
            if n == 0 {
                return Some(i);
            }
            i += n;
        }
    };
    let mut frames = 0usize;
    while frames <= MAX_FRAMES {
        match b.get(i) {
            Some(0x2C) => {
                frames += 1;
                let Some(&f) = b.get(i + 9) else { break };
                i += 10;
                if f & 0x80 != 0 {
                    i += 3 * (1usize << ((f & 0x07) + 1));
                }
                i += 1; // LZW minimum code size
                match skip_sub_blocks(i) {
                    Some(n) => i = n,
                    None => break,
                }
            }
            Some(0x21) => match skip_sub_blocks(i + 2) {
                Some(n) => i = n,
                None => break,
            },
            _ => break,
        }
    }
    frames
}

/// Frames a WebP declares: `ANMF` chunks (1 for a still image).
pub(crate) fn webp_frames(b: &[u8]) -> usize {
    let mut i = 12usize;
    let mut frames = 0usize;
    while i + 8 <= b.len() && frames <= MAX_FRAMES {
        let id = &b[i..i + 4];
        let len = u32::from_le_bytes([b[i + 4], b[i + 5], b[i + 6], b[i + 7]]) as usize;
        if id == b"ANMF" {
            frames += 1;
        }
        i = i.saturating_add(8).saturating_add(len + (len & 1));
    }
    frames.max(1)
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
    fn fit_and_halve() {
        assert_eq!(fit((1920, 1080), 1568), (1568, 882));
        assert_eq!(fit((1080, 1920), 1568), (882, 1568));
        assert_eq!(fit((800, 600), 1568), (800, 600));
        assert_eq!(fit((100_000, 1), 1568), (1568, 1));
        assert_eq!(halve((1568, 882)), (784, 441));
        assert_eq!(halve((200, 100)), (128, 64));
        assert_eq!(halve((128, 64)), (128, 64));
    }

    #[test]
    fn gif_frame_walk() {
        let mut g = b"GIF89a\x01\x00\x01\x00\x00\x00\x00".to_vec();
        for _ in 0..3 {
            g.extend_from_slice(&[0x21, 0xF9, 4, 0, 0, 0, 0, 0]);
            g.extend_from_slice(&[0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x4C, 0x01, 0]);
        }
        g.push(0x3B);
        assert_eq!(gif_frames(&g), 3);
        assert_eq!(gif_frames(&g[..20]), 0);
    }

    /// A wide banner in flat colours: bands and blocks, no gradients (the failing input).
    fn banner(w: u32, h: u32) -> image::RgbImage {
        image::RgbImage::from_fn(w, h, |x, y| {
            let c = match (x / 700, y / 60) {
                (0, _) => [250, 200, 20],
                (n, r) if (n + r) % 3 == 0 => [20, 40, 110],
                (n, _) if n % 2 == 0 => [240, 240, 245],
                _ => [200, 30, 40],
            };
            image::Rgb(c)
        })
    }

    fn png_of(img: &image::RgbImage) -> Vec<u8> {
        encode_png(&DynamicImage::ImageRgb8(img.clone())).unwrap()
    }

    fn downscale(max_len: u64) -> Target {
        Target {
            max_side: 1568,
            max_len,
            data_url: false,
            mode: Mode::Downscale,
        }
    }

    #[test]
    fn a_flat_banner_is_downscaled_to_png_not_a_larger_jpeg() {
        // The failing input: a 9000×300 flat-colour PNG downscaled for Gemini came out as a
        // JPEG 2.3× the PNG's bytes.
        let src = banner(9000, 300);
        let png = png_of(&src);
        let resized = DynamicImage::ImageRgb8(src)
            .resize_exact(1568, 52, RESIZE_FILTER)
            .to_rgb8();
        let old_jpeg = encode_jpeg(&resized, QUALITY_LADDER[0]).unwrap();
        assert!(
            old_jpeg.len() > png.len(),
            "{} vs {}",
            old_jpeg.len(),
            png.len()
        );

        let out = transcode_bytes(&png, &downscale(262_144), MAX_ALLOC).unwrap();
        assert_eq!(
            (out.format, out.from, out.to),
            (Format::Png, (9000, 300), (1568, 52))
        );
        let bytes = decode_all(&out.b64).unwrap();
        assert_eq!(
            bytes,
            png_of(&resized),
            "the PNG of the same resized pixels"
        );
        assert!(bytes.len() < old_jpeg.len() && bytes.len() < png.len());
        // Deterministic.
        assert_eq!(
            transcode_bytes(&png, &downscale(262_144), MAX_ALLOC).unwrap(),
            out
        );
    }

    #[test]
    fn a_noisy_image_stays_jpeg_and_shorter_than_its_png() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noisy = image::RgbImage::from_fn(800, 600, |_, _| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            image::Rgb([(x >> 8) as u8, (x >> 16) as u8, (x >> 24) as u8])
        });
        let png = png_of(&noisy);
        let out = transcode_bytes(&png, &downscale(4 << 20), MAX_ALLOC).unwrap();
        assert_eq!((out.format, out.to), (Format::Jpeg, (800, 600)));
        assert!(decode_all(&out.b64).unwrap().len() < png.len());
    }

    /// A PNG whose IHDR (CRC-checked) claims `w`×`h`, with a 1-byte-row IDAT: only the header
    /// is real, so a decode past the pixel check fails as a decode error.
    fn header_only_png(w: u32, h: u32) -> Vec<u8> {
        let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
        let chunk = |v: &mut Vec<u8>, kind: &[u8], data: &[u8]| {
            v.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
            let mut crc = flate2::Crc::new();
            crc.update(kind);
            crc.update(data);
            v.extend_from_slice(kind);
            v.extend_from_slice(data);
            v.extend_from_slice(&crc.sum().to_be_bytes());
        };
        let mut ihdr = w.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&h.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        chunk(&mut v, b"IHDR", &ihdr);
        chunk(
            &mut v,
            b"IDAT",
            &[0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
        );
        chunk(&mut v, b"IEND", &[]);
        v
    }

    #[test]
    fn pixel_bounds_per_mode_on_both_sides() {
        let over = |w: u32, h: u32, mode: Mode| {
            let target = Target {
                mode,
                ..downscale(262_144)
            };
            match transcode_bytes(&header_only_png(w, h), &target, MAX_ALLOC) {
                Err(TranscodeError::TooManyPixels { pixels, limit }) => {
                    assert_eq!(pixels, u64::from(w) * u64::from(h));
                    assert_eq!(limit, mode.max_pixels());
                    true
                }
                Err(TranscodeError::Decode(_)) => false,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(DOWNSCALE_MAX_PIXELS, 4000 * 4000);
        // Downscale: 16,000,000 px pass the guard, one row more does not.
        assert!(!over(4000, 4000, Mode::Downscale));
        assert!(over(4000, 4001, Mode::Downscale));
        // Repair: the same image passes; the bound is 100,000,000.
        assert!(!over(4000, 4001, Mode::Repair));
        assert!(!over(10_000, 10_000, Mode::Repair));
        assert!(over(10_000, 10_001, Mode::Repair));
    }

    #[test]
    fn flatten_is_white_under_transparency() {
        let img = DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(
            2,
            2,
            image::Rgba([0, 0, 0, 0]),
        ));
        assert_eq!(flatten_onto_white(&img).get_pixel(0, 0).0, [255, 255, 255]);
    }

    /// The decode's memory charge (issue 27), from the header's size alone: a screenshot
    /// downscaled, a 100 MP image repaired to Anthropic's 8000 px (the head-of-line benchmark's
    /// 10000 × 10000 PNG: 2.3 GB, more than the default 1 GiB budget), and one over the repair
    /// bound (never decoded: 0).
    #[test]
    fn the_decode_cost_is_the_frame_its_copy_and_the_resize() {
        let target = |max_side, mode| Target {
            max_side,
            max_len: 262_144,
            data_url: false,
            mode,
        };
        // 2560×1440 to 1568×882: 2 × 14,745,600 + 2560 × 882 × 16 + 1568 × 882 × 4.
        assert_eq!(
            decode_cost((2560, 1440), &target(1568, Mode::Downscale)),
            29_491_200 + 36_126_720 + 5_531_904
        );
        // 10000×10000 to 8000×8000: 2 × 400 MB + 10000 × 8000 × 16 + 8000 × 8000 × 4.
        assert_eq!(
            decode_cost((10_000, 10_000), &target(8000, Mode::Repair)),
            800_000_000 + 1_280_000_000 + 256_000_000
        );
        assert_eq!(
            decode_cost((20_000, 10_000), &target(8000, Mode::Repair)),
            0
        );
        // 9000×3000 (27 MP) is over the downscale bound: charged as a repair at full size,
        // 2 × 108 MB + 9000 × 3000 × 16 + 9000 × 3000 × 4, which covers its repair to 8000 px.
        let over = decode_cost((9000, 3000), &target(1568, Mode::Downscale));
        assert_eq!(over, 216_000_000 + 432_000_000 + 108_000_000);
        assert!(over >= decode_cost((9000, 3000), &target(8000, Mode::Repair)));
    }
}
