//! `proxy.toml`: the schema, its defaults (all in this file) and validation.
//!
//! Shape (see `docs/dev/architecture.md#config` and the shipped `proxy.toml`):
//!
//! ```toml
//! [server]   # listen, timeouts, max_rewrite_bytes, dry_run, client_token, ca_file
//! [state]    # backend (SQLite path or Redis url), retention
//! [images]   # eviction ceilings and downscale budget; overridable per route
//! [reasoning]
//! [[routes]] # name, prefix, upstream, dialect?, provider?, [routes.images]
//! ```
//!
//! An unknown key or a wrong type is an error that names the key and its line (the `toml`
//! crate's span-aware messages). An out-of-range value is clamped and a warning is returned
//! from [`Config::load`] so the caller can log it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::dialect::Dialect;
pub use crate::images::settings::{ImagesConfig, ImagesOverride, RouteCeilings};
use serde::Deserialize;

/// `[state]`: its schema, defaults and validation live with the store (`cachekeeper-state`).
pub use cachekeeper_state::{StateBackend, StateConfig};

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key or a wrong type; the message names the key and line.
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// The file parsed but a value is unusable (bad URL, duplicate prefix, ...).
    #[error("invalid config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The whole `proxy.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub state: StateConfig,
    pub images: ImagesConfig,
    pub reasoning: ReasoningConfig,
    pub routes: Vec<RouteConfig>,
    /// `[[pricing]]`: money per model for `report` and the dashboard (optional;
    /// `docs/accounting.md#pricing`).
    pub pricing: Vec<crate::accounting::pricing::PriceEntry>,
}

/// A listen address (`[server] listen`, `serve --listen`): an IP and port, `127.0.0.1:8787`
/// or `[::1]:8787` (port 0 = any free port). Errors: anything else, host names included
/// (`localhost:8787`), with a message that says what is needed.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "invalid listen address {text:?}: an IP address and port are needed, e.g. \
             127.0.0.1:8787 or [::1]:8787 (a host name such as localhost is not resolved)"
        )
    })
}

fn deserialize_listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    parse_listen(&text).map_err(serde::de::Error::custom)
}

/// `[server]`: the listener, timeouts and body limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on: an IP and port ([`parse_listen`]). Default `127.0.0.1:8787`.
    #[serde(deserialize_with = "deserialize_listen")]
    pub listen: SocketAddr,
    /// Request bodies up to this many bytes are read for the rewrite passes; larger ones are
    /// streamed upstream untouched. Default 64 MiB (twice Anthropic's 32 MB request limit).
    pub max_rewrite_bytes: u64,
    /// TCP + TLS connect timeout to the upstream, ms. Default 10000.
    pub connect_timeout_ms: u64,
    /// Time from sending the request to the upstream's response headers, ms. Default 600000:
    /// non-streaming generations can take minutes.
    pub first_byte_timeout_ms: u64,
    /// Longest pause between two response body chunks, ms. Default 300000.
    pub idle_timeout_ms: u64,
    /// Longest pause between two chunks of a client's request body, ms, whether the proxy
    /// reads the body for the passes or streams it upstream; past it the client gets a 400 in
    /// the dialect's error shape. A gap, not a total: a slow large upload is never cut.
    /// Default 60000.
    pub body_idle_timeout_ms: u64,
    /// Global memory budget for request bodies read for the passes, bytes (all requests
    /// together; each body is charged `wire::body::BODY_MEMORY_FACTOR` (5) times its size,
    /// for its decoded copy and the passes' working memory). A body that would exceed it
    /// waits for room, up to `buffer_wait_ms`; past that it is streamed upstream untouched,
    /// with a warning and
    /// `cachekeeper_buffer_budget_exceeded_total`. Default 1 GiB; never below
    /// `max_rewrite_bytes` (rejected at load).
    pub max_buffered_bytes: u64,
    /// How long a body waits for room in `max_buffered_bytes`, ms. Default 30000.
    pub buffer_wait_ms: u64,
    /// How long in-flight requests may run after SIGINT/SIGTERM, ms. Default 30000.
    pub shutdown_grace_ms: u64,
    /// Log what the passes would change but forward the original bytes. Default false.
    pub dry_run: bool,
    /// When set, clients must present it: header `x-cachekeeper-token: <value>`, or a leading
    /// `/t/<value>/` path segment (stripped, never forwarded or logged); `/metrics` and the
    /// dashboard also take `Authorization: Bearer <value>`; `/healthz` never needs it.
    /// The header never leaves the proxy. Default unset.
    pub client_token: Option<String>,
    /// Extra PEM CA bundle for upstream TLS, on top of the native roots. Relative paths are
    /// resolved against the config file's folder.
    pub ca_file: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            max_rewrite_bytes: 64 * 1024 * 1024,
            connect_timeout_ms: 10_000,
            first_byte_timeout_ms: 600_000,
            idle_timeout_ms: 300_000,
            body_idle_timeout_ms: 60_000,
            max_buffered_bytes: 1024 * 1024 * 1024,
            buffer_wait_ms: 30_000,
            shutdown_grace_ms: 30_000,
            dry_run: false,
            client_token: None,
            ca_file: None,
        }
    }
}

/// `[reasoning]`: what may be learned as unknown and dropped.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReasoningConfig {
    /// Top-level request parameters that may be learned as unknown from a provider's 4xx
    /// and then omitted for that (host, model). Default: `reasoning_effort`,
    /// `stream_options`, `parallel_tool_calls`, `prompt_cache_key`, `store`, `metadata`,
    /// `service_tier`, `enable_thinking`, `reasoning` (the top-level parameter, not the
    /// message carrier) and the keep-thinking flags
    /// ([`crate::provider::KEEP_THINKING_PARAMS`]; dotted names are nested keys).
    pub droppable_params: Vec<String>,
    /// The client's own `anthropic-beta` values that may be learned as rejected from a
    /// provider's 4xx and then removed from its header for that (host, model)
    /// (`docs/reasoning.md#beta-headers`). Default: none, since dropping a client's beta
    /// changes what the model does; values the proxy adds itself are always learned.
    pub droppable_betas: Vec<String>,
}

impl Default for ReasoningConfig {
    fn default() -> Self {
        Self {
            droppable_params: [
                "reasoning_effort",
                "stream_options",
                "parallel_tool_calls",
                "prompt_cache_key",
                "store",
                "metadata",
                "service_tier",
                "enable_thinking",
                "reasoning",
            ]
            .iter()
            .chain(crate::provider::KEEP_THINKING_PARAMS.iter())
            .map(|s| (*s).to_owned())
            .collect(),
            droppable_betas: Vec::new(),
        }
    }
}

/// One `[[routes]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Name used in logs.
    pub name: String,
    /// Path prefix, e.g. `/anthropic`. Longest prefix wins.
    pub prefix: String,
    /// Upstream base URL (`https://` or `http://`); the rest of the path is appended.
    pub upstream: String,
    /// Pin the dialect; default: from the request path.
    #[serde(default)]
    pub dialect: Option<Dialect>,
    /// A row of the provider table ([`crate::provider::PROVIDERS`], by name); default: from
    /// the upstream host.
    #[serde(default)]
    pub provider: Option<String>,
    /// Override the profile's reasoning carrier set.
    #[serde(default)]
    pub carriers: Option<Vec<String>>,
    /// OpenAI Chat streaming requests (`stream: true`) that lack
    /// `stream_options.include_usage` get `"include_usage": true` added, so the stream ends
    /// with a usage chunk (empty `choices`) the log can read. Default false. Only for routes
    /// that carry OpenAI Chat: rejected on a route pinned to another dialect.
    #[serde(default)]
    pub usage_in_streams: bool,
    /// `"off"` (the default) or `"auto"`: on the Anthropic wire, add up to 4 `cache_control`
    /// breakpoints to a request whose client set none (`docs/caching.md#automatic-breakpoints`).
    /// Rejected on a route pinned to another dialect and on a provider row that caches
    /// prefixes by itself ([`crate::provider::Provider::caches_automatically`]).
    #[serde(default)]
    pub cache_breakpoints: Option<crate::caching::Breakpoints>,
    /// `"5m"` or `"1h"`: the TTL of the breakpoints the proxy adds, and the provider cache
    /// TTL the session's idle time is judged by (`docs/caching.md#ttl`). Unset: 5 minutes for
    /// the breakpoints.
    #[serde(default)]
    pub cache_ttl: Option<crate::caching::CacheTtl>,
    /// Prefix stabilisers to run (`["claude_code_billing_line"]`); `[]` runs none. Unset: the
    /// provider row's default ([`crate::caching::CacheSettings::resolve`]). Anthropic wire
    /// only: rejected (when not empty) on a route pinned to another dialect.
    #[serde(default)]
    pub stabilize: Option<Vec<crate::caching::Stabiliser>>,
    /// Per-route dry run; default: `[server] dry_run`.
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Per-route `[images]` overrides.
    #[serde(default)]
    pub images: ImagesOverride,
    /// The model a name the client uses stands for: an Azure OpenAI deployment
    /// (`"prod-gpt" = "gpt-4.1"`), a Vertex AI or Bedrock model id with a version. The mapped
    /// name is what the provider table's per-model rules, pricing and the report read
    /// (`docs/reference/config.md#routes`). Default empty: names are read as sent.
    #[serde(default)]
    pub models: std::collections::BTreeMap<String, String>,
    /// `[routes.aws]`: where the proxy's own AWS credentials come from and the region it signs
    /// for, when it re-signs an Amazon Bedrock request (SigV4). Default unset: the standard
    /// chain (environment, then the shared files' `AWS_PROFILE` or `default` profile) and the
    /// region of the client's own signature.
    #[serde(default)]
    pub aws: Option<AwsConfig>,
    /// `[routes.google]`: a token source of the proxy's own for a Vertex AI route: requests
    /// that carry no credential get its OAuth access token. Default unset: such requests get
    /// the proxy's 401 naming what to send.
    #[serde(default)]
    pub google: Option<GoogleConfig>,
}

/// `[routes.google]`: the proxy's Google credentials for one Vertex AI route.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoogleConfig {
    /// A service-account key file (the JSON the Google Cloud console downloads: `type`
    /// `"service_account"`, `client_email`, `private_key`, `token_uri`), relative to the
    /// config file's folder. Read when the file loads; its access tokens (scope
    /// `cloud-platform`) are fetched at startup and renewed before they expire, off any
    /// request's path.
    pub service_account: PathBuf,
}

/// `[routes.aws]`: the proxy's side of SigV4 re-signing for one route (Amazon Bedrock).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsConfig {
    /// A profile of the shared AWS files (`~/.aws/credentials`, `~/.aws/config`, or the files
    /// `AWS_SHARED_CREDENTIALS_FILE` / `AWS_CONFIG_FILE` name): the route's credentials come
    /// from that profile only, not from the environment. Unset: the environment's
    /// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`, else the
    /// `AWS_PROFILE` (or `default`) profile.
    #[serde(default)]
    pub profile: Option<String>,
    /// The region to sign for, e.g. `"us-east-1"` (the upstream's, as in
    /// `bedrock-runtime.us-east-1.amazonaws.com`). Unset: the region of the client's own
    /// signature (its `Credential=` scope).
    #[serde(default)]
    pub region: Option<String>,
    /// Sign every request on this route with the proxy's credentials, not only those the
    /// client signed with the same credentials (which the proxy verifies first): requests
    /// with no `Authorization` (Claude Code with `CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`) and
    /// requests signed with other credentials. Whoever reaches the route then uses the
    /// proxy's AWS account: only for a proxy that only trusted clients reach (loopback, or
    /// `[server] client_token`). Default `false`.
    #[serde(default)]
    pub sign_all: bool,
}

/// A loaded, validated config plus the warnings produced by clamping.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// Folder of the config file; relative paths in the config resolve against it.
    pub base_dir: PathBuf,
    pub warnings: Vec<String>,
}

impl Config {
    /// Read, parse and validate a config file.
    ///
    /// Errors: [`ConfigError::Read`] when the file cannot be read, [`ConfigError::Parse`] for
    /// syntax, unknown keys and wrong types, [`ConfigError::Invalid`] for unusable values.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let (config, warnings) = Self::from_toml(&text).map_err(|e| match e {
            FromTomlError::Parse(message) => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            FromTomlError::Invalid(message) => ConfigError::Invalid {
                path: path.to_owned(),
                message,
            },
        })?;
        config
            .state
            .check_ca(&base_dir)
            .and_then(|()| config.check_service_accounts(&base_dir))
            .map_err(|message| ConfigError::Invalid {
                path: path.to_owned(),
                message,
            })?;
        Ok(Loaded {
            config,
            base_dir,
            warnings,
        })
    }

    /// Parse and validate TOML text; returns the config and clamp warnings.
    pub fn from_toml(text: &str) -> Result<(Config, Vec<String>), FromTomlError> {
        let mut config: Config =
            toml::from_str(text).map_err(|e| FromTomlError::Parse(e.to_string()))?;
        let mut warnings = Vec::new();
        config.validate(&mut warnings)?;
        Ok((config, warnings))
    }

    fn validate(&mut self, warnings: &mut Vec<String>) -> Result<(), FromTomlError> {
        let invalid = |m: String| Err(FromTomlError::Invalid(m));
        if let Err(m) = self.state.resolve() {
            return invalid(m);
        }
        self.images.clamp("images", warnings);
        if self.server.max_buffered_bytes < self.server.max_rewrite_bytes {
            return invalid(format!(
                "[server] max_buffered_bytes = {} is below max_rewrite_bytes = {}: the budget \
                 for buffered bodies must hold at least one body of the largest size the proxy \
                 reads; raise max_buffered_bytes or lower max_rewrite_bytes",
                self.server.max_buffered_bytes, self.server.max_rewrite_bytes
            ));
        }
        if self.routes.is_empty() {
            return invalid(
                "no [[routes]]: add at least one (name, prefix, upstream); see the shipped proxy.toml"
                    .to_owned(),
            );
        }
        for (i, p) in self.pricing.iter().enumerate() {
            if let Some(problem) = p.problem() {
                return invalid(format!("pricing[{i}] (model = {:?}): {problem}", p.model));
            }
        }
        let mut seen = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for (i, r) in self.routes.iter().enumerate() {
            let at = format!("routes[{i}] (name = {:?})", r.name);
            if r.name.trim().is_empty() {
                return invalid(format!("routes[{i}]: name must not be empty"));
            }
            if !names.insert(r.name.as_str()) {
                return invalid(format!("{at}: name is used twice"));
            }
            if !r.prefix.starts_with('/')
                || r.prefix.split('/').any(|seg| seg == "." || seg == "..")
            {
                return invalid(format!(
                    "{at}: prefix {:?} must start with '/' and have no '.' or '..' segments",
                    r.prefix
                ));
            }
            if !seen.insert(r.prefix.trim_end_matches('/').to_owned()) {
                return invalid(format!("{at}: prefix {:?} is used twice", r.prefix));
            }
            self.check_route(r, &at, warnings)
                .map_err(FromTomlError::Invalid)?;
        }
        Ok(())
    }

    /// [`Config::validate`]'s checks of one route past its name and prefix: the upstream URL,
    /// carriers, provider, cache keys, `usage_in_streams`, image overrides (clamped, with
    /// `warnings`) and a prefix that shadows one of the proxy's own paths (a warning).
    ///
    /// Errors: the first problem, prefixed with `at` (`routes[i] (name = "…")`).
    fn check_route(
        &self,
        r: &RouteConfig,
        at: &str,
        warnings: &mut Vec<String>,
    ) -> Result<(), String> {
        if let Some((name, model)) = r
            .models
            .iter()
            .find(|(n, m)| n.trim().is_empty() || m.trim().is_empty())
        {
            return Err(format!(
                "{at}: models: {name:?} = {model:?}: a name the client uses and the model it \
                 stands for must both be non-empty"
            ));
        }
        let host = match r.upstream.parse::<http::Uri>() {
            Ok(u)
                if matches!(u.scheme_str(), Some("http") | Some("https"))
                    && u.host().is_some()
                    && u.query().is_none()
                    && !u.authority().is_some_and(|a| a.as_str().contains('@')) =>
            {
                u.host().unwrap_or_default().to_owned()
            }
            _ => {
                return Err(format!(
                    "{at}: upstream {:?} must be an http:// or https:// base URL without a \
                     query or credentials (send credentials as headers)",
                    r.upstream
                ))
            }
        };
        if let Some(carriers) = &r.carriers {
            if let Some(bad) = carriers
                .iter()
                .find(|c| crate::provider::Carrier::from_name(c).is_none())
            {
                return Err(format!(
                    "{at}: unknown carrier {bad:?}; known: reasoning_content, reasoning, \
                     reasoning_details, extra_content, reasoning_opaque"
                ));
            }
        }
        if let Some(p) = &r.provider {
            if crate::provider::by_name(p).is_none() {
                let known: Vec<&str> = crate::provider::names().collect();
                return Err(format!(
                    "{at}: unknown provider {p:?}; known: {}",
                    known.join(", ")
                ));
            }
        }
        if let Some(problem) = cache_problem(r, &host) {
            return Err(format!("{at}: {problem}"));
        }
        if r.usage_in_streams && r.dialect.is_some_and(|d| !d.format().stream_usage_option()) {
            return Err(format!(
                "{at}: usage_in_streams applies to OpenAI Chat streams only \
                 (stream_options.include_usage); this route is pinned to {}",
                r.dialect.map_or("", Dialect::as_str)
            ));
        }
        if r.images.transcode_cache_bytes.is_some() {
            return Err(format!(
                "{at}: images.transcode_cache_bytes cannot be set per route: the transcode \
                 cache is shared by every route; set it in [images]"
            ));
        }
        if let Some(problem) = cloud_problem(r, &host) {
            return Err(format!("{at}: {problem}"));
        }
        let mut eff = self.images.with_overrides(&r.images);
        eff.clamp(&format!("{at}.images"), warnings);
        let token_set = self.server.client_token.is_some();
        if let Some(reserved) = crate::reserved::shadowing(&r.prefix, token_set) {
            warnings.push(crate::reserved::shadowing_warning(
                &r.name, &r.prefix, reserved,
            ));
        }
        Ok(())
    }

    /// Every `[routes.google] service_account` (relative to `base_dir`) is a readable
    /// service-account key: a JSON object with `type` `"service_account"` and non-empty
    /// `client_email`, `private_key` and `token_uri`. The error names the route and the file
    /// (never the key).
    fn check_service_accounts(&self, base_dir: &Path) -> Result<(), String> {
        for (i, r) in self.routes.iter().enumerate() {
            let Some(g) = &r.google else { continue };
            let file = base_dir.join(&g.service_account);
            let at = format!(
                "routes[{i}] (name = {:?}): google.service_account {}",
                r.name,
                file.display()
            );
            let text = std::fs::read_to_string(&file).map_err(|e| format!("{at}: {e}"))?;
            let key: serde_json::Value =
                serde_json::from_str(&text).map_err(|_| format!("{at}: not JSON"))?;
            if key.get("type").and_then(|t| t.as_str()) != Some("service_account") {
                return Err(format!(
                    "{at}: not a service-account key (its \"type\" is not \"service_account\")"
                ));
            }
            for member in ["client_email", "private_key", "token_uri"] {
                if key
                    .get(member)
                    .and_then(|v| v.as_str())
                    .is_none_or(str::is_empty)
                {
                    return Err(format!("{at}: the key has no {member}"));
                }
            }
            let pem = key
                .get("private_key")
                .and_then(|v| v.as_str())
                .unwrap_or("");
            if !is_pem_private_key(pem) {
                return Err(format!(
                    "{at}: the key's private_key is not a PEM private key (-----BEGIN PRIVATE \
                     KEY----- and base64 DER); download a new key from the Google Cloud console"
                ));
            }
        }
        Ok(())
    }

    /// The error that stops the proxy from serving this configuration on a listener bound to
    /// `addr` beyond loopback without `[server] client_token`, when a route lends the proxy's
    /// own cloud credentials to whoever reaches it: `[routes.aws] sign_all = true` (AWS signs
    /// the request with the proxy's key) or `[routes.google]` (the route's Google token).
    /// Unlike [`crate::reserved::exposure_warning`], where the agents' own keys are spent, this
    /// would spend the operator's account for anyone on the network. `None` on loopback, with a token, or when
    /// no route lends. `serve` refuses to start (and a reload to apply) with it; `check` reports
    /// it for the file's `listen`.
    pub fn lending_refusal(&self, addr: std::net::SocketAddr) -> Option<String> {
        if self.server.client_token.is_some() || addr.ip().is_loopback() {
            return None;
        }
        let lenders: Vec<String> = self
            .routes
            .iter()
            .filter_map(|r| {
                if r.aws.as_ref().is_some_and(|a| a.sign_all) {
                    Some(format!("{} ([routes.aws] sign_all)", r.name))
                } else if r.google.is_some() {
                    Some(format!("{} ([routes.google])", r.name))
                } else {
                    None
                }
            })
            .collect();
        (!lenders.is_empty()).then(|| {
            format!(
                "listening on {addr}, beyond loopback, without [server] client_token, while route(s) \
                 {} lend the proxy's own cloud credentials to every request that reaches them: \
                 anyone who can reach this port would use your cloud account. Set [server] \
                 client_token (agents then put /t/<token> in their base URL), or listen on 127.0.0.1",
                lenders.join(", ")
            )
        })
    }

    /// The effective `[images]` settings for a route (global values, route overrides,
    /// clamped).
    pub(crate) fn route_images(&self, route: &RouteConfig) -> ImagesConfig {
        let mut eff = self.images.with_overrides(&route.images);
        eff.clamp("", &mut Vec::new());
        eff
    }
}

impl AwsConfig {
    /// What makes this section unusable, if anything: an empty `profile`, or a `region` that
    /// is not a region code (lower-case letters, digits and `-`, as `us-east-1`; it is part
    /// of the signature's scope and of no URL here).
    fn problem(&self) -> Option<String> {
        if self.profile.as_deref().is_some_and(|p| p.trim().is_empty()) {
            return Some("aws.profile is empty: name a profile of the shared AWS files".into());
        }
        let bad_region = |r: &str| {
            r.is_empty()
                || !r
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        match self.region.as_deref() {
            Some(r) if bad_region(r) => Some(format!(
                "aws.region {r:?} is not a region code such as \"us-east-1\""
            )),
            _ => None,
        }
    }
}

/// Whether `pem` has the shape of the private key of a Google service-account key: a PEM
/// block `-----BEGIN PRIVATE KEY-----` (PKCS #8, what the Cloud console issues; `RSA PRIVATE
/// KEY`, PKCS #1, is taken too) whose body is base64 of a DER `SEQUENCE` (first byte `0x30`)
/// of at least [`MIN_PRIVATE_KEY_DER_BYTES`]. A shape check only: the key itself is parsed when
/// the token source starts, and an error then is logged and answered (503 `no_token`).
fn is_pem_private_key(pem: &str) -> bool {
    use base64::Engine as _;
    let block = ["PRIVATE KEY", "RSA PRIVATE KEY"].iter().find_map(|label| {
        let begin = format!("-----BEGIN {label}-----");
        let end = format!("-----END {label}-----");
        let start = pem.find(&begin)? + begin.len();
        let stop = pem[start..].find(&end)? + start;
        Some(&pem[start..stop])
    });
    let Some(body) = block else { return false };
    let b64: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .is_ok_and(|der| der.len() >= MIN_PRIVATE_KEY_DER_BYTES && der[0] == 0x30)
}

/// The least DER length taken as a private key by [`is_pem_private_key`], bytes: far below a
/// 2048-bit RSA key's PKCS #8 encoding (about 1,200 bytes), far above a placeholder.
const MIN_PRIVATE_KEY_DER_BYTES: usize = 64;

/// Why a route's cloud sections (`[routes.aws]`, `[routes.google]`) cannot work, if they
/// cannot (`host`: the upstream's host): a section on a route whose provider does not take
/// it, an unusable `[routes.aws]`, or `sign_all` with no region to sign for.
fn cloud_problem(r: &RouteConfig, host: &str) -> Option<String> {
    if let Some(problem) = r.aws.as_ref().and_then(AwsConfig::problem) {
        return Some(problem);
    }
    let signs_unscoped = r
        .aws
        .as_ref()
        .is_some_and(|a| a.sign_all && a.region.is_none());
    if signs_unscoped && crate::provider::bedrock_region_of_host(host).is_none() {
        return Some(format!(
            "[routes.aws] sign_all signs requests that carry no region of their own, \
             and the upstream host {host:?} names none (as bedrock-runtime.<region>.amazonaws.com \
             does): set [routes.aws] region"
        ));
    }
    let row = crate::provider::ResolvedProvider::resolve(r.provider.as_deref(), host, None).row;
    if r.aws.is_some() && row.auth != crate::provider::UpstreamAuth::SigV4 {
        return Some(format!(
            "[routes.aws] applies to routes whose upstream signs with AWS SigV4 \
             (provider \"bedrock\"); this route's provider is {:?}",
            row.name
        ));
    }
    if r.google.is_some() && row.auth != crate::provider::UpstreamAuth::Required {
        return Some(format!(
            "[routes.google] applies to Vertex AI routes (provider \"vertex\"), whose \
             requests need a Google credential; this route's provider is {:?}",
            row.name
        ));
    }
    None
}

/// Why a route's prompt-cache keys cannot work, if they cannot (`host`: the upstream's host).
fn cache_problem(r: &RouteConfig, host: &str) -> Option<String> {
    use crate::caching::Breakpoints;
    use crate::dialect::format::MarkerStyle;
    let unmarked = r
        .dialect
        .filter(|d| d.format().cache_markers() == MarkerStyle::Unmarked);
    let pinned = r.dialect.filter(|d| !d.format().system_billing_line());
    if r.cache_breakpoints == Some(Breakpoints::Auto) {
        if let Some(d) = unmarked {
            return Some(format!(
                "cache_breakpoints = \"auto\" places Anthropic cache_control markers and Bedrock \
                 Converse cachePoint blocks, on those wires only; this route is pinned to {}",
                d.as_str()
            ));
        }
        let row = crate::provider::ResolvedProvider::resolve(r.provider.as_deref(), host, None).row;
        if row.caches_automatically() {
            return Some(format!(
                "cache_breakpoints = \"auto\" would do nothing on provider {:?}: it caches prompt \
                 prefixes by itself, without cache_control markers; remove the key",
                row.name
            ));
        }
    }
    if let (Some(d), Some(list)) = (pinned, &r.stabilize) {
        if !list.is_empty() {
            return Some(format!(
                "stabilize applies to Anthropic Messages bodies only; this route is pinned to {}",
                d.as_str()
            ));
        }
    }
    None
}

/// Error of [`Config::from_toml`].
#[derive(Debug, thiserror::Error)]
pub enum FromTomlError {
    #[error("{0}")]
    Parse(String),
    #[error("{0}")]
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::settings::EMBED_TARGET_MIN;

    const MINIMAL: &str = r#"
[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "https://api.anthropic.com"
"#;

    #[test]
    fn defaults_are_the_documented_values() {
        let (c, w) = Config::from_toml(MINIMAL).unwrap();
        assert!(w.is_empty());
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8787");
        assert_eq!(c.server.max_rewrite_bytes, 67_108_864);
        assert_eq!(c.server.idle_timeout_ms, 300_000);
        assert_eq!(c.server.body_idle_timeout_ms, 60_000);
        assert_eq!(c.server.max_buffered_bytes, 1_073_741_824);
        assert_eq!(c.server.buffer_wait_ms, 30_000);
        assert_eq!(c.images.max_blocks, 20);
        assert_eq!(c.images.max_blocks_small, 100);
        assert_eq!(c.images.max_bytes, 24_000_000);
        assert_eq!(c.images.evict_batch, 8);
        assert_eq!(c.images.evict_floor, 3);
        assert_eq!(c.images.embed_target_bytes, 262_144);
        assert_eq!(c.routes.len(), 1);
    }

    #[test]
    fn routes_that_lend_credentials_refuse_an_open_listener() {
        let cfg = |extra: &str| {
            let toml = format!(
                "[[routes]]\nname = \"b\"\nprefix = \"/b\"\nupstream = \"http://127.0.0.1:9\"\n\
                 provider = \"bedrock\"\n[routes.aws]\nregion = \"us-east-1\"\n{extra}"
            );
            Config::from_toml(&toml).unwrap().0
        };
        let open: std::net::SocketAddr = "0.0.0.0:8787".parse().unwrap();
        let local: std::net::SocketAddr = "127.0.0.1:8787".parse().unwrap();
        let lending = cfg("sign_all = true\n");
        let msg = lending.lending_refusal(open).unwrap();
        assert!(msg.contains("b ([routes.aws] sign_all)"), "{msg}");
        assert!(msg.contains("client_token") && !msg.contains("  "), "{msg}");
        assert_eq!(lending.lending_refusal(local), None);
        assert_eq!(
            cfg("").lending_refusal(open),
            None,
            "re-signing only the proxy's own key lends nothing"
        );
        let mut with_token = lending.clone();
        with_token.server.client_token = Some("s3cret-token-value".into());
        assert_eq!(with_token.lending_refusal(open), None);
    }

    /// `[routes.aws]`: read as written, absent by default; an unknown key, an empty profile,
    /// a region that is no region code, or the section on a route whose provider does not
    /// sign with SigV4 is refused naming the route.
    #[test]
    fn route_aws_section_is_read_and_validated() {
        const BEDROCK: &str = "[[routes]]\nname = \"bedrock\"\nprefix = \"/bedrock\"\n\
                               upstream = \"https://bedrock-runtime.us-east-1.amazonaws.com\"\n";
        let (c, _) = Config::from_toml(BEDROCK).unwrap();
        assert_eq!(c.routes[0].aws, None);
        let with = |body: &str| format!("{BEDROCK}[routes.aws]\n{body}");
        let (c, w) = Config::from_toml(&with(
            "profile = \"bedrock\"\nregion = \"us-west-2\"\nsign_all = true\n",
        ))
        .unwrap();
        assert!(w.is_empty());
        assert_eq!(
            c.routes[0].aws,
            Some(AwsConfig {
                profile: Some("bedrock".into()),
                region: Some("us-west-2".into()),
                sign_all: true,
            })
        );
        let (c, _) = Config::from_toml(&with("")).unwrap();
        assert_eq!(c.routes[0].aws, Some(AwsConfig::default()));
        let err = |toml: &str| match Config::from_toml(toml) {
            Err(FromTomlError::Parse(m) | FromTomlError::Invalid(m)) => m,
            Ok(_) => panic!("accepted: {toml}"),
        };
        assert!(
            err(&with("secret_access_key = \"x\"\n")).contains("unknown field `secret_access_key`")
        );
        assert!(err(&with("profile = \" \"\n")).contains("aws.profile is empty"));
        let bad = err(&with("region = \"US East\"\n"));
        assert!(
            bad.contains("routes[0]") && bad.contains("\"US East\""),
            "{bad}"
        );
        let anthropic = err(&format!("{MINIMAL}[routes.aws]\n"));
        assert!(
            anthropic.contains("routes[0]") && anthropic.contains("provider is \"anthropic\""),
            "{anthropic}"
        );
        // A mock upstream on loopback is a Bedrock route by its `provider` key.
        let mock = "[[routes]]\nname = \"b\"\nprefix = \"/b\"\nupstream = \"http://127.0.0.1:9\"\n\
                    provider = \"bedrock\"\n[routes.aws]\nregion = \"us-east-1\"\n";
        assert!(Config::from_toml(mock).is_ok());
        // sign_all signs unsigned requests: a region must come from the route or the host.
        let unscoped = err(&mock.replace("region = \"us-east-1\"", "sign_all = true"));
        assert!(
            unscoped.contains("routes[0] (name = \"b\")")
                && unscoped.contains("set [routes.aws] region")
                && !unscoped.contains("  "),
            "{unscoped}"
        );
        assert!(
            Config::from_toml(&with("sign_all = true\n")).is_ok(),
            "the host names us-east-1"
        );
    }

    /// `[routes.google]`: only on a Vertex AI route; its key file is read when the file loads
    /// (relative to its folder) and must be a service-account key.
    #[test]
    fn route_google_section_is_checked() {
        const VERTEX: &str = "[[routes]]\nname = \"v\"\nprefix = \"/v\"\n\
                              upstream = \"https://us-east5-aiplatform.googleapis.com\"\n\
                              [routes.google]\nservice_account = \"sa.json\"\n";
        let (c, _) = Config::from_toml(VERTEX).unwrap();
        assert_eq!(
            c.routes[0].google,
            Some(GoogleConfig {
                service_account: PathBuf::from("sa.json")
            })
        );
        let refused = |toml: &str| match Config::from_toml(toml) {
            Err(FromTomlError::Parse(m) | FromTomlError::Invalid(m)) => m,
            Ok(_) => panic!("accepted: {toml}"),
        };
        let on_anthropic = refused(&format!(
            "{MINIMAL}[routes.google]\nservice_account = \"sa.json\"\n"
        ));
        assert!(
            on_anthropic.contains("applies to Vertex AI routes"),
            "{on_anthropic}"
        );
        assert!(refused(&VERTEX.replace("service_account", "key_file")).contains("unknown field"));

        let dir = tempfile::tempdir().unwrap();
        let load = |key: Option<&str>| {
            let path = dir.path().join("proxy.toml");
            std::fs::write(&path, VERTEX).unwrap();
            let sa = dir.path().join("sa.json");
            match key {
                Some(k) => std::fs::write(&sa, k).unwrap(),
                None => drop(std::fs::remove_file(&sa)),
            }
            Config::load(&path).map(|_| ()).map_err(|e| e.to_string())
        };
        let good = r#"{"type":"service_account","client_email":"a@b.iam.gserviceaccount.com","private_key":"-----BEGIN PRIVATE KEY-----\nMIIEvAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj9AQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVpbXF1eXw==\n-----END PRIVATE KEY-----\n","token_uri":"https://oauth2.googleapis.com/token"}"#;
        assert_eq!(load(Some(good)), Ok(()));
        let missing = load(None).unwrap_err();
        assert!(
            missing.contains("routes[0] (name = \"v\"): google.service_account"),
            "{missing}"
        );
        let user = load(Some(r#"{"type":"authorized_user","refresh_token":"x"}"#)).unwrap_err();
        assert!(user.contains("not a service-account key"), "{user}");
        let no_key = load(Some(&good.replace("private_key", "private_key_id"))).unwrap_err();
        assert!(
            no_key.contains("the key has no private_key") && !no_key.contains("BEGIN"),
            "{no_key}"
        );
        assert!(load(Some("{")).unwrap_err().contains("not JSON"));
        // A PEM block whose body is no key (the failing input of a fresh-user pass: `check`
        // said OK, and every request then got 503 no_token).
        let placeholder = good.replace("MIIEvAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj9AQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVpbXF1eXw==", "AAAA");
        let bad = load(Some(&placeholder)).unwrap_err();
        assert!(
            bad.contains("is not a PEM private key") && !bad.contains("AAAA"),
            "{bad}"
        );
        let no_block = good.replace("BEGIN PRIVATE KEY", "BEGIN CERTIFICATE");
        assert!(load(Some(&no_block))
            .unwrap_err()
            .contains("is not a PEM private key"));
    }

    #[test]
    fn pricing_entries_are_read_and_validated() {
        let entry =
            "[[pricing]]\nmodel = \"claude-*\"\ninput_per_mtok = 3.0\noutput_per_mtok = 15\n\
                     cache_read_per_mtok = 0.3\ncache_write_5m_per_mtok = 3.75\n";
        let (c, _) = Config::from_toml(&format!("{MINIMAL}{entry}")).unwrap();
        assert_eq!(c.pricing.len(), 1);
        assert_eq!(c.pricing[0].currency, "USD");
        assert_eq!(c.pricing[0].cache_write_1h_per_mtok, None);
        let bad = entry.replace("claude-*", "claude-[");
        let err = Config::from_toml(&format!("{MINIMAL}{bad}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pricing[0]") && err.contains("not a glob"),
            "{err}"
        );
        let typo = format!("{MINIMAL}{entry}cache_write_1hr_per_mtok = 6\n");
        let err = Config::from_toml(&typo).unwrap_err().to_string();
        assert!(err.contains("cache_write_1hr_per_mtok"), "{err}");
        let missing = entry.replace("output_per_mtok = 15\n", "");
        let err = Config::from_toml(&format!("{MINIMAL}{missing}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("output_per_mtok"), "{err}");
        let neg = entry.replace("= 0.3", "= -0.3");
        let err = Config::from_toml(&format!("{MINIMAL}{neg}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cache_read_per_mtok"), "{err}");
    }

    #[test]
    fn max_buffered_bytes_below_max_rewrite_bytes_is_rejected_saying_why() {
        let text =
            format!("{MINIMAL}\n[server]\nmax_rewrite_bytes = 1000\nmax_buffered_bytes = 999\n");
        let err = Config::from_toml(&text).unwrap_err().to_string();
        assert!(
            err.contains("max_buffered_bytes = 999 is below max_rewrite_bytes = 1000"),
            "{err}"
        );
        let text = format!(
            "{MINIMAL}\n[server]\nmax_rewrite_bytes = 1000\nmax_buffered_bytes = 1000\nbuffer_wait_ms = 5\nbody_idle_timeout_ms = 7\n"
        );
        let (c, _) = Config::from_toml(&text).unwrap();
        assert_eq!(c.server.max_buffered_bytes, 1000);
        assert_eq!(c.server.buffer_wait_ms, 5);
        assert_eq!(c.server.body_idle_timeout_ms, 7);
        // The default budget is below a max_rewrite_bytes raised past 1 GiB.
        let text = format!("{MINIMAL}\n[server]\nmax_rewrite_bytes = 2147483648\n");
        assert!(Config::from_toml(&text).is_err());
    }

    #[test]
    fn unknown_key_is_an_error_naming_key_and_line() {
        let text = format!("{MINIMAL}\n[images]\nmax_blokcs = 3\n");
        let err = Config::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("max_blokcs"), "{err}");
        assert!(err.contains("line 8"), "{err}");
    }

    /// A route's `models` table: names mapped to models; an empty side is refused, naming it.
    #[test]
    fn route_models_map_names_and_refuse_empty_sides() {
        let route = "[[routes]]\nname = \"az\"\nprefix = \"/az\"\nupstream = \"https://r.openai.azure.com\"\n";
        let (c, _) =
            Config::from_toml(&format!("{route}models = {{ \"prod-4o\" = \"gpt-4o\" }}\n"))
                .unwrap();
        assert_eq!(c.routes[0].models["prod-4o"], "gpt-4o");
        for bad in ["{ \"\" = \"gpt-4o\" }", "{ \"prod\" = \" \" }"] {
            let err = Config::from_toml(&format!("{route}models = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("routes[0] (name = \"az\"): models:"), "{err}");
        }
    }

    #[test]
    fn wrong_type_is_an_error_naming_key() {
        let text = format!("{MINIMAL}\n[server]\nidle_timeout_ms = \"soon\"\n");
        let err = Config::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("idle_timeout_ms"), "{err}");
    }

    #[test]
    fn out_of_range_budget_is_clamped_with_a_warning() {
        let text = format!("{MINIMAL}\n[images]\nembed_target_bytes = 10\n");
        let (c, w) = Config::from_toml(&text).unwrap();
        assert_eq!(c.images.embed_target_bytes, EMBED_TARGET_MIN);
        assert_eq!(w.len(), 1, "{w:?}");
    }

    #[test]
    fn evict_low_water_defaults_to_unset_and_is_held_below_the_ceiling() {
        let (c, w) = Config::from_toml(MINIMAL).unwrap();
        assert_eq!((c.images.evict_low_water, w.len()), (None, 0));
        let (c, w) =
            Config::from_toml(&format!("{MINIMAL}[images]\nevict_low_water = 15\n")).unwrap();
        assert_eq!((c.images.evict_low_water, w.len()), (Some(15), 0));
        // Not below max_blocks (20): allowed (it serves max_blocks_small); requests held to
        // max_blocks use 19 (`Limits::low_water_blocks`).
        let (c, w) =
            Config::from_toml(&format!("{MINIMAL}[images]\nevict_low_water = 60\n")).unwrap();
        assert_eq!((c.images.evict_low_water, w.len()), (Some(60), 0));
        // Not below max_blocks_small (100): held at 99.
        let (c, w) =
            Config::from_toml(&format!("{MINIMAL}[images]\nevict_low_water = 100\n")).unwrap();
        assert_eq!(c.images.evict_low_water, Some(99));
        assert!(w.len() == 1 && w[0].contains("using 99"), "{w:?}");
        // Per route, and the route's value wins.
        let (c, w) = Config::from_toml(&format!(
            "{MINIMAL}[routes.images]\nevict_low_water = 5\n[images]\nevict_low_water = 8\n"
        ))
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.route_images(&c.routes[0]).evict_low_water, Some(5));
    }

    #[test]
    fn per_model_ceilings_yield_to_the_route_and_win_over_the_global_value() {
        let anthropic = crate::provider::by_name("anthropic").unwrap();
        let opus = anthropic.image_ceiling("claude-opus-4-6");
        let (c, _) =
            Config::from_toml(&format!("{MINIMAL}[images]\nmax_blocks_small = 50\n")).unwrap();
        let eff = c.route_images(&c.routes[0]);
        // The row's 600 wins over the global [images] value.
        let per = eff.for_model(opus).unwrap();
        assert_eq!((per.max_blocks, per.max_blocks_small), (20, 600));
        // Other models: unchanged.
        assert_eq!(
            eff.for_model(anthropic.image_ceiling("claude-haiku-4-5")),
            None
        );
        // The route's key wins over the row's.
        let (c, _) = Config::from_toml(&format!(
            "{MINIMAL}[routes.images]\nmax_blocks_small = 80\n"
        ))
        .unwrap();
        let eff = c.route_images(&c.routes[0]);
        assert!(eff.route_set.max_blocks_small && !eff.route_set.max_blocks);
        assert_eq!(eff.for_model(opus), None);
        // A row that lowers both: both follow, unless the route set one.
        let groq = crate::provider::by_name("groq").unwrap();
        let one = groq.image_ceiling("llama-3.2-11b-vision-preview");
        let per = ImagesConfig::default().for_model(one).unwrap();
        assert_eq!((per.max_blocks, per.max_blocks_small), (1, 1));
        let per = eff.for_model(one).unwrap();
        assert_eq!((per.max_blocks, per.max_blocks_small), (1, 80));
    }

    #[test]
    fn route_overrides_apply() {
        let text = format!("{MINIMAL}[routes.images]\nmax_blocks = 5\n");
        let (c, _) = Config::from_toml(&text).unwrap();
        let eff = c.route_images(&c.routes[0]);
        assert_eq!(eff.max_blocks, 5);
        assert_eq!(eff.max_bytes, 24_000_000);
    }

    #[test]
    fn bad_routes_are_rejected() {
        for bad in [
            "[[routes]]\nname='a'\nprefix='x'\nupstream='https://a.com'\n",
            "[[routes]]\nname='a'\nprefix='/x'\nupstream='ftp://a.com'\n",
            "[[routes]]\nname='a'\nprefix='/x'\nupstream='https://a.com'\nprovider='nope'\n",
            "[[routes]]\nname='a'\nprefix='/x'\nupstream='https://a.com'\n[[routes]]\nname='b'\nprefix='/x/'\nupstream='https://b.com'\n",
            "[[routes]]\nname='a'\nprefix='/x'\n",
            "[[routes]]\nname='a'\nprefix='/x'\nupstream='http://user:pw@a.com'\n",
            "[[routes]]\nname='a'\nprefix='/a/../b'\nupstream='https://a.com'\n",
            "[[routes]]\nname=''\nprefix='/x'\nupstream='https://a.com'\n",
            "[[routes]]\nname='a'\nprefix='/x'\nupstream='https://a.com'\n[[routes]]\nname='a'\nprefix='/y'\nupstream='https://b.com'\n",
            "[[routes]]\nname='a'\nprefix='/x'\nupstream='https://a.com'\ncarriers=['reasoning_contnet']\n",
            "[server]\nlisten='127.0.0.1:1'\n",
        ] {
            assert!(Config::from_toml(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_that_cannot_work_are_rejected_saying_why() {
        for (extra, key, says) in [
            (
                "usage_in_streams = true\ndialect = \"anthropic\"\n",
                "usage_in_streams",
                "OpenAI Chat streams only",
            ),
            (
                "[routes.images]\ntranscode_cache_bytes = 1024\n",
                "transcode_cache_bytes",
                "shared by every route",
            ),
        ] {
            let err = Config::from_toml(&format!("{MINIMAL}{extra}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(says), "{extra}: {err}");
            assert!(err.contains("name = \"anthropic\""), "{err}");
        }
        // usage_in_streams is built: accepted where the route may carry OpenAI Chat.
        for ok in [
            "usage_in_streams = true\n",
            "usage_in_streams = true\ndialect = \"openai\"\n",
        ] {
            let (c, _) = Config::from_toml(&format!("{MINIMAL}{ok}")).unwrap();
            assert!(c.routes[0].usage_in_streams);
        }
        // The global key works and sizes the one cache.
        let (c, _) = Config::from_toml(&format!(
            "{MINIMAL}[images]\ntranscode_cache_bytes = 1024\n"
        ))
        .unwrap();
        assert_eq!(c.images.transcode_cache_bytes, 1024);
        assert_eq!(c.route_images(&c.routes[0]).transcode_cache_bytes, 1024);
    }

    fn route(upstream: &str, extra: &str) -> String {
        format!("[[routes]]\nname = \"r\"\nprefix = \"/r\"\nupstream = \"{upstream}\"\n{extra}")
    }

    #[test]
    fn cache_keys_parse() {
        use crate::caching::{Breakpoints, CacheTtl, Stabiliser};
        let (c, _) = Config::from_toml(MINIMAL).unwrap();
        let r = &c.routes[0];
        assert_eq!(
            (r.cache_breakpoints, r.cache_ttl, r.stabilize.clone()),
            (None, None, None)
        );
        for (extra, bp, ttl, stab) in [
            (
                "cache_breakpoints = \"off\"\n",
                Some(Breakpoints::Off),
                None,
                None,
            ),
            (
                "cache_breakpoints = \"auto\"\ncache_ttl = \"1h\"\n",
                Some(Breakpoints::Auto),
                Some(CacheTtl::OneHour),
                None,
            ),
            (
                "cache_ttl = \"5m\"\n",
                None,
                Some(CacheTtl::FiveMinutes),
                None,
            ),
            ("stabilize = []\n", None, None, Some(vec![])),
            (
                "stabilize = [\"claude_code_billing_line\"]\n",
                None,
                None,
                Some(vec![Stabiliser::ClaudeCodeBillingLine]),
            ),
        ] {
            let (c, _) = Config::from_toml(&format!("{MINIMAL}{extra}")).unwrap();
            let r = &c.routes[0];
            assert_eq!(r.cache_breakpoints, bp, "{extra}");
            assert_eq!(r.cache_ttl, ttl, "{extra}");
            assert_eq!(r.stabilize, stab, "{extra}");
        }
        // auto is accepted where markers work: Anthropic, gateways, third-party Anthropic
        // wires without automatic caching, unknown and local hosts.
        for upstream in [
            "https://api.anthropic.com",
            "https://openrouter.ai/api",
            "https://api.moonshot.ai/anthropic",
            "https://api.z.ai/api/anthropic",
            "https://llm.example.com",
            "http://127.0.0.1:8080",
        ] {
            let text = route(upstream, "cache_breakpoints = \"auto\"\n");
            assert!(Config::from_toml(&text).is_ok(), "{upstream}");
        }
    }

    #[test]
    fn cache_key_typos_name_the_key_and_the_values() {
        for (extra, key, values) in [
            (
                "cache_breakpoints = \"automatic\"\n",
                "cache_breakpoints",
                "`off` or `auto`",
            ),
            ("cache_breakpoints = true\n", "cache_breakpoints", "string"),
            ("cache_ttl = \"60m\"\n", "cache_ttl", "`5m` or `1h`"),
            ("cache_ttl = 300\n", "cache_ttl", "string"),
            (
                "stabilize = [\"claude_code_billing\"]\n",
                "stabilize",
                "`claude_code_billing_line`",
            ),
            (
                "stabilize = \"claude_code_billing_line\"\n",
                "stabilize",
                "sequence",
            ),
        ] {
            let err = Config::from_toml(&format!("{MINIMAL}{extra}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(values), "{extra}: {err}");
        }
    }

    #[test]
    fn auto_breakpoints_are_rejected_where_they_would_do_nothing() {
        for (upstream, extra, says) in [
            (
                "https://api.openai.com",
                "",
                "provider \"openai\": it caches prompt prefixes by itself",
            ),
            (
                "https://api.deepseek.com/anthropic",
                "",
                "provider \"deepseek\"",
            ),
            (
                "https://generativelanguage.googleapis.com",
                "",
                "provider \"gemini\"",
            ),
            (
                "https://llm.example.com",
                "provider = \"deepseek\"\n",
                "provider \"deepseek\"",
            ),
            (
                "https://api.anthropic.com",
                "dialect = \"openai\"\n",
                "pinned to openai",
            ),
        ] {
            let text = route(upstream, &format!("{extra}cache_breakpoints = \"auto\"\n"));
            let err = Config::from_toml(&text).unwrap_err().to_string();
            assert!(
                err.contains("cache_breakpoints")
                    && err.contains(says)
                    && err.contains("name = \"r\""),
                "{upstream}: {err}"
            );
        }
        // "off" is fine everywhere.
        let text = route("https://api.openai.com", "cache_breakpoints = \"off\"\n");
        assert!(Config::from_toml(&text).is_ok());
        // A stabiliser on a route pinned to another dialect would do nothing; `[]` is fine.
        let text = route(
            "https://api.deepseek.com",
            "dialect = \"openai\"\nstabilize = [\"claude_code_billing_line\"]\n",
        );
        let err = Config::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains("stabilize applies to Anthropic"), "{err}");
        let text = route(
            "https://api.deepseek.com",
            "dialect = \"openai\"\nstabilize = []\n",
        );
        assert!(Config::from_toml(&text).is_ok());
    }

    #[test]
    fn shipped_proxy_toml_is_valid() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("proxy.toml");
        let loaded = Config::load(&path).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert!(loaded.config.routes.len() >= 8);
    }

    fn state_section(body: &str) -> Result<Config, String> {
        Config::from_toml(&format!("{MINIMAL}[state]\n{body}\n"))
            .map(|(c, _)| c)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn state_backend_defaults_to_sqlite_and_redis_takes_a_url() {
        let (c, _) = Config::from_toml(MINIMAL).unwrap();
        assert_eq!(c.state.backend, StateBackend::Sqlite);
        assert!(c.state.redis_url().is_none());
        assert_eq!(c.state.read_timeout_ms(), 20);
        assert_eq!(c.state.write_wait_ms(), 0);
        assert_eq!(
            c.state.describe(Path::new("/etc/ck")),
            "sqlite /etc/ck/cachekeeper.db"
        );
        let c = state_section(
            "backend = \"redis\"\nurl = \"redis://app:s3cret@10.1.2.3:6380/4\"\nread_timeout_ms = 35",
        )
        .unwrap();
        assert_eq!(c.state.backend, StateBackend::Redis);
        assert_eq!(
            c.state.redis_url().map(|u| u.expose()),
            Some("redis://app:s3cret@10.1.2.3:6380/4")
        );
        assert_eq!(c.state.read_timeout_ms(), 35);
        assert_eq!(c.state.write_wait_ms(), 50);
        let waits = |v: &str| {
            state_section(&format!(
                "backend = \"redis\"\nurl = \"redis://h:1/0\"\nwrite_wait_ms = {v}"
            ))
            .unwrap()
            .state
            .write_wait_ms()
        };
        assert_eq!(waits("0"), 0);
        assert_eq!(waits("5000"), 5000);
        // Printed anywhere, the password is not there.
        let shown = c.state.describe(Path::new("."));
        assert_eq!(shown, "redis redis://app:***@10.1.2.3:6380/4");
        let debug = format!("{c:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
    }

    #[test]
    fn state_url_env_is_read_at_load_and_never_quoted() {
        let name = "CACHEKEEPER_TEST_STATE_URL_ENV_OK";
        std::env::set_var(name, "rediss://:pw-from-env@cache.internal:6390/1");
        let c = state_section(&format!("backend = \"redis\"\nurl_env = \"{name}\"")).unwrap();
        let url = c.state.redis_url().unwrap();
        assert!(url.is_tls());
        assert_eq!(url.redacted(), "rediss://:***@cache.internal:6390/1");
        assert!(!format!("{c:?}").contains("pw-from-env"));
        let err = state_section("backend = \"redis\"\nurl_env = \"CACHEKEEPER_TEST_UNSET_VAR\"")
            .unwrap_err();
        assert!(
            err.contains("CACHEKEEPER_TEST_UNSET_VAR") && err.contains("not set"),
            "{err}"
        );
        let bad = "CACHEKEEPER_TEST_STATE_URL_ENV_BAD";
        std::env::set_var(bad, "http://:pw-from-env@h:1/0");
        let err = state_section(&format!("backend = \"redis\"\nurl_env = \"{bad}\"")).unwrap_err();
        assert!(err.contains("redis:// or rediss://"), "{err}");
        assert!(!err.contains("pw-from-env"), "{err}");
    }

    /// `[state] ca_file` is read when the file loads, relative to its folder: a missing or
    /// unusable bundle is an error naming it; a CA certificate loads.
    #[test]
    fn state_ca_file_must_be_a_readable_pem_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("proxy.toml");
        let write = |ca: &str| {
            std::fs::write(
                &cfg,
                format!(
                    "{MINIMAL}[state]\nbackend = \"redis\"\nurl = \"rediss://:pw@127.0.0.1:1/0\"\nca_file = \"{ca}\"\n"
                ),
            )
            .unwrap();
        };
        write("missing.pem");
        let err = Config::load(&cfg).unwrap_err().to_string();
        assert!(
            err.contains("[state] ca_file")
                && err.contains("missing.pem")
                && err.contains("cannot read"),
            "{err}"
        );
        assert!(!err.contains(":pw@"), "{err}");
        std::fs::write(dir.path().join("notes.pem"), "hello\n").unwrap();
        write("notes.pem");
        let err = Config::load(&cfg).unwrap_err().to_string();
        assert!(err.contains("no PEM certificate"), "{err}");
        let ca = crate::state::redis::test_server::TestCa::generate();
        std::fs::copy(ca.ca(), dir.path().join("redis-ca.pem")).unwrap();
        write("redis-ca.pem");
        let loaded = Config::load(&cfg).unwrap();
        assert_eq!(
            loaded.config.state.ca_path(&loaded.base_dir),
            Some(dir.path().join("redis-ca.pem"))
        );
        let opts = crate::state::StoreOptions::from_config(&loaded.config.state, &loaded.base_dir);
        assert_eq!(
            opts.redis.and_then(|r| r.ca_file),
            Some(dir.path().join("redis-ca.pem"))
        );
    }

    #[test]
    fn state_keys_that_do_nothing_are_rejected() {
        for (body, want) in [
            (
                "write_wait_ms = 50",
                "write_wait_ms applies to backend = \"redis\" only",
            ),
            (
                "backend = \"redis\"\nurl = \"redis://h:1/0\"\nwrite_wait_ms = 50000",
                "write_wait_ms must be at most 5000",
            ),
            (
                "share_transcodes = true",
                "share_transcodes applies to backend = \"redis\" only",
            ),
            (
                "ca_file = \"ca.pem\"",
                "ca_file applies to backend = \"redis\" only",
            ),
            (
                "backend = \"redis\"\nurl = \"redis://:pw@h:1/0\"\nca_file = \"ca.pem\"",
                "ca_file applies to a rediss:// (TLS) URL only",
            ),
            (
                "url = \"redis://h:1/0\"",
                "url applies to backend = \"redis\" only",
            ),
            (
                "url_env = \"X\"",
                "url_env applies to backend = \"redis\" only",
            ),
            (
                "read_timeout_ms = 5",
                "read_timeout_ms applies to backend = \"redis\" only",
            ),
            ("backend = \"redis\"", "needs url"),
            (
                "backend = \"redis\"\nurl = \"redis://h:1/0\"\nurl_env = \"X\"",
                "both set",
            ),
            (
                "backend = \"redis\"\nurl = \"redis://h:1/0\"\nread_timeout_ms = 0",
                "at least 1",
            ),
            ("backend = \"valkey\"", "unknown variant"),
        ] {
            let err = state_section(body).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
        // A bad URL in the file: the message names the problem, not the password.
        let err =
            state_section("backend = \"redis\"\nurl = \"redis://:hunter2@h:1/cache\"").unwrap_err();
        assert!(err.contains("database number"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
