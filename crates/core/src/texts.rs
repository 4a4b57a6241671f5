//! Fixed texts the passes insert. They never vary: tests and the provider prefix cache depend on
//! them never changing (`docs/dev/architecture.md#fixed-texts`). No time, no counter, no per-request
//! data.

/// The sentence that replaces each retired image block / part (one text block per image).
///
/// ASCII only, with no `"` or `\`, so it can be written into JSON verbatim.
pub const RETIRED_IMAGE: &str = "[image removed by cachekeeper to stay within provider limits]";

/// Replaces an image whose format the provider rejects and no decoder here can convert
/// (SVG, HEIC/HEIF off Gemini, AVIF). One constant per format; see [`unsupported_format`].
pub const UNSUPPORTED_SVG: &str =
    "[image omitted by cachekeeper: image/svg+xml is not a supported image format]";
/// See [`UNSUPPORTED_SVG`].
pub const UNSUPPORTED_HEIC: &str =
    "[image omitted by cachekeeper: image/heic is not a supported image format]";
/// See [`UNSUPPORTED_SVG`].
pub(crate) const UNSUPPORTED_HEIF: &str =
    "[image omitted by cachekeeper: image/heif is not a supported image format]";
/// See [`UNSUPPORTED_SVG`].
pub const UNSUPPORTED_AVIF: &str =
    "[image omitted by cachekeeper: image/avif is not a supported image format]";
/// Replaces an image of a format that cannot be recognised, after the provider said the format
/// is unsupported (reactive recovery, `docs/images.md#rejection-wordings`).
pub(crate) const UNSUPPORTED_UNKNOWN: &str =
    "[image omitted by cachekeeper: the image format is not supported]";
/// Replaces an image the provider could not decode (reactive recovery,
/// `docs/images.md#rejection-wordings`).
pub const CORRUPT_IMAGE: &str =
    "[image omitted by cachekeeper: the image data could not be decoded]";
/// Replaces every image when the model cannot see images (`docs/images.md#rejection-wordings`, the
/// strip rule's placeholder, kept verbatim so tool-call pairing survives).
pub const IMAGES_NOT_SUPPORTED: &str =
    "[image content removed \u{2014} server does not support images]";

/// Text of the block that replaces an assistant turn left empty by stripping its thinking
/// (reasoning shaping on a third-party Anthropic-wire host; the Hermes agent uses the same
/// placeholder, `docs/reasoning.md#thinking-routes`). Fixed: the prefix cache depends on it.
pub(crate) const EMPTY_TURN_TEXT: &str = "(empty)";

/// The must-echo pad written as `reasoning_content` on a turn that must carry one: one space,
/// never `""` (DeepSeek V4 rejects the empty string; docs/reasoning.md).
pub(crate) const ECHO_PAD: &str = " ";

/// The fixed text for an unsupported format, by its MIME type (`image/svg+xml`, `image/heic`,
/// `image/heif`, `image/avif`); [`UNSUPPORTED_UNKNOWN`] for anything else.
pub(crate) fn unsupported_format(mime: &str) -> &'static str {
    match mime {
        "image/svg+xml" => UNSUPPORTED_SVG,
        "image/heic" => UNSUPPORTED_HEIC,
        "image/heif" => UNSUPPORTED_HEIF,
        "image/avif" => UNSUPPORTED_AVIF,
        _ => UNSUPPORTED_UNKNOWN,
    }
}

/// The repeat-cap text (`[images] max_calls_per_image`, `docs/images.md#repeat-cap`): replaces the
/// (n+1)-th and later occurrences of one image. Same `n`, same text.
pub fn repeat_cap(n: u32) -> String {
    let times = if n == 1 { "time" } else { "times" };
    format!(
        "[image omitted by cachekeeper: this image was already loaded {n} {times} in this \
         conversation; answer from what you have already seen of it]"
    )
}

/// The note added right after a downscaled agent image (`docs/images.md#downscale`): original and
/// new size, and the factor that maps coordinates read from the new image back to the
/// original (computer-use agents click by pixel). Sizes are `(width, height)` in px; the
/// factor is printed with 4 decimals, one per axis when they differ at that precision.
/// Same sizes, same text.
pub fn downscale_note(from: (u32, u32), to: (u32, u32)) -> String {
    let fx = f64::from(from.0) / f64::from(to.0.max(1));
    let fy = f64::from(from.1) / f64::from(to.1.max(1));
    let (sx, sy) = (format!("{fx:.4}"), format!("{fy:.4}"));
    let factor = if sx == sy {
        format!("multiply coordinates read from it by {sx}")
    } else {
        format!("multiply x coordinates read from it by {sx} and y coordinates by {sy}")
    };
    format!(
        "[cachekeeper: image downscaled from {}x{} to {}x{}; {factor} to map them back to the \
         original]",
        from.0, from.1, to.0, to.1
    )
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
    fn json_literal_matches_the_text() {
        let encoded = serde_json::to_string(RETIRED_IMAGE).unwrap();
        assert_eq!(encoded, format!("\"{RETIRED_IMAGE}\""));
        assert!(RETIRED_IMAGE.is_ascii());
    }

    #[test]
    fn fixed_formats() {
        assert_eq!(
            downscale_note((1920, 1080), (1568, 882)),
            "[cachekeeper: image downscaled from 1920x1080 to 1568x882; multiply x coordinates \
             read from it by 1.2245 and y coordinates by 1.2245 to map them back to the original]"
                .replace(
                    "x coordinates read from it by 1.2245 and y coordinates by 1.2245",
                    "coordinates read from it by 1.2245"
                )
        );
        assert!(downscale_note((1000, 1000), (333, 334)).contains("x coordinates"));
        assert_eq!(repeat_cap(1), repeat_cap(1));
        assert!(repeat_cap(3).contains("loaded 3 times"));
        assert!(repeat_cap(1).contains("loaded 1 time in"));
        assert_eq!(unsupported_format("image/heic"), UNSUPPORTED_HEIC);
        assert_eq!(unsupported_format("image/x"), UNSUPPORTED_UNKNOWN);
        assert!(IMAGES_NOT_SUPPORTED.contains('\u{2014}'));
    }
}
