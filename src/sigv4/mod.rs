//! SigV4 re-signing for Amazon Bedrock: a request the agent signed for the proxy's host is
//! signed again, with the proxy's own AWS credentials, for the upstream's host and the body
//! that is actually sent.
//!
//! Bedrock checks a SigV4 signature over the method, path, query, the signed headers (always
//! `host`) and the SHA-256 of the body
//! (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html). The agent's
//! endpoint URL is the proxy, so its signature names the proxy's host, and a body rewrite
//! changes the hash: the proxy must sign again, after the rewrite and again before the one
//! retry. The proxy cannot sign with the agent's key (it never has the secret), so it signs
//! with credentials of its own: [`credentials`] (the standard chain, `[routes.aws]`).
//!
//! - [`parse_authorization`]: the client's `Authorization` header read ([`SigV4Header`]), or
//!   `None` (a Bedrock API key, `Bearer …`, is not SigV4 and is left alone);
//! - [`AwsSigner::from_route`]: a route's credentials, loaded once (startup);
//! - [`AwsSigner::resign`]: the outgoing request's headers re-signed in place.
//!
//! What is signed ([`AwsSigner::resign`]): `host` (the upstream's, from the URI, as the HTTP
//! client sends it: default port left out), `content-type`, the `x-amz-*` headers the client
//! signed, `x-amz-date`, `x-amz-security-token` when the proxy's credentials have one, and
//! `x-amz-content-sha256` only if the client sent it. Nothing else: every other header may be
//! changed on the way (`content-length` is recomputed, `user-agent` belongs to the client) and
//! hop-by-hop headers never reach the upstream as sent.

pub mod credentials;
mod header;

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningError, SigningSettings,
};
use aws_sigv4::sign::v4;
use http::header::{HeaderName, HeaderValue, InvalidHeaderName, InvalidHeaderValue};
use http::request::Parts;

use crate::config::{AwsConfig, RouteConfig};
pub use credentials::RouteCredentials;
pub use header::{parse_authorization, SigV4Header, ALGORITHM};

/// The headers the signer writes itself; the client's values are stale once the proxy signs.
const SIGNER_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// Hop-by-hop headers (RFC 9110 §7.6.1, as `crates/wire/src/upstream.rs` drops them): never
/// signed, even when a client signed one.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Why a request could not be re-signed. No variant carries a key, a token or a signature.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The request's `authorization` is absent or not `AWS4-HMAC-SHA256`
    /// ([`parse_authorization`]): nothing to re-sign.
    #[error("the request carries no AWS4-HMAC-SHA256 authorization to re-sign")]
    NotSigV4,
    /// The outgoing URI is not absolute (`https://host/...`): there is no host to sign for.
    #[error("the upstream URI {0:?} has no host to sign for")]
    NoUpstreamHost(String),
    /// The signing parameters were refused (`aws-sigv4`'s builder).
    #[error("SigV4 signing parameters: {0}")]
    Params(#[from] v4::signing_params::BuildError),
    /// `aws-sigv4` refused the request (a URI or header it cannot canonicalise).
    #[error("SigV4 signing: {0}")]
    Signing(#[from] SigningError),
    /// A header the signer produced is not a valid header (cannot happen with `aws-sigv4`'s
    /// output; kept typed rather than unwrapped).
    #[error("a SigV4 header is not a valid header: {0}")]
    HeaderName(#[from] InvalidHeaderName),
    /// As [`SignError::HeaderName`], for a value.
    #[error("a SigV4 header value is not a valid header value: {0}")]
    HeaderValue(#[from] InvalidHeaderValue),
}

/// One route's signer: the proxy's credentials for it and the region it signs for.
pub struct AwsSigner {
    /// `[routes.aws] region`; `None`: the client's own scope's region.
    region: Option<String>,
    credentials: RouteCredentials,
}

impl std::fmt::Debug for AwsSigner {
    /// The region and the credentials' key id; never the secret, the token or a signature.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSigner")
            .field("region", &self.region)
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl AwsSigner {
    /// The signer of `route`: its credentials from the chain its `[routes.aws]` names
    /// ([`credentials::provider_for`]), asked once, now (call at startup: a shared file may be
    /// read with blocking I/O). `None` when no source has credentials: a warning names the
    /// route, the reason and what to configure, and the route's signed requests are to go
    /// upstream unchanged.
    pub async fn from_route(route: &RouteConfig) -> Option<Self> {
        let provider = credentials::provider_for(route.aws.as_ref());
        match Self::with_provider(route.aws.as_ref(), provider).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(
                    target: "cachekeeper::sigv4",
                    route = %route.name,
                    error = %e,
                    "no AWS credentials on the proxy's side: this route's SigV4-signed requests \
                     go upstream unchanged, signed for the proxy's host, and Bedrock refuses \
                     them; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                     AWS_SESSION_TOKEN), or a profile in ~/.aws/credentials (AWS_PROFILE, or \
                     [routes.aws] profile), for the proxy's process"
                );
                None
            }
        }
    }

    /// A signer over any credentials provider (tests, or a provider the caller built), with
    /// `aws`'s region. Errors: the provider's first answer.
    pub async fn with_provider(
        aws: Option<&AwsConfig>,
        provider: aws_credential_types::provider::SharedCredentialsProvider,
    ) -> Result<Self, aws_credential_types::provider::error::CredentialsError> {
        Ok(Self {
            region: aws.and_then(|a| a.region.clone()),
            credentials: RouteCredentials::load(provider).await?,
        })
    }

    /// Re-sign the outgoing request in place, for its URI's host and `body` (the bytes that
    /// will be sent, after any rewrite), at the current time. Sets `authorization`,
    /// `x-amz-date`, `x-amz-security-token` (when the proxy's credentials have one) and
    /// `x-amz-content-sha256` (only if the client sent it); removes the client's values of
    /// those and any `host` header (the HTTP client writes the upstream's). The region is the
    /// route's, else the client's scope's; the service is the client's scope's.
    ///
    /// Errors: [`SignError`]; `parts` is then unchanged (the signature is computed before any
    /// header is touched), so the request goes as the client signed it.
    pub async fn resign(&self, parts: &mut Parts, body: &[u8]) -> Result<(), SignError> {
        let now = SystemTime::now();
        let creds = self.credentials.current(now).await;
        resign_at(&creds, self.region.as_deref(), parts, body, now)
    }
}

/// [`AwsSigner::resign`] with given credentials and time.
fn resign_at(
    creds: &Credentials,
    region: Option<&str>,
    parts: &mut Parts,
    body: &[u8],
    time: SystemTime,
) -> Result<(), SignError> {
    let client = parts
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(parse_authorization)
        .ok_or(SignError::NotSigV4)?;
    if parts.uri.host().is_none() || parts.uri.scheme().is_none() {
        return Err(SignError::NoUpstreamHost(parts.uri.to_string()));
    }
    let region = region.unwrap_or(&client.region);
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = if parts.headers.contains_key("x-amz-content-sha256") {
        PayloadChecksumKind::XAmzSha256
    } else {
        PayloadChecksumKind::NoHeader
    };
    let to_sign = headers_to_sign(parts, &client);
    let identity = creds.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(&client.service)
        .time(time)
        .settings(settings)
        .build()?
        .into();
    let uri = parts.uri.to_string();
    let signable = SignableRequest::new(
        parts.method.as_str(),
        uri.as_str(),
        to_sign.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        SignableBody::Bytes(body),
    )?;
    let (instructions, _signature) = sign(signable, &params)?.into_parts();
    let mut signed = Vec::with_capacity(4);
    for (name, value) in instructions.headers() {
        let mut value = HeaderValue::from_str(value)?;
        value.set_sensitive(true);
        signed.push((HeaderName::from_bytes(name.as_bytes())?, value));
    }
    for stale in SIGNER_HEADERS.iter().chain(&["host"]) {
        parts.headers.remove(*stale);
    }
    for (name, value) in signed {
        parts.headers.insert(name, value);
    }
    Ok(())
}

/// The headers of `parts` to sign besides those the signer adds: `content-type` and the
/// `x-amz-*` headers `client` signed, as text (a value that is not text is sent unsigned),
/// never a hop-by-hop header nor one `connection` names.
fn headers_to_sign(parts: &Parts, client: &SigV4Header) -> Vec<(String, String)> {
    let named_by_connection: Vec<String> = parts
        .headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    parts
        .headers
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            let wanted = n == "content-type"
                || (n.starts_with("x-amz-") && client.signs(n) && !SIGNER_HEADERS.contains(&n));
            wanted && !HOP_BY_HOP.contains(&n) && !named_by_connection.iter().any(|c| c == n)
        })
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
