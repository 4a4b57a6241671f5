//! The reasoning side of a route: the per-request refinement of the route's provider row
//! ([`crate::provider`]) by the request's model and upstream path.
//!
//! The row (carriers, must-echo, thinking route, binding controls, keep-thinking flag) is
//! resolved once per route ([`ResolvedProvider`]); per request [`for_request`] adds what the
//! model name says ([`ModelFamily`]): the Gemini thought signature for `gemini` / `gemma`
//! models, must-echo for DeepSeek / MiMo / `stealth/missingno` models, and the Anthropic-wire
//! thinking route for Kimi / DeepSeek models on other hosts and Claude models behind an
//! unknown gateway. Sources: `docs/providers.md` (each row), `docs/reasoning.md` (the rules).

use std::collections::BTreeSet;

pub(crate) use crate::provider::{
    Carrier, EchoFamily, KeepThinking, MatchedBy, ThinkingRoute, KEEP_THINKING_PARAMS,
};
use crate::provider::{ModelFamily, ResolvedProvider};

/// Anthropic beta that enables `thinking.block_binding` (`docs/reasoning.md#prefix-binding`).
pub const BINDING_BETA: &str = "thinking-binding-controls-2026-08-01";

/// Everything the shaping pass and the detector need to know about a route and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRoute {
    /// The provider row's name.
    pub profile: &'static str,
    pub matched_by: MatchedBy,
    /// Lowercased upstream host (no port, no brackets).
    pub host: String,
    /// Carriers sent on the OpenAI Chat wire before learned verdicts (`omit`) are applied.
    pub carriers: BTreeSet<Carrier>,
    /// Must-echo family; `None` on routes that do not read `reasoning_content`.
    pub echo: Option<EchoFamily>,
    /// Thinking replay on the Anthropic wire.
    pub thinking: ThinkingRoute,
    /// `thinking.block_binding` may be sent (with [`BINDING_BETA`]).
    pub binding_controls: bool,
    /// Keep-thinking flag this route may add.
    pub keep_thinking: Option<KeepThinking>,
    /// The top-level reasoning controls the host takes (the row's
    /// [`crate::provider::Provider::reasoning_controls`]); the shaping pass removes the other
    /// [`crate::provider::REASONING_CONTROLS`]. `None`: not known, nothing removed.
    pub reasoning_controls: Option<&'static [&'static str]>,
    /// Betas travel in the body's `anthropic_beta` array (the row's
    /// [`crate::provider::Provider::betas_in_body`]), not the `anthropic-beta` header.
    pub betas_in_body: bool,
}

impl ResolvedRoute {
    /// True for a strict route: no reasoning carrier at all, not even the must-echo pad.
    pub fn is_strict(&self) -> bool {
        !self.carriers.iter().any(|c| {
            matches!(
                c,
                Carrier::ReasoningContent | Carrier::Reasoning | Carrier::ReasoningDetails
            )
        })
    }
}

/// The reasoning behaviour of one request on a route.
///
/// - `provider`: the route's resolved row ([`crate::route::Route::provider`]).
/// - `upstream_path`: the upstream URL's path (base path + request path); tells z.ai's
///   Coding Plan endpoint (`/coding/`), which preserves thinking by default, from the rest.
/// - `model`: the request's `model`, when known.
pub fn for_request(
    provider: &ResolvedProvider,
    upstream_path: &str,
    model: Option<&str>,
) -> ResolvedRoute {
    let row = provider.row;
    let model = model.unwrap_or("");
    let family = ModelFamily::of(model);
    let mut carriers = provider.carriers.clone();
    if family.reads_gemini_signature() {
        carriers.insert(Carrier::GeminiThoughtSignature);
    }

    // Must-echo: by row first, then by model name. Only where `reasoning_content` is sent at
    // all: a strict route never gets the pad, nor a route whose `carriers` override leaves
    // RC out.
    let echo = row
        .echo
        .or_else(|| family.echo())
        .filter(|_| carriers.contains(&Carrier::ReasoningContent));

    let mut thinking = row.thinking;
    if thinking == ThinkingRoute::StripThirdParty && !model.is_empty() {
        if family.kimi {
            thinking = ThinkingRoute::Kimi;
        } else if family.deepseek {
            thinking = ThinkingRoute::DeepSeek;
        } else if row.name == "default" && family.claude {
            // An unknown host serving a `claude-*` model is a gateway to Claude (LiteLLM,
            // a corporate proxy): the signatures are Anthropic's and verifiable there, and
            // stripping them would break thinking tool loops.
            thinking = ThinkingRoute::Native;
        }
    }

    let mut keep_thinking = row.keep_thinking;
    if keep_thinking == Some(KeepThinking::GlmClearThinking)
        && upstream_path.to_ascii_lowercase().contains("/coding/")
    {
        keep_thinking = None;
    }

    ResolvedRoute {
        profile: row.name,
        matched_by: provider.matched_by,
        host: provider.host.clone(),
        carriers,
        echo,
        thinking,
        binding_controls: row.binding_controls,
        keep_thinking,
        reasoning_controls: row.reasoning_controls,
        betas_in_body: row.betas_in_body,
    }
}

/// Resolve from strings: [`ResolvedProvider::resolve`] then [`for_request`]. For tests and
/// tools; the proxy resolves the row once per route.
pub fn resolve(
    provider: Option<&str>,
    upstream_host: &str,
    upstream_path: &str,
    model: Option<&str>,
    carriers_override: Option<&[String]>,
) -> ResolvedRoute {
    for_request(
        &ResolvedProvider::resolve(provider, upstream_host, carriers_override),
        upstream_path,
        model,
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
    use crate::provider::{host_matches, is_local_host, ResolvedProvider};
    use Carrier::{CopilotOpaque as CO, ReasoningContent as RC, ReasoningDetails as RD};
    use ThinkingRoute::{Native, StripThirdParty as Strip};
    const R: Carrier = Carrier::Reasoning;

    fn set(cs: &[Carrier]) -> BTreeSet<Carrier> {
        cs.iter().copied().collect()
    }

    /// Host matching itself is tested in `provider`; here: the path never picks a profile.
    #[test]
    fn the_path_never_picks_a_profile() {
        let r = resolve(None, "evil.com", "/mistral.ai/v1", None, None);
        assert_eq!(r.profile, "default");
        let r = resolve(None, "notmistral.ai", "/v1", None, None);
        assert_eq!(r.profile, "default");
        assert_eq!(r.carriers, set(&[RC]));
        let r = resolve(None, "api.mistral.ai", "/v1", None, None);
        assert_eq!((r.profile, r.matched_by), ("mistral", MatchedBy::Host));
        assert!(!host_matches("evil-moonshot.ai", "moonshot.ai"));
    }

    #[test]
    fn local_endpoints() {
        for h in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.8.9.10:11434",
            "[::1]:8000",
            "::1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.20",
            "169.254.1.1",
            "fd00::1",
            "[fe80::1]",
            "host.docker.internal",
        ] {
            assert!(is_local_host(h), "{h}");
            let r = resolve(None, h, "/v1", None, None);
            assert_eq!(
                (r.profile, r.matched_by),
                ("local", MatchedBy::Local),
                "{h}"
            );
            assert_eq!(r.carriers, set(&[RC, R]), "{h}");
        }
        for h in [
            "172.32.0.1",
            "8.8.8.8",
            "localhost.evil.com",
            "2001:db8::1",
            "example.com",
        ] {
            assert!(!is_local_host(h), "{h}");
        }
    }

    #[test]
    fn provider_key_wins_over_host() {
        let r = resolve(Some("groq"), "127.0.0.1", "/v1", None, None);
        assert_eq!((r.profile, r.matched_by), ("groq", MatchedBy::Provider));
        assert!(r.is_strict());
        let r = resolve(Some("nope"), "api.deepseek.com", "/v1", None, None);
        assert_eq!((r.profile, r.matched_by), ("deepseek", MatchedBy::Host));
    }

    #[test]
    fn expected_carrier_sets_per_profile() {
        // The Hermes agent's route tests (`docs/providers.md`), plus the profiles cachekeeper adds.
        let cases: &[(Option<&str>, &str, &[Carrier])] = &[
            (None, "api.mistral.ai", &[]),
            (None, "api.groq.com", &[]),
            (None, "api.cerebras.ai", &[R]),
            (None, "api.sambanova.ai", &[]),
            (None, "api.hunyuan.cloud.tencent.com", &[]),
            (None, "api.fireworks.ai", &[RC]),
            (None, "inference-api.nousresearch.com", &[RC, R, RD]),
            (None, "api.kilo.ai", &[RC, R, RD]),
            (None, "openrouter.ai", &[RC, R, RD]),
            (None, "api.novita.ai", &[RC, RD]),
            (None, "api.minimax.io", &[RC, RD]),
            (None, "ollama.com", &[RC, R]),
            (None, "127.0.0.1", &[RC, R]),
            (None, "api.openai.com", &[RC]),
            (None, "api.z.ai", &[]),
            (None, "open.bigmodel.cn", &[]),
            (None, "api.deepseek.com", &[RC]),
            (None, "api.moonshot.ai", &[RC]),
            (None, "dashscope.aliyuncs.com", &[RC]),
            (None, "api.githubcopilot.com", &[RC, CO]),
            (None, "example.com", &[RC]),
            (Some("ollama"), "192.168.0.5", &[RC, R]),
            (Some("zai"), "example.com", &[]),
        ];
        for (provider, host, want) in cases {
            let r = resolve(*provider, host, "/v1/chat/completions", Some("m"), None);
            assert_eq!(r.carriers, set(want), "{provider:?} {host}");
        }
    }

    #[test]
    fn strict_route_ignores_must_echo_model() {
        let r = resolve(None, "api.mistral.ai", "/v1", Some("deepseek-r1"), None);
        assert!(r.is_strict());
        assert_eq!(r.echo, None);
    }

    #[test]
    fn must_echo_table() {
        let echo = |p: Option<&str>, h: &str, m: &str| resolve(p, h, "/v1", Some(m), None).echo;
        assert_eq!(
            echo(None, "api.deepseek.com", "x"),
            Some(EchoFamily::DeepSeek)
        );
        assert_eq!(
            echo(None, "openrouter.ai", "deepseek/deepseek-v4"),
            Some(EchoFamily::DeepSeek)
        );
        assert_eq!(
            echo(None, "api.moonshot.cn", "kimi-k2.5"),
            Some(EchoFamily::Kimi)
        );
        assert_eq!(echo(None, "api.kimi.com", "k2"), Some(EchoFamily::Kimi));
        assert_eq!(echo(Some("kimi"), "10.0.0.1", "k2"), Some(EchoFamily::Kimi));
        // Kimi is host-driven on purpose: aggregators re-exporting Kimi don't need the pad.
        assert_eq!(echo(None, "openrouter.ai", "moonshotai/kimi-k2"), None);
        assert_eq!(
            echo(None, "api.xiaomimimo.com", "x"),
            Some(EchoFamily::Mimo)
        );
        assert_eq!(
            echo(None, "example.com", "MiMo-V2.5"),
            Some(EchoFamily::Mimo)
        );
        assert_eq!(
            echo(None, "example.com", "stealth/missingno"),
            Some(EchoFamily::Missingno)
        );
        assert_eq!(echo(None, "api.openai.com", "gpt-5"), None);
        // An override without RC turns the pad off.
        let r = resolve(
            None,
            "api.deepseek.com",
            "/v1",
            Some("deepseek-chat"),
            Some(&["reasoning".to_owned()]),
        );
        assert_eq!(r.echo, None);
    }

    #[test]
    fn gemini_signature_only_for_gemini_models() {
        let host = "generativelanguage.googleapis.com";
        let r = resolve(
            None,
            host,
            "/v1beta/openai/chat/completions",
            Some("gemini-3-pro"),
            None,
        );
        assert!(r.carriers.contains(&Carrier::GeminiThoughtSignature));
        let r = resolve(None, host, "/v1beta/openai", Some("my-alias"), None);
        assert!(!r.carriers.contains(&Carrier::GeminiThoughtSignature));
        let r = resolve(
            None,
            "openrouter.ai",
            "/api/v1",
            Some("google/Gemma-3-27b"),
            None,
        );
        assert!(r.carriers.contains(&Carrier::GeminiThoughtSignature));
    }

    #[test]
    fn override_replaces_the_set() {
        let names = vec!["reasoning".to_owned(), "bogus".to_owned()];
        let r = resolve(None, "api.cerebras.ai", "/v1", None, Some(&names));
        assert_eq!(r.carriers, set(&[R]));
        let p = ResolvedProvider::resolve(None, "api.cerebras.ai", Some(&names));
        assert_eq!(p.unknown_carrier_names, vec!["bogus".to_owned()]);
        let r = resolve(None, "api.openai.com", "/v1", None, Some(&[]));
        assert!(r.is_strict());
    }

    #[test]
    fn anthropic_wire_routes() {
        let t = |p: Option<&str>, h: &str, m: &str| resolve(p, h, "/v1/messages", Some(m), None);
        let r = t(None, "api.anthropic.com", "claude-opus-4-5");
        assert_eq!((r.thinking, r.binding_controls), (Native, true));
        assert_eq!(
            t(None, "api.moonshot.ai", "kimi-k2").thinking,
            ThinkingRoute::Kimi
        );
        assert_eq!(
            t(None, "api.deepseek.com", "deepseek-v4").thinking,
            ThinkingRoute::DeepSeek
        );
        assert_eq!(t(None, "api.z.ai", "glm-5").thinking, ThinkingRoute::Zai);
        assert_eq!(t(None, "api.minimax.io", "MiniMax-M2").thinking, Strip);
        assert_eq!(t(None, "example.com", "some-model").thinking, Strip);
        assert_eq!(
            t(None, "example.com", "moonshotai/kimi-k2.6").thinking,
            ThinkingRoute::Kimi
        );
        assert_eq!(
            t(None, "example.com", "deepseek-v4").thinking,
            ThinkingRoute::DeepSeek
        );
        let r = t(None, "llm.corp.example", "claude-sonnet-4-6");
        assert_eq!((r.thinking, r.binding_controls), (Native, false));
        assert_eq!(t(None, "127.0.0.1", "x").thinking, Native);
        assert_eq!(
            t(None, "openrouter.ai", "anthropic/claude-opus-4.5").thinking,
            Native
        );
    }

    #[test]
    fn keep_thinking_flags() {
        let k = |h: &str, path: &str| resolve(None, h, path, None, None).keep_thinking;
        assert_eq!(
            k("api.z.ai", "/api/paas/v4"),
            Some(KeepThinking::GlmClearThinking)
        );
        assert_eq!(k("api.z.ai", "/api/coding/paas/v4"), None);
        assert_eq!(
            k("dashscope.aliyuncs.com", "/compatible-mode/v1"),
            Some(KeepThinking::DashscopePreserve)
        );
        assert_eq!(k("api.moonshot.ai", "/v1"), None, "Kimi keep ships off");
        assert_eq!(k("api.openai.com", "/v1"), None);
    }
}
