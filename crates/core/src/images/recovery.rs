//! Reactive image recovery (`docs/images.md#rejection-wordings`): read a provider's 4xx, say which
//! image problem it names, and rebuild the request so the one retry can succeed.
//!
//! Two pure steps for the server's retry-once loop:
//! 1. [`classify_image_rejection`]`(status, body)` → `Some(ImageRejection)` when the error is
//!    about images (the phrase lists below, lowercased substring match, 4xx only).
//! 2. The caller runs the whole pass pipeline again on the ORIGINAL request body with
//!    `RewriteContext::image_recovery = Some(rejection.kind)` (so the retried bytes are the
//!    same on every later turn that hits the same rejection), and retries only when the
//!    result differs from what was sent. This module names the rejection; it never calls the
//!    pipeline (which sits above it).
//!
//! What the rebuild does per kind: `TooLarge { cap_px: Some(n) }` shrinks every image (uploads
//! too) to ≤ n px a side; `TooLarge { cap_px: None }` shrinks every image over 5 MiB of base64
//! ([`crate::images::passes::RESIZE_TARGET_BYTES`]); `Dimensions` shrinks every image to
//! `max_dimension`; `Corrupt` replaces images that do not decode with
//! [`crate::texts::CORRUPT_IMAGE`]; `Unsupported` converts everything but PNG / JPEG and
//! replaces what cannot be converted; `ModelCannotSeeImages` replaces every image with
//! [`crate::texts::IMAGES_NOT_SUPPORTED`] (text blocks in place of images, so tool-call pairing
//! and message order survive). Only `ModelCannotSeeImages` is worth remembering per
//! (upstream host, model) (the verdict field `crate::state::Field::NoImageInput`); pass it as
//! `RewriteContext::image_recovery` on later requests.

/// What a provider rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageRejectionKind {
    /// An image is too large; `cap_px` is the pixel cap the error states (512–8000), if any.
    TooLarge { cap_px: Option<u32> },
    /// An image's dimensions are too large and no cap could be read.
    Dimensions,
    /// An image's bytes do not decode (or do not match their declared type).
    Corrupt,
    /// An image's format is not accepted.
    Unsupported,
    /// The model takes no images at all.
    ModelCannotSeeImages,
}

impl ImageRejectionKind {
    /// A short, stable name for logs and `x-cachekeeper-rewrites` (`retried_without=image:…`).
    pub fn label(self) -> &'static str {
        match self {
            ImageRejectionKind::TooLarge { .. } => "too_large",
            ImageRejectionKind::Dimensions => "dimensions",
            ImageRejectionKind::Corrupt => "corrupt",
            ImageRejectionKind::Unsupported => "unsupported",
            ImageRejectionKind::ModelCannotSeeImages => "model_cannot_see_images",
        }
    }
}

/// A classified rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRejection {
    pub kind: ImageRejectionKind,
    /// The phrase that matched (for logs).
    pub wording: &'static str,
}

/// "Model can't see images" phrases (`docs/images.md#rejection-wordings`).
pub(crate) const CANNOT_SEE_IMAGES: &[&str] = &[
    "only 'text' content type is supported",
    "only text content type is supported",
    "image_url is not supported",
    "image content is not supported",
    "multimodal is not supported",
    "multimodal content is not supported",
    "multimodal input is not supported",
    "vision is not supported",
    "vision input is not supported",
    "does not support images",
    "does not support image input",
    "does not support multimodal",
    "does not support vision",
    "model does not support image",
    "unexpected item type in content",
    "image_url'. expected",
    "unknown variant `image_url`, expected `text`",
    "unknown variant image_url, expected text",
    "no endpoints found that support image input",
];

/// "Corrupt image payload" phrases, plus Anthropic's media-type mismatch wordings, repaired
/// the same way (`docs/images.md#rejection-wordings`).
pub(crate) const CORRUPT: &[&str] = &[
    "image data you provided does not represent a valid image",
    "failed to decode image",
    "invalid png image",
    "invalid jpeg image",
    "base64 string of provided image cannot be decoded",
    "image does not match the provided media type",
    "but the image appears to be",
];

/// Dimension phrases (`docs/images.md#rejection-wordings`); the stated
/// cap is read with [`stated_cap_px`].
pub(crate) const DIMENSIONS: &[&str] = &[
    "image dimensions exceed",
    "dimensions exceed max allowed size",
    "max allowed size: 8000",
    "patches after processing",
];

/// Size phrases (`docs/images.md#rejection-wordings`).
pub(crate) const TOO_LARGE: &[&str] = &[
    "image exceeds",
    "image too large",
    "image_too_large",
    "image size exceeds",
    "media exceeds",
    "media too large",
    "make sure your payload is below",
    "streamreadconstraints.getmaxstringlength",
];

/// Unsupported-format phrases: Anthropic's media-type enum error
/// (`docs/images.md#rejection-wordings`) and generic wordings.
pub(crate) const UNSUPPORTED: &[&str] = &[
    "input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
    "unsupported image format",
    "image format is not supported",
    "you uploaded an unsupported image",
];

/// Smallest and largest stated pixel cap accepted (`docs/images.md#rejection-wordings`).
pub(crate) const CAP_PX_RANGE: std::ops::RangeInclusive<u32> = 512..=8000;

/// Classify a provider error. `None` unless `status` is 4xx and the body names an image
/// problem. Checked in this order: corrupt, dimensions, size, unsupported format, model
/// cannot see images (the first four are about one image and more specific).
pub fn classify_image_rejection(status: u16, body: &[u8]) -> Option<ImageRejection> {
    if !(400..500).contains(&status) {
        return None;
    }
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    let find = |list: &'static [&'static str]| list.iter().copied().find(|p| text.contains(p));
    if let Some(w) = find(CORRUPT) {
        return Some(ImageRejection {
            kind: ImageRejectionKind::Corrupt,
            wording: w,
        });
    }
    if let Some(w) = find(DIMENSIONS) {
        let kind = match stated_cap_px(&text) {
            Some(px) => ImageRejectionKind::TooLarge { cap_px: Some(px) },
            None => ImageRejectionKind::Dimensions,
        };
        return Some(ImageRejection { kind, wording: w });
    }
    if let Some(w) = find(TOO_LARGE) {
        return Some(ImageRejection {
            kind: ImageRejectionKind::TooLarge {
                cap_px: stated_cap_px(&text),
            },
            wording: w,
        });
    }
    if let Some(w) = find(UNSUPPORTED) {
        return Some(ImageRejection {
            kind: ImageRejectionKind::Unsupported,
            wording: w,
        });
    }
    find(CANNOT_SEE_IMAGES).map(|w| ImageRejection {
        kind: ImageRejectionKind::ModelCannotSeeImages,
        wording: w,
    })
}

/// The cap in `max allowed size[ for …]: NNNN pixels` (lowercased text), when it lies in
/// [`CAP_PX_RANGE`] (`docs/images.md#rejection-wordings`).
pub(crate) fn stated_cap_px(lower: &str) -> Option<u32> {
    let mut rest = lower;
    while let Some(at) = rest.find("max allowed size") {
        rest = &rest[at + "max allowed size".len()..];
        let colon = rest.find(':')?;
        // ` for many-image requests` may sit between the phrase and the colon.
        if rest[..colon].len() > 64 {
            continue;
        }
        let after = rest[colon + 1..].trim_start();
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        let tail = after[digits.len()..].trim_start();
        if tail.starts_with("pixels") || tail.starts_with("px") {
            if let Ok(px) = digits.parse::<u32>() {
                if CAP_PX_RANGE.contains(&px) {
                    return Some(px);
                }
            }
        }
    }
    None
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
    use ImageRejectionKind::*;

    fn kind(status: u16, body: &str) -> Option<ImageRejectionKind> {
        classify_image_rejection(status, body.as_bytes()).map(|r| r.kind)
    }

    fn anthropic(msg: &str) -> String {
        serde_json::json!({"type":"error","error":{"type":"invalid_request_error","message":msg}})
            .to_string()
    }

    #[test]
    fn anthropic_wordings_of_wire_formats_2_4() {
        assert_eq!(
            kind(400, &anthropic("messages.3.content.1.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'")),
            Some(Unsupported)
        );
        assert_eq!(
            kind(400, &anthropic("messages.0.content.0.image.source.base64.data: Image does not match the provided media type image/png")),
            Some(Corrupt)
        );
        assert_eq!(
            kind(400, &anthropic("messages.83.content.0.tool_result.content.1.image.source.base64: The image was specified using the image/jpeg media type, but the image appears to be a image/png image")),
            Some(Corrupt)
        );
        assert_eq!(
            kind(400, &anthropic("messages.1.content.0.image.source.base64: image exceeds 5 MB maximum: 8259148 bytes > 5242880 bytes")),
            Some(TooLarge { cap_px: None })
        );
        assert_eq!(
            kind(400, &anthropic("messages.1.content.0.image.source.base64.data: At least one of the image dimensions exceed max allowed size: 8000 pixels")),
            Some(TooLarge { cap_px: Some(8000) })
        );
        assert_eq!(
            kind(400, &anthropic("messages.1.content.0.image.source.base64.data: At least one of the image dimensions exceed max allowed size for many-image requests: 2000 pixels")),
            Some(TooLarge { cap_px: Some(2000) })
        );
    }

    #[test]
    fn hermes_recovery_wordings() {
        for p in CANNOT_SEE_IMAGES {
            assert_eq!(
                kind(
                    400,
                    &format!(
                        "{{\"error\":{{\"message\":\"Error: {}\"}}}}",
                        p.to_uppercase()
                    )
                ),
                Some(ModelCannotSeeImages),
                "{p}"
            );
        }
        assert_eq!(
            kind(404, "No endpoints found that support image input"),
            Some(ModelCannotSeeImages)
        );
        assert_eq!(
            kind(400, "Only 'text' content type is supported."),
            Some(ModelCannotSeeImages)
        );
        assert_eq!(
            kind(400, "unknown variant `image_url`, expected `text`"),
            Some(ModelCannotSeeImages)
        );
        for p in CORRUPT {
            assert_eq!(kind(400, p), Some(Corrupt), "{p}");
        }
        assert_eq!(kind(400, "Failed to decode image buffer"), Some(Corrupt));
        for p in TOO_LARGE {
            assert_eq!(kind(413, p), Some(TooLarge { cap_px: None }), "{p}");
        }
        assert_eq!(
            kind(400, "image dimensions exceed the limit"),
            Some(Dimensions)
        );
        assert_eq!(
            kind(400, "too many patches after processing (30000)"),
            Some(Dimensions)
        );
        assert_eq!(
            kind(400, "image too large: max allowed size: 100 pixels"),
            Some(TooLarge { cap_px: None })
        );
        assert_eq!(
            kind(400, "image too large: max allowed size: 9000 pixels"),
            Some(TooLarge { cap_px: None })
        );
        assert_eq!(
            kind(400, "image too large: max allowed size: 1024 pixels"),
            Some(TooLarge { cap_px: Some(1024) })
        );
    }

    #[test]
    fn not_images() {
        assert_eq!(kind(500, "image exceeds 5 MB maximum"), None);
        assert_eq!(kind(200, "image exceeds"), None);
        assert_eq!(
            kind(
                400,
                "Unrecognized request argument supplied: reasoning_effort"
            ),
            None
        );
        assert_eq!(kind(400, ""), None);
        assert_eq!(
            classify_image_rejection(400, b"\xff\xfeimage exceeds").map(|r| r.wording),
            Some("image exceeds")
        );
    }
}
