//! Image dimensions from headers only (`docs/images.md#header-probe`): PNG IHDR, JPEG SOF.
//!
//! Only a prefix of the base64 is decoded. Anything that cannot be read — a remote URL, a
//! non-base64 data URL, corrupt bytes, another container such as GIF or WebP — gives `None`,
//! which the eviction policy treats as "large" (it keeps the strict block ceiling).

use base64::Engine as _;

/// Most base64 characters decoded to find a header (Hermes `_DIMENSION_PROBE_CHARS`,
/// `docs/images.md#header-probe`).
pub(crate) const PROBE_CHARS: usize = 32 * 1024;

/// Side length in px above which an image keeps the strict block ceiling (Hermes
/// `MANY_IMAGE_DIMENSION_LIMIT`, `docs/images.md#constants`; Anthropic's many-image rule).
pub(crate) const MANY_IMAGE_DIMENSION_LIMIT: u32 = crate::provider::MANY_IMAGE_SIDE;

/// `(width, height)` in px.
pub(crate) type Dimensions = (u32, u32);

/// URL-safe base64 (RFC 4648 §5: `-` and `_` for 62 and 63), padded or not: the official
/// `google-genai` Python SDK sends Gemini `inlineData.data` this way (docs/images.md).
const URL_SAFE_ANY_PADDING: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// Decode base64 in either alphabet clients send: the standard one (`+` `/`, padded, as
/// every provider documents) or, when a `-` or `_` appears, the URL-safe one. The one decoder
/// of image base64 in this crate; what is forwarded unchanged keeps the client's spelling.
pub(crate) fn decode_base64(chars: &[u8]) -> Option<Vec<u8>> {
    if chars.iter().any(|&c| c == b'-' || c == b'_') {
        URL_SAFE_ANY_PADDING.decode(chars).ok()
    } else {
        base64::engine::general_purpose::STANDARD.decode(chars).ok()
    }
}

/// Dimensions of an image given as a `data:…;base64,` URL or as bare base64.
///
/// `text` may be the raw inner text of a JSON string: the only escape base64 can plausibly
/// carry, `\/`, is undone; any other escape gives `None`.
pub(crate) fn dimensions(text: &str) -> Option<Dimensions> {
    let payload = if let Some(rest) = text.strip_prefix("data:") {
        let (meta, data) = rest.split_once(',')?;
        if !meta.to_ascii_lowercase().ends_with(";base64") {
            return None;
        }
        data
    } else if text.bytes().take(64).any(|c| c == b':') {
        // A URL (https://…, file:…, gs://…): not readable here.
        return None;
    } else {
        text
    };
    let chars = base64_prefix(payload)?;
    let bytes = decode_base64(chars.as_bytes())?;
    png_dimensions(&bytes).or_else(|| jpeg_dimensions(&bytes))
}

/// True when `dims` is known and both sides are ≤ [`MANY_IMAGE_DIMENSION_LIMIT`].
pub(crate) fn within_many_image_limit(dims: Option<Dimensions>) -> bool {
    matches!(dims, Some((w, h)) if w <= MANY_IMAGE_DIMENSION_LIMIT && h <= MANY_IMAGE_DIMENSION_LIMIT)
}

/// The first ≤ [`PROBE_CHARS`] base64 characters of `payload`, `\/` unescaped, cut to a
/// multiple of 4. `None` on any other escape.
fn base64_prefix(payload: &str) -> Option<String> {
    let mut out = String::with_capacity(PROBE_CHARS.min(payload.len()));
    let mut chars = payload.chars();
    while out.len() < PROBE_CHARS {
        match chars.next() {
            None => break,
            Some('\\') => match chars.next() {
                Some('/') => out.push('/'),
                _ => return None,
            },
            Some(c) => out.push(c),
        }
    }
    let keep = out.len() - out.len() % 4;
    out.truncate(keep);
    if out.is_empty() {
        return None;
    }
    Some(out)
}

const PNG_SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

/// PNG: width and height are the big-endian u32s at bytes 16–24, inside the IHDR chunk.
pub(crate) fn png_dimensions(b: &[u8]) -> Option<Dimensions> {
    if b.len() < 24 || &b[..8] != PNG_SIGNATURE || &b[12..16] != b"IHDR" {
        return None;
    }
    let w = u32::from_be_bytes([b[16], b[17], b[18], b[19]]);
    let h = u32::from_be_bytes([b[20], b[21], b[22], b[23]]);
    Some((w, h))
}

/// JPEG: walk the segments (skipping 0xFF fill bytes) to the first SOF marker (C0–C3, C5–C7,
/// C9–CB, CD–CF) and read its height and width; stop at SOS (DA) or EOI (D9).
pub(crate) fn jpeg_dimensions(b: &[u8]) -> Option<Dimensions> {
    if b.len() < 4 || b[0] != 0xFF || b[1] != 0xD8 {
        return None;
    }
    let mut i = 2usize;
    loop {
        // A marker: 0xFF, any number of 0xFF fill bytes, then the marker code.
        if *b.get(i)? != 0xFF {
            return None;
        }
        while *b.get(i)? == 0xFF {
            i += 1;
        }
        let marker = *b.get(i)?;
        i += 1;
        match marker {
            0xDA | 0xD9 => return None,
            // Standalone markers carry no length.
            0x01 | 0xD0..=0xD8 => continue,
            _ => {}
        }
        let len = usize::from(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]));
        if len < 2 {
            return None;
        }
        let is_sof = matches!(marker, 0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF);
        if is_sof {
            // length(2) precision(1) height(2) width(2)
            let h = u16::from_be_bytes([*b.get(i + 3)?, *b.get(i + 4)?]);
            let w = u16::from_be_bytes([*b.get(i + 5)?, *b.get(i + 6)?]);
            return Some((u32::from(w), u32::from(h)));
        }
        i = i.checked_add(len)?;
    }
}

/// Test helpers: tiny fake images with valid headers.
#[cfg(test)]
pub(crate) mod fake {
    /// PNG signature + IHDR for `w`×`h` followed by `pad` filler bytes.
    pub(crate) fn png(w: u32, h: u32, pad: usize) -> Vec<u8> {
        let mut v = super::PNG_SIGNATURE.to_vec();
        v.extend_from_slice(&13u32.to_be_bytes());
        v.extend_from_slice(b"IHDR");
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
        v.extend((0..pad).map(|i| (i % 251) as u8));
        v
    }

    /// SOI, an APP0 segment, fill bytes, SOF0 for `w`×`h`, then SOS.
    pub(crate) fn jpeg(w: u16, h: u16, sof: u8) -> Vec<u8> {
        let mut v = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x06, b'J', b'F', b'I', b'F'];
        v.extend_from_slice(&[0xFF, 0xFF, 0xFF, sof, 0x00, 0x0B, 0x08]);
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&[0x01, 0x01, 0x11, 0x00]);
        v.extend_from_slice(&[0xFF, 0xDA, 0x00, 0x02]);
        v
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
    use base64::engine::general_purpose::STANDARD;

    #[test]
    fn png_from_bare_and_data_url() {
        let b64 = STANDARD.encode(fake::png(2400, 1350, 100));
        assert_eq!(dimensions(&b64), Some((2400, 1350)));
        let url = format!("data:image/png;base64,{b64}");
        assert_eq!(dimensions(&url), Some((2400, 1350)));
    }

    #[test]
    fn png_with_escaped_slashes() {
        // Find padding bytes that make a '/' appear in the base64 and escape it as JSON may.
        let b64 = STANDARD.encode(fake::png(1568, 882, 300));
        assert!(b64.contains('/'));
        let escaped = b64.replace('/', "\\/");
        assert_eq!(dimensions(&escaped), Some((1568, 882)));
        assert_eq!(dimensions(&b64.replacen('A', "\\u0041", 1)), None);
    }

    #[test]
    fn jpeg_every_sof_kind() {
        for sof in [
            0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF,
        ] {
            let b64 = STANDARD.encode(fake::jpeg(1920, 1080, sof));
            assert_eq!(dimensions(&b64), Some((1920, 1080)), "sof {sof:#x}");
        }
        // C4 (DHT) and C8 are not SOF markers: the walk reaches SOS and gives up.
        for not_sof in [0xC4, 0xC8, 0xCC] {
            let b64 = STANDARD.encode(fake::jpeg(1920, 1080, not_sof));
            assert_eq!(dimensions(&b64), None, "marker {not_sof:#x}");
        }
    }

    #[test]
    fn url_safe_alphabet() {
        use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
        let png = fake::png(1568, 882, 300);
        let b64 = URL_SAFE.encode(&png);
        assert!(b64.contains('-') || b64.contains('_'), "{b64}");
        assert_eq!(dimensions(&b64), Some((1568, 882)));
        assert_eq!(decode_base64(b64.as_bytes()), Some(png.clone()));
        let bare = URL_SAFE_NO_PAD.encode(&png);
        assert_eq!(decode_base64(bare.as_bytes()), Some(png));
        // One string may not mix the alphabets.
        assert_eq!(decode_base64(b"ab+-"), None);
    }

    #[test]
    fn unreadable_is_none() {
        assert_eq!(dimensions("https://example.com/a.png"), None);
        assert_eq!(dimensions("data:image/png,rawbytes"), None);
        assert_eq!(dimensions("data:image/png;base64"), None);
        assert_eq!(dimensions("!!!not base64!!!"), None);
        assert_eq!(dimensions(""), None);
        assert_eq!(
            dimensions(&STANDARD.encode(b"GIF89a\x10\x00\x10\x00")),
            None
        );
        assert_eq!(dimensions(&STANDARD.encode(b"RIFF\0\0\0\0WEBPVP8 ")), None);
        // Truncated headers.
        let png = fake::png(10, 10, 0);
        assert_eq!(dimensions(&STANDARD.encode(&png[..20])), None);
        let jpeg = fake::jpeg(10, 10, 0xC0);
        assert_eq!(dimensions(&STANDARD.encode(&jpeg[..14])), None);
    }

    #[test]
    fn only_a_prefix_is_decoded() {
        // A valid header followed by garbage past the probe window still reads.
        let mut b64 = STANDARD.encode(fake::png(800, 600, 30_000));
        b64.push_str(&"!".repeat(10_000));
        assert_eq!(dimensions(&b64), Some((800, 600)));
    }

    #[test]
    fn many_image_limit() {
        assert!(within_many_image_limit(Some((2000, 2000))));
        assert!(!within_many_image_limit(Some((2001, 10))));
        assert!(!within_many_image_limit(Some((10, 2001))));
        assert!(!within_many_image_limit(None));
    }
}
