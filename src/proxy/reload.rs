//! Reloading `proxy.toml` while serving (`SIGHUP`): a new configuration snapshot replaces the
//! old one for the requests that arrive after it; requests in flight, streams included, finish
//! on the snapshot they started with, so no connection is dropped.
//!
//! What changes on a reload: the routes (upstreams, dialects, profiles, images and reasoning
//! settings, cache breakpoints), `[server]` timeouts, body limits, `dry_run`, `client_token`
//! and `ca_file`, `[images]`, `[reasoning]` and `[[pricing]]`. What needs a restart, and is
//! reported as such (the running value stays): `[server] listen` (unless `--listen` overrides
//! it), `[server] shutdown_grace_ms` and `max_buffered_bytes` (the shared budget is sized
//! once), the `[state]` store (`backend`, `path`, `url`, `ca_file`, `read_timeout_ms`,
//! `write_wait_ms`, `retention_days`, `max_bytes`) and `[images] transcode_cache_bytes` (the shared cache is sized once). A file
//! that does not load, or whose routes or CA bundle are unusable, changes nothing: the error is
//! returned (and logged by [`Reloader::reload_logged`]) and the old configuration keeps serving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::{ConfigError, Loaded};
use crate::proxy::record::Recorder;
use crate::proxy::{AppState, StartError};

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file did not read or parse, or a value is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The file loaded but its routes or `ca_file` are unusable.
    #[error(transparent)]
    Build(#[from] StartError),
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Routes now served.
    pub routes: usize,
    /// Settings the file changes that only a restart applies, each as
    /// `"[section] key: running → in file"`, in the order of the module docs.
    pub needs_restart: Vec<String>,
    /// The new file's load warnings (deprecated keys, ...), and the exposure warning
    /// ([`crate::exposure_warning`]) when the listener is beyond loopback and the new file sets
    /// no `client_token`.
    pub warnings: Vec<String>,
}

/// The settings a running proxy keeps until it restarts, as it started.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fixed {
    /// `[server] listen`, or `None` when `--listen` overrides it.
    listen: Option<std::net::SocketAddr>,
    shutdown_grace_ms: u64,
    /// The shared buffer budget is sized once.
    max_buffered_bytes: u64,
    /// The state file, resolved against the config file's folder.
    state_path: PathBuf,
    /// `[state] backend` and the Redis URL (compared in full, printed redacted): the store
    /// is opened once.
    state_backend: crate::config::StateBackend,
    state_url: Option<crate::state::RedisUrl>,
    /// `[state] ca_file`, resolved (the client is built with it once).
    state_ca_file: Option<PathBuf>,
    state_read_timeout_ms: u64,
    state_write_wait_ms: u64,
    retention_days: u32,
    state_max_bytes: u64,
    transcode_cache_bytes: u64,
    /// `[state] share_transcodes`: the transcode cache is built once.
    share_transcodes: bool,
}

impl Fixed {
    fn of(loaded: &Loaded, listen_overridden: bool) -> Self {
        let cfg = &loaded.config;
        Self {
            listen: (!listen_overridden).then_some(cfg.server.listen),
            shutdown_grace_ms: cfg.server.shutdown_grace_ms,
            max_buffered_bytes: cfg.server.max_buffered_bytes,
            state_path: loaded.base_dir.join(&cfg.state.path),
            state_backend: cfg.state.backend,
            state_url: cfg.state.redis_url().cloned(),
            state_ca_file: cfg.state.ca_path(&loaded.base_dir),
            state_read_timeout_ms: cfg.state.read_timeout_ms(),
            state_write_wait_ms: cfg.state.write_wait_ms(),
            retention_days: cfg.state.retention_days,
            state_max_bytes: cfg.state.max_bytes,
            transcode_cache_bytes: cfg.images.transcode_cache_bytes,
            share_transcodes: cfg.state.share_transcodes,
        }
    }

    /// `"[section] key: running → in file"` for each setting that differs.
    fn changes(&self, new: &Fixed) -> Vec<String> {
        let mut out = Vec::new();
        let mut diff = |key: &str, old: String, new: String| {
            if old != new {
                out.push(format!("{key}: {old} → {new}"));
            }
        };
        if let (Some(old), Some(new)) = (self.listen, new.listen) {
            diff("[server] listen", old.to_string(), new.to_string());
        }
        diff(
            "[server] shutdown_grace_ms",
            self.shutdown_grace_ms.to_string(),
            new.shutdown_grace_ms.to_string(),
        );
        diff(
            "[server] max_buffered_bytes",
            self.max_buffered_bytes.to_string(),
            new.max_buffered_bytes.to_string(),
        );
        diff(
            "[state] path",
            self.state_path.display().to_string(),
            new.state_path.display().to_string(),
        );
        diff(
            "[state] backend",
            format!("{:?}", self.state_backend).to_lowercase(),
            format!("{:?}", new.state_backend).to_lowercase(),
        );
        diff(
            "[state] retention_days",
            self.retention_days.to_string(),
            new.retention_days.to_string(),
        );
        diff(
            "[state] max_bytes",
            self.state_max_bytes.to_string(),
            new.state_max_bytes.to_string(),
        );
        diff(
            "[images] transcode_cache_bytes",
            self.transcode_cache_bytes.to_string(),
            new.transcode_cache_bytes.to_string(),
        );
        diff(
            "[state] share_transcodes",
            self.share_transcodes.to_string(),
            new.share_transcodes.to_string(),
        );
        diff(
            "[state] read_timeout_ms",
            self.state_read_timeout_ms.to_string(),
            new.state_read_timeout_ms.to_string(),
        );
        diff(
            "[state] write_wait_ms",
            self.state_write_wait_ms.to_string(),
            new.state_write_wait_ms.to_string(),
        );
        let ca = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or_else(|| "unset".to_owned(), |p| p.display().to_string())
        };
        diff(
            "[state] ca_file",
            ca(&self.state_ca_file),
            ca(&new.state_ca_file),
        );
        if self.state_url != new.state_url {
            // Compared in full (a changed password is a change), shown redacted.
            let shown = |u: &Option<crate::state::RedisUrl>| {
                u.as_ref()
                    .map_or_else(|| "unset".to_owned(), |u| u.redacted().to_owned())
            };
            out.push(format!(
                "[state] url: {} → {}",
                shown(&self.state_url),
                shown(&new.state_url)
            ));
        }
        out
    }
}

/// Reloads a running [`crate::proxy::Server`]'s configuration ([`crate::proxy::Server::reloader`]).
/// Cheap to clone; reloads are serialised.
#[derive(Clone)]
pub struct Reloader {
    live: Arc<ArcSwap<AppState>>,
    /// What the proxy started with (restart-only settings); the lock serialises reloads.
    fixed: Arc<Mutex<Fixed>>,
    listen_overridden: bool,
    /// The address the listener is bound to, for [`crate::reserved::exposure_warning`].
    bound: std::net::SocketAddr,
}

impl Reloader {
    pub(crate) fn new(
        live: Arc<ArcSwap<AppState>>,
        loaded: &Loaded,
        listen_overridden: bool,
        bound: std::net::SocketAddr,
    ) -> Self {
        Self {
            live,
            fixed: Arc::new(Mutex::new(Fixed::of(loaded, listen_overridden))),
            listen_overridden,
            bound,
        }
    }

    /// Apply `loaded`: requests that arrive after this returns run on it.
    ///
    /// Errors: [`ReloadError::Build`] when a route or the CA bundle is unusable, or the file
    /// lends the proxy's cloud credentials on a listener beyond loopback without a client
    /// token ([`crate::config::Config::lending_refusal`]); nothing changed then.
    pub fn reload(&self, loaded: &Loaded) -> Result<Reloaded, ReloadError> {
        let fixed = self
            .fixed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(refusal) = loaded.config.lending_refusal(self.bound) {
            return Err(StartError::Lending(refusal).into());
        }
        let current = self.live.load_full();
        let next = AppState::build(loaded, current.shared(), Some(&current))?;
        let routes = next.routes.routes().len();
        self.live.store(Arc::new(next));
        let mut warnings = loaded.warnings.clone();
        // The listener stays where it is: a file that drops the token exposes it.
        warnings.extend(crate::reserved::exposure_warning(
            self.bound,
            loaded.config.server.client_token.is_some(),
        ));
        Ok(Reloaded {
            routes,
            needs_restart: fixed.changes(&Fixed::of(loaded, self.listen_overridden)),
            warnings,
        })
    }

    /// Load `path` and apply it ([`Self::reload`]).
    ///
    /// Errors: [`ReloadError::Config`] when the file does not load; nothing changed then.
    pub fn reload_from(&self, path: &Path) -> Result<Reloaded, ReloadError> {
        let loaded = crate::config::Config::load(path)?;
        self.reload(&loaded)
    }

    /// [`Self::reload_from`], logged: `info` with the route count when applied, a `warn` per
    /// setting that needs a restart and per load warning, `error` (the old configuration kept)
    /// when the file is unusable. What `serve` does on `SIGHUP`.
    pub fn reload_logged(&self, path: &Path) -> Result<Reloaded, ReloadError> {
        let file = path.display().to_string();
        match self.reload_from(path) {
            Ok(done) => {
                for w in &done.warnings {
                    tracing::warn!(target: "cachekeeper::config", file = %file, "{w}");
                }
                for setting in &done.needs_restart {
                    tracing::warn!(target: "cachekeeper::config", file = %file, setting = %setting, "this setting changed in the file but needs a restart; the running value stays");
                }
                tracing::info!(target: "cachekeeper::config", file = %file, routes = done.routes, "configuration reloaded");
                Ok(done)
            }
            Err(e) => {
                tracing::error!(target: "cachekeeper::config", file = %file, error = %e, "configuration not reloaded; the running configuration stays");
                Err(e)
            }
        }
    }

    /// Record to `rec` from now on (`serve --record`), kept across reloads.
    pub(crate) fn set_record(&self, rec: Arc<Recorder>) {
        let _serial = self
            .fixed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.live.load_full();
        let mut shared = current.shared();
        shared.record = Some(rec);
        self.live.store(Arc::new(current.with_shared(shared)));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fixed(state: &str) -> Fixed {
        let text = format!(
            "[state]\n{state}\n[[routes]]\nname = \"a\"\nprefix = \"/a\"\nupstream = \"http://127.0.0.1:9\"\n"
        );
        let (config, warnings) = crate::config::Config::from_toml(&text).unwrap();
        let loaded = Loaded {
            config,
            base_dir: PathBuf::from("/etc/ck"),
            warnings,
        };
        Fixed::of(&loaded, false)
    }

    /// The store is opened once: a change of backend, URL (a new password included), read
    /// timeout or write wait needs a restart, and the message shows the URLs redacted.
    #[test]
    fn the_state_backend_and_its_url_need_a_restart_and_print_redacted() {
        let sqlite = fixed("");
        let redis = fixed("backend = \"redis\"\nurl = \"redis://:old-pw@10.0.0.1:6379/0\"");
        assert_eq!(
            sqlite.changes(&redis),
            [
                "[state] backend: sqlite → redis",
                "[state] write_wait_ms: 0 → 50",
                "[state] url: unset → redis://:***@10.0.0.1:6379/0"
            ]
        );
        let new_pw = fixed(
            "backend = \"redis\"\nurl = \"redis://:new-pw@10.0.0.1:6379/0\"\nread_timeout_ms = 40\nwrite_wait_ms = 80",
        );
        let changes = redis.changes(&new_pw);
        assert_eq!(
            changes,
            [
                "[state] read_timeout_ms: 20 → 40",
                "[state] write_wait_ms: 50 → 80",
                "[state] url: redis://:***@10.0.0.1:6379/0 → redis://:***@10.0.0.1:6379/0"
            ]
        );
        assert!(redis.changes(&redis).is_empty());
        // The CA bundle a rediss:// client trusts is built into the client once.
        let tls = fixed("backend = \"redis\"\nurl = \"rediss://10.0.0.1:6379/0\"");
        let tls_ca = fixed(
            "backend = \"redis\"\nurl = \"rediss://10.0.0.1:6379/0\"\nca_file = \"redis-ca.pem\"",
        );
        assert_eq!(
            tls.changes(&tls_ca),
            ["[state] ca_file: unset → /etc/ck/redis-ca.pem"]
        );
        assert!(tls_ca.changes(&tls_ca).is_empty());
    }
}
