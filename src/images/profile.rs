//! Per-provider image limits: the one table every image pass reads.
//!
//! Three profiles. The route's `provider` key wins, then the upstream host (suffix match), then the
//! model (a `claude` model behind a gateway gets Anthropic's limits,
//! `docs/images.md#anthropic-limits`), then the dialect (an Anthropic Messages body gets
//! Anthropic's limits, Gemini's gets Gemini's, everything else OpenAI's).

use crate::dialect::Dialect;
use crate::images::format::Format;

/// Which provider's image rules a request is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageProfile {
    Anthropic,
    Openai,
    Gemini,
}

/// Anthropic's largest side, px (8000×8000, `docs/images.md#anthropic-limits`; the 400
/// `At least one of the image dimensions exceed max allowed size: 8000 pixels`,
/// `docs/images.md#rejection-wordings`).
pub const ANTHROPIC_MAX_SIDE: u32 = 8000;
/// Anthropic's many-image rule: above this many images in one request
/// (`docs/images.md#anthropic-limits`)…
pub const MANY_IMAGE_COUNT: usize = 20;
/// …each image must be ≤ this many px per side (`docs/images.md#anthropic-limits`; Hermes
/// `MANY_IMAGE_DIMENSION_LIMIT`, `docs/images.md#constants`).
pub const MANY_IMAGE_SIDE: u32 = crate::images::probe::MANY_IMAGE_DIMENSION_LIMIT;

/// The limits of one profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileLimits {
    /// Profile name for reports (`anthropic`, `openai`, `gemini`).
    pub name: &'static str,
    /// Inline formats the provider accepts (`docs/images.md#provider-limits`). GIF is kept for
    /// Gemini: a repair happens only where a rejection is certain, and GIF is not documented
    /// as rejected there.
    pub accepted: &'static [Format],
    /// Largest side accepted, px; `None` when no documented limit applies.
    pub max_side: Option<u32>,
    /// The many-image rule: `(count, side)` — with more than `count` images every image must
    /// be ≤ `side` px; `None` when the provider has no such rule.
    pub many_image: Option<(usize, u32)>,
}

const COMMON: &[Format] = &[Format::Jpeg, Format::Png, Format::Gif, Format::Webp];
const GEMINI: &[Format] = &[
    Format::Jpeg,
    Format::Png,
    Format::Gif,
    Format::Webp,
    Format::Heic,
    Format::Heif,
];

/// The table.
pub const PROFILES: [(ImageProfile, ProfileLimits); 3] = [
    (
        ImageProfile::Anthropic,
        ProfileLimits {
            name: "anthropic",
            accepted: COMMON,
            max_side: Some(ANTHROPIC_MAX_SIDE),
            many_image: Some((MANY_IMAGE_COUNT, MANY_IMAGE_SIDE)),
        },
    ),
    (
        ImageProfile::Openai,
        ProfileLimits {
            name: "openai",
            accepted: COMMON,
            max_side: None,
            many_image: None,
        },
    ),
    (
        ImageProfile::Gemini,
        ProfileLimits {
            name: "gemini",
            accepted: GEMINI,
            max_side: None,
            many_image: None,
        },
    ),
];

/// Host suffixes per profile (suffix match on a dot boundary, never a substring).
const HOSTS: &[(&str, ImageProfile)] = &[
    ("anthropic.com", ImageProfile::Anthropic),
    ("generativelanguage.googleapis.com", ImageProfile::Gemini),
    ("aiplatform.googleapis.com", ImageProfile::Gemini),
    ("openai.com", ImageProfile::Openai),
];

impl ImageProfile {
    /// The profile's limits.
    pub fn limits(self) -> &'static ProfileLimits {
        match self {
            ImageProfile::Anthropic => &PROFILES[0].1,
            ImageProfile::Openai => &PROFILES[1].1,
            ImageProfile::Gemini => &PROFILES[2].1,
        }
    }

    /// Pick the profile of a request (see the module doc for the order).
    pub fn resolve(
        dialect: Dialect,
        provider: Option<&str>,
        upstream_host: Option<&str>,
        model: Option<&str>,
    ) -> ImageProfile {
        match provider.map(str::to_ascii_lowercase).as_deref() {
            Some("anthropic") => return ImageProfile::Anthropic,
            Some("gemini") => return ImageProfile::Gemini,
            Some("openai") => return ImageProfile::Openai,
            _ => {}
        }
        if let Some(host) = upstream_host {
            let host = crate::reasoning::normalize_host(host);
            if let Some((_, p)) = HOSTS
                .iter()
                .find(|(d, _)| crate::reasoning::host_matches(&host, d))
            {
                return *p;
            }
        }
        let model = model.unwrap_or("").to_ascii_lowercase();
        if model.contains("claude") {
            return ImageProfile::Anthropic;
        }
        if model.contains("gemini") {
            return ImageProfile::Gemini;
        }
        match dialect {
            Dialect::Anthropic => ImageProfile::Anthropic,
            Dialect::Gemini => ImageProfile::Gemini,
            Dialect::Openai | Dialect::OpenaiResponses => ImageProfile::Openai,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order() {
        use ImageProfile::*;
        assert_eq!(
            ImageProfile::resolve(Dialect::Openai, Some("anthropic"), None, None),
            Anthropic
        );
        assert_eq!(
            ImageProfile::resolve(
                Dialect::Openai,
                None,
                Some("generativelanguage.googleapis.com"),
                None
            ),
            Gemini
        );
        assert_eq!(
            ImageProfile::resolve(
                Dialect::Openai,
                None,
                Some("openrouter.ai"),
                Some("anthropic/claude-sonnet-4.5")
            ),
            Anthropic
        );
        assert_eq!(
            ImageProfile::resolve(Dialect::Anthropic, None, Some("api.kimi.com"), None),
            Anthropic
        );
        assert_eq!(
            ImageProfile::resolve(Dialect::Gemini, None, None, None),
            Gemini
        );
        assert_eq!(
            ImageProfile::resolve(Dialect::OpenaiResponses, None, Some("api.openai.com"), None),
            Openai
        );
        assert_eq!(
            ImageProfile::resolve(Dialect::Openai, None, Some("notanthropic.com"), None),
            Openai
        );
    }

    #[test]
    fn table_is_consistent() {
        for (p, l) in PROFILES {
            assert_eq!(p.limits(), &l);
        }
        assert!(Gemini::accepts_heic());
    }

    struct Gemini;
    impl Gemini {
        fn accepts_heic() -> bool {
            ImageProfile::Gemini
                .limits()
                .accepted
                .contains(&Format::Heic)
                && !ImageProfile::Anthropic
                    .limits()
                    .accepted
                    .contains(&Format::Heic)
        }
    }
}
