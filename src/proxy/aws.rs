//! AWS SigV4 in a request's life (Amazon Bedrock): which routes sign, and what one request
//! gets (`docs/providers.md#signing-bedrock-requests`).
//!
//! A route whose provider signs with SigV4 ([`UpstreamAuth::SigV4`]) has a signer slot,
//! filled from the proxy's own AWS credentials when the configuration is applied
//! ([`Signers::ready`] at startup; a reload that keeps a route's `[routes.aws]` keeps its
//! signer, a changed one loads in the background). Per request ([`decide`]):
//!
//! - a request signed with the proxy's own credentials, its signature checked
//!   ([`AwsSigner::verify`]): the passes run, and the bytes sent (and the one retry's) are
//!   signed again for the upstream's host ([`Outbound::Resign`]);
//! - on a `[routes.aws] sign_all = true` route, also a request with no `Authorization` or
//!   one signed with other credentials;
//! - any other signed request goes upstream exactly as the client signed it, its `host`
//!   included ([`Outbound::AsSigned`]), with the reason in the log; a Bearer API key and
//!   every non-Bedrock route are left alone ([`Outbound::None`]).

use std::collections::HashMap;
use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Uri};
use tokio::sync::OnceCell;

use crate::config::AwsConfig;
use crate::provider::UpstreamAuth;
use crate::proxy::outbound::Outbound;
use crate::route::{Route, RouteTable};
use crate::sigv4::{AwsSigner, Unverified};

/// One route's signer, loaded once: `None` inside when the proxy has no AWS credentials for
/// it.
type Slot = Arc<OnceCell<Option<Arc<AwsSigner>>>>;

/// The signer of every SigV4 route of one configuration, by route name.
#[derive(Default)]
pub(crate) struct Signers {
    slots: HashMap<String, (Option<AwsConfig>, Slot)>,
}

impl Signers {
    /// The slots of `routes`' SigV4 routes: `previous`'s slot when the route's name and
    /// `[routes.aws]` are the same (a reload keeps its credentials), else a new one, loading
    /// in the background when a runtime is running ([`Self::ready`] waits for it).
    pub(crate) fn new(routes: &RouteTable, previous: Option<&Signers>) -> Self {
        let mut slots = HashMap::new();
        for r in routes.routes() {
            if r.provider.row.auth != UpstreamAuth::SigV4 {
                continue;
            }
            let kept = previous
                .and_then(|p| p.slots.get(&r.name))
                .filter(|(aws, _)| *aws == r.aws)
                .map(|(_, slot)| Arc::clone(slot));
            let slot = kept.unwrap_or_else(|| {
                let slot: Slot = Arc::new(OnceCell::new());
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let (s, name, aws) = (Arc::clone(&slot), r.name.clone(), r.aws.clone());
                    rt.spawn(async move {
                        s.get_or_init(|| load(name, aws)).await;
                    });
                }
                slot
            });
            slots.insert(r.name.clone(), (r.aws.clone(), slot));
        }
        Self { slots }
    }

    /// Wait until every slot is loaded (startup: a signed request on the first connection
    /// finds its signer).
    pub(crate) async fn ready(&self) {
        for (name, (aws, slot)) in &self.slots {
            slot.get_or_init(|| load(name.clone(), aws.clone())).await;
        }
    }

    /// Whether `route` signs with SigV4 (it has a slot, loaded or not).
    pub(crate) fn signs(&self, route: &Route) -> bool {
        self.slots.contains_key(&route.name)
    }

    /// The route's slot, when the route signs with SigV4.
    fn slot(&self, route: &Route) -> Option<&Slot> {
        self.slots.get(&route.name).map(|(_, s)| s)
    }
}

/// Load one route's signer ([`AwsSigner::from_route`]: reads the environment and the shared
/// AWS files once).
async fn load(route: String, aws: Option<AwsConfig>) -> Option<Arc<AwsSigner>> {
    AwsSigner::from_route(&route, aws.as_ref())
        .await
        .map(Arc::new)
}

/// The request as the client sent it to the proxy.
pub(crate) struct Received<'a> {
    pub route: &'a Route,
    pub method: &'a Method,
    /// The URI as received, before a `/t/<token>` segment was stripped: what was signed.
    pub uri: &'a Uri,
    /// The headers as received (before hygiene): `host` and the signed ones.
    pub headers: &'a HeaderMap,
    /// The body as received; `None` when it streams through unread.
    pub body: Option<&'a [u8]>,
}

/// What `req` gets ([`Outbound`]), with the reason logged when the proxy does not sign a
/// signed request. No I/O: the signers are loaded before; the check is one HMAC chain.
pub(crate) async fn decide(signers: &Signers, req: &Received<'_>) -> Outbound {
    let auth = req.headers.get(header::AUTHORIZATION);
    let signed = crate::credential::sigv4_signed(req.headers);
    let as_signed = || {
        let host = req.headers.get(header::HOST).cloned().or_else(|| {
            let authority = req.uri.authority()?;
            HeaderValue::from_str(authority.as_str()).ok()
        });
        Outbound::AsSigned(host)
    };
    let Some(slot) = signers.slot(req.route) else {
        return if signed { as_signed() } else { Outbound::None };
    };
    if auth.is_some() && !signed {
        // A Bedrock API key (Bearer) or another scheme: not the proxy's to sign.
        return Outbound::None;
    }
    let route = &req.route.name;
    let Some(signer) = slot.get().cloned().flatten() else {
        if signed {
            tracing::info!(target: "cachekeeper::sigv4", route = %route, "no AWS credentials on the proxy's side for this route: the signed request goes upstream as the client signed it");
            return as_signed();
        }
        return Outbound::None;
    };
    let Some(body) = req.body else {
        if signed {
            tracing::info!(target: "cachekeeper::sigv4", route = %route, "the body streams through unread (over max_rewrite_bytes or the buffer budget): the signed request goes upstream as the client signed it");
            return as_signed();
        }
        return Outbound::None;
    };
    let verdict = if signed {
        signer.verify(req.method, req.uri, req.headers, body).await
    } else {
        Err(Unverified::NotSigV4)
    };
    match verdict {
        Ok(()) => Outbound::Resign {
            signer,
            verified: true,
        },
        Err(_) if signer.signs_all() => Outbound::Resign {
            signer,
            verified: false,
        },
        Err(_) if !signed => Outbound::None,
        Err(why) => {
            tracing::warn!(target: "cachekeeper::sigv4", route = %route, reason = %why, "the proxy re-signs only requests signed with its own AWS credentials (or every request with [routes.aws] sign_all = true): this one goes upstream as the client signed it, unchanged");
            as_signed()
        }
    }
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

    fn table(toml: &str) -> RouteTable {
        let (config, _) = crate::config::Config::from_toml(toml).unwrap();
        RouteTable::new(&config).unwrap()
    }

    const TWO: &str = "[[routes]]\nname = \"b\"\nprefix = \"/b\"\nupstream = \"http://127.0.0.1:9\"\n\
                       provider = \"bedrock\"\n[routes.aws]\nregion = \"us-east-1\"\n\
                       [[routes]]\nname = \"a\"\nprefix = \"/a\"\nupstream = \"https://api.anthropic.com\"\n";

    /// Only SigV4 routes get a slot; a reload keeps the slot of a route whose `[routes.aws]`
    /// is unchanged (its credentials are not read again) and replaces a changed one.
    #[tokio::test]
    async fn slots_per_sigv4_route_kept_across_reloads() {
        let first = Signers::new(&table(TWO), None);
        assert_eq!(first.slots.len(), 1);
        let same = Signers::new(&table(TWO), Some(&first));
        assert!(Arc::ptr_eq(&first.slots["b"].1, &same.slots["b"].1));
        let changed = Signers::new(&table(&TWO.replace("us-east-1", "us-west-2")), Some(&first));
        assert!(!Arc::ptr_eq(&first.slots["b"].1, &changed.slots["b"].1));
    }

    /// What a request gets before any signature is checked: a Bearer API key and an unsigned
    /// request on a route without `sign_all` are left alone; a signed request on a route
    /// with no signer goes as signed, with the `host` it was signed for.
    #[tokio::test]
    async fn decisions_without_a_signer() {
        let routes = table(TWO);
        let signers = Signers::default();
        let route = routes.routes().iter().find(|r| r.name == "b").unwrap();
        let uri = Uri::from_static("/b/model/m/invoke");
        let with = |auth: Option<&'static str>| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8787"));
            if let Some(a) = auth {
                h.insert(header::AUTHORIZATION, HeaderValue::from_static(a));
            }
            h
        };
        let signed = "AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=0000000000000000000000000000000000000000000000000000000000000000";
        for (auth, label) in [
            (None, ""),
            (Some("Bearer ABSK"), ""),
            (Some(signed), "as_signed"),
        ] {
            let headers = with(auth);
            let r = Received {
                route,
                method: &Method::POST,
                uri: &uri,
                headers: &headers,
                body: Some(b"{}"),
            };
            let got = decide(&signers, &r).await;
            assert_eq!(got.label(), label, "{auth:?}");
            if let Outbound::AsSigned(host) = got {
                assert_eq!(host.unwrap(), "127.0.0.1:8787");
            }
        }
    }
}
