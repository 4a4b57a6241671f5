//! Sessions, turns and prefix collapses (`docs/accounting.md#turns-and-sessions`).
//!
//! A **turn** is one generation request (not `count_tokens`, not the proxy's own retry). Its
//! **session** is, in this order:
//! 1. the client's `x-cachekeeper-session` header (never forwarded);
//! 2. for an OpenAI Responses request with `previous_response_id`, the session of the
//!    response it names (a chain of response ids, each stored as a [`Kind::ResponseLink`]
//!    record, so instances sharing one Redis follow each other's chains; an id no instance
//!    stored starts a session named after it);
//! 3. derived from the request as received: route, model, credential and the digests of its
//!    tools, system prompt (without Claude Code's billing line) and messages up to the first
//!    user message ([`Prefix::session_anchor`]). A client that edits a later message stays in
//!    its session.
//!
//! Per session the tracker keeps the previous turn's positions as received and as
//! forwarded ([`Prefix`], keyed digests, never bodies), in memory and as a [`Kind::Session`]
//! record under the credential's scope, so turn numbers and collapses survive a restart.
//!
//! A **prefix collapse** is a turn whose forwarded positions differ from the previous turn's
//! at a position the previous turn had ([`Prefix::first_difference`]; the billing line is
//! ignored on Anthropic's own API only, which handles it). Its cause ([`attribute`]):
//! `provider_expiry` when the session was idle longer than the provider's cache TTL (the
//! write would have happened anyway); else the client's, when its own bytes changed at or
//! before that position (`client_tools` / `client_system` / `client_history`); else the
//! proxy pass that changed the forwarded bytes (`eviction`, `repair`, `restore`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hashlink::LruCache;
use serde::{Deserialize, Serialize};

use super::prefix::{DigestKey, Position, Prefix};
use super::record::{TurnRecord, UsageRecord};
use super::{Cause, Collapse, TurnAccount};
use crate::dialect::usage::Usage;
use crate::dialect::Dialect;
use crate::images::retired::RetiredSet;
use crate::json::scan;
use crate::provider::{CacheActivation, ResolvedProvider};
use crate::rewrite::RewriteReport;
use crate::state::load::Reads;
use crate::state::{Kind, Record, RecordKey, Store};

/// The request header that names a session (read, never forwarded).
pub const SESSION_HEADER: &str = "x-cachekeeper-session";

/// Longest `x-cachekeeper-session` value used, bytes; a longer one is cut (at a char
/// boundary).
pub(crate) const MAX_SESSION_ID_BYTES: usize = 128;

/// Sessions kept in memory; past it the least recently active (the one whose last commit is
/// oldest) is forgotten (its record stays in the store). Kept in an LRU
/// list ([`hashlink::LruCache`]): a commit is O(1), not a scan of the map.
pub(crate) const MAX_SESSIONS_IN_MEMORY: usize = 4096;

/// Response ids remembered in memory for `previous_response_id` chains; each is also stored
/// as a [`Kind::ResponseLink`] record, read back when memory does not have it (after a
/// restart, or a response another instance answered).
pub(crate) const MAX_RESPONSE_IDS: usize = 65_536;

/// Payload of a [`Kind::ResponseLink`] record (scope: the credential scope; key: the response
/// id as the provider returned it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ResponseLink {
    /// The session the response was answered in.
    session: String,
}

/// How long a turn's load phase waits for its session's stored record on a memory miss (after
/// a restart), and with a shared store on every turn ([`Reads::latest`]), ms: an async wait
/// ([`Store::load`]), never on the passes' thread.
pub(crate) const SESSION_READ_TIMEOUT: Duration = Duration::from_millis(50);

/// Payload of a [`Kind::Session`] record (and the in-memory state): the previous turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SessionState {
    /// The last turn's number.
    turn: u32,
    /// When the last turn arrived, Unix ms.
    last_ms: i64,
    /// The last turn's positions as the client sent them.
    client: Prefix,
    /// The last turn's positions as forwarded.
    forwarded: Prefix,
    /// The images cold-cache eviction retired in this session (`docs/images.md#cold-cache-eviction`).
    #[serde(default, skip_serializing_if = "RetiredSet::is_empty")]
    retired: RetiredSet,
}

/// A session as memory keeps it: its state and the state before its last turn, each shared
/// ([`Arc`]) with the turns reading them, so opening and committing a turn copy no
/// [`Prefix`].
#[derive(Debug, Clone)]
struct Kept {
    /// The session's state after its last turn.
    state: Arc<SessionState>,
    /// The state before the last turn: what the session goes back to when that turn fails
    /// ([`SessionTracker::end`]).
    before: Option<Arc<SessionState>>,
}

/// What a turn committed on its request leaves for [`SessionTracker::settle`], after its
/// response (`TurnAccount::pending`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The credential scope the session is kept under.
    scope: String,
    /// The comparison with the previous turn (`None`: the session's first turn, or a
    /// chained Responses request).
    compare: Option<Box<Compare>>,
    /// The session's record has been queued ([`SessionTracker::write_state`]).
    state_written: bool,
}

/// The inputs of a turn's collapse comparison, kept from its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Compare {
    /// The previous turn's state (its positions as received and as forwarded).
    prev: Arc<SessionState>,
    /// This turn's state as its commit kept it.
    now: Arc<SessionState>,
    ignore_billing_line: bool,
    idle_ms: Option<u64>,
    /// The provider's cache TTL for the request, ms ([`ttl_ms`]).
    ttl_ms: Option<u64>,
    acted: Acted,
}

impl Compare {
    /// The collapse, if the forwarded positions differ from the previous turn's at a
    /// position the previous turn had ([`Prefix::first_difference`]).
    fn collapse(&self) -> Option<Collapse> {
        let ignore = self.ignore_billing_line;
        let (prev, now) = (&*self.prev, &*self.now);
        let at = now.forwarded.first_difference(&prev.forwarded, ignore)?;
        Some(Collapse {
            at: now.forwarded.location(&prev.forwarded, at, ignore),
            cause: attribute(
                at,
                now.client.first_difference(&prev.client, ignore),
                &now.client,
                self.idle_ms,
                self.ttl_ms,
                &self.acted,
            ),
            write_tokens: None,
        })
    }
}

/// What the proxy's passes did to a turn, as [`attribute`] reads it (from the turn's
/// [`RewriteReport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Acted {
    /// Stabilisers removed something (only they edit `system`).
    stabilized: bool,
    /// Images or their carriers were retired.
    evicted: bool,
    /// Images were repaired, downscaled, replaced or repeat-capped.
    repaired: bool,
    /// Reasoning carriers were restored.
    restored: bool,
}

impl Acted {
    fn of(report: &RewriteReport) -> Self {
        let i = &report.images;
        Self {
            stabilized: report.stabilized > 0,
            evicted: i.retired > 0 || i.carriers_retired > 0,
            repaired: i.repaired + i.downscaled + i.replaced + i.repeat_capped > 0,
            restored: report.restore.turns > 0,
        }
    }
}

/// The cold-cache eviction inputs of a turn (`docs/images.md#cold-cache-eviction`), as its
/// first run of the passes used them; the proxy's one retry runs with the same, so it retires
/// the same images.
#[derive(Debug, Clone, Default)]
pub struct ColdMemo {
    /// The session's retired-image set before this turn.
    pub retired: RetiredSet,
    /// Make a new cold-cache decision: the session's cache went cold ([`Opened::is_cold`]).
    pub cold: bool,
}

/// A session opened for a turn before the passes run ([`SessionTracker::open`]).
#[derive(Debug, Clone)]
pub(crate) struct Opened {
    session: String,
    /// The model the body names (else the caller's).
    model: String,
    /// An OpenAI Responses request chained by `previous_response_id`.
    chained: bool,
    client: Prefix,
    prev: Option<Arc<SessionState>>,
    /// Time since the session's previous turn, ms; `None` when no previous turn is known.
    pub idle_ms: Option<u64>,
}

impl Opened {
    /// The client body's positions (what the turn was opened with).
    pub(crate) fn client_prefix(&self) -> &Prefix {
        &self.client
    }

    /// The session's name.
    pub(crate) fn session(&self) -> &str {
        &self.session
    }

    /// The model the body names (else the caller's).
    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// Whether the session's prompt cache has gone cold: its previous turn is older than
    /// `ttl_ms` ([`cold_ttl_ms`]). `false` when either is unknown.
    pub(crate) fn is_cold(&self, ttl_ms: Option<u64>) -> bool {
        matches!((self.idle_ms, ttl_ms), (Some(idle), Some(ttl)) if idle > ttl)
    }

    /// The cold-cache inputs of this turn on a route with `route_ttl` (its `cache_ttl`) and
    /// `provider`, for `body` (the client's): the session's retired set and whether its cache
    /// went cold ([`cold_ttl_ms`]). The flag is `false` when the session has no record (a new
    /// session, or one whose record was purged or could not be read: no cold-cache decision on
    /// that turn, the step function alone applies); the second value says whether a record
    /// was there.
    pub(crate) fn cold_memo(
        &self,
        route_ttl: Option<crate::caching::CacheTtl>,
        provider: &ResolvedProvider,
        body: &[u8],
    ) -> (ColdMemo, bool) {
        match self.retired() {
            Some(retired) => {
                let ttl = cold_ttl_ms(route_ttl, provider, &self.model, body);
                (
                    ColdMemo {
                        retired: retired.clone(),
                        cold: self.is_cold(ttl),
                    },
                    true,
                )
            }
            None => (ColdMemo::default(), false),
        }
    }

    /// The session's retired-image set; `None` when it has no previous turn on record (a new
    /// session, or one whose record was purged or could not be read).
    pub(crate) fn retired(&self) -> Option<&RetiredSet> {
        self.prev.as_ref().map(|p| &p.retired)
    }
}

/// What [`SessionTracker::begin`] reads of one request.
pub struct TurnInput<'a> {
    pub dialect: Dialect,
    /// The route's name.
    pub route: &'a str,
    /// The route's provider (TTL, first-party Anthropic).
    pub provider: &'a ResolvedProvider,
    /// The model as the request names it.
    pub model: &'a str,
    /// The credential scope (`""` without a credential).
    pub scope: &'a str,
    /// The credential's digest key.
    pub key: &'a DigestKey,
    /// The `x-cachekeeper-session` value, if sent.
    pub client_session: Option<&'a str>,
    /// The body as the client sent it (decoded).
    pub client: &'a [u8],
    /// The body as forwarded (the client's bytes when nothing changed or in dry run).
    pub forwarded: &'a [u8],
    /// What the passes did.
    pub report: &'a RewriteReport,
    /// When the request arrived, Unix ms.
    pub now_ms: i64,
    /// The session's retired-image set after the passes, when they changed it.
    pub retired: Option<&'a RetiredSet>,
}

/// Names sessions, numbers turns and finds collapses; one per proxy.
pub struct SessionTracker {
    store: Store,
    inner: Mutex<Inner>,
}

struct Inner {
    /// (scope, session) → state, at most [`MAX_SESSIONS_IN_MEMORY`], in order of activity
    /// (a commit moves a session to the back; reads and roll-backs do not).
    sessions: LruCache<(String, String), Kept>,
    /// (scope, response id) → session, with insertion order for the bound.
    responses: HashMap<(String, String), String>,
    response_order: std::collections::VecDeque<(String, String)>,
}

impl Default for Inner {
    fn default() -> Self {
        Self::with_capacity(MAX_SESSIONS_IN_MEMORY)
    }
}

impl Inner {
    /// At most `sessions` sessions in memory.
    fn with_capacity(sessions: usize) -> Self {
        Self {
            sessions: LruCache::new(sessions),
            responses: HashMap::new(),
            response_order: std::collections::VecDeque::new(),
        }
    }
}

impl SessionTracker {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Tests: a tracker keeping at most `sessions` sessions in memory.
    #[cfg(test)]
    fn with_capacity(store: Store, sessions: usize) -> Self {
        Self {
            store,
            inner: Mutex::new(Inner::with_capacity(sessions)),
        }
    }

    /// The store the tracker keeps sessions in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Start a turn: [`Self::open`] then [`Self::commit`] (for callers whose passes do not
    /// need the session first). `None` when the body is not a JSON object.
    /// `reads`: the turn's view of the store ([`Reads`]).
    pub fn begin(&self, t: &TurnInput<'_>, reads: &Reads<'_>) -> Option<(TurnAccount, Prefix)> {
        let opened = self.open(t, reads)?;
        Some(self.commit(opened, t))
    }

    /// Tests: [`Self::begin`] with a load phase ([`crate::state::load::with_load`]).
    #[cfg(test)]
    pub(crate) fn begin_loaded(&self, t: &TurnInput<'_>) -> Option<(TurnAccount, Prefix)> {
        let opened = self.open_loaded(t)?;
        Some(self.commit(opened, t))
    }

    /// Tests: [`Self::open`] with a load phase ([`crate::state::load::with_load`]).
    #[cfg(test)]
    pub(crate) fn open_loaded(&self, t: &TurnInput<'_>) -> Option<Opened> {
        crate::state::load::with_load(&self.store, |r| self.open(t, r))
    }

    /// Name the request's session and read its previous turn, before the passes run (they
    /// need its idle time and retired-image set). Reads `dialect`, `route`, `model`, `scope`,
    /// `key`, `client_session`, `client` and `now_ms` of `t`. `None` when the body is not a
    /// JSON object.
    ///
    /// The stored records (the session's state, a response's session) are read through
    /// `reads`: before the request's load phase a record not in memory is wanted by it
    /// ([`Reads::wanting`]), and the turn is opened again on what the load read.
    ///
    /// This form parses `t.client` itself (replay's other variants, tests); the proxy's
    /// pipeline opens over its one parse ([`Self::open_doc`]).
    pub(crate) fn open(&self, t: &TurnInput<'_>, reads: &Reads<'_>) -> Option<Opened> {
        let parsed = crate::json::parse(t.client).ok()?;
        let client = Prefix::of_parsed(t.dialect, &parsed, t.key);
        let model = parsed
            .top
            .get("model")
            .and_then(|m| scan::string_at(parsed.text, &m.value));
        let chained = previous_response_id(t.dialect, parsed.text, &parsed.top);
        self.open_at(t, client, model, chained, reads)
    }

    /// [`Self::open`] over the request's one parse, `doc` (of `t.client`): no parse of its
    /// own.
    pub(crate) fn open_doc(
        &self,
        t: &TurnInput<'_>,
        doc: &crate::dialect::doc::Doc<'_>,
        reads: &Reads<'_>,
    ) -> Option<Opened> {
        let client = Prefix::of_doc(doc, t.key);
        let chained = previous_response_id(t.dialect, doc.text, &doc.top);
        self.open_at(t, client, doc.model.clone(), chained, reads)
    }

    /// [`Self::open`] once the body is read: its positions, the model it names and its
    /// `previous_response_id`.
    fn open_at(
        &self,
        t: &TurnInput<'_>,
        client: Prefix,
        body_model: Option<String>,
        chained: Option<String>,
        reads: &Reads<'_>,
    ) -> Option<Opened> {
        // The model the body names, else the caller's (the path's, for Gemini).
        let model = body_model.unwrap_or_else(|| t.model.to_owned());
        // An empty (or blank) name is no name: the derived session (a `$VAR` that expanded
        // to nothing would otherwise lump every such client into one session "").
        let named = t
            .client_session
            .map(clean_session_id)
            .filter(|s| !s.is_empty());
        let session = match (named, &chained) {
            (Some(s), _) => s,
            (None, Some(prev)) => self
                .response_session(t.scope, prev, reads)
                .unwrap_or_else(|| hex(&t.key.digest(b"chain", &[prev.as_bytes()])[..8])),
            (None, None) => {
                let anchor = client.session_anchor(t.key, t.route, &model)?;
                hex(&anchor[..8])
            }
        };
        if reads.wanting() {
            // The session is named by a response link the load phase reads first.
            return None;
        }
        let map_key = (t.scope.to_owned(), session.clone());
        let cached = self
            .inner
            .lock()
            .ok()
            .and_then(|g| g.sessions.peek(&map_key).map(|k| Arc::clone(&k.state)));
        // With a shared store (several instances on one Redis) the conversation's previous
        // turn may have been answered by another instance: its stored state, not this
        // process's copy, is the previous turn (else two instances number the same turn).
        let prev = if self.store.is_shared() {
            // The later of the two: another instance's turn is in the store, a turn this
            // process committed since the load read it is in memory (the failing input of a
            // break-it pass: turns of one session in parallel on one instance took one
            // number).
            match (self.load(t.scope, &session, reads).map(Arc::new), cached) {
                (Some(stored), Some(mine)) if mine.turn > stored.turn => Some(mine),
                (stored, mine) => stored.or(mine),
            }
        } else {
            cached.or_else(|| self.load(t.scope, &session, reads).map(Arc::new))
        };
        let idle_ms = prev
            .as_ref()
            .map(|p| u64::try_from(t.now_ms.saturating_sub(p.last_ms)).unwrap_or(0));
        Some(Opened {
            session,
            model,
            chained: chained.is_some(),
            client,
            prev,
            idle_ms,
        })
    }

    /// [`Self::commit_turn`] and [`Self::settle`] at once: the turn numbered, its collapse
    /// found and the session's record queued (replay and tests, whose turns have no response
    /// to wait for).
    pub(crate) fn commit(&self, opened: Opened, t: &TurnInput<'_>) -> (TurnAccount, Prefix) {
        let (mut account, forwarded) = self.commit_turn(opened, t);
        self.settle(&mut account);
        (account, forwarded)
    }

    /// Number the opened turn and keep the session's new state in memory, where the next
    /// turn finds it at once: the part of a turn's accounting that stays on the request.
    /// Reads `forwarded`, `report`, `provider`, `retired`, `scope` and `now_ms` of `t`.
    ///
    /// The rest waits in [`TurnAccount::pending`] for [`Self::settle`], after the response:
    /// the comparison with the previous turn that finds a collapse, and the session's
    /// [`Kind::Session`] record (serialised and queued then; with a shared store before the
    /// response's write wait, [`Self::write_state`], so the next turn finds it on any
    /// instance).
    pub(crate) fn commit_turn(&self, opened: Opened, t: &TurnInput<'_>) -> (TurnAccount, Prefix) {
        self.commit_turn_at(opened, t, None)
    }

    /// [`Self::commit_turn`] with the forwarded positions already known (`forwarded`: derived
    /// from the request's one parse and its changes, [`Prefix::after_changes`]); `None`: read
    /// from `t.forwarded` (no parse when it is the client's body).
    pub(crate) fn commit_turn_at(
        &self,
        opened: Opened,
        t: &TurnInput<'_>,
        forwarded: Option<Prefix>,
    ) -> (TurnAccount, Prefix) {
        let known = forwarded;
        let Opened {
            session,
            model,
            chained,
            client,
            prev,
            idle_ms,
        } = opened;
        let forwarded = if let Some(known) = known {
            known
        } else if t.forwarded == t.client {
            client.clone()
        } else {
            Prefix::of(t.dialect, t.forwarded, t.key).unwrap_or_else(|| client.clone())
        };
        let turn = prev.as_ref().map_or(1, |p| p.turn.saturating_add(1));
        let retired = match (t.retired, &prev) {
            (Some(new), _) => new.clone(),
            (None, Some(p)) => p.retired.clone(),
            (None, None) => RetiredSet::default(),
        };
        let state = Arc::new(SessionState {
            turn,
            last_ms: t.now_ms,
            client,
            forwarded: forwarded.clone(),
            retired,
        });
        // A chained Responses request sends only its new items: its positions say nothing
        // of the prefix the provider holds.
        let compare = match &prev {
            Some(p) if !chained => Some(Box::new(Compare {
                prev: Arc::clone(p),
                now: Arc::clone(&state),
                ignore_billing_line: ignores_billing_line(t.provider),
                idle_ms,
                ttl_ms: ttl_ms(t.provider, &model, t.forwarded),
                acted: Acted::of(t.report),
            })),
            _ => None,
        };
        let kept = Kept {
            state,
            before: prev,
        };
        let map_key = (t.scope.to_owned(), session.clone());
        if let Ok(mut g) = self.inner.lock() {
            // Past the bound the least recently active session goes (`LruCache::insert`).
            g.sessions.insert(map_key, kept);
        }
        (
            TurnAccount {
                session,
                turn,
                collapse: None,
                idle_ms,
                pending: Some(Pending {
                    scope: t.scope.to_owned(),
                    compare,
                    state_written: false,
                }),
            },
            forwarded,
        )
    }

    /// The turn's accounting after its response ([`Self::commit_turn`]): its collapse, found
    /// by comparing its forwarded positions with the previous turn's (write tokens are filled
    /// in by the caller from the response's usage), and its session record queued
    /// ([`Self::write_state`]). Does nothing the second time.
    pub fn settle(&self, account: &mut TurnAccount) {
        self.write_state(account);
        let Some(pending) = account.pending.take() else {
            return;
        };
        account.collapse = pending.compare.and_then(|c| c.collapse());
    }

    /// Serialise the session's state as this turn left it and queue it as the session's
    /// [`Kind::Session`] record, once. Skipped when a later turn of the session has been
    /// committed since (its own record supersedes this one).
    pub fn write_state(&self, account: &mut TurnAccount) {
        let Some(pending) = account.pending.as_mut().filter(|p| !p.state_written) else {
            return;
        };
        pending.state_written = true;
        let state = self.inner.lock().ok().and_then(|g| {
            g.sessions
                .peek(&(pending.scope.clone(), account.session.clone()))
                .filter(|k| k.state.turn == account.turn)
                .map(|k| Arc::clone(&k.state))
        });
        if let Some(v) = state.and_then(|s| serde_json::to_vec(&*s).ok()) {
            self.store.put(Record::new(
                Kind::Session,
                &pending.scope,
                &account.session,
                v,
            ));
        }
    }

    /// The proxy's one retry sent other bytes: they are what the next turn compares with.
    /// `retired`: the retry's retired-image set, when its passes changed it.
    pub fn replace_forwarded(
        &self,
        scope: &str,
        account: &TurnAccount,
        forwarded: Prefix,
        retired: Option<RetiredSet>,
    ) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        let key = (scope.to_owned(), account.session.clone());
        if let Some(k) = g
            .sessions
            .peek_mut(&key)
            .filter(|k| k.state.turn == account.turn)
        {
            // A copy when a turn still reads the old state (its comparison keeps what the
            // commit saw).
            let s = Arc::make_mut(&mut k.state);
            s.forwarded = forwarded;
            if let Some(r) = retired {
                s.retired = r;
            }
            if account.pending.as_ref().is_some_and(|p| !p.state_written) {
                // The turn's own record, written after the response, carries this.
                return;
            }
            if let Ok(v) = serde_json::to_vec(&*s) {
                self.store
                    .put(Record::new(Kind::Session, scope, &account.session, v));
            }
        }
    }

    /// End a turn: remember a Responses response id for its chain, and store the turn's
    /// record. A turn the provider refused (status not 2xx: it read and wrote no cache) is
    /// forgotten as the session's last turn — the next turn compares with the one before it,
    /// so a client's retry of a refused request carries the collapse and its write tokens —
    /// while its number stays taken.
    pub fn end(&self, scope: &str, response_id: Option<&str>, record: &TurnRecord) {
        if let Some(id) = response_id {
            self.link_response(scope, id, &record.session);
        }
        if !(200..300).contains(&record.status) {
            self.roll_back(scope, record);
        }
        if let Some(rec) = record.to_record(scope) {
            // Read back only by the report and the dashboard (through the backend).
            self.store.write(rec);
        }
    }

    /// The session's state as it was before `record`'s turn, keeping the turn number.
    fn roll_back(&self, scope: &str, record: &TurnRecord) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        let key = (scope.to_owned(), record.session.clone());
        let Some(current) = g
            .sessions
            .peek(&key)
            .filter(|k| k.state.turn == record.turn)
        else {
            return;
        };
        let restored = match current.before.as_deref() {
            Some(before) => SessionState {
                turn: record.turn,
                ..before.clone()
            },
            None => {
                // The session's first turn failed: nothing to compare the next one with.
                g.sessions.remove(&key);
                self.store.delete(&RecordKey {
                    kind: Kind::Session,
                    scope: scope.to_owned(),
                    key: record.session.clone(),
                });
                return;
            }
        };
        if let Ok(v) = serde_json::to_vec(&restored) {
            self.store
                .put(Record::new(Kind::Session, scope, &record.session, v));
        }
        // In place: a roll-back keeps the session where its failed turn's commit put it.
        if let Some(k) = g.sessions.peek_mut(&key) {
            *k = Kept {
                state: Arc::new(restored),
                before: None,
            };
        }
    }

    fn load(&self, scope: &str, session: &str, reads: &Reads<'_>) -> Option<SessionState> {
        let key = RecordKey {
            kind: Kind::Session,
            scope: scope.to_owned(),
            key: session.to_owned(),
        };
        let rec = reads.latest(&key, SESSION_READ_TIMEOUT)?;
        serde_json::from_slice(&rec.value).ok()
    }

    /// The session of response `id` under `scope`: this process's map, else the stored
    /// [`Kind::ResponseLink`] record (written by whichever instance answered the response;
    /// with a shared store read from the backend, waiting at most [`SESSION_READ_TIMEOUT`]).
    /// A record found is kept in the map. `None`: the id is unknown (or the store did not
    /// answer in time), and the request starts a session of its own.
    fn response_session(&self, scope: &str, id: &str, reads: &Reads<'_>) -> Option<String> {
        let k = (scope.to_owned(), id.to_owned());
        if let Some(s) = self.inner.lock().ok()?.responses.get(&k).cloned() {
            return Some(s);
        }
        let key = RecordKey {
            kind: Kind::ResponseLink,
            scope: scope.to_owned(),
            key: id.to_owned(),
        };
        let rec = reads.latest(&key, SESSION_READ_TIMEOUT)?;
        let link: ResponseLink = serde_json::from_slice(&rec.value).ok()?;
        self.remember_response(k, link.session.clone());
        Some(link.session)
    }

    /// Link response `id` to `session` under `scope`: in memory and as a
    /// [`Kind::ResponseLink`] record (queued; other instances on a shared store read it, as
    /// does this one after a restart). Called when the response completed,
    /// before its last chunk goes (so the chunk's write wait covers it: `[state]
    /// write_wait_ms`), and again at the turn's end, which then writes nothing.
    pub fn link_response(&self, scope: &str, id: &str, session: &str) {
        let linked = self.inner.lock().ok().is_some_and(|g| {
            g.responses
                .get(&(scope.to_owned(), id.to_owned()))
                .map(String::as_str)
                == Some(session)
        });
        if linked {
            return;
        }
        let link = ResponseLink {
            session: session.to_owned(),
        };
        if let Ok(v) = serde_json::to_vec(&link) {
            // Only a chained request on a memory miss reads it back: not kept in the read
            // cache (the map holds it).
            self.store
                .write(Record::new(Kind::ResponseLink, scope, id, v));
        }
        self.remember_response((scope.to_owned(), id.to_owned()), session.to_owned());
    }

    /// Keep (scope, response id) → session in memory, the oldest of [`MAX_RESPONSE_IDS`]
    /// forgotten first (its record stays in the store).
    fn remember_response(&self, k: (String, String), session: String) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        if g.responses.insert(k.clone(), session).is_none() {
            g.response_order.push_back(k);
        }
        while g.responses.len() > MAX_RESPONSE_IDS {
            match g.response_order.pop_front() {
                Some(old) => {
                    g.responses.remove(&old);
                }
                None => break,
            }
        }
    }
}

/// The billing line is ignored only on Anthropic's own API, which handles it; elsewhere its
/// churn is real.
fn ignores_billing_line(provider: &ResolvedProvider) -> bool {
    provider.row.name == "anthropic"
}

/// The cache TTL that applies to this request, ms: the provider rule's, or its long TTL
/// when the request asks for it (Anthropic `"ttl":"1h"` markers, OpenAI
/// `prompt_cache_retention: "24h"`). `None`: not published.
fn ttl_ms(provider: &ResolvedProvider, model: &str, body: &[u8]) -> Option<u64> {
    let rule = provider.row.cache_rule(model)?;
    let text = std::str::from_utf8(body).unwrap_or("");
    let asks_long = match rule.activation {
        CacheActivation::Explicit => {
            text.contains("\"ttl\":\"1h\"") || text.contains("\"ttl\": \"1h\"")
        }
        CacheActivation::Automatic => {
            text.contains("\"prompt_cache_retention\":\"24h\"")
                || text.contains("\"prompt_cache_retention\": \"24h\"")
        }
    };
    let ttl_s = match (asks_long, rule.long_ttl) {
        (true, Some((long, _))) => long,
        _ => rule.ttl_s?,
    };
    Some(u64::from(ttl_s) * 1000)
}

/// The cache TTL cold-cache eviction judges a session's idle time by, ms
/// (`docs/images.md#cold-cache-eviction`): the route's `cache_ttl` when it sets one; else, on a
/// provider whose cache is filled by explicit breakpoints (Anthropic), its rule's TTL (the long
/// one when the request's markers ask for it); else `None` — off where the TTL is unknown or
/// long (OpenAI keeps prefixes for hours, DeepSeek and Gemini publish none).
pub(crate) fn cold_ttl_ms(
    route_ttl: Option<crate::caching::CacheTtl>,
    provider: &ResolvedProvider,
    model: &str,
    body: &[u8],
) -> Option<u64> {
    if let Some(t) = route_ttl {
        return Some(t.ms());
    }
    let rule = provider.row.cache_rule(model)?;
    if rule.activation != CacheActivation::Explicit {
        return None;
    }
    ttl_ms(provider, model, body)
}

/// The cause of a collapse at `at` (forwarded bytes), given where the client's own bytes
/// first changed (`client_at`).
fn attribute(
    at: Position,
    client_at: Option<Position>,
    client: &Prefix,
    idle_ms: Option<u64>,
    ttl_ms: Option<u64>,
    acted: &Acted,
) -> Cause {
    if let (Some(idle), Some(ttl)) = (idle_ms, ttl_ms) {
        if idle > ttl {
            return Cause::ProviderExpiry;
        }
    }
    if let Some(c) = client_at.filter(|c| *c <= at) {
        return match c {
            Position::Tools => Cause::ClientTools,
            Position::System => Cause::ClientSystem,
            Position::Message(i) if client.is_system_like(i) => Cause::ClientSystem,
            Position::Message(_) => Cause::ClientHistory,
        };
    }
    // Only a stabiliser edits `system` (images and carriers live in messages).
    if at == Position::System && acted.stabilized {
        return Cause::Stabiliser;
    }
    if acted.evicted {
        Cause::Eviction
    } else if acted.repaired {
        Cause::Repair
    } else if acted.restored {
        Cause::Restore
    } else {
        // The proxy's bytes changed with none of its passes acting on this turn: the passes
        // acted on the previous turn (a retire count that stepped down, a carrier no longer
        // found), so the previous turn's edits are what changed.
        Cause::ClientHistory
    }
}

/// The Responses request's `previous_response_id` (`top` is its top-level object in
/// `text`), when it is a non-empty string; `None` on the other dialects.
fn previous_response_id(dialect: Dialect, text: &str, top: &scan::Object) -> Option<String> {
    let m = top.get(dialect.format().previous_response_key()?)?;
    scan::string_at(text, &m.value).filter(|s| !s.is_empty())
}

/// The client's session name, trimmed, cut to [`MAX_SESSION_ID_BYTES`] and without control
/// characters (empty when nothing is left: the caller then derives the session).
fn clean_session_id(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_SESSION_ID_BYTES));
    for c in s.trim().chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_SESSION_ID_BYTES {
            break;
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stored record of a finished turn.
#[allow(clippy::too_many_arguments)]
pub fn turn_record(
    account: &TurnAccount,
    ts_ms: i64,
    route: &str,
    provider: &str,
    model: &str,
    streamed: bool,
    status: u16,
    usage: Usage,
    report: &RewriteReport,
) -> TurnRecord {
    TurnRecord {
        session: account.session.clone(),
        turn: account.turn,
        ts_ms,
        route: route.to_owned(),
        provider: provider.to_owned(),
        model: model.to_owned(),
        streamed,
        status,
        usage: UsageRecord::from(usage),
        passes: report
            .counters()
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| (k.to_owned(), v as u64))
            .collect(),
        collapse: account.collapse.clone(),
        idle_ms: account.idle_ms,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::disallowed_methods)]
    use super::*;
    use crate::caching::CacheTtl;
    use crate::state::MemoryBackend;

    const MIN: i64 = 60_000;

    fn store() -> Store {
        Store::with_backend(Box::new(MemoryBackend::new()), 0, u64::MAX, 1 << 20)
    }

    fn anthropic() -> ResolvedProvider {
        ResolvedProvider::resolve(None, "api.anthropic.com", None)
    }

    fn deepseek() -> ResolvedProvider {
        ResolvedProvider::resolve(None, "api.deepseek.com", None)
    }

    /// Ends `account`'s turn as the proxy does once the response is done: a non-streamed
    /// turn of `provider` (route of the same name) with `status`, no usage and no rewrites,
    /// answered as `response_id` when the API names its responses.
    fn end_turn(
        tracker: &SessionTracker,
        scope: &str,
        account: &TurnAccount,
        ts_ms: i64,
        (provider, model): (&str, &str),
        status: u16,
        response_id: Option<&str>,
    ) {
        let none = RewriteReport::default();
        let rec = turn_record(
            account,
            ts_ms,
            provider,
            provider,
            model,
            false,
            status,
            Usage::default(),
            &none,
        );
        tracker.end(scope, response_id, &rec);
    }

    /// An Anthropic body: system, tools and `n` messages, message `i` = `"m{i}"` unless
    /// `edit` names it; markers on the newest message, as Claude Code places them.
    fn body(system: &str, n: usize, edit: Option<usize>) -> Vec<u8> {
        let msgs: Vec<String> = (0..n)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                let text = if edit == Some(i) {
                    format!("edited {i}")
                } else {
                    format!("m{i}")
                };
                let marker = if i + 1 == n {
                    r#","cache_control":{"type":"ephemeral"}"#
                } else {
                    ""
                };
                format!(
                    r#"{{"role":"{role}","content":[{{"type":"text","text":"{text}"{marker}}}]}}"#
                )
            })
            .collect();
        format!(
            r#"{{"model":"claude-x","system":{system},"tools":[{{"name":"bash"}}],"messages":[{}]}}"#,
            msgs.join(",")
        )
        .into_bytes()
    }

    struct Run<'a> {
        tracker: &'a SessionTracker,
        provider: ResolvedProvider,
        key: DigestKey,
    }

    impl Run<'_> {
        fn turn(
            &self,
            client: &[u8],
            forwarded: &[u8],
            report: &RewriteReport,
            now_ms: i64,
        ) -> TurnAccount {
            self.tracker
                .begin_loaded(&TurnInput {
                    dialect: Dialect::Anthropic,
                    route: "anthropic",
                    provider: &self.provider,
                    model: "claude-x",
                    scope: "scope",
                    key: &self.key,
                    client_session: None,
                    client,
                    forwarded,
                    report,
                    now_ms,
                    retired: None,
                })
                .unwrap()
                .0
        }
    }

    fn run(tracker: &SessionTracker, provider: ResolvedProvider) -> Run<'_> {
        Run {
            tracker,
            provider,
            key: DigestKey::for_credential(None),
        }
    }

    /// A store on `server`'s database 0, as an instance on a shared Redis opens it.
    fn redis_store(server: &crate::state::redis::test_server::RedisServer) -> Store {
        use crate::state::redis::{RedisBackend, RedisOptions};
        let b = RedisBackend::open(&RedisOptions {
            url: server.url(0),
            read_timeout: Duration::from_secs(10),
            retention_days: 0,
            ca_file: None,
        })
        .unwrap();
        Store::with_backend(Box::new(b), 0, u64::MAX, 1 << 20)
    }

    /// Past the bound the least recently committed session is forgotten (a read does not
    /// count as activity), in O(1); a forgotten session's record stays in the store, so its
    /// next turn is numbered on.
    #[test]
    fn past_the_bound_the_least_recently_committed_session_goes() {
        let tracker = SessionTracker::with_capacity(store(), 3);
        let p = anthropic();
        let key = DigestKey::for_credential(None);
        let none = RewriteReport::default();
        let b = body(r#""S""#, 1, None);
        let turn = |session: &str, now_ms: i64| {
            tracker
                .begin_loaded(&TurnInput {
                    dialect: Dialect::Anthropic,
                    route: "anthropic",
                    provider: &p,
                    model: "claude-x",
                    scope: "scope",
                    key: &key,
                    client_session: Some(session),
                    client: &b,
                    forwarded: &b,
                    report: &none,
                    now_ms,
                    retired: None,
                })
                .unwrap()
                .0
                .turn
        };
        let in_memory = || -> Vec<String> {
            let g = tracker.inner.lock().unwrap();
            g.sessions.iter().map(|((_, s), _)| s.clone()).collect()
        };
        assert_eq!(turn("a", 1_000), 1);
        assert_eq!(turn("b", 2_000), 1);
        assert_eq!(turn("c", 3_000), 1);
        assert_eq!(in_memory(), ["a", "b", "c"]);
        // "a" again: now the most recent; opening "b" (a read) does not move it.
        assert_eq!(turn("a", 4_000), 2);
        assert!(tracker
            .open_loaded(&TurnInput {
                dialect: Dialect::Anthropic,
                route: "anthropic",
                provider: &p,
                model: "claude-x",
                scope: "scope",
                key: &key,
                client_session: Some("b"),
                client: &b,
                forwarded: &b,
                report: &none,
                now_ms: 4_500,
                retired: None,
            })
            .is_some());
        assert_eq!(in_memory(), ["b", "c", "a"]);
        // A fourth session: "b" goes, the three most recently committed stay.
        assert_eq!(turn("d", 5_000), 1);
        assert_eq!(in_memory(), ["c", "a", "d"]);
        assert_eq!(turn("e", 6_000), 1);
        assert_eq!(in_memory(), ["a", "d", "e"]);
        // "b"'s record is still in the store: its next turn is its second.
        assert_eq!(turn("b", 7_000), 2);
        assert_eq!(in_memory(), ["d", "e", "b"]);
    }

    /// The failing input of a break-it pass: on one instance with Redis, a turn whose load
    /// read the session's record before a parallel turn of the same session committed took
    /// that turn's number too (the stored record was preferred to the newer one in memory).
    /// The later of the two is the previous turn.
    #[test]
    fn a_turn_committed_while_another_loaded_is_not_numbered_twice() {
        use crate::state::load::{Reads, Snapshot};
        let server = crate::state::redis::test_server::RedisServer::start();
        let s = redis_store(&server);
        let tracker = SessionTracker::new(s.clone());
        let p = anthropic();
        let key = DigestKey::for_credential(None);
        let none = RewriteReport::default();
        let b1 = body(r#""S""#, 1, None);
        let t = opened_input(&p, &key, &b1, &none, 0, None);
        let (first, _) = tracker.begin_loaded(&t).unwrap();
        assert_eq!(first.turn, 1);
        s.flush();
        // Turn B's load phase reads the record (turn 1) ...
        let before = Snapshot::before_load();
        let reads = Reads::new(&s, &before);
        assert!(tracker.open(&t, &reads).is_some());
        assert!(
            reads.wanting(),
            "with Redis every turn reads its session's record"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let loaded = Snapshot::before_load().after(rt.block_on(s.load(&reads.wants())), 1);
        // ... then turn C, in parallel, commits turn 2 before B runs on what it loaded.
        let (c, _) = tracker.begin_loaded(&t).unwrap();
        assert_eq!(c.turn, 2);
        let opened = tracker.open(&t, &Reads::new(&s, &loaded)).unwrap();
        let (b, _) = tracker.commit(opened, &t);
        assert_eq!(b.turn, 3);
    }

    /// Two instances on one Redis, a conversation alternating between them on every turn:
    /// each numbers its turn after the other's, so the turns are 1, 2, 3, 4 in one session
    /// (each instance's own copy of the session is stale after the other's turn).
    #[test]
    fn turns_alternating_between_two_instances_on_one_redis_number_in_order() {
        let server = crate::state::redis::test_server::RedisServer::start();
        let store = || redis_store(&server);
        let (sa, sb) = (store(), store());
        assert!(sa.is_shared());
        let (a, b) = (
            SessionTracker::new(sa.clone()),
            SessionTracker::new(sb.clone()),
        );
        let (ra, rb) = (run(&a, anthropic()), run(&b, anthropic()));
        let none = RewriteReport::default();
        let mut turns = Vec::new();
        for (i, n) in [1usize, 3, 5, 7].into_iter().enumerate() {
            let body = body(r#""S""#, n, None);
            let r = if i % 2 == 0 { &ra } else { &rb };
            turns.push(r.turn(&body, &body, &none, i as i64 * MIN));
            // The turn's records reach Redis before the next turn (what write_wait_ms is for).
            sa.flush();
            sb.flush();
        }
        assert_eq!(
            turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert!(turns.iter().all(|t| t.session == turns[0].session));
        assert!(turns.iter().all(|t| t.collapse.is_none()), "{turns:?}");
    }

    /// Two instances on one Redis, a Responses conversation chained by
    /// `previous_response_id` alone (no session header), alternating between them: each
    /// instance finds the session of the response the other answered, so the turns are 1, 2,
    /// 3, 4 in one session. A third credential's request naming the same id does not join it
    /// (the link is per credential scope).
    #[test]
    fn a_responses_chain_alternating_between_two_instances_stays_one_session() {
        let server = crate::state::redis::test_server::RedisServer::start();
        let store = || redis_store(&server);
        let (sa, sb) = (store(), store());
        let (a, b) = (
            SessionTracker::new(sa.clone()),
            SessionTracker::new(sb.clone()),
        );
        let key = DigestKey::for_credential(None);
        let openai = ResolvedProvider::resolve(None, "api.openai.com", None);
        let none = RewriteReport::default();
        let turn = |tracker: &SessionTracker, scope: &str, prev: Option<&str>, now_ms: i64| {
            let extra = prev
                .map(|p| format!(r#","previous_response_id":"{p}""#))
                .unwrap_or_default();
            let body = format!(r#"{{"model":"gpt-5","input":"hi {now_ms}"{extra}}}"#);
            tracker
                .begin_loaded(&TurnInput {
                    dialect: Dialect::OpenaiResponses,
                    route: "openai",
                    provider: &openai,
                    model: "gpt-5",
                    scope,
                    key: &key,
                    client_session: None,
                    client: body.as_bytes(),
                    forwarded: body.as_bytes(),
                    report: &none,
                    now_ms,
                    retired: None,
                })
                .unwrap()
                .0
        };
        let mut turns = Vec::new();
        let mut prev: Option<String> = None;
        for i in 0..4i64 {
            let tracker = if i % 2 == 0 { &a } else { &b };
            let t = turn(tracker, "scope", prev.as_deref(), i * MIN);
            let id = format!("resp_{i}");
            end_turn(
                tracker,
                "scope",
                &t,
                i * MIN,
                ("openai", "gpt-5"),
                200,
                Some(&id),
            );
            prev = Some(id);
            turns.push(t);
            // The turn's records reach Redis before the next turn (what write_wait_ms is for).
            sa.flush();
            sb.flush();
        }
        assert_eq!(
            turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert!(
            turns.iter().all(|t| t.session == turns[0].session),
            "{turns:?}"
        );
        // Another credential naming the same response id starts a session of its own.
        let other = turn(&b, "other scope", Some("resp_3"), 5 * MIN);
        assert_ne!(other.session, turns[0].session);
        assert_eq!(other.turn, 1);
        // A restarted instance (empty memory) still follows the chain from the store.
        let c = SessionTracker::new(store());
        let t = turn(&c, "scope", Some("resp_3"), 6 * MIN);
        assert_eq!((t.session.as_str(), t.turn), (turns[0].session.as_str(), 5));
    }

    /// Bug B5, the failing input: two API keys sending `x-cachekeeper-session: shared3` each
    /// get turn 1 (turns are numbered per credential scope), and both usage records are kept
    /// (they were stored under one key, the second replacing the first): the report shows
    /// the two turns under the one name.
    #[test]
    fn one_session_name_under_two_credentials_keeps_both_turns() {
        let s = store();
        let tracker = SessionTracker::new(s.clone());
        let p = anthropic();
        let none = RewriteReport::default();
        let b = body(r#""S""#, 1, None);
        let mut turns = Vec::new();
        for scope in ["scope-key-1", "scope-key-2"] {
            let key = DigestKey::for_credential(None);
            let t = TurnInput {
                client_session: Some("shared3"),
                scope,
                ..opened_input(&p, &key, &b, &none, 0, None)
            };
            let (account, _) = tracker.begin_loaded(&t).unwrap();
            end_turn(
                &tracker,
                scope,
                &account,
                0,
                ("anthropic", "claude-x"),
                200,
                None,
            );
            turns.push(account);
        }
        assert_eq!(
            turns
                .iter()
                .map(|t| (t.session.as_str(), t.turn))
                .collect::<Vec<_>>(),
            [("shared3", 1), ("shared3", 1)]
        );
        s.flush();
        let stored = crate::accounting::record::load_turns(&s, Duration::from_secs(5));
        assert_eq!(stored.len(), 2, "{stored:?}");
        let pricing = crate::accounting::pricing::Pricing::new(&[]);
        let detail =
            crate::accounting::summary::session_detail(&stored, &pricing, "shared3", None).unwrap();
        assert_eq!(detail.summary.turns, 2);
        assert_eq!(
            detail.turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
            [1, 1]
        );
    }

    #[test]
    fn a_client_edit_of_message_3_is_one_collapse_in_the_same_session() {
        let tracker = SessionTracker::new(store());
        let r = run(&tracker, anthropic());
        let none = RewriteReport::default();
        let sys = r#""S""#;
        let mut turns = Vec::new();
        for (i, n) in [1usize, 3, 5].into_iter().enumerate() {
            let b = body(sys, n, None);
            turns.push(r.turn(&b, &b, &none, i as i64 * MIN));
        }
        let edited = body(sys, 7, Some(3));
        turns.push(r.turn(&edited, &edited, &none, 3 * MIN));
        let b = body(sys, 9, Some(3));
        turns.push(r.turn(&b, &b, &none, 4 * MIN));
        let sessions: std::collections::BTreeSet<&str> =
            turns.iter().map(|t| t.session.as_str()).collect();
        assert_eq!(sessions.len(), 1, "one session: {sessions:?}");
        assert_eq!(
            turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        let collapses: Vec<_> = turns.iter().filter_map(|t| t.collapse.clone()).collect();
        assert_eq!(
            collapses,
            [Collapse {
                at: "messages[3]".into(),
                cause: Cause::ClientHistory,
                write_tokens: None
            }]
        );
        assert_eq!(turns[3].idle_ms, Some(60_000));
        assert_eq!(turns[3].session.len(), 16);
    }

    /// The failing input: a history edit refused with a 529 took the collapse (with no write
    /// tokens), and the client's successful retry, which did write the cache, showed none.
    #[test]
    fn a_refused_turn_leaves_the_collapse_to_the_retry() {
        let tracker = SessionTracker::new(store());
        let r = run(&tracker, anthropic());
        let none = RewriteReport::default();
        let b1 = body(r#""S""#, 3, None);
        r.turn(&b1, &b1, &none, 0);
        let edited = body(r#""S""#, 5, Some(1));
        let refused = r.turn(&edited, &edited, &none, MIN);
        assert!(refused.collapse.is_some());
        end_turn(
            &tracker,
            "scope",
            &refused,
            MIN,
            ("anthropic", "claude-x"),
            529,
            None,
        );
        let retry = r.turn(&edited, &edited, &none, 2 * MIN);
        assert_eq!(retry.turn, 3, "the refused turn keeps its number");
        assert_eq!(
            retry.collapse.map(|c| (c.at, c.cause)),
            Some(("messages[1]".to_owned(), Cause::ClientHistory))
        );
        assert_eq!(
            retry.idle_ms,
            Some(2 * MIN as u64),
            "idle since the last turn that was answered"
        );
        // A refused first turn leaves nothing to compare with.
        let tracker = SessionTracker::new(store());
        let r = run(&tracker, anthropic());
        let first = r.turn(&b1, &b1, &none, 0);
        end_turn(
            &tracker,
            "scope",
            &first,
            0,
            ("anthropic", "claude-x"),
            500,
            None,
        );
        assert_eq!(r.turn(&edited, &edited, &none, MIN).collapse, None);
    }

    #[test]
    fn an_eviction_batch_is_attributed_to_eviction() {
        let tracker = SessionTracker::new(store());
        let r = run(&tracker, anthropic());
        let none = RewriteReport::default();
        let b1 = body(r#""S""#, 5, None);
        r.turn(&b1, &b1, &none, 0);
        // The proxy retires an image in message 2: the client's bytes keep their prefix.
        let b2 = body(r#""S""#, 7, None);
        let fwd = body(r#""S""#, 7, Some(2));
        let mut report = RewriteReport::default();
        report.images.retired = 8;
        let t = r.turn(&b2, &fwd, &report, MIN);
        let c = t.collapse.unwrap();
        assert_eq!((c.at.as_str(), c.cause), ("messages[2]", Cause::Eviction));
        // The next turn keeps the retired bytes: no collapse.
        let b3 = body(r#""S""#, 9, None);
        let fwd3 = body(r#""S""#, 9, Some(2));
        assert_eq!(r.turn(&b3, &fwd3, &report, 2 * MIN).collapse, None);
    }

    #[test]
    fn idle_past_the_ttl_is_provider_expiry_even_with_an_edit() {
        let tracker = SessionTracker::new(store());
        let r = run(&tracker, anthropic());
        let none = RewriteReport::default();
        let b1 = body(r#""S""#, 3, None);
        r.turn(&b1, &b1, &none, 0);
        let b2 = body(r#""S""#, 5, Some(1));
        // Anthropic's default TTL is 5 minutes.
        let t = r.turn(&b2, &b2, &none, 5 * MIN + 1);
        assert_eq!(t.collapse.unwrap().cause, Cause::ProviderExpiry);
        // A 1-hour marker keeps it alive for an hour.
        let one_h = String::from_utf8(body(r#""S""#, 7, Some(2)))
            .unwrap()
            .replace(
                r#"{"type":"ephemeral"}"#,
                r#"{"type":"ephemeral","ttl":"1h"}"#,
            );
        let t = r.turn(one_h.as_bytes(), one_h.as_bytes(), &none, 20 * MIN);
        assert_eq!(t.collapse.unwrap().cause, Cause::ClientHistory);
    }

    /// A system prompt the client kept while the forwarded one changed, on a turn a
    /// stabiliser acted on (e.g. the first turn after `stabilize` was turned on).
    #[test]
    fn a_stabiliser_is_the_cause_of_a_system_change_it_made() {
        let key = DigestKey::for_credential(None);
        let client = Prefix::of(
            Dialect::Anthropic,
            br#"{"model":"m","system":"s","messages":[]}"#,
            &key,
        )
        .unwrap();
        let report = RewriteReport {
            stabilized: 1,
            ..RewriteReport::default()
        };
        let cause = |at| attribute(at, None, &client, None, None, &Acted::of(&report));
        assert_eq!(cause(Position::System), Cause::Stabiliser);
        assert_eq!(cause(Position::Message(0)), Cause::ClientHistory);
        let system = Some(Position::System);
        assert_eq!(
            attribute(
                Position::System,
                system,
                &client,
                None,
                None,
                &Acted::of(&report)
            ),
            Cause::ClientSystem
        );
    }

    #[test]
    fn claude_codes_billing_line_one_session_and_a_collapse_only_off_anthropic() {
        let sys = |cch: &str| {
            format!(
                r#"[{{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.014; cc_entrypoint=sdk-cli; cch={cch};"}},{{"type":"text","text":"You are Claude Code.","cache_control":{{"type":"ephemeral"}}}}]"#
            )
        };
        let none = RewriteReport::default();
        for (provider, collapse) in [(anthropic(), None), (deepseek(), Some(Cause::ClientSystem))] {
            let tracker = SessionTracker::new(store());
            let r = run(&tracker, provider);
            let b1 = body(&sys("a4c23"), 1, None);
            let t1 = r.turn(&b1, &b1, &none, 0);
            let b2 = body(&sys("6b943"), 3, None);
            let t2 = r.turn(&b2, &b2, &none, MIN);
            assert_eq!(t1.session, t2.session);
            assert_eq!(t2.turn, 2);
            assert_eq!(
                t2.collapse.map(|c| (c.at, c.cause)),
                // The billing line is system[0]: the collapse names the block.
                collapse.map(|c| ("system[0]".to_owned(), c))
            );
        }
    }

    #[test]
    fn sessions_survive_a_restart_and_are_named_by_the_header_or_the_chain() {
        let s = store();
        let b1 = body(r#""S""#, 1, None);
        let b2 = body(r#""S""#, 3, Some(0));
        let none = RewriteReport::default();
        {
            let tracker = SessionTracker::new(s.clone());
            run(&tracker, anthropic()).turn(&b1, &b1, &none, 0);
        }
        s.flush();
        let tracker = SessionTracker::new(s.clone());
        let t = run(&tracker, anthropic()).turn(&body(r#""S""#, 3, None), &b1, &none, MIN);
        assert_eq!(t.turn, 2, "the turn number survives a restart");
        // Editing the first user message starts another session.
        let t = run(&tracker, anthropic()).turn(&b2, &b2, &none, MIN);
        assert_eq!(t.turn, 1);
        // The header names the session.
        let key = DigestKey::for_credential(None);
        let p = anthropic();
        let named = |session: &'static str| TurnInput {
            dialect: Dialect::Anthropic,
            route: "anthropic",
            provider: &p,
            model: "claude-x",
            scope: "",
            key: &key,
            client_session: Some(session),
            client: &b1,
            forwarded: &b1,
            report: &none,
            now_ms: 0,
            retired: None,
        };
        let (a, _) = tracker.begin_loaded(&named("  my\tsession ")).unwrap();
        assert_eq!(a.session, "mysession");
        // A Responses chain: the response id links the next request.
        let openai = ResolvedProvider::resolve(None, "api.openai.com", None);
        let chained = |prev: Option<&str>| {
            let extra = prev
                .map(|p| format!(r#","previous_response_id":"{p}""#))
                .unwrap_or_default();
            format!(r#"{{"model":"gpt-5","input":"hi"{extra}}}"#).into_bytes()
        };
        let first = chained(None);
        let begin = |b: &[u8]| {
            tracker
                .begin_loaded(&TurnInput {
                    dialect: Dialect::OpenaiResponses,
                    route: "openai",
                    provider: &openai,
                    model: "gpt-5",
                    scope: "",
                    key: &key,
                    client_session: None,
                    client: b,
                    forwarded: b,
                    report: &none,
                    now_ms: 0,
                    retired: None,
                })
                .unwrap()
                .0
        };
        let t1 = begin(&first);
        end_turn(
            &tracker,
            "",
            &t1,
            0,
            ("openai", "gpt-5"),
            200,
            Some("resp_1"),
        );
        let t2 = begin(&chained(Some("resp_1")));
        assert_eq!(
            (t2.session.as_str(), t2.turn, t2.collapse.clone()),
            (t1.session.as_str(), 2, None)
        );
        let t3 = begin(&chained(Some("resp_unknown")));
        assert_ne!(t3.session, t1.session);
    }

    /// Issue 27: what the request path does of a turn's accounting is the in-memory state
    /// (the next turn numbers after it at once); the collapse comparison and the session's
    /// record wait for [`SessionTracker::settle`], after the response.
    #[test]
    fn a_committed_turn_leaves_its_collapse_and_record_for_after_the_response() {
        let s = store();
        let tracker = SessionTracker::new(s.clone());
        let p = anthropic();
        let key = DigestKey::for_credential(None);
        let none = RewriteReport::default();
        let b1 = body(r#""S""#, 3, None);
        tracker
            .begin_loaded(&opened_input(&p, &key, &b1, &none, 0, None))
            .unwrap();
        // The client edits an earlier message: a collapse at `messages[1]`.
        let b2 = body(r#""S""#, 5, Some(1));
        let t2 = opened_input(&p, &key, &b2, &none, 1_000, None);
        let o = tracker.open_loaded(&t2).unwrap();
        let session = o.session().to_owned();
        let (mut account, _) = tracker.commit_turn(o, &t2);
        assert_eq!((account.turn, account.collapse.clone()), (2, None));
        s.flush();
        let stored = |s: &Store| {
            let rec = s
                .get(
                    &RecordKey {
                        kind: Kind::Session,
                        scope: "scope".to_owned(),
                        key: session.clone(),
                    },
                    Duration::from_secs(1),
                )
                .unwrap();
            serde_json::from_slice::<SessionState>(&rec.value)
                .unwrap()
                .turn
        };
        assert_eq!(
            stored(&s),
            1,
            "turn 2's record is not written on the request"
        );
        // The next turn already numbers after it (memory).
        let o3 = tracker.open_loaded(&t2).unwrap();
        assert_eq!(o3.idle_ms, Some(0));
        tracker.settle(&mut account);
        let c = account.collapse.clone().unwrap();
        assert_eq!(
            (c.at.as_str(), c.cause),
            ("messages[1]", Cause::ClientHistory)
        );
        assert!(account.pending.is_none());
        s.flush();
        assert_eq!(stored(&s), 2);
        // Settling twice does nothing more.
        tracker.settle(&mut account);
        assert_eq!(account.collapse, Some(c));
    }

    fn opened_input<'a>(
        p: &'a ResolvedProvider,
        key: &'a DigestKey,
        b: &'a [u8],
        none: &'a RewriteReport,
        now_ms: i64,
        retired: Option<&'a RetiredSet>,
    ) -> TurnInput<'a> {
        TurnInput {
            dialect: Dialect::Anthropic,
            route: "anthropic",
            provider: p,
            model: "",
            scope: "scope",
            key,
            client_session: None,
            client: b,
            forwarded: b,
            report: none,
            now_ms,
            retired,
        }
    }

    #[test]
    fn the_retired_set_is_kept_with_the_session_across_turns_and_a_restart() {
        let s = store();
        let p = anthropic();
        let key = DigestKey::for_credential(None);
        let none = RewriteReport::default();
        let mut set = RetiredSet::default();
        set.images.insert("00ff".to_owned(), 2);
        let b1 = body(r#""S""#, 1, None);
        let b2 = body(r#""S""#, 3, None);
        let b3 = body(r#""S""#, 5, None);
        {
            let tracker = SessionTracker::new(s.clone());
            let o = tracker
                .open_loaded(&opened_input(&p, &key, &b1, &none, 0, None))
                .unwrap();
            assert!(o.retired().is_none(), "a new session has no record");
            assert!(!o.cold_memo(None, &p, &b1).1);
            tracker.commit(o, &opened_input(&p, &key, &b1, &none, 0, Some(&set)));
            // A turn that changes nothing keeps the set.
            let o = tracker
                .open_loaded(&opened_input(&p, &key, &b2, &none, MIN, None))
                .unwrap();
            assert_eq!(o.retired(), Some(&set));
            tracker.commit(o, &opened_input(&p, &key, &b2, &none, MIN, None));
        }
        s.flush();
        let tracker = SessionTracker::new(s.clone());
        let o = tracker
            .open_loaded(&opened_input(&p, &key, &b3, &none, 20 * MIN, None))
            .unwrap();
        assert_eq!(o.retired(), Some(&set), "the set survives a restart");
        assert_eq!(o.idle_ms, Some(19 * MIN as u64));
        let (memo, known) = o.cold_memo(None, &p, &b3);
        assert!(known);
        assert!(memo.cold, "19 idle minutes > Anthropic's 5-minute TTL");
        assert_eq!(memo.retired, set);
        // The route's 1-hour TTL keeps it warm.
        assert!(!o.cold_memo(Some(CacheTtl::OneHour), &p, &b3).0.cold);
    }

    #[test]
    fn cold_cache_ttl_comes_from_the_route_then_explicit_providers_only() {
        let model = "claude-sonnet-4-5";
        let b = body(r#""S""#, 1, None);
        assert_eq!(cold_ttl_ms(None, &anthropic(), model, &b), Some(300_000));
        let one_h = String::from_utf8(b.clone()).unwrap().replace(
            r#"{"type":"ephemeral"}"#,
            r#"{"type":"ephemeral","ttl":"1h"}"#,
        );
        assert_eq!(
            cold_ttl_ms(None, &anthropic(), model, one_h.as_bytes()),
            Some(3_600_000)
        );
        let openai = ResolvedProvider::resolve(None, "api.openai.com", None);
        // OpenAI keeps prefixes for hours, DeepSeek publishes no TTL: off unless the route
        // sets cache_ttl.
        assert_eq!(cold_ttl_ms(None, &openai, "gpt-5", b"{}"), None);
        assert_eq!(cold_ttl_ms(None, &deepseek(), "deepseek-chat", b"{}"), None);
        assert_eq!(
            cold_ttl_ms(Some(CacheTtl::FiveMinutes), &openai, "gpt-5", b"{}"),
            Some(300_000)
        );
    }
}
