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
//! it expires, so a request only reads the kept copy: no network call, no wait on its path.
//! A fetch that fails is retried after [`RETRY_AFTER`], with a warning; until a token exists
//! the route answers such requests with the proxy's 401 (`docs/providers.md#vertex--aiplatformgoogleapiscom--aiplatformgoogleapiscom`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

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
pub const RENEW_BEFORE: Duration = Duration::from_secs(300);

/// How long after a failed fetch the next is tried.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// How long startup waits for each route's first token before it serves anyway (the route
/// then answers with the proxy's 401 until the token arrives).
pub const FIRST_TOKEN_WAIT: Duration = Duration::from_secs(10);

/// One route's token: the kept `Authorization` value, and the last fetch error.
pub(crate) struct TokenSlot {
    bearer: ArcSwapOption<HeaderValue>,
    last_error: ArcSwapOption<String>,
    /// `true` once the first fetch ended, with a token or an error.
    attempted: watch::Sender<bool>,
}

impl TokenSlot {
    fn new() -> Self {
        Self {
            bearer: ArcSwapOption::empty(),
            last_error: ArcSwapOption::empty(),
            attempted: watch::Sender::new(false),
        }
    }

    /// The kept `Authorization: Bearer …` value (marked sensitive), or why there is none.
    pub(crate) fn bearer(&self) -> Result<HeaderValue, String> {
        match self.bearer.load_full() {
            Some(v) => Ok((*v).clone()),
            None => Err(self.last_error.load_full().map_or_else(
                || "the first token is still being fetched".to_owned(),
                |e| (*e).clone(),
            )),
        }
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
/// replaced it). The key file is read off the runtime's threads.
async fn keep_fresh(slot: Weak<TokenSlot>, file: PathBuf, route: String) {
    let read = file.clone();
    let account =
        match tokio::task::spawn_blocking(move || CustomServiceAccount::from_file(read)).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => return fail_for_good(&slot, &route, &file, &chain(&e)),
            Err(e) => return fail_for_good(&slot, &route, &file, &e.to_string()),
        };
    loop {
        let wait = {
            let Some(s) = slot.upgrade() else { return };
            let wait = match account.token(&[SCOPE]).await {
                Ok(token) => match bearer_value(token.as_str()) {
                    Some(v) => {
                        s.bearer.store(Some(Arc::new(v)));
                        s.last_error.store(None);
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs());
                        let expires = u64::try_from(token.expires_at().timestamp()).unwrap_or(0);
                        let left = Duration::from_secs(expires.saturating_sub(now));
                        left.saturating_sub(RENEW_BEFORE).max(RETRY_AFTER)
                    }
                    None => {
                        note_error(
                            &s,
                            &route,
                            "the token endpoint answered a token that is no header value",
                        );
                        RETRY_AFTER
                    }
                },
                Err(e) => {
                    note_error(
                        &s,
                        &route,
                        &format!("fetching an access token failed: {}", chain(&e)),
                    );
                    RETRY_AFTER
                }
            };
            s.attempted.send_replace(true);
            wait
        };
        tokio::time::sleep(wait).await;
    }
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
    tracing::warn!(target: "cachekeeper::google", route = %route, error = %why, "no Google access token for this route yet; requests without a credential get the proxy's 401 until one arrives");
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
        slot.bearer
            .store(Some(Arc::new(bearer_value("t").unwrap())));
        assert_eq!(slot.bearer().unwrap(), "Bearer t");
    }
}
