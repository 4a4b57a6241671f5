//! Image formats: the vocabulary the provider table (which formats a provider accepts) and
//! the image passes (what a payload is, what it becomes) share. Sniffing a payload's format
//! from its magic bytes is `crate::images::format`'s job (`docs/images.md#formats-and-magic-bytes`).

/// A raster or vector format, as sniffed from the first bytes of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    Png,
    Jpeg,
    Gif,
    Webp,
    Bmp,
    Tiff,
    Svg,
    Heic,
    Heif,
    Avif,
}

impl Format {
    /// The MIME type sent on the wire.
    pub(crate) fn mime(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
            Format::Gif => "image/gif",
            Format::Webp => "image/webp",
            Format::Bmp => "image/bmp",
            Format::Tiff => "image/tiff",
            Format::Svg => "image/svg+xml",
            Format::Heic => "image/heic",
            Format::Heif => "image/heif",
            Format::Avif => "image/avif",
        }
    }

    /// The format's bare lowercase name, as Bedrock Converse's image `format` spells it
    /// (`png`, `jpeg`, `gif`, `webp`: the `ImageFormat` values of
    /// <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ImageBlock.html>);
    /// the other formats by their media subtype.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Svg => "svg",
            other => other.mime().trim_start_matches("image/"),
        }
    }

    /// True when the `image` crate built here decodes it (png, jpeg, gif, webp, bmp, tiff).
    pub(crate) fn decodable(self) -> bool {
        self.codec().is_some()
    }

    /// The `image` crate's format, for the decodable ones.
    pub(crate) fn codec(self) -> Option<image::ImageFormat> {
        Some(match self {
            Format::Png => image::ImageFormat::Png,
            Format::Jpeg => image::ImageFormat::Jpeg,
            Format::Gif => image::ImageFormat::Gif,
            Format::Webp => image::ImageFormat::WebP,
            Format::Bmp => image::ImageFormat::Bmp,
            Format::Tiff => image::ImageFormat::Tiff,
            Format::Svg | Format::Heic | Format::Heif | Format::Avif => return None,
        })
    }

    /// True when `declared` (a media type as sent, parameters ignored) names this format in
    /// its canonical spelling: `image/jpg` and `image/pjpeg` do not. `exact`: case counts too,
    /// for a media-type field (Anthropic's `media_type` is a case-sensitive enum: `IMAGE/JPEG`
    /// is rejected); a data URL's type is case-insensitive (RFC 2045), so `exact` is false
    /// for one.
    pub(crate) fn matches_declared(self, declared: &str, exact: bool) -> bool {
        let d = declared.split(';').next().unwrap_or("").trim();
        if exact {
            d == self.mime()
        } else {
            d.eq_ignore_ascii_case(self.mime())
        }
    }
}
