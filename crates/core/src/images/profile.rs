//! The image rules a request is held to: the route's provider row's rules
//! ([`crate::provider::ImageLimits`], resolved once per route), refined per request.
//!
//! Order: the route's rules (its `provider` key's row, else the row its upstream host
//! matches), then the model (a `claude` model behind a gateway gets Anthropic's rules, a
//! `gemini` model Gemini's), then the body's dialect (an Anthropic Messages body gets
//! Anthropic's rules, Gemini's gets Gemini's, everything else OpenAI's). Limits and their
//! sources: `docs/images.md#provider-limits`, `docs/providers.md`.

use crate::dialect::format::ImageRules;
use crate::dialect::Dialect;
use crate::provider::{
    ImageLimits, ModelFamily, ResolvedProvider, ANTHROPIC_IMAGES, GEMINI_IMAGES, OPENAI_IMAGES,
};

/// Which provider's image rules a request is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageProfile(&'static ImageLimits);

impl ImageProfile {
    /// Anthropic's rules.
    pub(crate) const ANTHROPIC: ImageProfile = ImageProfile(&ANTHROPIC_IMAGES);
    /// OpenAI's rules.
    pub(crate) const OPENAI: ImageProfile = ImageProfile(&OPENAI_IMAGES);
    /// Gemini's rules.
    pub(crate) const GEMINI: ImageProfile = ImageProfile(&GEMINI_IMAGES);

    /// The profile's limits.
    pub(crate) fn limits(self) -> &'static ImageLimits {
        self.0
    }

    /// The rules of one request (see the module doc for the order). `provider`: the route's
    /// resolved row, `None` when there is no route (tests, benches).
    pub fn for_request(
        dialect: Dialect,
        provider: Option<&ResolvedProvider>,
        model: Option<&str>,
    ) -> ImageProfile {
        if let Some(limits) = provider.and_then(|p| p.images) {
            return ImageProfile(limits);
        }
        let family = ModelFamily::of(model.unwrap_or(""));
        if family.claude {
            return ImageProfile::ANTHROPIC;
        }
        if family.gemini {
            return ImageProfile::GEMINI;
        }
        match dialect.format().default_image_rules() {
            ImageRules::Anthropic => ImageProfile::ANTHROPIC,
            ImageRules::Gemini => ImageProfile::GEMINI,
            ImageRules::Openai => ImageProfile::OPENAI,
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
mod tests {
    use super::*;
    use crate::images::format::Format;

    fn resolve(
        dialect: Dialect,
        provider: Option<&str>,
        host: Option<&str>,
        model: Option<&str>,
    ) -> ImageProfile {
        let p = host.map(|h| ResolvedProvider::resolve(provider, h, None));
        let p = p.or_else(|| provider.map(|k| ResolvedProvider::resolve(Some(k), "", None)));
        ImageProfile::for_request(dialect, p.as_ref(), model)
    }

    #[test]
    fn resolution_order() {
        const A: ImageProfile = ImageProfile::ANTHROPIC;
        const O: ImageProfile = ImageProfile::OPENAI;
        const G: ImageProfile = ImageProfile::GEMINI;
        assert_eq!(resolve(Dialect::Openai, Some("anthropic"), None, None), A);
        assert_eq!(
            resolve(
                Dialect::Openai,
                None,
                Some("generativelanguage.googleapis.com"),
                None
            ),
            G
        );
        assert_eq!(
            resolve(
                Dialect::Openai,
                None,
                Some("openrouter.ai"),
                Some("anthropic/claude-sonnet-4.5")
            ),
            A
        );
        assert_eq!(
            resolve(Dialect::Anthropic, None, Some("api.kimi.com"), None),
            A
        );
        assert_eq!(resolve(Dialect::Gemini, None, None, None), G);
        assert_eq!(
            resolve(Dialect::OpenaiResponses, None, Some("api.openai.com"), None),
            O
        );
        assert_eq!(
            resolve(Dialect::Openai, None, Some("notanthropic.com"), None),
            O
        );
        // The host's rules win over the model's.
        assert_eq!(
            resolve(
                Dialect::Openai,
                None,
                Some("api.openai.com"),
                Some("claude-x")
            ),
            O
        );
    }

    #[test]
    fn gemini_accepts_heic_anthropic_does_not() {
        assert!(ImageProfile::GEMINI
            .limits()
            .accepted
            .contains(&Format::Heic));
        assert!(!ImageProfile::ANTHROPIC
            .limits()
            .accepted
            .contains(&Format::Heic));
    }
}
