//! A Google OAuth access token of the proxy's own for a Vertex AI route (`[routes.google]`):
//! the token a request that carries no credential is sent with (an agent told to skip its
//! auth, as Claude Code is with `CLAUDE_CODE_SKIP_VERTEX_AUTH=1`).
//!
//! The token comes from a service-account key through the OAuth 2.0 JWT-bearer grant
//! (https://developers.google.com/identity/protocols/oauth2/service-account#httprest), done by
//! `gcp_auth` (its `CustomServiceAccount`: the JWT signed with the key, posted to the key's
//! `token_uri`), with the `cloud-platform` scope Vertex AI takes
//! (https://cloud.google.com/vertex-ai/docs/authentication). Google's access tokens live one
//! hour; a background task per route fetches one at startup and again [`RENEW_BEFORE`] before
//! it expires (halfway through a shorter life), so a request only reads the kept copy: no
//! network call, no wait on its path. A fetch that fails is retried after [`RETRY_AFTER`],
//! with a warning. The kept token carries its expiry, and an expired one is never sent: until
//! a live token exists the route answers such requests with the proxy's 503 `no_token`
//! (`docs/providers.md#vertex--aiplatformgoogleapiscom--aiplatformgoogleapiscom`).
//!
//! Each renewal asks a new `CustomServiceAccount`, built from the key read once at startup:
//! one account keeps its token and fetches again only when under 20 s of it remain
//! (`gcp_auth` 0.12.7, `Token::has_expired`), so asking the same account [`RENEW_BEFORE`] early
//! would answer the token already kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use gcp_auth::{CustomServiceAccount, TokenProvider};
use http::HeaderValue;
use tokio::sync::watch;

use crate::config::GoogleConfig;
use crate::route::{Route, RouteTable};

/// The OAuth scope asked for: all of Google Cloud, the one Vertex AI documents.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// How long before a token's expiry a new one is fetched: 5 minutes (Google's client
/// libraries refresh within the last minutes of the hour; five leaves room for a retry).
/// A token that lives less than twice this is renewed halfway through its life instead.
pub const RENEW_BEFORE: Duration = Duration::from_secs(300);

/// The shortest wait before a renewal: 1 s, so a token endpoint that answers tokens about to
/// expire is not asked in a loop.
pub const MIN_RENEW_WAIT: Duration = Duration::from_secs(1);

/// How long after a failed fetch the next is tried.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// How long startup waits for each route's first token before it serves anyway (the route
/// then answers with the proxy's 503 `no_token` until the token arrives).
pub const FIRST_TOKEN_WAIT: Duration = Duration::from_secs(10);

/// A fetched token: the `Authorization` value and when the token stops being valid.
struct Kept {
    bearer: HeaderValue,
    expires_at: SystemTime,
}

/// One route's token: the kept token with its expiry, and the last fetch error.
pub(crate) struct TokenSlot {
    kept: ArcSwapOption<Kept>,
    last_error: ArcSwapOption<String>,
    /// `true` once the first fetch ended, with a token or an error.
    attempted: watch::Sender<bool>,
}

impl TokenSlot {
    fn new() -> Self {
        Self {
            kept: ArcSwapOption::empty(),
            last_error: ArcSwapOption::empty(),
            attempted: watch::Sender::new(false),
        }
    }

    /// The kept `Authorization: Bearer …` value (marked sensitive) while its token is valid,
    /// or why there is none.
    pub(crate) fn bearer(&self) -> Result<HeaderValue, String> {
        self.bearer_at(SystemTime::now())
    }

    /// [`Self::bearer`] at `now`: a token expired at `now` counts as none.
    fn bearer_at(&self, now: SystemTime) -> Result<HeaderValue, String> {
        let kept = self.kept.load_full();
        if let Some(k) = kept.as_deref().filter(|k| now < k.expires_at) {
            return Ok(k.bearer.clone());
        }
        let error = self.last_error.load_full();
        Err(match (kept.is_some(), error) {
            (false, None) => "the first token is still being fetched".to_owned(),
            (false, Some(e)) => (*e).clone(),
            (true, None) => "the token expired before a new one arrived".to_owned(),
            (true, Some(e)) => format!("the token expired and renewing it failed: {e}"),
        })
    }

    /// Keep `bearer`, valid until `expires_at`, in place of the last token and error.
    fn store(&self, bearer: HeaderValue, expires_at: SystemTime) {
        self.kept.store(Some(Arc::new(Kept { bearer, expires_at })));
        self.last_error.store(None);
    }
}

/// The token slot of every route with `[routes.google]`, by route name.
#[derive(Default)]
pub(crate) struct Tokens {
    slots: HashMap<String, (GoogleConfig, Arc<TokenSlot>)>,
}

impl Tokens {
    /// The slots of `routes`' `[routes.google]` routes (key files relative to `base_dir`):
    /// `previous`'s slot when the route's name and section are the same (a reload keeps its
    /// token and its task), else a new one whose task starts now, when a runtime is running.
    pub(crate) fn new(routes: &RouteTable, base_dir: &Path, previous: Option<&Tokens>) -> Self {
        let mut slots = HashMap::new();
        for r in routes.routes() {
            let Some(google) = &r.google else { continue };
            let kept = previous
                .and_then(|p| p.slots.get(&r.name))
                .filter(|(g, _)| g == google)
                .map(|(_, slot)| Arc::clone(slot));
            let slot = kept.unwrap_or_else(|| {
                let slot = Arc::new(TokenSlot::new());
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let file = base_dir.join(&google.service_account);
                    rt.spawn(keep_fresh(Arc::downgrade(&slot), file, r.name.clone()));
                }
                slot
            });
            slots.insert(r.name.clone(), (google.clone(), slot));
        }
        Self { slots }
    }

    /// Wait (at most [`FIRST_TOKEN_WAIT`] each) until every route's first fetch has ended.
    pub(crate) async fn ready(&self) {
        for (_, slot) in self.slots.values() {
            let mut rx = slot.attempted.subscribe();
            let _ = tokio::time::timeout(FIRST_TOKEN_WAIT, rx.wait_for(|done| *done)).await;
        }
    }

    /// The route's token slot, when it has `[routes.google]`.
    pub(crate) fn slot(&self, route: &Route) -> Option<&TokenSlot> {
        self.slots.get(&route.name).map(|(_, s)| s.as_ref())
    }
}

/// The task that keeps `slot`'s token fresh, until the slot is dropped (a reload that
/// replaced it). The key file is read once, off the runtime's threads; each fetch asks a new
/// account built from it (see the module docs).
async fn keep_fresh(slot: Weak<TokenSlot>, file: PathBuf, route: String) {
    let read = file.clone();
    let key: Arc<str> =
        match tokio::task::spawn_blocking(move || std::fs::read_to_string(read)).await {
            Ok(Ok(k)) => k.into(),
            Ok(Err(e)) => return fail_for_good(&slot, &route, &file, &e.to_string()),
            Err(e) => return fail_for_good(&slot, &route, &file, &e.to_string()),
        };
    let mut first = true;
    loop {
        let account = account(&key).await;
        if let (true, Err(why)) = (first, &account) {
            // A key that builds no account the first time never will.
            return fail_for_good(&slot, &route, &file, why);
        }
        first = false;
        let wait = {
            let Some(s) = slot.upgrade() else { return };
            let wait = match account {
                Ok(a) => fetch(&s, &a, &route).await,
                Err(why) => {
                    note_error(&s, &route, &why);
                    RETRY_AFTER
                }
            };
            s.attempted.send_replace(true);
            wait
        };
        tokio::time::sleep(wait).await;
    }
}

/// A new account (no token kept) from the key's JSON, built off the runtime's threads:
/// `gcp_auth` reads the system's root certificates for its HTTPS client there.
async fn account(key: &Arc<str>) -> Result<CustomServiceAccount, String> {
    let key = Arc::clone(key);
    match tokio::task::spawn_blocking(move || CustomServiceAccount::from_json(&key)).await {
        Ok(Ok(a)) => Ok(a),
        Ok(Err(e)) => Err(chain(&e)),
        Err(e) => Err(e.to_string()),
    }
}

/// One fetch through `account` into `slot`; how long until the next.
async fn fetch(slot: &TokenSlot, account: &CustomServiceAccount, route: &str) -> Duration {
    match account.token(&[SCOPE]).await {
        Ok(token) => match bearer_value(token.as_str()) {
            Some(v) => {
                let expires_at = SystemTime::from(token.expires_at());
                slot.store(v, expires_at);
                let left = expires_at
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                renew_in(left)
            }
            None => {
                note_error(
                    slot,
                    route,
                    "the token endpoint answered a token that is no header value",
                );
                RETRY_AFTER
            }
        },
        Err(e) => {
            note_error(
                slot,
                route,
                &format!("fetching an access token failed: {}", chain(&e)),
            );
            RETRY_AFTER
        }
    }
}

/// How long after a fetch the next one is made, for a token valid `left` longer:
/// [`RENEW_BEFORE`] before it expires, or halfway through a life shorter than twice that;
/// never sooner than [`MIN_RENEW_WAIT`].
fn renew_in(left: Duration) -> Duration {
    let wait = if left >= RENEW_BEFORE * 2 {
        left.saturating_sub(RENEW_BEFORE)
    } else {
        left / 2
    };
    wait.max(MIN_RENEW_WAIT)
}

/// An error and its sources, `: `-joined (`gcp_auth` puts the token endpoint's answer in a
/// source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// `Bearer <token>`, marked sensitive (never indexed by HPACK, never printed by `Debug`).
fn bearer_value(token: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    v.set_sensitive(true);
    Some(v)
}

/// Keep `why` as the slot's last error, with a warning naming the route (never the token).
fn note_error(slot: &TokenSlot, route: &str, why: &str) {
    tracing::warn!(target: "cachekeeper::google", route = %route, error = %why, "fetching this route's Google access token failed; requests without a credential get the proxy's 503 no_token while it has no unexpired token");
    slot.last_error.store(Some(Arc::new(why.to_owned())));
}

/// The key file cannot be used: the slot says why, for good (a reload with a fixed file
/// starts a new slot).
fn fail_for_good(slot: &Weak<TokenSlot>, route: &str, file: &Path, why: &str) {
    if let Some(s) = slot.upgrade() {
        note_error(
            &s,
            route,
            &format!(
                "the service-account key {} cannot be used: {why}",
                file.display()
            ),
        );
        s.attempted.send_replace(true);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn bearer_values_are_sensitive_and_refuse_control_characters() {
        let v = bearer_value("ya29.a0-token").unwrap();
        assert_eq!(v, "Bearer ya29.a0-token");
        assert!(v.is_sensitive());
        assert!(bearer_value("a\nb").is_none());
    }

    #[test]
    fn a_slot_without_a_token_says_why() {
        let slot = TokenSlot::new();
        assert_eq!(
            slot.bearer().unwrap_err(),
            "the first token is still being fetched"
        );
        slot.last_error.store(Some(Arc::new("boom".into())));
        assert_eq!(slot.bearer().unwrap_err(), "boom");
        let hour = SystemTime::now() + Duration::from_secs(3600);
        slot.store(bearer_value("t").unwrap(), hour);
        assert_eq!(slot.bearer().unwrap(), "Bearer t");
    }

    /// A token past its `expires_at` is never served, whether its renewal failed or is late.
    #[test]
    fn an_expired_token_counts_as_none() {
        let slot = TokenSlot::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let expires = t0 + Duration::from_secs(3599);
        slot.store(bearer_value("t").unwrap(), expires);
        assert_eq!(slot.bearer_at(t0).unwrap(), "Bearer t");
        assert_eq!(
            slot.bearer_at(expires - Duration::from_secs(1)).unwrap(),
            "Bearer t"
        );
        assert_eq!(
            slot.bearer_at(expires).unwrap_err(),
            "the token expired before a new one arrived"
        );
        // A failed renewal keeps the old token (still served until it expires) and says why.
        slot.last_error.store(Some(Arc::new(
            "fetching an access token failed: 500".into(),
        )));
        assert_eq!(slot.bearer_at(t0).unwrap(), "Bearer t");
        assert_eq!(
            slot.bearer_at(expires + Duration::from_secs(60))
                .unwrap_err(),
            "the token expired and renewing it failed: fetching an access token failed: 500"
        );
        // A renewal that arrives replaces both.
        slot.store(
            bearer_value("u").unwrap(),
            expires + Duration::from_secs(3600),
        );
        assert_eq!(
            slot.bearer_at(expires + Duration::from_secs(60)).unwrap(),
            "Bearer u"
        );
    }

    #[test]
    fn renewal_comes_five_minutes_early_or_halfway_through_a_short_life() {
        assert_eq!(
            renew_in(Duration::from_secs(3599)),
            Duration::from_secs(3299)
        );
        assert_eq!(renew_in(RENEW_BEFORE * 2), RENEW_BEFORE);
        assert_eq!(renew_in(Duration::from_secs(300)), Duration::from_secs(150));
        assert_eq!(renew_in(Duration::from_secs(4)), Duration::from_secs(2));
        assert_eq!(renew_in(Duration::ZERO), MIN_RENEW_WAIT);
    }
}
