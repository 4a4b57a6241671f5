//! AWS SigV4 in a request's life (Amazon Bedrock): which routes sign, and what one request
//! gets (`docs/providers.md#signing-bedrock-requests`).
//!
//! A route whose provider signs with SigV4 ([`UpstreamAuth::SigV4`]) has a signer slot,
//! filled from the proxy's own AWS credentials off the request path: at startup
//! ([`Signers::ready`] waits for it), and again at every reload, on a blocking thread (the
//! AWS chain reads its files with blocking I/O), so rotated keys are picked up by `SIGHUP`. A
//! reload that keeps a route's `[routes.aws]` keeps signing with the credentials it had
//! until the new read lands. Per request ([`decide`]):
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

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Uri};
use tokio::sync::OnceCell;

use crate::config::AwsConfig;
use crate::provider::UpstreamAuth;
use crate::proxy::outbound::Outbound;
use crate::route::{Route, RouteTable};
use crate::sigv4::{AwsSigner, Unverified};

/// One route's signer: empty (`None`) when the proxy has no AWS credentials for it, or before
/// the first read lands (`loaded` is set then).
struct Slot {
    /// The route's `[routes.aws]`, as the slot reads it.
    aws: Option<AwsConfig>,
    signer: ArcSwapOption<AwsSigner>,
    loaded: OnceCell<()>,
}

impl Slot {
    /// Read the route's credentials and keep them (or none).
    async fn fill(&self, route: &str) {
        self.signer.store(load(route, self.aws.clone()).await);
    }
}

/// The signer of every SigV4 route of one configuration, by route name.
#[derive(Default)]
pub(crate) struct Signers {
    slots: HashMap<String, Arc<Slot>>,
}

impl Signers {
    /// The slots of `routes`' SigV4 routes, each read in the background when a runtime is
    /// running ([`Self::ready`] waits for the reads). A route that `previous` had with the
    /// same `[routes.aws]` starts with the signer it had, replaced when the new read lands
    /// (a reload never leaves a window with no signer); any other starts empty.
    pub(crate) fn new(routes: &RouteTable, previous: Option<&Signers>) -> Self {
        let mut slots = HashMap::new();
        for r in routes.routes() {
            if r.provider.row.auth != UpstreamAuth::SigV4 {
                continue;
            }
            let slot = Arc::new(Slot {
                aws: r.aws.clone(),
                signer: ArcSwapOption::empty(),
                loaded: OnceCell::new(),
            });
            let kept = previous
                .and_then(|p| p.slots.get(&r.name))
                .filter(|old| old.aws == r.aws);
            if let Some(old) = kept {
                slot.signer.store(old.signer.load_full());
                let _ = slot.loaded.set(());
            }
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let (s, name) = (Arc::clone(&slot), r.name.clone());
                rt.spawn(async move {
                    if s.loaded.initialized() {
                        s.fill(&name).await;
                    } else {
                        s.loaded.get_or_init(|| s.fill(&name)).await;
                    }
                });
            }
            slots.insert(r.name.clone(), slot);
        }
        Self { slots }
    }

    /// Wait until every slot has been read once (startup: a signed request on the first
    /// connection finds its signer).
    pub(crate) async fn ready(&self) {
        for (name, slot) in &self.slots {
            slot.loaded.get_or_init(|| slot.fill(name)).await;
        }
    }

    /// Whether `route` signs with SigV4 (it has a slot, loaded or not).
    pub(crate) fn signs(&self, route: &Route) -> bool {
        self.slots.contains_key(&route.name)
    }

    /// The route's signer, when the route signs with SigV4 and the proxy has credentials.
    fn signer(&self, route: &Route) -> Option<Arc<AwsSigner>> {
        self.slots.get(&route.name)?.signer.load_full()
    }
}

/// Load one route's signer ([`AwsSigner::from_route`]) on a blocking thread: the AWS chain
/// reads the environment and the shared files with blocking I/O. `None` when the proxy has
/// no credentials for the route (or the read could not run).
async fn load(route: &str, aws: Option<AwsConfig>) -> Option<Arc<AwsSigner>> {
    let name = route.to_owned();
    let handle = tokio::runtime::Handle::current();
    // A blocking thread of its own, off every request's path, may wait on the read.
    let read = tokio::task::spawn_blocking(move || {
        handle.block_on(AwsSigner::from_route(&name, aws.as_ref()))
    });
    match read.await {
        Ok(signer) => signer.map(Arc::new),
        Err(e) => {
            tracing::warn!(target: "cachekeeper::sigv4", route = %route, error = %e, "reading the proxy's AWS credentials failed; the route's signed requests go upstream as signed");
            None
        }
    }
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
    pub body: Option<&'a Bytes>,
}

/// What `req` gets ([`Outbound`]), with the reason logged when the proxy does not sign a
/// signed request. No I/O: the signers are loaded before; the check is one SHA-256 of the
/// body and an HMAC chain, run on a blocking thread for a body over
/// [`crate::proxy::passes::INLINE_MAX_BYTES`].
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
    if !signers.signs(req.route) {
        return if signed { as_signed() } else { Outbound::None };
    }
    if auth.is_some() && !signed {
        // A Bedrock API key (Bearer) or another scheme: not the proxy's to sign.
        return Outbound::None;
    }
    let route = &req.route.name;
    let Some(signer) = signers.signer(req.route) else {
        if signed {
            tracing::info!(target: "cachekeeper::sigv4", route = %route, "no AWS credentials on the proxy's side for this route: the signed request goes upstream as the client signed it");
            return as_signed();
        }
        return Outbound::None;
    };
    let Some(body) = req.body else {
        if signed {
            tracing::warn!(target: "cachekeeper::sigv4", route = %route, "the body streams through unread (over max_rewrite_bytes or the buffer budget), so its signature cannot be checked: the signed request goes upstream as the client signed it, which AWS refuses unless the route is on / and reached by the name the client signed for");
            return as_signed();
        }
        return Outbound::None;
    };
    let verdict = if signed {
        verify(&signer, req, body).await
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

/// [`AwsSigner::verify`] of `req` with `body`: inline for a small body, on a blocking thread
/// for a larger one (hashing megabytes would hold an async worker).
async fn verify(
    signer: &Arc<AwsSigner>,
    req: &Received<'_>,
    body: &Bytes,
) -> Result<(), Unverified> {
    if body.len() <= crate::proxy::passes::INLINE_MAX_BYTES {
        return signer.verify(req.method, req.uri, req.headers, body);
    }
    let (signer, body) = (Arc::clone(signer), body.clone());
    let (method, uri, headers) = (req.method.clone(), req.uri.clone(), req.headers.clone());
    tokio::task::spawn_blocking(move || signer.verify(&method, &uri, &headers, &body))
        .await
        .unwrap_or_else(|e| Err(Unverified::Canonical(format!("the check did not run: {e}"))))
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

    /// Only SigV4 routes get a slot. A reload reads every route's credentials again (rotated
    /// keys are picked up by `SIGHUP`); a route whose `[routes.aws]` is unchanged signs with
    /// the credentials it had until the new read lands, a changed one starts empty.
    #[tokio::test]
    async fn credentials_are_read_again_at_each_reload() {
        use crate::sigv4::credentials::tests::EnvGuard;
        let env = EnvGuard::set(&[
            ("AWS_ACCESS_KEY_ID", Some("AKIDFIRSTREAD")),
            ("AWS_SECRET_ACCESS_KEY", Some("firstSecret")),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                Some("/nonexistent-aws-credentials"),
            ),
            ("AWS_CONFIG_FILE", Some("/nonexistent-aws-config")),
        ]);
        let key_of = |s: &Signers| format!("{:?}", s.slots["b"].signer.load_full());
        let first = Signers::new(&table(TWO), None);
        first.ready().await;
        assert_eq!(first.slots.len(), 1);
        assert!(
            key_of(&first).contains("AKIDFIRSTREAD"),
            "{}",
            key_of(&first)
        );
        drop(env);
        let _env = EnvGuard::set(&[
            ("AWS_ACCESS_KEY_ID", Some("AKIDROTATED")),
            ("AWS_SECRET_ACCESS_KEY", Some("rotatedSecret")),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                Some("/nonexistent-aws-credentials"),
            ),
            ("AWS_CONFIG_FILE", Some("/nonexistent-aws-config")),
        ]);
        let same = Signers::new(&table(TWO), Some(&first));
        // At once: the signer it had, and ready.
        assert!(same.slots["b"].loaded.initialized());
        let changed = Signers::new(&table(&TWO.replace("us-east-1", "us-west-2")), Some(&first));
        assert!(
            !changed.slots["b"].loaded.initialized() || key_of(&changed).contains("AKIDROTATED")
        );
        // Then the new read.
        for _ in 0..200 {
            if key_of(&same).contains("AKIDROTATED") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(key_of(&same).contains("AKIDROTATED"), "{}", key_of(&same));
        changed.ready().await;
        assert!(
            key_of(&changed).contains("AKIDROTATED"),
            "{}",
            key_of(&changed)
        );
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
        let body = Bytes::from_static(b"{}");
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
                body: Some(&body),
            };
            let got = decide(&signers, &r).await;
            assert_eq!(got.label(), label, "{auth:?}");
            if let Outbound::AsSigned(host) = got {
                assert_eq!(host.unwrap(), "127.0.0.1:8787");
            }
        }
    }
}
