//! THE provider table: one row per provider, holding everything cachekeeper knows about it —
//! the hosts that identify it, the wire dialects it serves, its image limits, the reasoning
//! carriers it reads on the OpenAI Chat wire, its must-echo rule, how signed thinking is
//! replayed on its Anthropic-compatible wire, the keep-thinking flag it may get, and its
//! prompt-cache rules (TTL, cache write / read price multipliers per model family).
//!
//! Every fact in a row has its public source in `docs/providers.md` (or is marked unconfirmed
//! there); the rules the rows feed are in `docs/reasoning.md` and `docs/images.md`.
//!
//! Resolution happens once, when the route table is built ([`ResolvedProvider::resolve`],
//! held by [`crate::route::Route::provider`]): the route's `provider` key wins, then the
//! upstream host (exact or dot-suffix, never a substring, never the path), then a local
//! address (`local`), else `default`. Per request only the model refinement remains, and it
//! reads [`ModelFamily::of`] (the one set of model-name tests) — see
//! [`crate::reasoning::for_request`] and [`crate::images::profile::ImageProfile::for_request`].
//!
//! This module is vocabulary and data only: it depends on nothing above it except the image
//! [`Format`] enum and the [`Dialect`] enum.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::dialect::Dialect;
use crate::media::Format;

// ---- Vocabulary --------------------------------------------------------------------------

/// A reasoning carrier on an OpenAI Chat assistant message (`docs/reasoning.md#carriers-per-wire`).
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
    /// Every key a carrier occupies on an assistant message (or, for `extra_content`, on its
    /// `tool_calls[i]`): each [`Carrier::field`] plus Copilot's second key `reasoning_text`.
    pub(crate) const MESSAGE_KEYS: [&'static str; 6] = [
        "reasoning_content",
        "reasoning",
        "reasoning_details",
        "extra_content",
        "reasoning_opaque",
        "reasoning_text",
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
    pub(crate) fn from_name(name: &str) -> Option<Carrier> {
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
    /// (DeepSeek demands `content[].thinking` back).
    DeepSeek,
    /// z.ai's Anthropic-compatible endpoint: replay (replayed thinking works there).
    Zai,
    /// Any other third-party host: strip thinking blocks (it cannot verify the signatures).
    StripThirdParty,
}

/// Must-echo family (`docs/reasoning.md#must-echo`): a tool-call turn without a non-empty
/// `reasoning_content` is a 400 there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EchoFamily {
    Kimi,
    /// Also: when the request carries `tools`, every assistant turn.
    DeepSeek,
    Mimo,
    Missingno,
}

/// A keep-thinking flag a profile may add when the request explicitly enables thinking
/// (`docs/reasoning.md#keep-thinking-flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepThinking {
    /// GLM: `thinking.clear_thinking: false` next to `thinking.type: "enabled"`. The Coding
    /// Plan endpoint (`/coding/` in the upstream path) preserves thinking by default, so it is
    /// not added there. Only matters when `reasoning_content` is replayed (the `zai` row
    /// replays none on the OpenAI wire unless `carriers` says so).
    GlmClearThinking,
    /// DashScope / Qwen: top-level `preserve_thinking: true` next to `enable_thinking: true`.
    DashscopePreserve,
    /// Kimi: `thinking.keep: "all"` next to `thinking.type: "enabled"`. No vendor document of
    /// the wire value was found, so no row carries it (it ships off).
    KimiKeepAll,
}

impl KeepThinking {
    /// The name under which a rejection of this flag is learned and omitted (dotted for a
    /// nested key).
    pub(crate) fn param(self) -> &'static str {
        match self {
            KeepThinking::GlmClearThinking => "thinking.clear_thinking",
            KeepThinking::DashscopePreserve => "preserve_thinking",
            KeepThinking::KimiKeepAll => "thinking.keep",
        }
    }
}

/// The droppable names of every keep-thinking flag: a rejection of one is learned like any
/// other unknown top-level parameter.
pub const KEEP_THINKING_PARAMS: [&str; 3] = [
    "thinking.clear_thinking",
    "preserve_thinking",
    "thinking.keep",
];

/// A provider's image rules (`docs/images.md#provider-limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Name for reports (`anthropic`, `openai`, `gemini`).
    pub name: &'static str,
    /// Inline formats the provider accepts. GIF is kept for Gemini: a repair happens only
    /// where a rejection is certain, and GIF is not documented as rejected there.
    pub accepted: &'static [Format],
    /// Largest side accepted, px; `None` when no documented limit applies.
    pub max_side: Option<u32>,
    /// The many-image rule: `(count, side)` — with more than `count` images every image must
    /// be ≤ `side` px; `None` when the provider has no such rule.
    pub many_image: Option<(usize, u32)>,
    /// Largest image accepted, as the length of its base64 string, bytes; `None` when only
    /// `[images] max_image_bytes` applies. The tighter of the two holds
    /// ([`ImageLimits::hard_len`]).
    pub max_b64_len: Option<u64>,
}

impl ImageLimits {
    /// The longest base64 string an image may be sent as, bytes: the tighter of
    /// `max_image_bytes` (the `[images]` setting) and these rules' own [`Self::max_b64_len`].
    pub(crate) fn hard_len(&self, max_image_bytes: u64) -> u64 {
        self.max_b64_len
            .map_or(max_image_bytes, |l| l.min(max_image_bytes))
    }
}

/// Anthropic's largest image side, px (8000×8000; the 400 `At least one of the image
/// dimensions exceed max allowed size: 8000 pixels`). Source: `docs/images.md#anthropic-limits`.
pub(crate) const ANTHROPIC_MAX_SIDE: u32 = 8000;
/// Anthropic's many-image rule: above this many images in one request…
pub(crate) const MANY_IMAGE_COUNT: usize = 20;
/// …each image must be ≤ this many px per side (2000; Hermes calls it
/// `MANY_IMAGE_DIMENSION_LIMIT`). Source: `docs/images.md#anthropic-limits`.
pub(crate) const MANY_IMAGE_SIDE: u32 = 2000;

const COMMON_FORMATS: &[Format] = &[Format::Jpeg, Format::Png, Format::Gif, Format::Webp];
const GEMINI_FORMATS: &[Format] = &[
    Format::Jpeg,
    Format::Png,
    Format::Gif,
    Format::Webp,
    Format::Heic,
    Format::Heif,
];

/// The Converse API's largest image, bytes of the image itself: 3.75 MB, read as 3,750,000
/// (the smaller reading of "MB"). An `ImageSource`'s `bytes` are "the raw image bytes", sent
/// as base64 in the JSON body, so the string may be 5,000,000 bytes long ([`base64_len`]).
/// Source: <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Message.html>
/// ("You can include up to 20 images. Each image's size, height, and width must be no more
/// than 3.75 MB, 8000 px, and 8000 px, respectively."),
/// <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ImageSource.html>.
pub(crate) const CONVERSE_MAX_IMAGE_BYTES: u64 = 3_750_000;
/// The Converse API's largest image side, px (8000 × 8000). Source: as
/// [`CONVERSE_MAX_IMAGE_BYTES`].
pub(crate) const CONVERSE_MAX_SIDE: u32 = 8000;

/// The length of the padded base64 of `n` bytes.
const fn base64_len(n: u64) -> u64 {
    n.div_ceil(3) * 4
}

/// Anthropic's image rules (also for Claude models behind gateways).
pub(crate) const ANTHROPIC_IMAGES: ImageLimits = ImageLimits {
    name: "anthropic",
    accepted: COMMON_FORMATS,
    max_side: Some(ANTHROPIC_MAX_SIDE),
    many_image: Some((MANY_IMAGE_COUNT, MANY_IMAGE_SIDE)),
    max_b64_len: None,
};
/// OpenAI's image rules (also the fallback for OpenAI-wire bodies).
pub(crate) const OPENAI_IMAGES: ImageLimits = ImageLimits {
    name: "openai",
    accepted: COMMON_FORMATS,
    max_side: None,
    many_image: None,
    max_b64_len: None,
};
/// Gemini's image rules.
pub(crate) const GEMINI_IMAGES: ImageLimits = ImageLimits {
    name: "gemini",
    accepted: GEMINI_FORMATS,
    max_side: None,
    many_image: None,
    max_b64_len: None,
};
/// The Bedrock Converse API's image rules, which every model on that wire is held to: its
/// four formats (`png`, `jpeg`, `gif`, `webp`), 8000 px a side, 3.75 MB an image. Its "up to
/// 20 images" is per message (the restriction is on `Message.content`), not per request, and
/// is not enforced here (`docs/images.md#bedrock-converse-limits`). Source: as
/// [`CONVERSE_MAX_IMAGE_BYTES`].
pub(crate) const CONVERSE_IMAGES: ImageLimits = ImageLimits {
    name: "converse",
    accepted: COMMON_FORMATS,
    max_side: Some(CONVERSE_MAX_SIDE),
    many_image: None,
    max_b64_len: Some(base64_len(CONVERSE_MAX_IMAGE_BYTES)),
};
/// A Claude model on Converse: Anthropic's rules and the Converse API's, the tighter of each
/// (the same four formats and 8000 px in both; Anthropic's many-image rule; Converse's
/// 3.75 MB).
pub(crate) const CONVERSE_CLAUDE_IMAGES: ImageLimits = ImageLimits {
    name: "converse (claude)",
    accepted: COMMON_FORMATS,
    max_side: Some(if ANTHROPIC_MAX_SIDE < CONVERSE_MAX_SIDE {
        ANTHROPIC_MAX_SIDE
    } else {
        CONVERSE_MAX_SIDE
    }),
    many_image: ANTHROPIC_IMAGES.many_image,
    max_b64_len: CONVERSE_IMAGES.max_b64_len,
};

/// A provider's per-request image-count ceiling for some of its models, where it differs from
/// the `[images]` defaults (`docs/providers.md#image-ceilings`). Precedence per request: a
/// route's `[routes.images]` key, then this, then the global `[images]` value
/// ([`crate::images::settings::ImagesConfig::for_model`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageCeiling {
    /// Lowercased model-name prefix (after any `vendor/`) the ceiling is for.
    pub models: &'static str,
    /// Most image blocks in one request when an image may be over 2000 px (`max_blocks`);
    /// `None` = no documented value different from the default.
    pub max_blocks: Option<usize>,
    /// Most image blocks in one request when every image is ≤ 2000 px (`max_blocks_small`);
    /// `None` = no documented value different from the default.
    pub max_blocks_small: Option<usize>,
    /// Public source of the value (also listed in docs/providers.md).
    pub source: &'static str,
}

const ANTHROPIC_VISION: &str = "https://platform.claude.com/docs/en/build-with-claude/vision";
const GROQ_VISION: &str = "https://console.groq.com/docs/vision";

/// Anthropic: 100 images per request on models with a 200k-token context window (the
/// `[images]` default), 600 on the others — the 1M-context models (context windows from each
/// model's overview page, `docs/providers.md#image-ceilings`). Above 20 images every image is
/// still held to 2000 px, so `max_blocks` (20) stays.
const ANTHROPIC_CEILINGS: &[ImageCeiling] = &[
    ImageCeiling {
        models: "claude-opus-4-6",
        max_blocks: None,
        max_blocks_small: Some(600),
        source: ANTHROPIC_VISION,
    },
    ImageCeiling {
        models: "claude-sonnet-4-6",
        max_blocks: None,
        max_blocks_small: Some(600),
        source: ANTHROPIC_VISION,
    },
];

/// Groq's Llama 3.2 vision preview models: one image per request ("Requests with multiple
/// images will return a 400 error").
const GROQ_CEILINGS: &[ImageCeiling] = &[
    ImageCeiling {
        models: "llama-3.2-11b-vision",
        max_blocks: Some(1),
        max_blocks_small: Some(1),
        source: GROQ_VISION,
    },
    ImageCeiling {
        models: "llama-3.2-90b-vision",
        max_blocks: Some(1),
        max_blocks_small: Some(1),
        source: GROQ_VISION,
    },
];

/// How a provider's prompt cache is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheActivation {
    /// Only where the request marks a breakpoint (`cache_control`) or asks for it.
    Explicit,
    /// The provider caches prefixes by itself; nothing to mark.
    Automatic,
}

/// One prompt-cache rule of a provider, for the model family it names. Multipliers are in
/// thousandths of the model's base input-token price (`1250` = 1.25×); `None` = not
/// published / not confirmed (docs/providers.md says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRule {
    /// Lowercased model-name prefix this rule is for (after any `vendor/`); `""` = every
    /// model of the provider not matched by an earlier rule.
    pub models: &'static str,
    pub activation: CacheActivation,
    /// How long an unused cache entry lives, s; `None` = not published.
    pub ttl_s: Option<u32>,
    /// Price of writing input tokens into the cache, thousandths of the input price (`1000`
    /// = no surcharge).
    pub write_milli: Option<u32>,
    /// The longer TTL a request may ask for, as `(ttl_s, write_milli)`: Anthropic's 1-hour
    /// breakpoints, OpenAI's 24-hour retention.
    pub long_ttl: Option<(u32, u32)>,
    /// Price of input tokens read from the cache, thousandths of the input price.
    pub read_milli: Option<u32>,
    /// Public source of the rule (also listed in docs/providers.md).
    pub source: &'static str,
}

// ---- The table ---------------------------------------------------------------------------

/// One provider: everything cachekeeper knows about it. Sources: docs/providers.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provider {
    /// The name a route's `provider` key uses (also the name in logs and `check`).
    pub name: &'static str,
    /// Domains matched exactly or by dot-suffix.
    pub hosts: &'static [&'static str],
    /// Wire dialects the provider serves; a request path of another dialect is tunnelled
    /// untouched ([`crate::route::Route::classify`]). [`ALL_DIALECTS`] where unknown.
    pub dialects: &'static [Dialect],
    /// The dialect of the provider's own API: the shape of the proxy's own errors on a path
    /// that names no dialect (`/v1/files`, `/v1/models`) on a route to it
    /// ([`crate::route::Route::error_dialect`]). `None` for gateways, hosts serving several
    /// wires, and unknown hosts.
    pub native_dialect: Option<Dialect>,
    /// The dialect whose error shape every error of this upstream takes, whatever wire the
    /// request spoke: the proxy's own errors on a route to it take that shape too
    /// ([`crate::route::Route::error_dialect`]). Amazon Bedrock: `{"message"}` with an
    /// `x-amzn-ErrorType` header on InvokeModel as on Converse (the AWS SDKs, and Anthropic's
    /// `AnthropicBedrock`, parse errors that way;
    /// <https://docs.aws.amazon.com/bedrock/latest/APIReference/CommonErrors.html>). `None`:
    /// each wire's own shape.
    pub errors_as: Option<Dialect>,
    /// Image rules; `None` = from the model name, else the body's dialect.
    pub images: Option<&'static ImageLimits>,
    /// Carriers read on the OpenAI Chat wire (the Gemini signature is added by model name).
    pub carriers: &'static [Carrier],
    /// Must-echo by row (model names are checked separately, [`ModelFamily::echo`]).
    pub echo: Option<EchoFamily>,
    /// Thinking replay on the Anthropic wire.
    pub thinking: ThinkingRoute,
    /// Whether `thinking.block_binding` with its beta header may be sent (Anthropic itself).
    pub binding_controls: bool,
    /// Keep-thinking flag added when the request enables thinking.
    pub keep_thinking: Option<KeepThinking>,
    /// Validates Gemini 3 thought signatures on the function calls it is sent (Google's own
    /// hosts): a Gemini 3 model's `functionCall` without one is a 400, so the restore pass puts
    /// the documented placeholder on a call whose signature is unknown
    /// ([`ResolvedProvider::wants_placeholder_signature`], `docs/reasoning.md#carrier-restore`).
    pub validates_thought_signatures: bool,
    /// Prompt-cache rules, first match by model prefix wins; empty = none known.
    pub cache: &'static [CacheRule],
    /// The row's Anthropic-wire endpoint is a third-party model host: not Anthropic, and not
    /// a gateway that may forward to it. Claude Code's billing line at the head of `system`
    /// (per conversation, per request with `cch=`) then only keeps requests from sharing the
    /// cached prefix, so routes on the row get the billing-line stabiliser by default
    /// (`docs/caching.md#prefix-stabilisers`). False for `anthropic`, the gateways
    /// (`openrouter`, `copilot`) and `default` (an unknown host may be a gateway to Anthropic),
    /// and for `gemini`, which serves no Anthropic wire (nor does `openai`: its
    /// [`Self::dialects`] leave Anthropic out, which the default reads too).
    pub third_party_anthropic_wire: bool,
    /// A 1-hour `cache_control` TTL needs the `extended-cache-ttl-2025-04-11` `anthropic-beta`
    /// value ([`crate::caching::EXTENDED_CACHE_TTL_BETA`]). False for `anthropic`, whose
    /// current prompt-caching docs document the 1-hour TTL without a header
    /// (`docs/caching.md#ttl`).
    pub ttl_beta: bool,
    /// Per-model image ceilings, first match by model prefix wins; empty = none known.
    pub image_ceilings: &'static [ImageCeiling],
    /// The top-level reasoning controls ([`REASONING_CONTROLS`]) this host takes on the
    /// OpenAI Chat wire; every other one a request carries is removed before it is sent
    /// (`docs/reasoning.md#top-level-reasoning-controls`). `None` = not known: nothing is
    /// removed up front (a rejection is still learned, [`crate::reasoning::unknown_field`]).
    /// Only hosts that reject unknown body properties have a list.
    pub reasoning_controls: Option<&'static [&'static str]>,
    /// What the upstream needs of a request's credential ([`UpstreamAuth`]).
    pub auth: UpstreamAuth,
    /// Anthropic-wire betas travel in the body's `anthropic_beta` array, not the
    /// `anthropic-beta` header: Amazon Bedrock's InvokeModel
    /// (https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-claude-messages-request-response.html).
    /// Learned beta verdicts then apply to that array ([`crate::reasoning::betas`]).
    pub betas_in_body: bool,
}

/// The region a Bedrock runtime host names: `bedrock-runtime.<region>.amazonaws.com` or
/// `bedrock-runtime-fips.<region>.amazonaws.com`, the bedrock row's [`Provider::hosts`]
/// (https://docs.aws.amazon.com/general/latest/gr/bedrock.html); `None` for any other host
/// (a VPC endpoint, a mock): SigV4 then needs `[routes.aws] region`.
pub fn bedrock_region_of_host(host: &str) -> Option<&str> {
    let rest = host
        .strip_prefix("bedrock-runtime.")
        .or_else(|| host.strip_prefix("bedrock-runtime-fips."))?;
    let region = rest.strip_suffix(".amazonaws.com")?;
    (!region.is_empty() && !region.contains('.')).then_some(region)
}

/// Which parts of a request the automatic-breakpoint pass may mark
/// ([`ResolvedProvider::breakpoints_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BreakpointTargets {
    /// The tool list (not on Amazon Nova).
    pub tools: bool,
}

/// What a provider needs of a request's credential, beyond forwarding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamAuth {
    /// Whatever the client sends goes upstream as sent; the upstream answers a missing one.
    AsSent,
    /// A request without any credential cannot succeed, and the upstream's own 401 does not
    /// say why (an agent told to skip its auth, as Claude Code is with
    /// `CLAUDE_CODE_SKIP_VERTEX_AUTH=1`, expects a proxy to add it): the proxy answers it
    /// with an error naming what to send. Vertex AI (an OAuth access token, or an express-mode
    /// API key).
    Required,
    /// Requests are signed with AWS Signature Version 4 over the body and the `host` (a
    /// Bearer API key is the other credential): a rewritten request must be signed again,
    /// with the proxy's own AWS credentials (`[routes.aws]`, `docs/providers.md#bedrock--bedrock-runtimeamazonawscom-bedrock-runtime-fipsamazonawscom`).
    /// Amazon Bedrock.
    SigV4,
}

/// The top-level request parameters clients send to turn reasoning on, off or up, across
/// OpenAI-compatible hosts (`docs/reasoning.md#top-level-reasoning-controls`): OpenAI's
/// `reasoning_effort`; OpenRouter's `reasoning` object; Groq's and Cerebras'
/// `reasoning_format`; Groq's `include_reasoning`; Qwen / DashScope's `enable_thinking` and
/// `thinking_budget`; DeepSeek / Kimi / GLM's `thinking` object; Cerebras' `disable_reasoning`
/// and `clear_thinking`. A row's [`Provider::reasoning_controls`] names the ones it takes.
pub const REASONING_CONTROLS: [&str; 9] = [
    "reasoning",
    "reasoning_effort",
    "reasoning_format",
    "include_reasoning",
    "enable_thinking",
    "thinking_budget",
    "thinking",
    "disable_reasoning",
    "clear_thinking",
];

/// Cerebras' top-level reasoning controls: `reasoning_effort`, `reasoning_format`,
/// `disable_reasoning` (GLM, deprecated for `reasoning_effort: "none"`) and `clear_thinking`
/// (GLM). Sources: https://inference-docs.cerebras.ai/capabilities/reasoning,
/// https://inference-docs.cerebras.ai/api-reference/chat-completions (`docs/providers.md`).
const CEREBRAS_CONTROLS: &[&str] = &[
    "reasoning_effort",
    "reasoning_format",
    "disable_reasoning",
    "clear_thinking",
];

/// Groq's top-level reasoning controls: `reasoning_effort`, `reasoning_format`,
/// `include_reasoning`. Source: https://console.groq.com/docs/reasoning (`docs/providers.md`).
const GROQ_CONTROLS: &[&str] = &["reasoning_effort", "reasoning_format", "include_reasoning"];

/// Every dialect ([`crate::dialect::ALL`]): a provider whose wires are not restricted.
pub(crate) const ALL_DIALECTS: &[Dialect] = &crate::dialect::ALL;

use Carrier::{CopilotOpaque as CO, ReasoningContent as RC, ReasoningDetails as RD};
const R: Carrier = Carrier::Reasoning;
use CacheActivation::{Automatic, Explicit};
use ThinkingRoute::{Native, StripThirdParty as Strip};

const fn row(
    name: &'static str,
    hosts: &'static [&'static str],
    carriers: &'static [Carrier],
    thinking: ThinkingRoute,
) -> Provider {
    Provider {
        name,
        hosts,
        dialects: ALL_DIALECTS,
        native_dialect: None,
        errors_as: None,
        images: None,
        carriers,
        echo: None,
        thinking,
        binding_controls: false,
        keep_thinking: None,
        validates_thought_signatures: false,
        cache: &[],
        third_party_anthropic_wire: true,
        ttl_beta: true,
        image_ceilings: &[],
        reasoning_controls: None,
        auth: UpstreamAuth::AsSent,
        betas_in_body: false,
    }
}

const ANTHROPIC_CACHE: &str = "https://docs.claude.com/en/docs/build-with-claude/prompt-caching";
const OPENAI_CACHE: &str = "https://developers.openai.com/api/docs/guides/prompt-caching";
const OPENAI_PRICING: &str = "https://developers.openai.com/api/docs/pricing";
const GEMINI_PRICING: &str = "https://ai.google.dev/gemini-api/docs/pricing";
const DEEPSEEK_CACHE: &str = "https://api-docs.deepseek.com/guides/kv_cache";

/// Claude's rule, as Anthropic publishes it and as the clouds serving Claude restate it:
/// explicit (`cache_control`), 5-minute TTL refreshed on use, writes 1.25×, reads 0.1×; a
/// 1-hour TTL per breakpoint, its writes 2×.
const fn claude_cache(models: &'static str, source: &'static str) -> CacheRule {
    CacheRule {
        models,
        activation: Explicit,
        ttl_s: Some(300),
        write_milli: Some(1250),
        long_ttl: Some((3600, 2000)),
        read_milli: Some(100),
        source,
    }
}

/// Vertex AI's Claude prompt caching: "behaves as described in the Anthropic documentation",
/// 5-minute TTL, `"ttl": "1h"` per breakpoint.
const VERTEX_CLAUDE_CACHE: &str =
    "https://docs.cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/prompt-caching";
/// Vertex AI's Gemini context cache: implicit caching, cached tokens at a 90% discount.
const VERTEX_GEMINI_CACHE: &str = "https://docs.cloud.google.com/vertex-ai/generative-ai/docs/context-cache/context-cache-overview";
/// Azure OpenAI prompt caching: automatic from 1,024 tokens on GPT-4o and newer, caches
/// "typically cleared within 5-10 minutes of inactivity", `prompt_cache_retention` for longer.
const AZURE_CACHE: &str = "https://learn.microsoft.com/azure/foundry/openai/how-to/prompt-caching";
/// Amazon Bedrock's prompt caching for Claude: 5-minute TTL (1 hour on some models), writes
/// 1.25×, reads 0.1× of the input price.
const BEDROCK_CACHE: &str =
    "https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html";
/// Amazon Nova's prompt caching on Bedrock: explicit (`cachePoint`), a 5-minute TTL
/// refreshed on use, no breakpoint on the tool list ([`NO_TOOL_BREAKPOINTS`]); its prices are
/// per model on Bedrock's pricing page and not recorded here (`None`: not priced). Source:
/// [`BEDROCK_CACHE`] (its table of models, checkpoints and cacheable fields).
const BEDROCK_NOVA_CACHE: CacheRule = CacheRule {
    models: "nova",
    activation: Explicit,
    ttl_s: Some(300),
    write_milli: None,
    long_ttl: None,
    read_milli: None,
    source: BEDROCK_CACHE,
};

/// Model families whose prompt cache takes no breakpoint on the tool list: Amazon Nova
/// ("tools" is not among its cacheable fields, [`BEDROCK_CACHE`]).
const NO_TOOL_BREAKPOINTS: &[&str] = &["nova"];

/// Claude in Microsoft Foundry: Claude runs on Anthropic's infrastructure at Anthropic's
/// standard API prices.
const FOUNDRY_CLAUDE: &str =
    "https://platform.claude.com/docs/en/build-with-claude/claude-in-microsoft-foundry";

/// Azure OpenAI's rule: automatic, no write surcharge, a 5-minute idle life (longer with
/// `prompt_cache_retention`); the cached-input discount varies by deployment type and model
/// and is not recorded (`read_milli: None`: not priced).
const AZURE_OPENAI_CACHE: CacheRule = CacheRule {
    models: "",
    activation: Automatic,
    ttl_s: Some(300),
    write_milli: Some(1000),
    long_ttl: Some((86_400, 1000)),
    read_milli: None,
    source: AZURE_CACHE,
};

/// An OpenAI rule: automatic, no write surcharge, cached prefixes kept in memory for
/// (typically) 5–10 idle minutes, or up to 24 h with `prompt_cache_retention: "24h"`.
const fn openai_cache(models: &'static str, read_milli: Option<u32>) -> CacheRule {
    CacheRule {
        models,
        activation: Automatic,
        ttl_s: Some(300),
        write_milli: Some(1000),
        long_ttl: Some((86_400, 1000)),
        read_milli,
        source: OPENAI_PRICING,
    }
}

/// The table, first host match wins (no two rows share a domain). `local` and `default`
/// are matched by address / as the fallback, never by host.
pub(crate) const PROVIDERS: &[Provider] = &[
    Provider {
        native_dialect: Some(Dialect::Anthropic),
        images: Some(&ANTHROPIC_IMAGES),
        binding_controls: true,
        third_party_anthropic_wire: false,
        ttl_beta: false,
        cache: &[claude_cache("", ANTHROPIC_CACHE)],
        image_ceilings: ANTHROPIC_CEILINGS,
        ..row("anthropic", &["anthropic.com"], &[RC], Native)
    },
    Provider {
        dialects: &[Dialect::Openai, Dialect::OpenaiResponses],
        native_dialect: Some(Dialect::Openai),
        images: Some(&OPENAI_IMAGES),
        cache: &[
            // GPT-5.6 and later: a 30-minute minimum life, writes 1.25×, reads 0.1×.
            CacheRule {
                models: "gpt-5.6",
                activation: Automatic,
                ttl_s: Some(1800),
                write_milli: Some(1250),
                long_ttl: None,
                read_milli: Some(100),
                source: OPENAI_CACHE,
            },
            openai_cache("gpt-5", Some(100)),
            openai_cache("gpt-4.1", Some(250)),
            openai_cache("gpt-4o", Some(500)),
            openai_cache("o1", Some(500)),
            openai_cache("o3", Some(250)),
            openai_cache("o4", Some(250)),
            openai_cache("", None),
        ],
        ..row("openai", &["openai.com"], &[RC], Strip)
    },
    // Gateways that forward Claude models to Anthropic.
    Provider {
        third_party_anthropic_wire: false,
        ..row(
            "openrouter",
            &[
                "openrouter.ai",
                "kilo.ai",
                "ai-gateway.vercel.sh",
                "nousresearch.com",
            ],
            &[RC, R, RD],
            Native,
        )
    },
    Provider {
        images: Some(&GEMINI_IMAGES),
        // Implicit caching (Gemini 2.5 and later): no write charge, no published TTL.
        cache: &[CacheRule {
            models: "",
            activation: Automatic,
            ttl_s: None,
            write_milli: Some(1000),
            long_ttl: None,
            read_milli: Some(100),
            source: GEMINI_PRICING,
        }],
        validates_thought_signatures: true,
        native_dialect: Some(Dialect::Gemini),
        // Google serves its own wire and an OpenAI-compatible one, no Anthropic wire.
        third_party_anthropic_wire: false,
        ..row(
            "gemini",
            &["generativelanguage.googleapis.com"],
            &[RC],
            Strip,
        )
    },
    // Google Vertex AI: Claude (the Anthropic wire, `:rawPredict`) and Gemini
    // (`:generateContent`) on one host; the model family picks the cache rule and the image
    // limits, the wire picks the rest
    // (`docs/providers.md#vertex--aiplatformgoogleapiscom--aiplatformgoogleapiscom`).
    Provider {
        dialects: &[Dialect::Anthropic, Dialect::Gemini, Dialect::Openai],
        cache: &[
            claude_cache("claude", VERTEX_CLAUDE_CACHE),
            CacheRule {
                models: "",
                activation: Automatic,
                ttl_s: None,
                write_milli: Some(1000),
                long_ttl: None,
                read_milli: Some(100),
                source: VERTEX_GEMINI_CACHE,
            },
        ],
        validates_thought_signatures: true,
        auth: UpstreamAuth::Required,
        // Claude itself, served by Google: signatures verify, the billing line is Anthropic's.
        third_party_anthropic_wire: false,
        ttl_beta: false,
        ..row(
            "vertex",
            &["aiplatform.googleapis.com", "*-aiplatform.googleapis.com"],
            &[RC],
            Native,
        )
    },
    // Azure OpenAI: OpenAI's models on Azure deployments
    // (`docs/providers.md#azure-openai--openaiazurecom-cognitiveservicesazurecom`).
    Provider {
        dialects: &[Dialect::Openai, Dialect::OpenaiResponses],
        native_dialect: Some(Dialect::Openai),
        images: Some(&OPENAI_IMAGES),
        cache: &[AZURE_OPENAI_CACHE],
        ..row(
            "azure-openai",
            &["openai.azure.com", "cognitiveservices.azure.com"],
            &[RC],
            Strip,
        )
    },
    // Amazon Bedrock (bedrock-runtime): Claude's InvokeModel on the Anthropic wire, and
    // Converse for every model; prompt caching (cachePoint) for Claude and Amazon Nova only
    // (`docs/providers.md#bedrock--bedrock-runtimeamazonawscom-bedrock-runtime-fipsamazonawscom`).
    Provider {
        dialects: &[Dialect::Anthropic, Dialect::Converse],
        cache: &[claude_cache("claude", BEDROCK_CACHE), BEDROCK_NOVA_CACHE],
        third_party_anthropic_wire: false,
        ttl_beta: false,
        auth: UpstreamAuth::SigV4,
        betas_in_body: true,
        errors_as: Some(Dialect::Converse),
        ..row(
            "bedrock",
            &[
                "bedrock-runtime.*.amazonaws.com",
                "bedrock-runtime-fips.*.amazonaws.com",
            ],
            &[RC],
            Native,
        )
    },
    // Microsoft Foundry resources: Claude on `/anthropic/v1/messages` (run by Anthropic), and
    // OpenAI's models on `/openai/v1/...` (`docs/providers.md#foundry--servicesaiazurecom`).
    Provider {
        dialects: &[
            Dialect::Anthropic,
            Dialect::Openai,
            Dialect::OpenaiResponses,
        ],
        cache: &[claude_cache("claude", FOUNDRY_CLAUDE), AZURE_OPENAI_CACHE],
        third_party_anthropic_wire: false,
        ttl_beta: false,
        ..row("foundry", &["services.ai.azure.com"], &[RC], Native)
    },
    Provider {
        echo: Some(EchoFamily::DeepSeek),
        // Automatic disk cache, no write charge; the cache-hit price is listed per model.
        cache: &[CacheRule {
            models: "",
            activation: Automatic,
            ttl_s: None,
            write_milli: Some(1000),
            long_ttl: None,
            read_milli: None,
            source: DEEPSEEK_CACHE,
        }],
        ..row(
            "deepseek",
            &["deepseek.com"],
            &[RC],
            ThinkingRoute::DeepSeek,
        )
    },
    Provider {
        echo: Some(EchoFamily::Kimi),
        ..row(
            "kimi",
            &["api.kimi.com", "moonshot.ai", "moonshot.cn"],
            &[RC],
            ThinkingRoute::Kimi,
        )
    },
    Provider {
        echo: Some(EchoFamily::Mimo),
        ..row("mimo", &["xiaomimimo.com"], &[RC], Strip)
    },
    Provider {
        keep_thinking: Some(KeepThinking::GlmClearThinking),
        ..row("zai", &["z.ai", "bigmodel.cn"], &[], ThinkingRoute::Zai)
    },
    Provider {
        keep_thinking: Some(KeepThinking::DashscopePreserve),
        ..row(
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
    row("mistral", &["mistral.ai"], &[], Strip),
    Provider {
        image_ceilings: GROQ_CEILINGS,
        reasoning_controls: Some(GROQ_CONTROLS),
        ..row("groq", &["groq.com"], &[], Strip)
    },
    // Cerebras takes reasoning back as `reasoning` and rejects `reasoning_content`, and every
    // top-level reasoning control but its own (`enable_thinking`, `thinking`, `reasoning`).
    Provider {
        reasoning_controls: Some(CEREBRAS_CONTROLS),
        ..row("cerebras", &["cerebras.ai"], &[R], Strip)
    },
    row("sambanova", &["sambanova.ai"], &[], Strip),
    row("hunyuan", &["hunyuan.cloud.tencent.com"], &[], Strip),
    row("fireworks", &["fireworks.ai"], &[RC], Strip),
    row(
        "novita",
        &[
            "novita.ai",
            "tokenhub.tencentmaas.com",
            "tokenhub-intl.tencentcloudmaas.com",
        ],
        &[RC, RD],
        Strip,
    ),
    row("minimax", &["minimax.io", "minimaxi.com"], &[RC, RD], Strip),
    row("ollama", &["ollama.com", "upstage.ai"], &[RC, R], Strip),
    Provider {
        third_party_anthropic_wire: false,
        ..row("copilot", &["githubcopilot.com"], &[RC, CO], Strip)
    },
    // Local endpoints: matched by address, not by domain. Anthropic-wire traffic to a local
    // server is passed through (a local gateway or mock, not a signature-less model host).
    LOCAL,
    DEFAULT,
];

const LOCAL: Provider = row("local", &[], &[RC, R], Native);
const DEFAULT: Provider = Provider {
    third_party_anthropic_wire: false,
    ..row("default", &[], &[RC], Strip)
};

impl Provider {
    /// The row caches prompt prefixes by itself for every model (every cache rule is
    /// [`CacheActivation::Automatic`]): `cache_control` breakpoints would do nothing there.
    pub(crate) fn caches_automatically(&self) -> bool {
        !self.cache.is_empty() && self.cache.iter().all(|r| r.activation == Automatic)
    }

    /// The cache rule for `model` (first rule whose prefix the model's leaf name, lowercased
    /// and without a `vendor/` part, starts with), if the row has one.
    pub(crate) fn cache_rule(&self, model: &str) -> Option<&'static CacheRule> {
        let leaf = model_leaf(model);
        self.cache.iter().find(|r| names_family(&leaf, r.models))
    }

    /// The image ceiling for `model` (first entry whose prefix the model's leaf name,
    /// lowercased and without a `vendor/` part, starts with), if the row has one.
    pub(crate) fn image_ceiling(&self, model: &str) -> Option<&'static ImageCeiling> {
        let leaf = model_leaf(model);
        self.image_ceilings
            .iter()
            .find(|c| leaf.starts_with(c.models))
    }
}

/// The row called `name`, if any.
pub(crate) fn by_name(name: &str) -> Option<&'static Provider> {
    PROVIDERS.iter().find(|p| p.name == name)
}

/// Every row's name, in table order (what a route's `provider` key may say).
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    PROVIDERS.iter().map(|p| p.name)
}

/// The row whose hosts match `host` (normalized), if any.
fn by_host(host: &str) -> Option<&'static Provider> {
    PROVIDERS
        .iter()
        .find(|p| p.hosts.iter().any(|d| domain_matches(host, d)))
}

// ---- Resolution, once per route ----------------------------------------------------------

/// How a route's row was chosen (for `check` output and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchedBy {
    /// The route's `provider` key.
    Provider,
    /// The upstream host, exact or dot-suffix.
    Host,
    /// The upstream is a loopback / private address or `localhost`.
    Local,
    /// Nothing matched: the `default` row.
    Default,
}

/// A route's provider, resolved once when the route table is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedProvider {
    /// The row.
    pub row: &'static Provider,
    pub matched_by: MatchedBy,
    /// The verdict key: the lowercased upstream host (no brackets, no trailing dot), with
    /// its port when the upstream URL names one that is not the scheme's default — two local
    /// servers on one machine (`127.0.0.1:8001` and `:8002`) learn apart.
    pub host: String,
    /// Image rules of the route: the row's, else those of the row the host matches (a
    /// `provider` key without image rules keeps the host's); `None` = per request from the
    /// model name, else the dialect.
    pub images: Option<&'static ImageLimits>,
    /// Carriers sent on the OpenAI Chat wire before the model refinement and learned
    /// verdicts: the row's, or the route's `carriers = [...]`.
    pub carriers: BTreeSet<Carrier>,
    /// Names in `carriers = [...]` that are not carriers (for `check` to report).
    pub unknown_carrier_names: Vec<String>,
}

impl ResolvedProvider {
    /// Resolve a route's row.
    ///
    /// - `provider`: the route's `provider` key (a row name); an unknown name falls back to
    ///   host matching (config validation rejects unknown names first).
    /// - `upstream_host`: the upstream's host, with the port that tells the verdicts of two
    ///   servers on one host apart (IPv6 brackets tolerated; rows match on the host alone).
    /// - `carriers_override`: the route's `carriers = [...]`, replacing the row's set.
    pub fn resolve(
        provider: Option<&str>,
        upstream_host: &str,
        carriers_override: Option<&[String]>,
    ) -> ResolvedProvider {
        let host = normalize_host(upstream_host);
        let key = match port_of(upstream_host) {
            Some(port) if host.contains(':') => format!("[{host}]:{port}"),
            Some(port) => format!("{host}:{port}"),
            None => host.clone(),
        };
        let by_key = provider.and_then(by_name);
        let host_row = by_host(&host);
        let (row, matched_by) = if let Some(p) = by_key {
            (p, MatchedBy::Provider)
        } else if let Some(p) = host_row {
            (p, MatchedBy::Host)
        } else if is_local_host(&host) {
            (&LOCAL, MatchedBy::Local)
        } else {
            (&DEFAULT, MatchedBy::Default)
        };
        let images = by_key
            .and_then(|p| p.images)
            .or_else(|| host_row.and_then(|p| p.images));
        let mut unknown_carrier_names = Vec::new();
        let carriers = match carriers_override {
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
            None => row.carriers.iter().copied().collect(),
        };
        ResolvedProvider {
            row,
            matched_by,
            host: key,
            images,
            carriers,
            unknown_carrier_names,
        }
    }

    /// Whether a `functionCall` of `model` (as the request names it) with no signature gets
    /// the placeholder signature on this route: the row validates Gemini 3 signatures and the
    /// model is Gemini 3 or later ([`ModelFamily::gemini_3`]).
    pub(crate) fn wants_placeholder_signature(&self, model: &str) -> bool {
        self.row.validates_thought_signatures && ModelFamily::of(model).gemini_3
    }

    /// The cache rule for `model` (first rule whose prefix the model's leaf name starts
    /// with), if the row has one.
    pub fn cache_rule(&self, model: &str) -> Option<&'static CacheRule> {
        self.row.cache_rule(model)
    }

    /// Where the automatic-breakpoint pass may mark a request for `model` (as the request
    /// names it; `None` when it names none), or `None` when it marks nothing: the one policy
    /// of which models get breakpoints (`docs/caching.md#automatic-breakpoints`). Markers go
    /// where the row's cache rule for the model is [`CacheActivation::Explicit`]; on a row
    /// with no rules (nothing known), and for a request naming no model on a row with an
    /// explicit rule, too. A model the row caches automatically, or one it lists no rule for
    /// (Bedrock's models other than Claude and Nova: no prompt cache), gets none.
    pub(crate) fn breakpoints_for(&self, model: Option<&str>) -> Option<BreakpointTargets> {
        let row = self.row;
        let marks = match model {
            _ if row.cache.is_empty() => true,
            Some(m) => row.cache_rule(m).is_some_and(|r| r.activation == Explicit),
            None => row.cache.iter().any(|r| r.activation == Explicit),
        };
        let leaf = model.map(model_leaf).unwrap_or_default();
        marks.then(|| BreakpointTargets {
            tools: !NO_TOOL_BREAKPOINTS.iter().any(|f| names_family(&leaf, f)),
        })
    }
}

// ---- Hosts -------------------------------------------------------------------------------

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

/// The port of `host:port` or `[v6]:port`, if any.
fn port_of(host: &str) -> Option<u16> {
    let h = host.trim();
    let tail = if h.starts_with('[') {
        h.rsplit_once("]:")?.1
    } else if h.matches(':').count() == 1 {
        h.rsplit_once(':')?.1
    } else {
        return None;
    };
    tail.parse().ok()
}

/// True when `host` (any form [`normalize_host`] accepts) is `domain` or a subdomain of it.
pub fn host_matches(host: &str, domain: &str) -> bool {
    domain_matches(&normalize_host(host), domain)
}

/// [`host_matches`] for a host already normalized.
///
/// A domain with a `*` is a pattern matched label by label, exactly as many labels: `*` is
/// any one label (`bedrock-runtime.*.amazonaws.com`: the regional hosts of Amazon Bedrock),
/// `*-rest` a label ending in `-rest` after at least one byte
/// (`*-aiplatform.googleapis.com`: `us-east5-aiplatform.googleapis.com`, Vertex AI's).
fn domain_matches(host: &str, domain: &str) -> bool {
    let domain = domain.trim_end_matches('.');
    if domain.contains('*') {
        let (mut h, mut d) = (host.split('.'), domain.split('.'));
        loop {
            match (h.next(), d.next()) {
                (None, None) => return true,
                (Some(hl), Some(dl)) if label_matches(hl, dl) => {}
                _ => return false,
            }
        }
    }
    if domain.is_empty() {
        return false;
    }
    let n = domain.len();
    host.eq_ignore_ascii_case(domain)
        || (host.len() > n
            && host.as_bytes()[host.len() - n - 1] == b'.'
            && host.as_bytes()[host.len() - n..].eq_ignore_ascii_case(domain.as_bytes()))
}

/// One label of a host against one label of a pattern ([`domain_matches`]).
fn label_matches(host: &str, pattern: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some("") => !host.is_empty(),
        Some(rest) => {
            rest.starts_with('-')
                && host.len() > rest.len()
                && host.as_bytes()[host.len() - rest.len()..].eq_ignore_ascii_case(rest.as_bytes())
        }
        None => host.eq_ignore_ascii_case(pattern),
    }
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

// ---- Model names: the one set of tests ---------------------------------------------------

/// The model name lowercased, without a vendor prefix (`moonshotai/kimi-k2` → `kimi-k2`).
/// Whether `leaf` (a [`model_leaf`]) starts with `family`, or does after a Bedrock-style
/// prefix of dot-separated labels of letters and `-` (an inference profile's region and the
/// vendor: `us.anthropic.claude-…`, `amazon.nova-…`, `global.anthropic.claude-…`; model ids
/// from <https://docs.aws.amazon.com/bedrock/latest/userguide/models-supported.html>). A
/// version's dot never counts as such a prefix (`gpt-4.1`, `qwen2.5`: a digit comes first).
fn names_family(leaf: &str, family: &str) -> bool {
    if leaf.starts_with(family) {
        return true;
    }
    leaf.match_indices('.').any(|(i, _)| {
        leaf[..i]
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'.')
            && leaf[i + 1..].starts_with(family)
    })
}

fn model_leaf(model: &str) -> String {
    let m = model.to_ascii_lowercase();
    m.rsplit('/').next().unwrap_or("").to_owned()
}

/// What a model name says about its family. Substring tests on the lowercased name, except
/// Kimi (a prefix of the name after any `vendor/`). Computed once per request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ModelFamily {
    /// `claude`: Anthropic's image rules and signed thinking behind a gateway.
    pub claude: bool,
    /// `gemini`: Gemini's image rules; with `gemma`, the Gemini thought signature.
    pub gemini: bool,
    /// `gemma`.
    pub gemma: bool,
    /// `gemini-N…` with N ≥ 3 (`gemini-3-pro-preview`, `gemini-3.1-flash`, a `models/` or
    /// `publishers/google/models/` prefix and a `:generateContent` suffix allowed): the models
    /// that validate thought signatures strictly. An alias without a version
    /// (`gemini-flash-latest`) is not known to be one.
    pub gemini_3: bool,
    /// `kimi…`, `moonshot…`, `k2.…`, `k3-…` or bare `k3` (after any `vendor/`).
    pub kimi: bool,
    /// `deepseek`.
    pub deepseek: bool,
    /// `mimo`.
    pub mimo: bool,
    /// `stealth/missingno`.
    pub missingno: bool,
}

/// The major version of a `gemini-N…` model leaf (`gemini-3.1-pro:generateContent` → 3).
fn gemini_major(leaf: &str) -> Option<u32> {
    let rest = &leaf[leaf.find("gemini-")? + "gemini-".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl ModelFamily {
    /// Sniff `model` (empty: nothing known).
    pub(crate) fn of(model: &str) -> ModelFamily {
        let m = model.to_ascii_lowercase();
        let leaf = m.rsplit('/').next().unwrap_or("");
        ModelFamily {
            claude: m.contains("claude"),
            gemini: m.contains("gemini"),
            gemma: m.contains("gemma"),
            gemini_3: gemini_major(leaf).is_some_and(|v| v >= 3),
            kimi: leaf.starts_with("kimi")
                || leaf.starts_with("moonshot")
                || leaf.starts_with("k2.")
                || leaf.starts_with("k3-")
                || leaf == "k3",
            deepseek: m.contains("deepseek"),
            mimo: m.contains("mimo"),
            missingno: m.contains("stealth/missingno"),
        }
    }

    /// Gemini thought signatures are replayed only for these models (`gemini` / `gemma`):
    /// every other host 400s on them.
    pub(crate) fn reads_gemini_signature(self) -> bool {
        self.gemini || self.gemma
    }

    /// Must-echo by model name (`deepseek`, then `mimo`, then `stealth/missingno`).
    pub(crate) fn echo(self) -> Option<EchoFamily> {
        if self.deepseek {
            Some(EchoFamily::DeepSeek)
        } else if self.mimo {
            Some(EchoFamily::Mimo)
        } else if self.missingno {
            Some(EchoFamily::Missingno)
        } else {
            None
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

    #[test]
    fn image_ceilings_by_model() {
        let anthropic = by_name("anthropic").unwrap();
        let c = anthropic.image_ceiling("claude-opus-4-6").unwrap();
        assert_eq!((c.max_blocks, c.max_blocks_small), (None, Some(600)));
        assert!(anthropic
            .image_ceiling("Claude-Sonnet-4-6-20260217")
            .is_some());
        assert!(anthropic
            .image_ceiling("anthropic/claude-sonnet-4-6")
            .is_some());
        // 200k-context models keep the `[images]` default (100).
        assert_eq!(anthropic.image_ceiling("claude-sonnet-4-5"), None);
        assert_eq!(anthropic.image_ceiling("claude-haiku-4-5"), None);
        let groq = by_name("groq").unwrap();
        let c = groq.image_ceiling("llama-3.2-90b-vision-preview").unwrap();
        assert_eq!((c.max_blocks, c.max_blocks_small), (Some(1), Some(1)));
        assert_eq!(
            groq.image_ceiling("meta-llama/llama-4-scout-17b-16e-instruct"),
            None
        );
        assert!(PROVIDERS
            .iter()
            .flat_map(|p| p.image_ceilings)
            .all(|c| c.source.starts_with("https://")));
    }

    #[test]
    fn placeholder_signature_only_for_gemini_3_on_google_rows() {
        for m in [
            "gemini-3-pro-preview",
            "gemini-3.1-flash",
            "models/gemini-3-flash-preview",
            "publishers/google/models/gemini-3-pro:generateContent",
            "Gemini-4-ultra",
        ] {
            assert!(ModelFamily::of(m).gemini_3, "{m}");
        }
        for m in [
            "gemini-2.5-flash",
            "gemini-exp-1206",
            "gemini-flash-latest",
            "gemma-3-27b",
            "",
        ] {
            assert!(!ModelFamily::of(m).gemini_3, "{m}");
        }
        let google = ResolvedProvider::resolve(None, "generativelanguage.googleapis.com", None);
        assert!(google.wants_placeholder_signature("gemini-3-pro-preview"));
        assert!(!google.wants_placeholder_signature("gemini-2.5-pro"));
        let mock = ResolvedProvider::resolve(Some("gemini"), "127.0.0.1:9000", None);
        assert!(mock.wants_placeholder_signature("gemini-3-pro-preview"));
        for host in ["openrouter.ai", "127.0.0.1:9000", "example.com"] {
            let p = ResolvedProvider::resolve(None, host, None);
            assert!(
                !p.wants_placeholder_signature("gemini-3-pro-preview"),
                "{host}"
            );
        }
    }

    #[test]
    fn names_are_unique_and_hosts_do_not_overlap() {
        let mut names = BTreeSet::new();
        for p in PROVIDERS {
            assert!(names.insert(p.name), "{} twice", p.name);
        }
        for p in PROVIDERS {
            for h in p.hosts {
                let owners: Vec<&str> = PROVIDERS
                    .iter()
                    .filter(|q| q.hosts.iter().any(|d| host_matches(h, d)))
                    .map(|q| q.name)
                    .collect();
                assert_eq!(owners, vec![p.name], "{h}");
            }
        }
        assert!(by_name("local").is_some() && by_name("default").is_some());
    }

    #[test]
    fn the_verdict_key_keeps_a_port_and_rows_match_without_it() {
        // The failing input: two local servers on one machine shared their verdicts.
        let a = ResolvedProvider::resolve(None, "127.0.0.1:8001", None);
        let b = ResolvedProvider::resolve(None, "127.0.0.1:8002", None);
        assert_eq!(
            (a.host.as_str(), b.host.as_str()),
            ("127.0.0.1:8001", "127.0.0.1:8002")
        );
        assert_eq!(a.matched_by, MatchedBy::Local);
        let v6 = ResolvedProvider::resolve(None, "[::1]:11434", None);
        assert_eq!(v6.host, "[::1]:11434");
        assert_eq!(v6.matched_by, MatchedBy::Local);
        let m = ResolvedProvider::resolve(None, "API.Mistral.ai", None);
        assert_eq!(m.host, "api.mistral.ai");
        assert_eq!(
            m.row.name,
            ResolvedProvider::resolve(None, "api.mistral.ai:8443", None)
                .row
                .name
        );
    }

    #[test]
    fn cloud_hosts_resolve_to_their_rows() {
        for (host, row) in [
            ("us-east5-aiplatform.googleapis.com", "vertex"),
            ("europe-west1-aiplatform.googleapis.com", "vertex"),
            ("aiplatform.googleapis.com", "vertex"),
            ("generativelanguage.googleapis.com", "gemini"),
            ("my-res.openai.azure.com", "azure-openai"),
            ("my-res.cognitiveservices.azure.com", "azure-openai"),
            ("my-res.services.ai.azure.com", "foundry"),
            ("bedrock-runtime.us-east-1.amazonaws.com", "bedrock"),
            (
                "bedrock-runtime-fips.us-gov-west-1.amazonaws.com",
                "bedrock",
            ),
            ("BEDROCK-RUNTIME.eu-west-3.amazonaws.com", "bedrock"),
        ] {
            assert_eq!(
                ResolvedProvider::resolve(None, host, None).row.name,
                row,
                "{host}"
            );
        }
        // The regional pattern is one label: no dot before `-aiplatform`, nothing else after.
        for host in [
            "evil.us-east5-aiplatform.googleapis.com",
            "us-east5-aiplatform.googleapis.com.evil.com",
            "-aiplatform.googleapis.com",
            "us-east5aiplatform.googleapis.com",
        ] {
            assert_ne!(
                ResolvedProvider::resolve(None, host, None).row.name,
                "vertex",
                "{host}"
            );
        }
        for host in [
            "bedrock-runtime.amazonaws.com",
            "bedrock-runtime.a.b.amazonaws.com",
            "bedrock.us-east-1.amazonaws.com",
            "x.bedrock-runtime.us-east-1.amazonaws.com",
        ] {
            assert_ne!(
                ResolvedProvider::resolve(None, host, None).row.name,
                "bedrock",
                "{host}"
            );
        }
        // Vertex: Claude's rule for Claude models, Gemini's implicit caching otherwise.
        let vertex = by_name("vertex").unwrap();
        let claude = vertex.cache_rule("claude-sonnet-4-5@20250929").unwrap();
        assert_eq!(
            (claude.activation, claude.write_milli),
            (Explicit, Some(1250))
        );
        let gemini = vertex.cache_rule("gemini-2.5-pro").unwrap();
        assert_eq!(
            (gemini.activation, gemini.read_milli),
            (Automatic, Some(100))
        );
        assert!(!vertex.caches_automatically());
        assert_eq!(vertex.thinking, Native);
        assert!(!vertex.third_party_anthropic_wire);
        assert!(by_name("azure-openai").unwrap().caches_automatically());
        assert_eq!(by_name("foundry").unwrap().thinking, Native);
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
        assert!(!host_matches("evil-moonshot.ai", "moonshot.ai"));
        let r = ResolvedProvider::resolve(None, "api.mistral.ai", None);
        assert_eq!((r.row.name, r.matched_by), ("mistral", MatchedBy::Host));
        let r = ResolvedProvider::resolve(None, "notmistral.ai", None);
        assert_eq!((r.row.name, r.matched_by), ("default", MatchedBy::Default));
    }

    #[test]
    fn image_rules_from_key_then_host() {
        let img =
            |p: Option<&str>, h: &str| ResolvedProvider::resolve(p, h, None).images.map(|l| l.name);
        assert_eq!(img(Some("anthropic"), "example.com"), Some("anthropic"));
        assert_eq!(img(None, "api.anthropic.com"), Some("anthropic"));
        assert_eq!(
            img(None, "generativelanguage.googleapis.com"),
            Some("gemini")
        );
        assert_eq!(img(None, "api.openai.com"), Some("openai"));
        // A key without image rules keeps the host's.
        assert_eq!(
            img(Some("deepseek"), "api.anthropic.com"),
            Some("anthropic")
        );
        assert_eq!(img(None, "api.kimi.com"), None);
        assert_eq!(img(None, "notanthropic.com"), None);
    }

    #[test]
    fn model_family() {
        let f = ModelFamily::of("moonshotai/Kimi-K2.6");
        assert!(f.kimi && !f.deepseek);
        assert!(ModelFamily::of("k3").kimi && !ModelFamily::of("k30").kimi);
        assert!(ModelFamily::of("google/Gemma-3").reads_gemini_signature());
        assert!(!ModelFamily::of("google/Gemma-3").gemini);
        assert_eq!(
            ModelFamily::of("deepseek/deepseek-v4").echo(),
            Some(EchoFamily::DeepSeek)
        );
        assert_eq!(ModelFamily::of("MiMo-V2.5").echo(), Some(EchoFamily::Mimo));
        assert_eq!(ModelFamily::of("").echo(), None);
    }

    #[test]
    fn bedrock_model_ids_name_their_family() {
        for (model, family) in [
            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude"),
            ("anthropic.claude-3-7-sonnet-20250219-v1:0", "claude"),
            ("global.anthropic.claude-haiku-4-5-20251001-v1:0", "claude"),
            ("apac.amazon.nova-pro-v1:0", "nova"),
            ("amazon.nova-micro-v1:0", "nova"),
        ] {
            assert!(names_family(&model_leaf(model), family), "{model}");
        }
        // A version's dot is no vendor prefix.
        assert!(!names_family("gpt-4.1-mini", "1-mini"));
        assert!(!names_family("qwen2.5-coder", "5-coder"));
    }

    /// The one policy of which models get automatic breakpoints: Bedrock marks Claude and Nova
    /// (Nova not on its tools), no other model; rows with no rules, and explicit rows, as
    /// before; a row caching automatically, never.
    #[test]
    fn breakpoints_for_models_that_cache_explicitly() {
        let p = |name: &str| ResolvedProvider::resolve(Some(name), "upstream.example", None);
        let bedrock = p("bedrock");
        let all = Some(BreakpointTargets { tools: true });
        assert_eq!(
            bedrock.breakpoints_for(Some("us.anthropic.claude-sonnet-4-5-20250929-v1:0")),
            all
        );
        assert_eq!(
            bedrock.breakpoints_for(Some("us.amazon.nova-pro-v1:0")),
            Some(BreakpointTargets { tools: false })
        );
        assert_eq!(
            bedrock.breakpoints_for(Some("meta.llama3-70b-instruct-v1:0")),
            None
        );
        assert_eq!(bedrock.breakpoints_for(None), all);
        assert_eq!(p("anthropic").breakpoints_for(Some("claude-opus-4-1")), all);
        assert_eq!(
            p("openrouter").breakpoints_for(Some("anthropic/claude-x")),
            all
        );
        assert_eq!(p("deepseek").breakpoints_for(Some("deepseek-chat")), None);
        assert_eq!(
            p("vertex").breakpoints_for(Some("claude-sonnet-4-5@20250929")),
            all
        );
    }

    #[test]
    fn cache_rules_by_model_family() {
        let openai = ResolvedProvider::resolve(None, "api.openai.com", None);
        let read = |m: &str| openai.cache_rule(m).and_then(|r| r.read_milli);
        assert_eq!(read("gpt-5.1"), Some(100));
        assert_eq!(read("gpt-4o-mini"), Some(500));
        assert_eq!(read("gpt-4.1-mini"), Some(250));
        assert_eq!(read("o3"), Some(250));
        assert_eq!(read("davinci-002"), None);
        let r = openai.cache_rule("openai/gpt-5.6-terra").unwrap();
        assert_eq!((r.ttl_s, r.write_milli), (Some(1800), Some(1250)));
        assert_eq!(openai.cache_rule("gpt-5").unwrap().write_milli, Some(1000));
        let anthropic = ResolvedProvider::resolve(None, "api.anthropic.com", None);
        let r = anthropic.cache_rule("claude-opus-4-5").unwrap();
        assert_eq!(
            (r.ttl_s, r.write_milli, r.read_milli),
            (Some(300), Some(1250), Some(100))
        );
        for p in PROVIDERS {
            for r in p.cache {
                assert!(r.source.starts_with("https://"), "{}", p.name);
            }
        }
    }
}
