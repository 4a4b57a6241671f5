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
//! - [`AwsSigner::from_route`]: a route's credentials, loaded off the request path (startup,
//!   reloads);
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
//! changed on the way (`content-length` is recomputed, `user-agent` belongs to the client).

pub(crate) mod credentials;
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
pub(crate) use credentials::RouteCredentials;
pub(crate) use header::{parse_authorization, SigV4Header};
pub(crate) use verify::Unverified;

/// The headers the signer writes itself; the client's values are stale once the proxy signs.
const SIGNER_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// Why a request could not be re-signed. No variant carries a key, a token or a signature.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SignError {
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
pub(crate) struct AwsSigner {
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
    /// ([`credentials::provider_for`]), asked once, now (never on a request's path: a shared
    /// file may be read with blocking I/O; `crate::proxy::aws` calls it at startup and, on a
    /// blocking thread, at each reload). `None` when no source has credentials: a warning names the
    /// route, the reason and what to configure, and the route's signed requests are to go
    /// upstream unchanged.
    pub(crate) async fn from_route(route: &str, aws: Option<&AwsConfig>) -> Option<Self> {
        let provider = credentials::provider_for(aws);
        match Self::with_provider(aws, provider).await {
            Ok(s) => Some(s),
            Err(e) => {
                // What to set depends on where the route reads: its profile only, or the chain.
                let fix = match aws.and_then(|a| a.profile.as_deref()) {
                    Some(profile) => format!(
                        "the route reads only profile {profile:?} of the shared AWS files \
                         (~/.aws/credentials and ~/.aws/config, or AWS_SHARED_CREDENTIALS_FILE and \
                         AWS_CONFIG_FILE): add aws_access_key_id and aws_secret_access_key to it, \
                         or fix [routes.aws] profile"
                    ),
                    None => "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                             AWS_SESSION_TOKEN), or a profile in ~/.aws/credentials (AWS_PROFILE, \
                             or [routes.aws] profile), for the proxy's process"
                        .to_owned(),
                };
                tracing::warn!(
                    target: "cachekeeper::sigv4",
                    route = %route,
                    error = %e,
                    fix = %fix,
                    "no AWS credentials on the proxy's side: this route's SigV4-signed requests \
                     go upstream unchanged, signed for the proxy's host, and Bedrock refuses them"
                );
                None
            }
        }
    }

    /// A signer over any credentials provider (tests, or a provider the caller built), with
    /// `aws`'s region and `sign_all`. Errors: the provider's first answer.
    pub(crate) async fn with_provider(
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
    pub(crate) fn signs_all(&self) -> bool {
        self.sign_all
    }

    /// Whether the request as the client sent it to the proxy carries a valid SigV4
    /// signature made with the proxy's own credentials: `method`, `uri` (its path and query
    /// as received, the route's prefix included), `headers` (with the `host` it was sent to;
    /// an HTTP/2 client's `:authority` is `uri`'s) and the `body` as received. The signature
    /// is computed again with the proxy's secret at the client's `x-amz-date`, which must be
    /// within [`verify::MAX_CLOCK_SKEW`] of now, and compared in constant time. CPU only (one SHA-256
    /// of the body and an HMAC chain): the caller runs a large body's check on a blocking
    /// thread (`crate::proxy::aws`).
    ///
    /// Errors: [`Unverified`], saying why (never a key, a token or a signature).
    pub(crate) fn verify(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), Unverified> {
        verify::verify_at(
            self.credentials.current(),
            method,
            uri,
            headers,
            body,
            SystemTime::now(),
        )
    }

    /// Re-sign the outgoing request in place, for `uri`'s host and `body` (the bytes that
    /// will be sent, after any rewrite), at the current time. Sets `authorization`,
    /// `x-amz-date`, `x-amz-security-token` (when the proxy's credentials have one) and
    /// `x-amz-content-sha256` (only if the client sent it); removes the client's values of
    /// those and any `host` header (the HTTP client writes the upstream's). The region is the
    /// route's, else the one the upstream host names (`bedrock-runtime.<region>.amazonaws.com`),
    /// else the client's own scope's; the service is the client's scope's, else
    /// [`BEDROCK_SIGNING_NAME`]. The client's scope counts only when its signature was checked
    /// (`verified`): an unchecked request's scope is only a claim. A request with no `authorization` at all is signed the same
    /// way (`[routes.aws] sign_all`). CPU only, as [`Self::verify`].
    ///
    /// Errors: [`SignError`]; `headers` are then unchanged (the signature is computed before
    /// any header is touched).
    pub(crate) fn resign(
        &self,
        outgoing: Outgoing<'_>,
        body: &[u8],
        verified: bool,
    ) -> Result<(), SignError> {
        let scope = Scope {
            region: self.region.as_deref(),
            trust_client: verified,
        };
        sign_at(
            self.credentials.current(),
            scope,
            outgoing,
            body,
            SystemTime::now(),
        )
    }
}

/// Where the region a request is signed for comes from ([`AwsSigner::resign`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    /// `[routes.aws] region`.
    pub region: Option<&'a str>,
    /// Whether the client's own scope's region may be used (its signature was checked).
    pub trust_client: bool,
}

/// The request being signed: what goes upstream (its headers after hygiene and the passes'
/// edits).
pub(crate) struct Outgoing<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a mut HeaderMap,
}

/// The signing name of Bedrock's runtime API (`bedrock-runtime.<region>.amazonaws.com` signs
/// as `bedrock`: its service model's `signingName`, and the scope boto3 writes).
pub(crate) const BEDROCK_SIGNING_NAME: &str = "bedrock";

/// [`AwsSigner::resign`] with given credentials, region sources and time.
pub(crate) fn sign_at(
    creds: &Credentials,
    scope: Scope<'_>,
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
    let trusted = client.as_ref().filter(|_| scope.trust_client);
    let region = scope
        .region
        .or_else(|| crate::provider::bedrock_region_of_host(host))
        .or(trusted.map(|c| c.region.as_str()))
        .ok_or_else(|| SignError::NoRegion(host.to_owned()))?;
    let service = trusted.map_or(BEDROCK_SIGNING_NAME, |c| c.service.as_str());
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
/// is sent unsigned). `headers` are the outgoing ones, after the hop-by-hop hygiene
/// (`cachekeeper_wire::upstream::upstream_request_headers`), so no hop-by-hop header is here
/// to sign.
fn headers_to_sign(headers: &HeaderMap, client: Option<&SigV4Header>) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            let client_signed = client.is_some_and(|c| c.signs(n));
            n == "content-type"
                || (n.starts_with("x-amz-") && client_signed && !SIGNER_HEADERS.contains(&n))
        })
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
