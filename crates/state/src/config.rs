//! `[state]` of `proxy.toml`: the section's schema, its defaults and its validation. The
//! config's loader (`cachekeeper::config`) parses it as a part of the whole file (unknown keys
//! are errors), then calls [`StateConfig::resolve`] and [`StateConfig::check_ca`].

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `[state]`: where verdicts, carriers, sessions and usage are kept: an embedded SQLite file
/// (the default) or a Redis server shared by several instances (`docs/state.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// `"sqlite"` (default) or `"redis"`.
    pub backend: StateBackend,
    /// SQLite file, relative to the config file's folder. Default `cachekeeper.db`. Unused
    /// with `backend = "redis"`.
    pub path: PathBuf,
    /// Records older than this many days are deleted (0 = never). Default 30. With Redis it
    /// is also the records' TTL (verdicts excepted).
    pub retention_days: u32,
    /// Bound on the stored records' total size, bytes: past it the oldest records of the
    /// large kinds are evicted first, verdicts never (`docs/state.md`). Default 1 GiB.
    pub max_bytes: u64,
    /// `backend = "redis"`: `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`, or `rediss://` for
    /// TLS. Printed redacted everywhere ([`crate::RedisUrl`]). Exactly one of `url`
    /// and `url_env`.
    pub url: Option<crate::UrlText>,
    /// `backend = "redis"`: the name of an environment variable holding the URL (so the
    /// password stays out of the file). Read at load; its value is never logged.
    pub url_env: Option<String>,
    /// `backend = "redis"` with a `rediss://` URL: a PEM CA bundle, relative to the config
    /// file's folder; the Redis server's certificate must verify against it (and only it).
    /// Unset: the platform's roots. Read and checked at load (`config::Config::load`, through [`Self::check_ca`]) and again
    /// when the store opens ([`crate::redis::tls`]).
    pub ca_file: Option<PathBuf>,
    /// `backend = "redis"`: how long reading one record may wait for Redis, ms. Default 20
    /// ([`crate::redis::DEFAULT_READ_TIMEOUT_MS`]). Past it the read counts as a miss.
    pub read_timeout_ms: Option<u64>,
    /// `backend = "redis"`: how long the last chunk of a generation response may wait for
    /// that turn's session and carrier writes to reach Redis, ms, so the next turn finds them
    /// on any instance (read-your-writes; `docs/state.md`). Default 50
    /// ([`crate::settle::DEFAULT_WRITE_WAIT_MS`]); 0: never wait; at most
    /// [`crate::settle::MAX_WRITE_WAIT_MS`]. Past it the chunk goes and the writes
    /// complete later (counted in `cachekeeper_state_write_waits_total{result="late"}`).
    pub write_wait_ms: Option<u64>,
    /// `backend = "redis"`: share the transcode cache with the other instances on the same
    /// Redis (each transcode sealed under its credential's key, kept `retention_days`:
    /// `images::cache`). Default false; `true` with SQLite is rejected.
    pub share_transcodes: bool,
    /// The URL from `url` or `url_env`, set by validation.
    #[serde(skip)]
    resolved_url: Option<crate::RedisUrl>,
}

/// `[state] backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    /// One SQLite file (`[state] path`).
    #[default]
    Sqlite,
    /// A Redis server (`[state] url` / `url_env`).
    Redis,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            backend: StateBackend::Sqlite,
            path: PathBuf::from("cachekeeper.db"),
            retention_days: 30,
            max_bytes: 1024 * 1024 * 1024,
            url: None,
            url_env: None,
            ca_file: None,
            read_timeout_ms: None,
            write_wait_ms: None,
            share_transcodes: false,
            resolved_url: None,
        }
    }
}

impl StateConfig {
    /// The Redis URL when `backend = "redis"` (resolved from `url` or `url_env` at load).
    pub fn redis_url(&self) -> Option<&crate::RedisUrl> {
        self.resolved_url.as_ref()
    }

    /// `read_timeout_ms` or its default, ms.
    pub fn read_timeout_ms(&self) -> u64 {
        self.read_timeout_ms
            .unwrap_or(crate::redis::DEFAULT_READ_TIMEOUT_MS)
    }

    /// `write_wait_ms` or its default, ms (0 with SQLite: a single process reads its own
    /// writes from memory, nothing to wait for).
    pub fn write_wait_ms(&self) -> u64 {
        match self.backend {
            StateBackend::Sqlite => 0,
            StateBackend::Redis => self
                .write_wait_ms
                .unwrap_or(crate::settle::DEFAULT_WRITE_WAIT_MS),
        }
    }

    /// Where the records are, for `check`: `sqlite <path>` or `redis <url, redacted>`.
    pub fn describe(&self, base_dir: &Path) -> String {
        match self.redis_url() {
            Some(u) => format!("redis {u}"),
            None => format!("sqlite {}", base_dir.join(&self.path).display()),
        }
    }

    /// Check the backend's keys and resolve the Redis URL (called once by the config's
    /// loader); `Err`: the message of an unusable one, naming the key.
    pub fn resolve(&mut self) -> Result<(), String> {
        if self.backend == StateBackend::Sqlite {
            for (set, key) in [
                (self.url.is_some(), "url"),
                (self.url_env.is_some(), "url_env"),
                (self.ca_file.is_some(), "ca_file"),
                (self.share_transcodes, "share_transcodes"),
                (self.read_timeout_ms.is_some(), "read_timeout_ms"),
                (self.write_wait_ms.is_some(), "write_wait_ms"),
            ] {
                if set {
                    return Err(format!(
                        "[state] {key} applies to backend = \"redis\" only; this config uses \
                         sqlite (set backend = \"redis\" or remove {key})"
                    ));
                }
            }
            self.resolved_url = None;
            return Ok(());
        }
        if self.read_timeout_ms == Some(0) {
            return Err("[state] read_timeout_ms must be at least 1".to_owned());
        }
        let max_wait = crate::settle::MAX_WRITE_WAIT_MS;
        if self.write_wait_ms.is_some_and(|ms| ms > max_wait) {
            return Err(format!(
                "[state] write_wait_ms must be at most {max_wait} (ms: how long the end of a \
                 response may wait for its writes to reach Redis)"
            ));
        }
        let url = match (&self.url, &self.url_env) {
            (Some(u), None) => u
                .parse()
                .map_err(|e| format!("[state] url: not a usable Redis URL: {e}"))?,
            (None, Some(name)) => {
                let text = std::env::var(name).map_err(|_| {
                    format!(
                        "[state] url_env = {name:?}: the environment variable is not set (or \
                         not UTF-8)"
                    )
                })?;
                crate::RedisUrl::parse(&text).map_err(|e| {
                    format!("[state] url_env = {name:?}: not a usable Redis URL: {e}")
                })?
            }
            (Some(_), Some(_)) => {
                return Err("[state] url and url_env are both set; keep one".to_owned())
            }
            (None, None) => {
                return Err(
                    "[state] backend = \"redis\" needs url = \"redis://HOST:PORT/DB\" or \
                     url_env = \"NAME\""
                        .to_owned(),
                )
            }
        };
        if self.ca_file.is_some() && !url.is_tls() {
            return Err(format!(
                "[state] ca_file applies to a rediss:// (TLS) URL only; the url is {} (use \
                 rediss:// or remove ca_file)",
                url.redacted()
            ));
        }
        self.resolved_url = Some(url);
        Ok(())
    }

    /// `ca_file` resolved against `base_dir` (the config file's folder), when set.
    pub fn ca_path(&self, base_dir: &Path) -> Option<PathBuf> {
        self.ca_file.as_ref().map(|p| base_dir.join(p))
    }

    /// Check that `ca_file` (when set) is a readable PEM bundle of usable CA certificates;
    /// the message names the path and the problem.
    pub fn check_ca(&self, base_dir: &Path) -> Result<(), String> {
        match self.ca_path(base_dir) {
            Some(path) => crate::redis::tls::read_ca(&path).map(|_| ()),
            None => Ok(()),
        }
    }
}
