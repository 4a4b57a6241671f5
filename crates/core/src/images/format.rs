//! Image formats from magic bytes (`docs/images.md#formats-and-magic-bytes`), and the base64
//! helpers every image pass uses.
//!
//! The declared `media_type` / `mimeType` / data-URL type is never trusted: Anthropic checks it
//! against the payload's magic bytes and answers 400 on a mismatch
//! (`docs/images.md#anthropic-limits`).

pub use crate::media::Format;

/// Sniff the format from the first bytes (at least 32 are needed for HEIF/AVIF brands; SVG is
/// looked for in the first 512). `None` when unknown.
pub(crate) fn sniff(b: &[u8]) -> Option<Format> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some(Format::Png);
    }
    if b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Some(Format::Jpeg);
    }
    if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        return Some(Format::Gif);
    }
    if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        return Some(Format::Webp);
    }
    if b.starts_with(b"BM") && b.len() >= 26 {
        return Some(Format::Bmp);
    }
    if b.starts_with(b"II*\0") || b.starts_with(b"MM\0*") {
        return Some(Format::Tiff);
    }
    if let Some(f) = sniff_ftyp(b) {
        return Some(f);
    }
    sniff_svg(b)
}

/// ISO-BMFF `ftyp` box (`docs/images.md#formats-and-magic-bytes`): major brand at 8–12, compatible
/// brands every 4 bytes from 16, bounded by the declared box size (a malformed size fails closed).
/// AVIF brands win over the HEIF ones.
fn sniff_ftyp(b: &[u8]) -> Option<Format> {
    if b.len() < 12 || &b[4..8] != b"ftyp" {
        return None;
    }
    let size = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    if size < 16 {
        return None;
    }
    let end = size.min(b.len());
    let mut brands = vec![&b[8..12]];
    let mut i = 16;
    while i + 4 <= end {
        brands.push(&b[i..i + 4]);
        i += 4;
    }
    let has = |names: &[&[u8; 4]]| brands.iter().any(|br| names.iter().any(|n| *br == &n[..]));
    if has(&[b"avif", b"avis", b"av01"]) {
        return Some(Format::Avif);
    }
    if has(&[b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx"]) {
        return Some(Format::Heic);
    }
    if has(&[b"mif1", b"msf1"]) {
        return Some(Format::Heif);
    }
    None
}

/// SVG: optional BOM / whitespace / XML declaration / comments, then `<svg` within the first
/// 512 bytes.
fn sniff_svg(b: &[u8]) -> Option<Format> {
    let head = &b[..b.len().min(512)];
    let text = std::str::from_utf8(head)
        .ok()
        .or_else(|| std::str::from_utf8(&head[..head.len().saturating_sub(3)]).ok())?;
    let t = text.trim_start_matches('\u{feff}').trim_start();
    if !t.starts_with('<') {
        return None;
    }
    t.contains("<svg").then_some(Format::Svg)
}

/// The payload of a raw JSON string holding base64 (bare or after a data-URL comma): the
/// JSON escape `\/` is undone; any other escape, whitespace or invalid character gives `None`.
/// Borrowed when there is nothing to undo.
pub(crate) fn unescape_b64(raw: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !raw.contains('\\') {
        return Some(std::borrow::Cow::Borrowed(raw));
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('/') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(std::borrow::Cow::Owned(out))
}

/// Decode the first `max_chars` (rounded down to a multiple of 4) of a base64 string (either
/// alphabet, [`crate::images::probe::decode_base64`]) given as raw JSON string text. `None` on
/// invalid base64 or an escape other than `\/`.
pub(crate) fn decode_prefix(raw: &str, max_chars: usize) -> Option<Vec<u8>> {
    // Enough raw chars to yield max_chars after unescaping `\/` (2 raw chars → 1).
    let cut = floor_char_boundary(raw, max_chars.saturating_mul(2));
    let unescaped = unescape_b64(&raw[..cut]).or_else(|| {
        // The cut may have split an escape: drop one trailing char and retry.
        let shorter = floor_char_boundary(raw, cut.saturating_sub(1));
        unescape_b64(&raw[..shorter])
    })?;
    let s: &str = &unescaped;
    let mut keep = s.len().min(max_chars);
    keep -= keep % 4;
    if keep == 0 {
        return None;
    }
    let part = &s[..keep];
    // Padding may only sit at the very end of the whole string.
    let decoded = if part.len() < s.len() && part.ends_with('=') {
        return None;
    } else {
        crate::images::probe::decode_base64(part.as_bytes())
    };
    decoded
}

/// Decode a whole base64 string (either alphabet) given as raw JSON string text.
pub(crate) fn decode_all(raw: &str) -> Option<Vec<u8>> {
    let s = unescape_b64(raw)?;
    crate::images::probe::decode_base64(s.as_bytes())
}

/// Largest char boundary ≤ `i` in `s`.
fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Base64 characters decoded to sniff a format and read a header: enough for every header
/// this crate reads except TIFF (whose IFD may sit at the end; TIFF is converted anyway).
pub(crate) const SNIFF_CHARS: usize = crate::images::probe::PROBE_CHARS;

/// Format and header dimensions of a base64 image (raw JSON string text), from a prefix only.
pub(crate) fn sniff_b64(raw: &str) -> (Option<Format>, Option<(u32, u32)>) {
    let Some(head) = decode_prefix(raw, SNIFF_CHARS) else {
        return (None, None);
    };
    let format = sniff(&head);
    let dims = format.and_then(|f| header_dimensions(f, &head));
    (format, dims)
}

/// Dimensions from a header prefix: PNG IHDR and JPEG SOF read directly
/// (`docs/images.md#header-probe`), the other formats the `image` crate decodes through its header
/// readers.
pub(crate) fn header_dimensions(format: Format, head: &[u8]) -> Option<(u32, u32)> {
    match format {
        Format::Png => return crate::images::probe::png_dimensions(head),
        Format::Jpeg => return crate::images::probe::jpeg_dimensions(head),
        _ => {}
    }
    let codec = format.codec()?;
    let mut reader = image::ImageReader::with_format(std::io::Cursor::new(head), codec);
    reader.limits(image::Limits::default());
    reader.into_dimensions().ok()
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

    fn ftyp(major: &[u8; 4], compat: &[&[u8; 4]]) -> Vec<u8> {
        let size = 16 + 4 * compat.len();
        let mut v = (size as u32).to_be_bytes().to_vec();
        v.extend_from_slice(b"ftyp");
        v.extend_from_slice(major);
        v.extend_from_slice(&[0, 0, 0, 0]);
        for c in compat {
            v.extend_from_slice(*c);
        }
        v.extend_from_slice(&[0; 16]);
        v
    }

    #[test]
    fn magic_bytes() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n...."), Some(Format::Png));
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some(Format::Jpeg));
        assert_eq!(sniff(b"GIF89a...."), Some(Format::Gif));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some(Format::Webp));
        assert_eq!(
            sniff(&[
                b'B', b'M', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ]),
            Some(Format::Bmp)
        );
        assert_eq!(sniff(b"II*\0...."), Some(Format::Tiff));
        assert_eq!(sniff(b"MM\0*...."), Some(Format::Tiff));
        assert_eq!(sniff(&ftyp(b"heic", &[b"mif1"])), Some(Format::Heic));
        assert_eq!(sniff(&ftyp(b"mif1", &[b"heic"])), Some(Format::Heic));
        assert_eq!(sniff(&ftyp(b"mif1", &[b"miaf"])), Some(Format::Heif));
        assert_eq!(sniff(&ftyp(b"mif1", &[b"avif"])), Some(Format::Avif));
        assert_eq!(sniff(&ftyp(b"isom", &[b"mp41"])), None);
        assert_eq!(
            sniff(b"<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"/>"),
            Some(Format::Svg)
        );
        assert_eq!(sniff(b"<html>"), None);
        assert_eq!(sniff(b""), None);
        assert_eq!(sniff(b"BM"), None);
    }

    #[test]
    fn declared_types() {
        assert!(Format::Jpeg.matches_declared("image/jpeg", true));
        assert!(Format::Jpeg.matches_declared("IMAGE/JPEG", false));
        assert!(!Format::Jpeg.matches_declared("IMAGE/JPEG", true));
        assert!(!Format::Jpeg.matches_declared("image/jpg", false));
        assert!(!Format::Png.matches_declared("image", false));
        assert!(!Format::Png.matches_declared("", true));
    }

    #[test]
    fn base64_prefixes() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode([0xFFu8; 300]);
        assert!(b64.contains('/'));
        let escaped = b64.replace('/', "\\/");
        assert_eq!(decode_prefix(&escaped, 8).unwrap(), vec![0xFF; 6]);
        assert_eq!(decode_all(&escaped).unwrap(), vec![0xFF; 300]);
        assert_eq!(decode_prefix("!!!!", 8), None);
        assert_eq!(decode_prefix("", 8), None);
        assert_eq!(decode_all("a\\nb"), None);
        assert_eq!(sniff_b64("@@@"), (None, None));
    }
}
