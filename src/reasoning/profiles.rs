//! The reasoning route table and its matching: which reasoning carriers a provider reads on the
//! OpenAI Chat wire, which must be echoed back, how signed thinking is replayed on the Anthropic
//! wire, and which keep-thinking flag a profile may add.
//!
//! Sources (see `docs/providers.md` for each row and `docs/reasoning.md` for the rules):
//! - Carrier sets are Hermes' `_REASONING_CARRIER_ROUTES` defaults: strict schemas (Mistral, Groq,
//!   Cerebras, SambaNova, Hunyuan) get none; OpenRouter-style gateways RC + R + RD; Novita /
//!   MiniMax RC + RD; local servers and Ollama Cloud RC + R; Fireworks and everything else RC.
//!   One deliberate difference: z.ai's OpenAI-compatible endpoint bills a replayed
//!   `reasoning_content` but never shows it to the model (Hermes PR #86433,
//!   `docs/reasoning.md#keep-thinking-flags`), so `zai` sends none on that wire.
//! - Must-echo is Hermes' `_REASONING_ECHO_RULES` (`docs/reasoning.md#must-echo`): DeepSeek,
//!   Kimi/Moonshot, MiMo, and the `stealth/missingno` model.
//! - Gemini `extra_content.google.thought_signature` on tool calls is kept only for models whose
//!   name contains `gemini` or `gemma` (`docs/reasoning.md#gemini-thought-signatures`): every
//!   other host 400s on it.
//!
//! A host matches a domain when, lowercased and without a trailing dot, it equals the domain or
//! ends with `"." + domain`; never by substring (`notmistral.ai` is not Mistral) and never by
//! the path (`evil.com/mistral.ai` is not Mistral).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A reasoning carrier on an OpenAI Chat assistant message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Carrier {
    /// `reasoning_content` (string): DeepSeek, Kimi, MiMo, GLM, Qwen, llama.cpp, SGLang.
    ReasoningContent,
    /// `reasoning` (string): OpenRouter alias, vLLM, Ollama, Cerebras.
    Reasoning,
    /// `reasoning_details` (array): OpenRouter's unified reasoning records.
    ReasoningDetails,
    /// `extra_content` (holding `google.thought_signature`) on `tool_calls[i]` and on the
    /// message: Gemini 3 via its OpenAI-compatible endpoint.
    GeminiThoughtSignature,
    /// `reasoning_opaque` / `reasoning_text`: GitHub Copilot `/chat/completions`.
    CopilotOpaque,
}

impl Carrier {
    /// Every carrier, in a fixed order.
    pub const ALL: [Carrier; 5] = [
        Carrier::ReasoningContent,
        Carrier::Reasoning,
        Carrier::ReasoningDetails,
        Carrier::GeminiThoughtSignature,
        Carrier::CopilotOpaque,
    ];

    /// The message key this carrier lives in; also its name in verdicts and `carriers = [...]`.
    pub fn field(self) -> &'static str {
        match self {
            Carrier::ReasoningContent => "reasoning_content",
            Carrier::Reasoning => "reasoning",
            Carrier::ReasoningDetails => "reasoning_details",
            Carrier::GeminiThoughtSignature => "extra_content",
            Carrier::CopilotOpaque => "reasoning_opaque",
        }
    }

    /// Parse a name from a route's `carriers = [...]` (the field names; also
    /// `thought_signature` for the Gemini carrier and `reasoning_text` for Copilot's).
    pub fn from_name(name: &str) -> Option<Carrier> {
        match name.trim().to_ascii_lowercase().as_str() {
            "reasoning_content" => Some(Carrier::ReasoningContent),
            "reasoning" => Some(Carrier::Reasoning),
            "reasoning_details" => Some(Carrier::ReasoningDetails),
            "extra_content" | "thought_signature" => Some(Carrier::GeminiThoughtSignature),
            "reasoning_opaque" | "reasoning_text" => Some(Carrier::CopilotOpaque),
            _ => None,
        }
    }
}

/// How signed thinking blocks are replayed on the Anthropic Messages wire
/// (`docs/reasoning.md#thinking-routes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingRoute {
    /// anthropic.com (and gateways that forward to Claude): `thinking` / `redacted_thinking`
    /// pass byte-exact on every turn, never rewritten by model age.
    Native,
    /// Kimi's Anthropic-compatible endpoint or a Kimi-family model: replay as-is.
    Kimi,
    /// DeepSeek's Anthropic-compatible endpoint or a DeepSeek model on another host: replay
    /// (DeepSeek demands `content[].thinking` back, `docs/reasoning.md#must-echo`).
    DeepSeek,
    /// z.ai's Anthropic-compatible endpoint: replay (replayed thinking works there,
    /// `docs/reasoning.md#thinking-routes`).
    Zai,
    /// Any other third-party host: strip thinking blocks (it cannot verify the signatures).
    StripThirdParty,
}

/// Must-echo family (`docs/reasoning.md#must-echo`): a tool-call turn without a non-empty
/// `reasoning_content` is a 400 there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EchoFamily {
    Kimi,
    /// Also: when the request carries `tools`, every assistant turn
    /// (`docs/reasoning.md#must-echo`).
    DeepSeek,
    Mimo,
    Missingno,
}

/// A keep-thinking flag a profile may add when the request explicitly enables thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepThinking {
    /// GLM: `thinking.clear_thinking: false` next to `thinking.type: "enabled"`. Source: docs.z.ai
    /// / docs.bigmodel.cn "thinking mode" (`docs/reasoning.md#keep-thinking-flags`); the Coding
    /// Plan endpoint preserves thinking by default, so it is not added there. On by default, but
    /// only matters when `reasoning_content` is replayed (the `zai` profile replays none on the
    /// OpenAI wire unless `carriers` says so, `docs/reasoning.md#keep-thinking-flags`).
    GlmClearThinking,
    /// DashScope / Qwen: top-level `preserve_thinking: true` next to `enable_thinking: true`.
    /// Source: Alibaba Model Studio "deep thinking" page (help.aliyun.com, cited by
    /// `docs/reasoning.md#keep-thinking-flags`, official text not read directly) and qwen-code PR
    /// #5637 (public code). On by default.
    DashscopePreserve,
    /// Kimi: `thinking.keep: "all"` next to `thinking.type: "enabled"`. No public vendor
    /// document of the wire value was found (Hermes documents it but its code lacks it;
    /// Moonshot's own kimi-code client has a `[thinking] keep` setting, value not documented),
    /// so it ships OFF: [`Profile::keep_thinking`] is `None` for `kimi`.
    KimiKeepAll,
}

impl KeepThinking {
    /// The name under which a rejection of this flag is learned and omitted (dotted for a
    /// nested key).
    pub fn param(self) -> &'static str {
        match self {
            KeepThinking::GlmClearThinking => "thinking.clear_thinking",
            KeepThinking::DashscopePreserve => "preserve_thinking",
            KeepThinking::KimiKeepAll => "thinking.keep",
        }
    }
}

/// The droppable names of every keep-thinking flag: a rejection of one is learned like any
/// other unknown top-level parameter (they belong on `[reasoning] droppable_params`; the
/// detector treats them as droppable even when the config list lacks them).
pub const KEEP_THINKING_PARAMS: [&str; 3] = [
    "thinking.clear_thinking",
    "preserve_thinking",
    "thinking.keep",
];

/// Anthropic beta that enables `thinking.block_binding` (`docs/reasoning.md#prefix-binding`).
pub const BINDING_BETA: &str = "thinking-binding-controls-2026-08-01";

/// One built-in provider profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// The name a route's `provider` key uses (also the name in logs).
    pub name: &'static str,
    /// Domains matched exactly or by dot-suffix.
    pub hosts: &'static [&'static str],
    /// Carriers read on the OpenAI Chat wire (the Gemini signature is added by model name).
    pub carriers: &'static [Carrier],
    /// Must-echo by profile / host (model substrings are checked separately).
    pub echo: Option<EchoFamily>,
    /// Thinking replay on the Anthropic wire.
    pub thinking: ThinkingRoute,
    /// Whether `thinking.block_binding` with its beta header may be sent (Anthropic itself).
    pub binding_controls: bool,
    /// Keep-thinking flag added when the request enables thinking.
    pub keep_thinking: Option<KeepThinking>,
}

use Carrier::{CopilotOpaque as CO, ReasoningContent as RC, ReasoningDetails as RD};
const R: Carrier = Carrier::Reasoning;

const fn p(
    name: &'static str,
    hosts: &'static [&'static str],
    carriers: &'static [Carrier],
    thinking: ThinkingRoute,
) -> Profile {
    Profile {
        name,
        hosts,
        carriers,
        echo: None,
        thinking,
        binding_controls: false,
        keep_thinking: None,
    }
}

use ThinkingRoute::{Native, StripThirdParty as Strip};

/// The table, first match wins (host order matters only for overlapping domains, of which
/// there are none). Names outside `config::PROVIDER_PROFILES` (`hunyuan`, `copilot`) are
/// reachable by host only; `default` is the fallback.
pub const PROFILES: &[Profile] = &[
    Profile {
        binding_controls: true,
        ..p("anthropic", &["anthropic.com"], &[RC], Native)
    },
    p("openai", &["openai.com"], &[RC], Strip),
    p(
        "openrouter",
        &[
            "openrouter.ai",
            "kilo.ai",
            "ai-gateway.vercel.sh",
            "nousresearch.com",
        ],
        &[RC, R, RD],
        Native,
    ),
    p(
        "gemini",
        &[
            "generativelanguage.googleapis.com",
            "aiplatform.googleapis.com",
        ],
        &[RC],
        Strip,
    ),
    Profile {
        echo: Some(EchoFamily::DeepSeek),
        ..p(
            "deepseek",
            &["deepseek.com"],
            &[RC],
            ThinkingRoute::DeepSeek,
        )
    },
    Profile {
        echo: Some(EchoFamily::Kimi),
        ..p(
            "kimi",
            &["api.kimi.com", "moonshot.ai", "moonshot.cn"],
            &[RC],
            ThinkingRoute::Kimi,
        )
    },
    Profile {
        echo: Some(EchoFamily::Mimo),
        ..p("mimo", &["xiaomimimo.com"], &[RC], Strip)
    },
    Profile {
        keep_thinking: Some(KeepThinking::GlmClearThinking),
        ..p("zai", &["z.ai", "bigmodel.cn"], &[], ThinkingRoute::Zai)
    },
    Profile {
        keep_thinking: Some(KeepThinking::DashscopePreserve),
        ..p(
            "dashscope",
            &[
                "dashscope.aliyuncs.com",
                "dashscope-intl.aliyuncs.com",
                "dashscope-us.aliyuncs.com",
            ],
            &[RC],
            Strip,
        )
    },
    p("mistral", &["mistral.ai"], &[], Strip),
    p("groq", &["groq.com"], &[], Strip),
    p("cerebras", &["cerebras.ai"], &[], Strip),
    p("sambanova", &["sambanova.ai"], &[], Strip),
    p("hunyuan", &["hunyuan.cloud.tencent.com"], &[], Strip),
    p("fireworks", &["fireworks.ai"], &[RC], Strip),
    p(
        "novita",
        &[
            "novita.ai",
            "tokenhub.tencentmaas.com",
            "tokenhub-intl.tencentcloudmaas.com",
        ],
        &[RC, RD],
        Strip,
    ),
    p("minimax", &["minimax.io", "minimaxi.com"], &[RC, RD], Strip),
    p("ollama", &["ollama.com", "upstage.ai"], &[RC, R], Strip),
    p("copilot", &["githubcopilot.com"], &[RC, CO], Strip),
    // Local endpoints: matched by address, not by domain. Anthropic-wire traffic to a local
    // server is passed through (a local gateway or mock, not a signature-less model host).
    p("local", &[], &[RC, R], Native),
    p("default", &[], &[RC], Strip),
];

/// The profile called `name`, if built in.
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

fn fallback(name: &str) -> &'static Profile {
    // The table always holds "local" and "default"; the static below is never reached but
    // keeps this total without a panic.
    static DEFAULT: Profile = p("default", &[], &[RC], Strip);
    profile(name).unwrap_or(&DEFAULT)
}

/// How a route's profile was chosen (for `check` output and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchedBy {
    /// The route's `provider` key.
    Provider,
    /// The upstream host, exact or dot-suffix.
    Host,
    /// The upstream is a loopback / private address or `localhost`.
    Local,
    /// Nothing matched: the `default` profile.
    Default,
}

/// Everything the shaping pass and the detector need to know about a route (and model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRoute {
    /// The profile's name.
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
    /// Names in `carriers = [...]` that are not carriers (for `check` to report).
    pub unknown_carrier_names: Vec<String>,
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

/// Normalize a host: lowercase, no brackets, no port, no trailing dot.
pub fn normalize_host(host: &str) -> String {
    let h = host.trim().to_ascii_lowercase();
    let h = if let Some(rest) = h.strip_prefix('[') {
        // [v6]:port or [v6]
        rest.split(']').next().unwrap_or("").to_owned()
    } else if h.matches(':').count() == 1 {
        h.split(':').next().unwrap_or("").to_owned()
    } else {
        h
    };
    h.trim_end_matches('.').to_owned()
}

/// True when `host` (normalized) is `domain` or a subdomain of it.
pub fn host_matches(host: &str, domain: &str) -> bool {
    let host = normalize_host(host);
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    if domain.is_empty() {
        return false;
    }
    host == domain
        || (host.len() > domain.len()
            && host.ends_with(domain.as_str())
            && host.as_bytes()[host.len() - domain.len() - 1] == b'.')
}

/// True for `localhost` (and `*.localhost`), `host.docker.internal`, loopback, private
/// (RFC 1918, CGNAT), link-local and unique-local addresses.
pub fn is_local_host(host: &str) -> bool {
    let h = normalize_host(host);
    if h == "localhost" || h.ends_with(".localhost") || h == "host.docker.internal" {
        return true;
    }
    match h.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => is_local_v4(v4),
        Ok(IpAddr::V6(v6)) => is_local_v6(v6),
        Err(_) => false,
    }
}

fn is_local_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || (a == 100 && (64..128).contains(&b))
}

fn is_local_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_local_v4(v4);
    }
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

/// The model name lowercased, without a vendor prefix (`moonshotai/kimi-k2` → `kimi-k2`).
fn model_leaf(model: &str) -> String {
    let m = model.to_ascii_lowercase();
    m.rsplit('/').next().unwrap_or("").to_owned()
}

/// Gemini signatures are replayed only for these model names
/// (`docs/reasoning.md#gemini-thought-signatures`).
pub fn is_gemini_model(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    m.contains("gemini") || m.contains("gemma")
}

/// Kimi-family model names (`docs/reasoning.md#thinking-routes`): `kimi-…`, `moonshot-…`,
/// `k2.…`, `k3-…`, bare `k3`.
fn is_kimi_model(model: &str) -> bool {
    let leaf = model_leaf(model);
    leaf.starts_with("kimi")
        || leaf.starts_with("moonshot")
        || leaf.starts_with("k2.")
        || leaf.starts_with("k3-")
        || leaf == "k3"
}

/// Must-echo by model substring (`docs/reasoning.md#must-echo`: deepseek, mimo,
/// stealth/missingno).
fn echo_by_model(model: &str) -> Option<EchoFamily> {
    let m = model.to_ascii_lowercase();
    if m.contains("deepseek") {
        Some(EchoFamily::DeepSeek)
    } else if m.contains("mimo") {
        Some(EchoFamily::Mimo)
    } else if m.contains("stealth/missingno") {
        Some(EchoFamily::Missingno)
    } else {
        None
    }
}

/// Resolve a route's reasoning behaviour.
///
/// - `provider`: the route's `provider` key (a name in [`PROFILES`]); unknown names fall back
///   to host matching.
/// - `upstream_host`: the upstream's host (a port and IPv6 brackets are tolerated).
/// - `upstream_path`: the upstream URL's path (base path + request path); used to tell z.ai's
///   Coding Plan endpoint (`/coding/`), which preserves thinking by default, from the rest.
/// - `model`: the request's `model`, when known (Gemini signature, must-echo by model, the
///   Anthropic-wire route for Kimi / DeepSeek / Claude models on other hosts).
/// - `carriers_override`: the route's `carriers = [...]`, replacing the profile's set.
pub fn resolve(
    provider: Option<&str>,
    upstream_host: &str,
    upstream_path: &str,
    model: Option<&str>,
    carriers_override: Option<&[String]>,
) -> ResolvedRoute {
    let host = normalize_host(upstream_host);
    let by_provider = provider.and_then(profile);
    let (prof, matched_by) = if let Some(p) = by_provider {
        (p, MatchedBy::Provider)
    } else if let Some(p) = PROFILES
        .iter()
        .find(|p| p.hosts.iter().any(|d| host_matches(&host, d)))
    {
        (p, MatchedBy::Host)
    } else if is_local_host(&host) {
        (fallback("local"), MatchedBy::Local)
    } else {
        (fallback("default"), MatchedBy::Default)
    };

    let mut unknown_carrier_names = Vec::new();
    let mut carriers: BTreeSet<Carrier> = match carriers_override {
        Some(names) => names
            .iter()
            .filter_map(|n| {
                let c = Carrier::from_name(n);
                if c.is_none() {
                    unknown_carrier_names.push(n.clone());
                }
                c
            })
            .collect(),
        None => prof.carriers.iter().copied().collect(),
    };
    let model = model.unwrap_or("");
    if is_gemini_model(model) {
        carriers.insert(Carrier::GeminiThoughtSignature);
    }

    // Must-echo: by profile / host first (table order: kimi, deepseek, mimo), then by model
    // substring. Only where `reasoning_content` is sent at all: a strict route never gets the
    // pad (`docs/reasoning.md#shaping-an-assistant-turn`), nor a route whose `carriers`
    // override leaves RC out.
    let echo = prof
        .echo
        .or_else(|| echo_by_model(model))
        .filter(|_| carriers.contains(&Carrier::ReasoningContent));

    let mut thinking = prof.thinking;
    if thinking == ThinkingRoute::StripThirdParty && !model.is_empty() {
        if is_kimi_model(model) {
            thinking = ThinkingRoute::Kimi;
        } else if model.to_ascii_lowercase().contains("deepseek") {
            thinking = ThinkingRoute::DeepSeek;
        } else if prof.name == "default" && model.to_ascii_lowercase().contains("claude") {
            // An unknown host serving a `claude-*` model is a gateway to Claude (LiteLLM,
            // a corporate proxy): the signatures are Anthropic's and verifiable there, and
            // stripping them would break thinking tool loops (`docs/reasoning.md#thinking-routes`).
            thinking = ThinkingRoute::Native;
        }
    }

    let mut keep_thinking = prof.keep_thinking;
    if keep_thinking == Some(KeepThinking::GlmClearThinking)
        && upstream_path.to_ascii_lowercase().contains("/coding/")
    {
        keep_thinking = None;
    }

    ResolvedRoute {
        profile: prof.name,
        matched_by,
        host,
        carriers,
        echo,
        thinking,
        binding_controls: prof.binding_controls,
        keep_thinking,
        unknown_carrier_names,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::PROVIDER_PROFILES;

    fn set(cs: &[Carrier]) -> BTreeSet<Carrier> {
        cs.iter().copied().collect()
    }

    #[test]
    fn every_config_profile_is_built_in() {
        for name in PROVIDER_PROFILES {
            assert!(profile(name).is_some(), "{name}");
        }
        for extra in ["hunyuan", "copilot", "default"] {
            assert!(profile(extra).is_some(), "{extra}");
        }
    }

    #[test]
    fn host_matching_is_exact_or_dot_suffix() {
        assert!(host_matches("api.mistral.ai", "mistral.ai"));
        assert!(host_matches("mistral.ai", "mistral.ai"));
        assert!(host_matches("API.Mistral.AI.", "mistral.ai"));
        assert!(host_matches("api.mistral.ai:443", "mistral.ai"));
        assert!(!host_matches("notmistral.ai", "mistral.ai"));
        assert!(!host_matches("mistral.ai.evil.com", "mistral.ai"));
        assert!(!host_matches("evil.com/mistral.ai", "mistral.ai"));
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
            (None, "api.cerebras.ai", &[]),
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
        assert_eq!(r.unknown_carrier_names, vec!["bogus".to_owned()]);
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
