//! Checking a client's SigV4 signature with the proxy's own credentials, before the proxy
//! signs the request again with them.
//!
//! Re-signing lends the proxy's AWS credentials to the request. The proxy lends them only to
//! a request that proves it holds the same secret: the client signed it with the proxy's
//! access key id, and the signature computed again here, over the request exactly as
//! received (method, path and query, the headers the client names in `SignedHeaders`, the
//! body) at the client's `x-amz-date`, is the one it sent. This is the check AWS itself makes
//! (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html),
//! with the proxy's host in place of AWS's. A request that fails it is never re-signed (the
//! caller sends it as the client signed it, or signs it anyway on a `sign_all` route).

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use http::{HeaderMap, Method, Uri};

use super::parse_authorization;

/// How far the client's `x-amz-date` may be from the proxy's clock: 5 minutes, AWS's own
/// limit ("the signed request must reach AWS within five minutes of the time stamp",
/// https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-troubleshooting.html).
/// A request captured and sent again later is refused as AWS would refuse it.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// Why a request's signature was not accepted as made with the proxy's credentials. No
/// variant carries a key id, a token or a signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// No `authorization` header, or one that is not `AWS4-HMAC-SHA256` with a well-formed
    /// scope.
    #[error("the request carries no SigV4 signature")]
    NotSigV4,
    /// Signed with another access key id than the proxy's.
    #[error("signed with other AWS credentials than the proxy's")]
    OtherCredentials,
    /// `x-amz-date` absent or not `YYYYMMDDTHHMMSSZ`.
    #[error("x-amz-date is missing or malformed")]
    NoDate,
    /// `x-amz-date` further than [`MAX_CLOCK_SKEW`] from now, by this many seconds.
    #[error("x-amz-date is {0} s from the proxy's clock (at most 300 s)")]
    Skewed(u64),
    /// A header the client names in `SignedHeaders` is absent.
    #[error("the signed header {0:?} is absent")]
    MissingHeader(String),
    /// The signature computed with the proxy's secret differs from the client's.
    #[error("the signature does not match the proxy's credentials")]
    Mismatch,
    /// The request could not be canonicalised (`aws-sigv4` refused it).
    #[error("the request cannot be canonicalised: {0}")]
    Canonical(String),
    /// `x-amz-content-sha256` is not the body's SHA-256 in hex but a marker
    /// (`UNSIGNED-PAYLOAD`, `STREAMING-…`): the signature does not cover the body, and the
    /// proxy lends its key only to a request whose bytes the client signed.
    #[error("x-amz-content-sha256 is not a body hash (an unsigned or streaming payload)")]
    UnsignedPayload,
}

/// [`super::AwsSigner::verify`] with given credentials and time.
pub(crate) fn verify_at(
    creds: &Credentials,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Result<(), Unverified> {
    let client = headers
        .get(http::header::AUTHORIZATION)
        .and_then(parse_authorization)
        .ok_or(Unverified::NotSigV4)?;
    if client.access_key_id != creds.access_key_id() {
        return Err(Unverified::OtherCredentials);
    }
    if let Some(declared) = headers.get("x-amz-content-sha256") {
        let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
        let bytes = declared.as_bytes();
        if bytes.len() != 64 || !bytes.iter().all(hex) {
            return Err(Unverified::UnsignedPayload);
        }
    }
    let signed_at = headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_amz_date)
        .ok_or(Unverified::NoDate)?;
    let skew = match now.duration_since(signed_at) {
        Ok(behind) => behind,
        Err(ahead) => ahead.duration(),
    };
    if skew > MAX_CLOCK_SKEW {
        return Err(Unverified::Skewed(skew.as_secs()));
    }
    // The headers exactly as the client signed them; `host` from the URI for an HTTP/2
    // client, whose `:authority` is no header.
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(client.signed_headers.len());
    for name in &client.signed_headers {
        let mut found = false;
        for v in headers.get_all(name.as_str()) {
            let v = v
                .to_str()
                .map_err(|e| Unverified::Canonical(e.to_string()))?;
            pairs.push((name.as_str(), v));
            found = true;
        }
        let from_uri = name == "host" && uri.authority().is_some();
        if !found && !from_uri {
            return Err(Unverified::MissingHeader(name.clone()));
        }
    }
    let host = match headers.get(http::header::HOST) {
        Some(h) => h
            .to_str()
            .map_err(|e| Unverified::Canonical(e.to_string()))?,
        None => uri.authority().map_or("", |a| a.as_str()),
    };
    let path = uri.path_and_query().map_or("/", |pq| pq.as_str());
    // The scheme only decides a default port the `host` header already settles.
    let absolute = format!("http://{host}{path}");
    let mut settings = SigningSettings::default();
    // Sign what the client named, whatever it is (the defaults leave `user-agent` out).
    settings.excluded_headers = None;
    if client.signs("x-amz-content-sha256") {
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    }
    let identity = creds.clone().into();
    let canonical = |e: &dyn std::fmt::Display| Unverified::Canonical(e.to_string());
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&client.region)
        .name(&client.service)
        .time(signed_at)
        .settings(settings)
        .build()
        .map_err(|e| canonical(&e))?
        .into();
    let signable = SignableRequest::new(
        method.as_str(),
        absolute.as_str(),
        pairs.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| canonical(&e))?;
    let (_, expected) = sign(signable, &params)
        .map_err(|e| canonical(&e))?
        .into_parts();
    if crate::digest::constant_time_eq(expected.as_bytes(), client.signature.as_bytes()) {
        Ok(())
    } else {
        Err(Unverified::Mismatch)
    }
}

/// `x-amz-date` (`YYYYMMDDTHHMMSSZ`, ISO 8601 basic, UTC) as a time; `None` when malformed.
fn parse_amz_date(v: &str) -> Option<SystemTime> {
    let b = v.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' || !digits(0..8) || !digits(9..15) {
        return None;
    }
    // RFC 3339 spelling of the same instant, for humantime's parser.
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &v[0..4],
        &v[4..6],
        &v[6..8],
        &v[9..11],
        &v[11..13],
        &v[13..15]
    );
    humantime::parse_rfc3339(&rfc3339).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
