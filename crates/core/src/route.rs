//! The route table: which upstream a request path goes to, and which dialect its body speaks.
//!
//! Matching: the longest `prefix` wins, on a path-segment boundary (`/openai` matches
//! `/openai` and `/openai/v1/...`, never `/openaix`). The rest of the path and the query are
//! appended to the upstream base URL unchanged.

use std::sync::Arc;

use http::Uri;

use crate::config::{Config, ImagesConfig};
use crate::dialect::Dialect;
use crate::provider::ResolvedProvider;

/// One configured route, ready for matching.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    /// Path prefix without a trailing `/` (`""` for a route on `/`).
    pub prefix: String,
    /// `http` or `https`.
    pub scheme: http::uri::Scheme,
    /// Host and optional port of the upstream.
    pub authority: http::uri::Authority,
    /// Path of the upstream base URL without a trailing `/` (often `""`).
    pub base_path: String,
    /// Dialect pinned by config; `None` = from the request path.
    pub dialect: Option<Dialect>,
    /// Effective image settings (global `[images]` plus `[routes.images]`).
    pub images: ImagesConfig,
    /// Log what the passes would do but forward the original bytes.
    pub dry_run: bool,
    /// Ask OpenAI Chat streams for their usage chunk (`usage_in_streams`).
    pub usage_in_streams: bool,
    /// Prompt-cache settings: breakpoints, TTL, stabilisers ([`crate::caching`]), from the
    /// route's keys and its provider row's defaults ([`crate::caching::CacheSettings::resolve`]).
    pub cache: crate::caching::CacheSettings,
    /// The route's provider row, resolved once from its `provider` key, else the upstream
    /// host, with the route's `carriers = [...]` applied ([`ResolvedProvider::resolve`]).
    pub provider: ResolvedProvider,
    /// The route's `models` table: a name the client uses → the model it stands for.
    pub models: std::collections::BTreeMap<String, String>,
    /// `[routes.aws]`: the proxy's AWS credentials and region for re-signing, on a route whose
    /// provider signs with SigV4 ([`crate::provider::UpstreamAuth::SigV4`]).
    pub aws: Option<crate::config::AwsConfig>,
    /// `[routes.google]`: the proxy's service-account key for a Vertex AI route (the path as
    /// written, relative to the config file's folder).
    pub google: Option<crate::config::GoogleConfig>,
}

use crate::dialect::format::Endpoint;

/// The upstream's host with its port when that is not the scheme's default (never the
/// authority's userinfo): what [`ResolvedProvider::resolve`] keys verdicts by.
fn verdict_host(authority: &http::uri::Authority, scheme: &http::uri::Scheme) -> String {
    let default = if *scheme == http::uri::Scheme::HTTPS {
        443
    } else {
        80
    };
    match authority.port_u16() {
        Some(port) if port != default => format!("{}:{port}", authority.host()),
        _ => authority.host().to_owned(),
    }
}

/// The route table. Built once from the config.
#[derive(Debug, Clone)]
pub struct RouteTable {
    /// Sorted by prefix length, longest first. Shared, so a request's context can hold its
    /// route for as long as its response streams.
    routes: Vec<Arc<Route>>,
}

/// A request matched to a route.
#[derive(Debug, Clone)]
pub struct Matched {
    pub route: Arc<Route>,
    /// The upstream URI: base URL + rest of the path + query.
    pub upstream_uri: Uri,
    /// The path after the prefix (always starts with `/` or is empty).
    pub rest: String,
}

impl RouteTable {
    /// Build the table from a validated config.
    ///
    /// Errors: a route's `upstream` that is not an absolute http(s) URL (validation normally
    /// catches this first).
    pub fn new(config: &Config) -> Result<Self, String> {
        let mut routes = Vec::with_capacity(config.routes.len());
        for r in &config.routes {
            let uri: Uri = r
                .upstream
                .parse()
                .map_err(|e| format!("route {:?}: upstream {:?}: {e}", r.name, r.upstream))?;
            let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned())
            else {
                return Err(format!(
                    "route {:?}: upstream {:?} is not an absolute URL",
                    r.name, r.upstream
                ));
            };
            let host_key = verdict_host(&authority, &scheme);
            let provider =
                ResolvedProvider::resolve(r.provider.as_deref(), &host_key, r.carriers.as_deref());
            let cache = crate::caching::CacheSettings::resolve(
                r.cache_breakpoints,
                r.cache_ttl,
                r.stabilize.as_deref(),
                provider.row,
            );
            routes.push(Arc::new(Route {
                name: r.name.clone(),
                prefix: r.prefix.trim_end_matches('/').to_owned(),
                scheme,
                base_path: uri.path().trim_end_matches('/').to_owned(),
                dialect: r.dialect,
                images: config.route_images(r),
                dry_run: r.dry_run.unwrap_or(config.server.dry_run),
                usage_in_streams: r.usage_in_streams,
                cache,
                provider,
                authority,
                models: r.models.clone(),
                aws: r.aws.clone(),
                google: r.google.clone(),
            }));
        }
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        Ok(Self { routes })
    }

    /// The configured prefixes, for the "no route" error.
    pub fn prefixes(&self) -> Vec<String> {
        let mut p: Vec<String> = self
            .routes
            .iter()
            .map(|r| {
                if r.prefix.is_empty() {
                    "/".to_owned()
                } else {
                    r.prefix.clone()
                }
            })
            .collect();
        p.sort();
        p
    }

    /// The routes, longest prefix first.
    pub fn routes(&self) -> &[Arc<Route>] {
        &self.routes
    }

    /// Match a request path (and query) to a route; `None` when no prefix matches.
    pub fn find(&self, path: &str, query: Option<&str>) -> Option<Matched> {
        let route = self.routes.iter().find(|r| {
            path.strip_prefix(r.prefix.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })?;
        let rest = &path[route.prefix.len()..];
        let mut pq = String::with_capacity(route.base_path.len() + rest.len() + 1);
        pq.push_str(&route.base_path);
        pq.push_str(rest);
        if pq.is_empty() {
            pq.push('/');
        }
        if let Some(q) = query {
            pq.push('?');
            pq.push_str(q);
        }
        let upstream_uri = Uri::builder()
            .scheme(route.scheme.clone())
            .authority(route.authority.clone())
            .path_and_query(pq)
            .build()
            .ok()?;
        Some(Matched {
            route: Arc::clone(route),
            upstream_uri,
            rest: rest.to_owned(),
        })
    }
}

/// How many times [`climbs_out`] percent-decodes a path: a server behind the upstream that
/// decodes again (`%252e` → `%2e` → `.`) still cannot be walked out of the base path. Our
/// own bound.
const DOT_SEGMENT_DECODES: usize = 3;

/// Whether the path after a route's prefix (`rest`) climbs above its start with dot segments
/// (`..`), as sent or as a server would read it after percent-decoding (`%2e%2e`, `.%2E`,
/// an encoded separator `..%2f..%2f`, `..%5c`, a backslash; up to [`DOT_SEGMENT_DECODES`]
/// decodings). Appended to a route's base path, such a path would leave it on a server that
/// normalises it (RFC 3986 §5.2.4 removes dot segments; §6.2.2.2 decodes `%2E` to `.` first).
/// A `..` that stays below the start (`/v1/../messages`) and segments that only contain dots
/// (`a..b`, `.well-known`) do not climb out.
pub fn climbs_out(rest: &str) -> bool {
    fn climbs(text: &str) -> bool {
        let mut depth = 0i64;
        for seg in text.split(['/', '\\']) {
            match seg {
                "" | "." => {}
                ".." => {
                    depth -= 1;
                    if depth < 0 {
                        return true;
                    }
                }
                _ => depth += 1,
            }
        }
        false
    }
    let mut text = std::borrow::Cow::Borrowed(rest);
    for _ in 0..DOT_SEGMENT_DECODES {
        if climbs(&text) {
            return true;
        }
        let decoded = percent_encoding::percent_decode_str(&text)
            .decode_utf8_lossy()
            .into_owned();
        if decoded == text {
            return false;
        }
        text = std::borrow::Cow::Owned(decoded);
    }
    climbs(&text)
}

/// The dialect a request path speaks and which endpoint it is, from the path alone, or `None`
/// for paths that are not parsed (files, batches, model lists, ...: tunnelled untouched). The
/// proxy asks the route instead ([`Route::classify`]), which also checks the path's dialect
/// against the provider row; this route-less form shapes the proxy's own errors. Each wire
/// says which paths are its own ([`crate::dialect::format::WireFormat::classify_path`]; e.g. a
/// path ending in `/messages` is Anthropic Messages, except OpenAI's Assistants API
/// `…/threads/{thread_id}/messages`).
pub(crate) fn classify_path(path: &str) -> Option<(Dialect, Endpoint)> {
    crate::dialect::classify_path(path)
}

impl Route {
    /// The model of a request whose path names `path_model` and whose body names
    /// `body_model`: the path's first (the deployment or model the upstream serves: Azure
    /// OpenAI ignores the body's), then the body's; either mapped by the route's `models`
    /// table.
    pub fn model_of(&self, path_model: Option<&str>, body_model: Option<String>) -> Option<String> {
        let named = path_model.map(str::to_owned).or(body_model)?;
        Some(self.models.get(&named).cloned().unwrap_or(named))
    }

    /// The dialect and endpoint class of a request path (the part after the prefix) on this
    /// route, or `None` when the path is tunnelled untouched: [`classify_path`], then the
    /// path's dialect must be one the route's provider row serves
    /// ([`crate::provider::Provider::dialects`]; an OpenAI route has no Anthropic Messages
    /// or Gemini paths). A pinned `dialect` replaces the path's for parsing.
    pub fn classify(&self, rest: &str) -> Option<(Dialect, Endpoint)> {
        let (dialect, endpoint) = classify_path(rest)?;
        if !self.provider.row.dialects.contains(&dialect) {
            return None;
        }
        Some((self.dialect.unwrap_or(dialect), endpoint))
    }
}

/// The model a request path names, if any: Gemini's and Vertex AI's `/models/{model}:…`
/// (`/v1beta/models/gemini-2.5-pro:generateContent` → `gemini-2.5-pro`;
/// `…/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict` →
/// `claude-sonnet-4-5@20250929`; Vertex's `count-tokens` endpoint names none) and an Azure
/// OpenAI deployment (`/openai/deployments/{deployment}/chat/completions` → the deployment,
/// which a route's `models` table may map to the model it serves), and an Amazon Bedrock
/// model id (`/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke`; an ARN decoded).
pub fn model_from_path(path: &str) -> Option<std::borrow::Cow<'_, str>> {
    if let Some((id, _)) = crate::dialect::anthropic::bedrock_model_path(path) {
        // Model ids hold `:` (`anthropic.claude-sonnet-4-5-20250929-v1:0`); an ARN is sent
        // percent-encoded.
        return percent_encoding::percent_decode_str(id).decode_utf8().ok();
    }
    let (_, after) = path
        .split_once("/models/")
        .or_else(|| path.split_once("/deployments/"))?;
    let model = after.split([':', '/']).next()?;
    (!model.is_empty() && model != crate::dialect::anthropic::VERTEX_COUNT_TOKENS)
        .then_some(std::borrow::Cow::Borrowed(model))
}

/// The dialect the proxy's own errors take (`None`: OpenAI's shape): the one place that
/// decides it (`docs/dev/architecture.md#errors-the-proxy-produces`).
///
/// - On a matched route (`route`: the route and the path after its prefix), the route's
///   dialect decides ([`Route::error_dialect`]).
/// - Without one, the path's dialect ([`classify_path`]), else a Gemini API version segment
///   (`/v1beta/`, `/v1alpha/`); OpenAI's shape only when the path says nothing.
pub fn error_dialect(route: Option<(&Route, &str)>, path: &str) -> Option<Dialect> {
    match route {
        Some((route, rest)) => route.error_dialect(rest),
        None => path_dialect_hint(path),
    }
}

/// What a path alone says about its dialect: [`classify_path`], else the first wire whose
/// [`crate::dialect::format::WireFormat::path_hint`] knows it (a Gemini API version segment).
fn path_dialect_hint(path: &str) -> Option<Dialect> {
    classify_path(path).map(|(d, _)| d).or_else(|| {
        crate::dialect::ALL
            .into_iter()
            .find(|d| d.format().path_hint(path))
    })
}

impl Route {
    /// The dialect of the proxy's own errors for `rest` (the path after the prefix) on this
    /// route: the provider's one error shape when it has one
    /// ([`crate::provider::Provider::errors_as`]: Bedrock's, on InvokeModel too), else the
    /// pinned `dialect`, else the path's dialect on the route ([`Route::classify`]), else the
    /// provider's own API's ([`crate::provider::Provider::native_dialect`]: a 401 or a broken
    /// upload on `/anthropic/v1/files` is Anthropic-shaped), else what the path alone says
    /// ([`error_dialect`] without a route). Use [`error_dialect`].
    fn error_dialect(&self, rest: &str) -> Option<Dialect> {
        self.provider
            .row
            .errors_as
            .or(self.dialect)
            .or_else(|| self.classify(rest).map(|(d, _)| d))
            .or(self.provider.row.native_dialect)
            .or_else(|| path_dialect_hint(rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RouteTable {
        let (c, _) = Config::from_toml(
            r#"
[[routes]]
name = "a"
prefix = "/anthropic"
upstream = "https://api.anthropic.com"
[[routes]]
name = "o"
prefix = "/openai"
upstream = "https://api.openai.com/"
[[routes]]
name = "o2"
prefix = "/openai/special"
upstream = "http://127.0.0.1:9000/base"
"#,
        )
        .unwrap();
        RouteTable::new(&c).unwrap()
    }

    #[test]
    fn dot_segments_that_climb_out_plain_encoded_and_hidden() {
        for p in [
            "/../b",
            "/a/../../b",
            "/..",
            "/%2e%2e/b",
            "/%2E%2e/b",
            "/.%2e/b",
            "/a/..%2f..%2fb",
            "/a/..%5C..%5Cb",
            "/a/..\\..\\b",
            "/%252e%252e/b",
            "/a/%2e%2e%2f%2e%2e%2fb",
        ] {
            assert!(climbs_out(p), "{p}");
        }
        for p in [
            "/a/b",
            "/a/../b",
            "/a/./b",
            "/./b",
            "/a/a..b",
            "/a/.well-known/x",
            "/a/...",
            "/a/v1%2Fmessages",
            "/a/b/..",
            "/a/..%2fb",
            "/",
            "",
            "/a/%zz",
        ] {
            assert!(!climbs_out(p), "{p}");
        }
    }

    #[test]
    fn longest_prefix_wins_and_rest_is_appended() {
        let t = table();
        let m = t.find("/openai/special/v1/chat/completions", None).unwrap();
        assert_eq!(m.route.name, "o2");
        assert_eq!(
            m.upstream_uri.to_string(),
            "http://127.0.0.1:9000/base/v1/chat/completions"
        );
        let m = t.find("/openai/v1/models", Some("limit=5")).unwrap();
        assert_eq!(m.route.name, "o");
        assert_eq!(
            m.upstream_uri.to_string(),
            "https://api.openai.com/v1/models?limit=5"
        );
    }

    #[test]
    fn verdicts_key_by_host_and_a_non_default_port() {
        let t = table();
        let host = |path: &str| t.find(path, None).unwrap().route.provider.host.clone();
        assert_eq!(
            host("/openai/special/v1/chat/completions"),
            "127.0.0.1:9000"
        );
        assert_eq!(host("/openai/v1/chat/completions"), "api.openai.com");
        let (c, _) = Config::from_toml(
            "[[routes]]\nname='x'\nprefix='/x'\nupstream='https://api.openai.com:443'\n",
        )
        .unwrap();
        let t = RouteTable::new(&c).unwrap();
        // The scheme's default port is not part of the key (userinfo is rejected by the config).
        assert_eq!(
            t.find("/x/v1", None).unwrap().route.provider.host,
            "api.openai.com"
        );
    }

    #[test]
    fn cache_settings_resolve_from_keys_and_row() {
        use crate::caching::{Breakpoints, CacheTtl, Stabiliser};
        let (c, _) = Config::from_toml(
            r#"
[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "https://api.anthropic.com"
cache_breakpoints = "auto"
cache_ttl = "1h"
[[routes]]
name = "deepseek"
prefix = "/deepseek"
upstream = "https://api.deepseek.com/anthropic"
[[routes]]
name = "kimi-off"
prefix = "/kimi"
upstream = "https://api.moonshot.ai/anthropic"
stabilize = []
[[routes]]
name = "gateway"
prefix = "/gw"
upstream = "https://llm.example.com"
[[routes]]
name = "local"
prefix = "/local"
upstream = "http://127.0.0.1:8080"
"#,
        )
        .unwrap();
        let t = RouteTable::new(&c).unwrap();
        let cache = |p: &str| t.find(p, None).unwrap().route.cache.clone();
        let a = cache("/anthropic");
        assert_eq!(a.breakpoints, Breakpoints::Auto);
        assert_eq!(a.ttl, Some(CacheTtl::OneHour));
        assert!(a.stabilize.is_empty(), "Anthropic handles the billing line");
        let billing = vec![Stabiliser::ClaudeCodeBillingLine];
        assert_eq!(cache("/deepseek").stabilize, billing);
        assert_eq!(cache("/deepseek").breakpoints, Breakpoints::Off);
        assert_eq!(cache("/local").stabilize, billing);
        assert!(
            cache("/kimi").stabilize.is_empty(),
            "[] turns the default off"
        );
        assert!(
            cache("/gw").stabilize.is_empty(),
            "an unknown host may be Anthropic"
        );
    }

    #[test]
    fn prefix_matches_on_segment_boundary_only() {
        let t = table();
        assert!(t.find("/openaix/v1", None).is_none());
        assert!(t.find("/nope", None).is_none());
        let m = t.find("/anthropic", None).unwrap();
        assert_eq!(m.upstream_uri.to_string(), "https://api.anthropic.com/");
    }

    #[test]
    fn gemini_query_is_kept() {
        let (c, _) = Config::from_toml(
            "[[routes]]\nname='g'\nprefix='/gemini'\nupstream='https://generativelanguage.googleapis.com'\n",
        )
        .unwrap();
        let t = RouteTable::new(&c).unwrap();
        let m = t
            .find(
                "/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent",
                Some("alt=sse"),
            )
            .unwrap();
        assert_eq!(
            m.upstream_uri.to_string(),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
    }

    #[test]
    fn paths_are_classified() {
        use Dialect::*;
        assert_eq!(
            classify_path("/v1/messages"),
            Some((Anthropic, Endpoint::Generate))
        );
        assert_eq!(
            classify_path("/v1/messages/count_tokens"),
            Some((Anthropic, Endpoint::CountTokens))
        );
        assert_eq!(
            classify_path("/v1/chat/completions"),
            Some((Openai, Endpoint::Generate))
        );
        assert_eq!(
            classify_path("/api/v1/chat/completions"),
            Some((Openai, Endpoint::Generate))
        );
        assert_eq!(
            classify_path("/v1/responses"),
            Some((OpenaiResponses, Endpoint::Generate))
        );
        assert_eq!(
            classify_path("/v1beta/models/gemini-2.5-pro:generateContent"),
            Some((Gemini, Endpoint::Generate))
        );
        assert_eq!(
            classify_path("/v1beta/models/gemini-2.5-pro:countTokens"),
            Some((Gemini, Endpoint::CountTokens))
        );
        assert_eq!(classify_path("/v1/models"), None);
        assert_eq!(classify_path("/v1/files"), None);
        assert_eq!(classify_path("/v1/messages/batches"), None);
        assert_eq!(classify_path("/v1/responses/resp_123"), None);
        assert_eq!(classify_path("/v1/threads/thread_1/messages"), None);
        assert_eq!(classify_path("/openai/threads/thread_1/messages/"), None);
        assert_eq!(
            classify_path("/anthropic/v1/messages"),
            Some((Anthropic, Endpoint::Generate))
        );
        assert_eq!(
            classify_path("/messages"),
            Some((Anthropic, Endpoint::Generate))
        );
    }

    #[test]
    fn paths_are_classified_by_the_route() {
        use Dialect::*;
        let (c, _) = Config::from_toml(
            r#"
[[routes]]
name = "o"
prefix = "/openai"
upstream = "https://api.openai.com"
[[routes]]
name = "o-local"
prefix = "/o-local"
upstream = "http://127.0.0.1:9000"
provider = "openai"
[[routes]]
name = "a"
prefix = "/anthropic"
upstream = "https://api.anthropic.com"
[[routes]]
name = "gw"
prefix = "/gw"
upstream = "https://llm.corp.example"
[[routes]]
name = "pinned"
prefix = "/pinned"
upstream = "https://llm.corp.example"
dialect = "openai-responses"
"#,
        )
        .unwrap();
        let t = RouteTable::new(&c).unwrap();
        let class = |path: &str| {
            let m = t.find(path, None).unwrap();
            m.route.classify(&m.rest)
        };
        // The Assistants API on an OpenAI route is tunnelled, not parsed as Anthropic.
        assert_eq!(class("/openai/v1/threads/thread_1/messages"), None);
        assert_eq!(class("/o-local/v1/threads/thread_1/messages"), None);
        // An OpenAI route serves no Anthropic Messages or Gemini paths at all.
        assert_eq!(class("/openai/v1/messages"), None);
        assert_eq!(class("/openai/v1/messages/count_tokens"), None);
        assert_eq!(class("/openai/v1beta/models/g:generateContent"), None);
        assert_eq!(
            class("/openai/v1/chat/completions"),
            Some((Openai, Endpoint::Generate))
        );
        assert_eq!(
            class("/o-local/v1/responses"),
            Some((OpenaiResponses, Endpoint::Generate))
        );
        // Anthropic: count_tokens stays its own class, not a generation.
        assert_eq!(
            class("/anthropic/v1/messages"),
            Some((Anthropic, Endpoint::Generate))
        );
        assert_eq!(
            class("/anthropic/v1/messages/count_tokens"),
            Some((Anthropic, Endpoint::CountTokens))
        );
        // An unknown gateway serves every dialect, but never Assistants threads as Anthropic.
        assert_eq!(
            class("/gw/anthropic/v1/messages"),
            Some((Anthropic, Endpoint::Generate))
        );
        assert_eq!(class("/gw/v1/threads/t/messages"), None);
        // A pinned dialect is used for parsing a recognised path.
        assert_eq!(
            class("/pinned/v1/chat/completions"),
            Some((OpenaiResponses, Endpoint::Generate))
        );
        assert_eq!(class("/pinned/v1/models"), None);
    }

    #[test]
    fn gemini_model_from_path() {
        assert_eq!(
            model_from_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent").as_deref(),
            Some("gemini-2.5-pro")
        );
        assert_eq!(model_from_path("/v1/chat/completions"), None);
    }

    /// The clouds' paths: Vertex AI (Claude and Gemini, regional and global), Azure OpenAI
    /// deployments and its v1 API, Claude in Microsoft Foundry.
    #[test]
    fn cloud_paths_are_classified_with_their_models() {
        use Dialect::*;
        let vertex = "/v1/projects/my-proj/locations/us-east5/publishers";
        for (path, dialect, endpoint, model) in [
            (
                format!("{vertex}/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"),
                Anthropic,
                Endpoint::Generate,
                Some("claude-sonnet-4-5@20250929"),
            ),
            (
                format!("{vertex}/anthropic/models/claude-opus-4-1:streamRawPredict"),
                Anthropic,
                Endpoint::Generate,
                Some("claude-opus-4-1"),
            ),
            (
                format!("{vertex}/anthropic/models/count-tokens:rawPredict"),
                Anthropic,
                Endpoint::CountTokens,
                None,
            ),
            (
                format!("{vertex}/google/models/gemini-2.5-pro:streamGenerateContent"),
                Gemini,
                Endpoint::Generate,
                Some("gemini-2.5-pro"),
            ),
            (
                "/v1/projects/p/locations/global/publishers/google/models/gemini-3-pro:generateContent"
                    .to_owned(),
                Gemini,
                Endpoint::Generate,
                Some("gemini-3-pro"),
            ),
            (
                "/openai/deployments/prod-gpt/chat/completions".to_owned(),
                Openai,
                Endpoint::Generate,
                Some("prod-gpt"),
            ),
            ("/openai/v1/chat/completions".to_owned(), Openai, Endpoint::Generate, None),
            ("/openai/v1/responses".to_owned(), OpenaiResponses, Endpoint::Generate, None),
            ("/anthropic/v1/messages".to_owned(), Anthropic, Endpoint::Generate, None),
            (
                "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke".to_owned(),
                Anthropic,
                Endpoint::Generate,
                Some("anthropic.claude-sonnet-4-5-20250929-v1:0"),
            ),
            (
                "/model/us.anthropic.claude-opus-4-1-20250805-v1:0/invoke-with-response-stream"
                    .to_owned(),
                Anthropic,
                Endpoint::Generate,
                Some("us.anthropic.claude-opus-4-1-20250805-v1:0"),
            ),
            (
                "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke".to_owned(),
                Anthropic,
                Endpoint::Generate,
                Some("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            ),
            // Converse: a wire of its own, for any model Bedrock serves.
            (
                "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/converse".to_owned(),
                Converse,
                Endpoint::Generate,
                Some("anthropic.claude-sonnet-4-5-20250929-v1:0"),
            ),
            (
                "/model/us.meta.llama3-3-70b-instruct-v1%3A0/converse-stream".to_owned(),
                Converse,
                Endpoint::Generate,
                Some("us.meta.llama3-3-70b-instruct-v1:0"),
            ),
        ] {
            assert_eq!(classify_path(&path), Some((dialect, endpoint)), "{path}");
            assert_eq!(model_from_path(&path).as_deref(), model, "{path}");
        }
        // Other publishers' rawPredict (Mistral, Llama on Vertex) and other methods are not
        // Anthropic Messages.
        for path in [
            format!("{vertex}/mistralai/models/mistral-large:rawPredict"),
            format!("{vertex}/anthropic/models/claude-x:predict"),
            format!("{vertex}/anthropic/models/claude-x"),
            // Bedrock: other models' InvokeModel bodies are theirs; other operations.
            "/model/meta.llama3-70b-instruct-v1:0/invoke".to_owned(),
            "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/count-tokens".to_owned(),
        ] {
            assert_eq!(classify_path(&path), None, "{path}");
        }
    }
}
