//! What the proxy does to a request's credential before it goes upstream, decided once per
//! request and applied to the first send and to the one retry alike: SigV4 for Amazon
//! Bedrock ([`super::aws`], `docs/providers.md#signing-bedrock-requests`) and a Google token
//! of the proxy's own for Vertex AI ([`crate::google_token`]).

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Uri};

use crate::proxy::errors::ProxyError;
use crate::sigv4::{AwsSigner, Outgoing};

/// What the proxy does to one request's credential.
#[derive(Clone)]
pub(crate) enum Outbound {
    /// Nothing: the client's credential goes as sent (a Bearer API key, a Google token, none).
    None,
    /// Sent exactly as the client signed it: its bytes and this `host` (the passes run dry).
    AsSigned(Option<HeaderValue>),
    /// Sent signed by the proxy: the passes run; the bytes sent, and the retry's, are signed
    /// with this signer for the upstream's host. `verified`: the client's own signature was
    /// made with the proxy's credentials (else a `sign_all` route signed it anyway).
    Resign {
        signer: Arc<AwsSigner>,
        verified: bool,
    },
    /// Sent with the route's own access token (`[routes.google]`): the request carried no
    /// credential. The `Authorization: Bearer …` value, marked sensitive.
    Token(HeaderValue),
}

impl Outbound {
    /// The `upstream_auth=` log value: `resigned`, `signed_by_proxy`, `as_signed`,
    /// `proxy_token`, or empty.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Outbound::None => "",
            Outbound::AsSigned(_) => "as_signed",
            Outbound::Resign { verified: true, .. } => "resigned",
            Outbound::Resign {
                verified: false, ..
            } => "signed_by_proxy",
            Outbound::Token(_) => "proxy_token",
        }
    }

    /// Sign the outgoing request (`headers` after hygiene and the passes' edits, `body` the
    /// bytes sent) for `uri`, or put back the `host` the client signed. Signing is CPU only
    /// (one SHA-256 of the body and an HMAC chain), run on a blocking thread for a body over
    /// [`crate::proxy::passes::INLINE_MAX_BYTES`].
    ///
    /// Errors: [`ProxyError::CannotSign`] when the proxy was to sign and could not (the
    /// headers are then unchanged); the caller answers it rather than send a request AWS
    /// refuses with a 403 that does not say why.
    pub(crate) async fn apply(
        &self,
        route: &str,
        method: &Method,
        uri: &Uri,
        headers: &mut HeaderMap,
        body: &Bytes,
    ) -> Result<(), ProxyError> {
        match self {
            Outbound::None => {}
            Outbound::AsSigned(host) => {
                if let Some(host) = host {
                    headers.insert(header::HOST, host.clone());
                }
            }
            Outbound::Token(bearer) => {
                headers.insert(header::AUTHORIZATION, bearer.clone());
            }
            Outbound::Resign { signer, verified } => {
                let signed = if body.len() <= crate::proxy::passes::INLINE_MAX_BYTES {
                    resign(signer, method, uri, headers.clone(), body, *verified)
                } else {
                    let (signer, verified) = (Arc::clone(signer), *verified);
                    let (method, uri, out, body) =
                        (method.clone(), uri.clone(), headers.clone(), body.clone());
                    tokio::task::spawn_blocking(move || {
                        resign(&signer, &method, &uri, out, &body, verified)
                    })
                    .await
                    .unwrap_or_else(|e| Err(format!("the signing task did not run: {e}")))
                };
                *headers = signed.map_err(|reason| {
                    tracing::warn!(target: "cachekeeper::sigv4", route = %route, error = %reason, "re-signing failed; the proxy answers the request itself");
                    ProxyError::CannotSign {
                        route: route.to_owned(),
                        reason,
                    }
                })?;
            }
        }
        Ok(())
    }

    /// Whether the request is sent exactly as the client signed it (the passes run dry).
    pub(crate) fn keeps_original(&self) -> bool {
        matches!(self, Outbound::AsSigned(_))
    }

    /// Whether the request's credential may scope the proxy's state: false for a SigV4
    /// request the proxy signs without having checked its signature (`signed_by_proxy`): its
    /// `Credential=` access key id is anyone's to write, and a made-up signature naming
    /// another client's key must not reach that client's captured reasoning. A request sent
    /// as signed is checked by AWS before anything is captured from its answer.
    pub(crate) fn vouches_for_credential(&self) -> bool {
        !matches!(
            self,
            Outbound::Resign {
                verified: false,
                ..
            }
        )
    }
}

/// `headers` signed by `signer` for `uri` and `body` ([`AwsSigner::resign`]); the reason as
/// text when it fails.
fn resign(
    signer: &AwsSigner,
    method: &Method,
    uri: &Uri,
    mut headers: HeaderMap,
    body: &[u8],
    verified: bool,
) -> Result<HeaderMap, String> {
    let outgoing = Outgoing {
        method,
        uri,
        headers: &mut headers,
    };
    signer
        .resign(outgoing, body, verified)
        .map_err(|e| e.to_string())?;
    Ok(headers)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    reason = "tests: #[tokio::test] blocks on its future"
)]
mod tests {
    use super::*;
    use aws_credential_types::provider::SharedCredentialsProvider;
    use aws_credential_types::Credentials;

    async fn signer() -> Arc<AwsSigner> {
        let creds = Credentials::new("AKIDPROXYEXAMPLE", "proxySecret", None, None, "test");
        let provider = SharedCredentialsProvider::new(creds);
        Arc::new(AwsSigner::with_provider(None, provider).await.unwrap())
    }

    /// Signing that cannot be done (an unsigned request, no `[routes.aws] region`, an upstream
    /// host that names none) is the proxy's 502 `cannot_sign`, saying why, the headers left
    /// as they were; never a request sent to earn AWS's bare 403. The same request to a host
    /// that names its region is signed, inline and (a body over 64 KiB) on a blocking thread.
    #[tokio::test]
    async fn a_request_that_cannot_be_signed_is_answered_not_sent() {
        let out = Outbound::Resign {
            signer: signer().await,
            verified: false,
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let before = headers.clone();
        let mock: Uri = "http://127.0.0.1:9/model/m/invoke".parse().unwrap();
        let body = Bytes::from_static(b"{}");
        let err = out
            .apply("gateway", &Method::POST, &mock, &mut headers, &body)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "cannot_sign");
        assert_eq!(err.status(), http::StatusCode::BAD_GATEWAY);
        assert!(err.to_string().contains("no region to sign for"), "{err}");
        assert_eq!(headers, before);
        let aws: Uri = "https://bedrock-runtime.eu-west-3.amazonaws.com/model/m/invoke"
            .parse()
            .unwrap();
        let large = Bytes::from(vec![b' '; crate::proxy::passes::INLINE_MAX_BYTES + 1]);
        for body in [body, large] {
            let mut headers = before.clone();
            out.apply("gateway", &Method::POST, &aws, &mut headers, &body)
                .await
                .unwrap();
            let auth = headers[header::AUTHORIZATION].to_str().unwrap();
            assert!(auth.contains("/eu-west-3/bedrock/aws4_request"), "{auth}");
        }
    }
}
