//! What the proxy does to a request's credential before it goes upstream, decided once per
//! request and applied to the first send and to the one retry alike: SigV4 for Amazon
//! Bedrock ([`super::aws`], `docs/providers.md#signing-bedrock-requests`) and a Google token
//! of the proxy's own for Vertex AI ([`crate::google_token`]).

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Uri};

use crate::sigv4::AwsSigner;

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
    /// bytes sent) for `uri`, or put back the `host` the client signed. Fails open: a
    /// signing error leaves the headers as they were, with a warning (the upstream answers).
    pub(crate) async fn apply(
        &self,
        route: &str,
        method: &Method,
        uri: &Uri,
        headers: &mut HeaderMap,
        body: &[u8],
    ) {
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
            Outbound::Resign { signer, .. } => {
                if let Err(e) = signer.resign(method, uri, headers, body).await {
                    tracing::warn!(target: "cachekeeper::sigv4", route = %route, error = %e, "re-signing failed; the request goes as the client sent it");
                }
            }
        }
    }

    /// Whether the request is sent exactly as the client signed it (the passes run dry).
    pub(crate) fn keeps_original(&self) -> bool {
        matches!(self, Outbound::AsSigned(_))
    }
}
