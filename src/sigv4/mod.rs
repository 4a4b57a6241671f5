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
//! - [`AwsSigner::verify`]: whether the client signed with those same credentials (the
//!   proxy lends its key to no one else, [`verify`]);
//! - [`AwsSigner::resign`]: the outgoing request's headers re-signed in place.
//!
//! When each is called in a request's life: `crate::proxy::aws`.
//!
//! What is signed ([`AwsSigner::resign`]): `host` (the upstream's, from the URI, as the HTTP
//! client sends it: default port left out), `content-type`, the `x-amz-*` headers the client
//! signed, `x-amz-date`, `x-amz-security-token` when the proxy's credentials have one, and
//! `x-amz-content-sha256` only if the client sent it. Nothing else: every other header may be
//! changed on the way (`content-length` is recomputed, `user-agent` belongs to the client) and
//! hop-by-hop headers never reach the upstream as sent.

pub mod credentials;
mod header;
mod verify;

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningError, SigningSettings,
};
use aws_sigv4::sign::v4;
use http::header::{HeaderName, HeaderValue, InvalidHeaderName, InvalidHeaderValue};
use http::{HeaderMap, Method, Uri};

use crate::config::AwsConfig;
pub use credentials::RouteCredentials;
pub use header::{parse_authorization, SigV4Header, ALGORITHM};
pub use verify::{Unverified, MAX_CLOCK_SKEW};

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
    /// An unsigned request to a host that names no region, on a route with no
    /// `[routes.aws] region`: there is no region to sign for.
    #[error("no region to sign for: the upstream host {0:?} names none and [routes.aws] region is unset")]
    NoRegion(String),
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
    /// `[routes.aws] sign_all`.
    sign_all: bool,
    credentials: RouteCredentials,
}

impl std::fmt::Debug for AwsSigner {
    /// The region and the credentials' key id; never the secret, the token or a signature.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSigner")
            .field("region", &self.region)
            .field("sign_all", &self.sign_all)
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl AwsSigner {
    /// The signer of the route named `route`: its credentials from the chain its `[routes.aws]` (`aws`) names
    /// ([`credentials::provider_for`]), asked once, now (call at startup: a shared file may be
    /// read with blocking I/O). `None` when no source has credentials: a warning names the
    /// route, the reason and what to configure, and the route's signed requests are to go
    /// upstream unchanged.
    pub async fn from_route(route: &str, aws: Option<&AwsConfig>) -> Option<Self> {
        let provider = credentials::provider_for(aws);
        match Self::with_provider(aws, provider).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(
                    target: "cachekeeper::sigv4",
                    route = %route,
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
    /// `aws`'s region and `sign_all`. Errors: the provider's first answer.
    pub async fn with_provider(
        aws: Option<&AwsConfig>,
        provider: aws_credential_types::provider::SharedCredentialsProvider,
    ) -> Result<Self, aws_credential_types::provider::error::CredentialsError> {
        Ok(Self {
            region: aws.and_then(|a| a.region.clone()),
            sign_all: aws.is_some_and(|a| a.sign_all),
            credentials: RouteCredentials::load(provider).await?,
        })
    }

    /// `[routes.aws] sign_all`: whether requests the proxy cannot verify (unsigned, or
    /// signed with other credentials) are signed too.
    pub fn signs_all(&self) -> bool {
        self.sign_all
    }

    /// Whether the request as the client sent it to the proxy carries a valid SigV4
    /// signature made with the proxy's own credentials: `method`, `uri` (its path and query
    /// as received, the route's prefix included), `headers` (with the `host` it was sent to;
    /// an HTTP/2 client's `:authority` is `uri`'s) and the `body` as received. The signature
    /// is computed again with the proxy's secret at the client's `x-amz-date`, which must be
    /// within [`MAX_CLOCK_SKEW`] of now, and compared in constant time.
    ///
    /// Errors: [`Unverified`], saying why (never a key, a token or a signature).
    pub async fn verify(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), Unverified> {
        let now = SystemTime::now();
        let creds = self.credentials.current(now).await;
        verify::verify_at(&creds, method, uri, headers, body, now)
    }

    /// Re-sign the outgoing request in place, for `uri`'s host and `body` (the bytes that
    /// will be sent, after any rewrite), at the current time. Sets `authorization`,
    /// `x-amz-date`, `x-amz-security-token` (when the proxy's credentials have one) and
    /// `x-amz-content-sha256` (only if the client sent it); removes the client's values of
    /// those and any `host` header (the HTTP client writes the upstream's). The region is the
    /// route's, else the client's scope's, else the one the upstream host names
    /// (`bedrock-runtime.<region>.amazonaws.com`); the service is the client's scope's, else
    /// [`BEDROCK_SIGNING_NAME`]. A request with no `authorization` at all is signed the same
    /// way (`[routes.aws] sign_all`).
    ///
    /// Errors: [`SignError`]; `headers` are then unchanged (the signature is computed before
    /// any header is touched), so the request goes as the client sent it.
    pub async fn resign(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &mut HeaderMap,
        body: &[u8],
    ) -> Result<(), SignError> {
        let now = SystemTime::now();
        let creds = self.credentials.current(now).await;
        let outgoing = Outgoing {
            method,
            uri,
            headers,
        };
        sign_at(&creds, self.region.as_deref(), outgoing, body, now)
    }
}

/// The request being signed: what goes upstream.
pub(crate) struct Outgoing<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a mut HeaderMap,
}

/// The signing name of Bedrock's runtime API (`bedrock-runtime.<region>.amazonaws.com` signs
/// as `bedrock`: its service model's `signingName`, and the scope boto3 writes).
pub const BEDROCK_SIGNING_NAME: &str = "bedrock";

/// The region a Bedrock runtime host names: `bedrock-runtime.<region>.amazonaws.com` or
/// `bedrock-runtime-fips.<region>.amazonaws.com`
/// (https://docs.aws.amazon.com/general/latest/gr/bedrock.html).
fn region_of_host(host: &str) -> Option<&str> {
    let rest = host
        .strip_prefix("bedrock-runtime.")
        .or_else(|| host.strip_prefix("bedrock-runtime-fips."))?;
    let region = rest.strip_suffix(".amazonaws.com")?;
    (!region.is_empty() && !region.contains('.')).then_some(region)
}

/// [`AwsSigner::resign`] with given credentials and time.
pub(crate) fn sign_at(
    creds: &Credentials,
    region: Option<&str>,
    req: Outgoing<'_>,
    body: &[u8],
    time: SystemTime,
) -> Result<(), SignError> {
    let client = match req.headers.get(http::header::AUTHORIZATION) {
        None => None,
        Some(v) => Some(parse_authorization(v).ok_or(SignError::NotSigV4)?),
    };
    let Some(host) = req.uri.host().filter(|_| req.uri.scheme().is_some()) else {
        return Err(SignError::NoUpstreamHost(req.uri.to_string()));
    };
    let region = region
        .or(client.as_ref().map(|c| c.region.as_str()))
        .or_else(|| region_of_host(host))
        .ok_or_else(|| SignError::NoRegion(host.to_owned()))?;
    let service = client
        .as_ref()
        .map_or(BEDROCK_SIGNING_NAME, |c| c.service.as_str());
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = if req.headers.contains_key("x-amz-content-sha256") {
        PayloadChecksumKind::XAmzSha256
    } else {
        PayloadChecksumKind::NoHeader
    };
    let to_sign = headers_to_sign(req.headers, client.as_ref());
    let identity = creds.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(settings)
        .build()?
        .into();
    let uri = req.uri.to_string();
    let signable = SignableRequest::new(
        req.method.as_str(),
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
        req.headers.remove(*stale);
    }
    for (name, value) in signed {
        req.headers.insert(name, value);
    }
    Ok(())
}

/// The headers to sign besides those the signer adds: `content-type` and the `x-amz-*`
/// headers `client` signed (none for an unsigned request), as text (a value that is not text
/// is sent unsigned), never a hop-by-hop header nor one `connection` names.
fn headers_to_sign(headers: &HeaderMap, client: Option<&SigV4Header>) -> Vec<(String, String)> {
    let named_by_connection: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    headers
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            let client_signed = client.is_some_and(|c| c.signs(n));
            let wanted = n == "content-type"
                || (n.starts_with("x-amz-") && client_signed && !SIGNER_HEADERS.contains(&n));
            wanted && !HOP_BY_HOP.contains(&n) && !named_by_connection.iter().any(|c| c == n)
        })
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
