//! The image rules a request is held to: the route's provider row's rules
//! ([`crate::provider::ImageLimits`], resolved once per route), refined per request.
//!
//! Order: a wire with rules of its own first (Bedrock Converse: the Converse API's, for every
//! model; with Anthropic's for a `claude` model, the tighter of each), then the route's rules
//! (its `provider` key's row, else the row its upstream host matches), then the model (a
//! `claude` model behind a gateway gets Anthropic's rules, a `gemini` model Gemini's), then
//! the body's dialect (an Anthropic Messages body gets Anthropic's rules, Gemini's gets
//! Gemini's, everything else OpenAI's). Limits and their sources:
//! `docs/images.md#provider-limits`, `docs/providers.md`.

use crate::dialect::format::ImageRules;
use crate::dialect::Dialect;
use crate::provider::{
    ImageLimits, ModelFamily, ResolvedProvider, ANTHROPIC_IMAGES, CONVERSE_CLAUDE_IMAGES,
    CONVERSE_IMAGES, GEMINI_IMAGES, OPENAI_IMAGES,
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
    /// The Bedrock Converse API's rules.
    pub(crate) const CONVERSE: ImageProfile = ImageProfile(&CONVERSE_IMAGES);
    /// A Claude model on Converse: Anthropic's and the Converse API's, the tighter of each.
    pub(crate) const CONVERSE_CLAUDE: ImageProfile = ImageProfile(&CONVERSE_CLAUDE_IMAGES);

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
        let rules = dialect.format().default_image_rules();
        let family = ModelFamily::of(model.unwrap_or(""));
        if rules == ImageRules::Converse {
            return if family.claude {
                ImageProfile::CONVERSE_CLAUDE
            } else {
                ImageProfile::CONVERSE
            };
        }
        if let Some(limits) = provider.and_then(|p| p.images) {
            return ImageProfile(limits);
        }
        if family.claude {
            return ImageProfile::ANTHROPIC;
        }
        if family.gemini {
            return ImageProfile::GEMINI;
        }
        match rules {
            ImageRules::Anthropic => ImageProfile::ANTHROPIC,
            ImageRules::Gemini => ImageProfile::GEMINI,
            ImageRules::Openai => ImageProfile::OPENAI,
            ImageRules::Converse => ImageProfile::CONVERSE,
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

    /// Every model on Converse is held to the Converse API's rules; a Claude model to
    /// Anthropic's too, the tighter of each.
    #[test]
    fn converse_rules_hold_every_model_and_claude_gets_the_tighter_of_both() {
        const C: ImageProfile = ImageProfile::CONVERSE;
        const CC: ImageProfile = ImageProfile::CONVERSE_CLAUDE;
        let bedrock = Some("bedrock-runtime.us-east-1.amazonaws.com");
        assert_eq!(
            resolve(
                Dialect::Converse,
                None,
                bedrock,
                Some("amazon.nova-pro-v1:0")
            ),
            C
        );
        assert_eq!(resolve(Dialect::Converse, None, None, None), C);
        let claude = Some("us.anthropic.claude-sonnet-4-5-20250929-v1:0");
        assert_eq!(resolve(Dialect::Converse, None, bedrock, claude), CC);
        // Claude's InvokeModel on the same host speaks Anthropic's wire: Anthropic's rules.
        assert_eq!(
            resolve(Dialect::Anthropic, None, bedrock, claude),
            ImageProfile::ANTHROPIC
        );

        // 3.75 MB of image bytes is 5,000,000 bytes of base64.
        assert_eq!(C.limits().max_b64_len, Some(5_000_000));
        let (a, c, cc) = (ImageProfile::ANTHROPIC.limits(), C.limits(), CC.limits());
        assert_eq!(cc.accepted, a.accepted);
        assert_eq!(cc.accepted, c.accepted);
        assert_eq!(cc.max_side, a.max_side.min(c.max_side));
        assert_eq!(cc.many_image, a.many_image);
        assert_eq!(cc.max_b64_len, c.max_b64_len);
        // The tighter of the rule and `[images] max_image_bytes`.
        assert_eq!(c.hard_len(20_000_000), 5_000_000);
        assert_eq!(c.hard_len(1_000_000), 1_000_000);
        assert_eq!(a.hard_len(20_000_000), 20_000_000);
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
