//! `[state] url`: a Redis URL whose password never reaches a log, `check` output or an error
//! message. [`RedisUrl`]'s `Debug` and `Display` print it redacted ([`RedisUrl::redacted`]);
//! only the backend reads the real text ([`RedisUrl::expose`]).

use std::fmt;

/// What a password (and any query string, which could carry one) is printed as.
pub(crate) const REDACTED: &str = "***";

/// A validated `redis://` or `rediss://` URL: `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    text: String,
    redacted: String,
    tls: bool,
}

/// Why a URL is not usable as `[state] url`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("not a URL")]
    Syntax,
    #[error("the scheme must be redis:// or rediss:// (TLS), not {0}://")]
    Scheme(String),
    #[error("no host")]
    NoHost,
    #[error("the path must be empty or a database number (/0, /1, ...), not {0:?}")]
    Database(String),
}

impl RedisUrl {
    /// Parse and check `text`. The error never quotes the text (it may hold a password).
    pub fn parse(text: &str) -> Result<Self, UrlError> {
        let url = url::Url::parse(text.trim()).map_err(|_| UrlError::Syntax)?;
        let tls = match url.scheme() {
            "redis" => false,
            "rediss" => true,
            other => return Err(UrlError::Scheme(other.to_owned())),
        };
        if url.host_str().is_none_or(str::is_empty) {
            return Err(UrlError::NoHost);
        }
        let db = url.path().trim_start_matches('/');
        if !db.is_empty() && db.parse::<u16>().is_err() {
            return Err(UrlError::Database(db.to_owned()));
        }
        let mut shown = url.clone();
        if shown.password().is_some() {
            // Cannot fail on a URL with a host.
            let _ = shown.set_password(Some(REDACTED));
        }
        if shown.query().is_some() {
            shown.set_query(Some(REDACTED));
        }
        Ok(Self {
            text: text.trim().to_owned(),
            redacted: shown.to_string(),
            tls,
        })
    }

    /// The URL as configured, password included: for the client only, never for printing.
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// The URL with its password (and query) replaced by [`REDACTED`].
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// `rediss://`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisUrl({})", self.redacted)
    }
}

/// `[state] url` as written in the file, before [`RedisUrl::parse`]. Parsed after
/// deserialising, not during: a TOML error quotes the offending line, which would print the
/// password. Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct UrlText(String);

impl UrlText {
    /// The [`RedisUrl`] it holds.
    pub fn parse(&self) -> Result<RedisUrl, UrlError> {
        RedisUrl::parse(&self.0)
    }
}

impl fmt::Debug for UrlText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.parse() {
            Ok(u) => write!(f, "UrlText({})", u.redacted()),
            Err(_) => f.write_str("UrlText(unparsed)"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_redacted_in_display_debug_and_errors() {
        let u = RedisUrl::parse("redis://app:s3cret-pw@cache.internal:6380/2").unwrap();
        assert_eq!(u.to_string(), "redis://app:***@cache.internal:6380/2");
        assert_eq!(
            format!("{u:?}"),
            "RedisUrl(redis://app:***@cache.internal:6380/2)"
        );
        assert_eq!(
            u.expose(),
            "redis://app:s3cret-pw@cache.internal:6380/2",
            "the client gets it"
        );
        assert!(!u.is_tls());
        // No user, only a password (Redis before ACLs).
        let u = RedisUrl::parse("rediss://:hunter2@10.0.0.5/0").unwrap();
        assert_eq!(u.redacted(), "rediss://:***@10.0.0.5/0");
        assert!(u.is_tls());
        // A query could carry credentials: never printed.
        let u = RedisUrl::parse("redis://h:1/0?password=hunter2").unwrap();
        assert_eq!(u.redacted(), "redis://h:1/0?***");
        // Nothing to hide.
        let u = RedisUrl::parse("redis://127.0.0.1:7000").unwrap();
        assert_eq!(u.redacted(), "redis://127.0.0.1:7000");
    }

    #[test]
    fn unusable_urls_are_refused_without_quoting_them() {
        for (text, err) in [
            ("http://:pw@h:1/0", UrlError::Scheme("http".into())),
            ("unix:///tmp/redis.sock", UrlError::Scheme("unix".into())),
            ("redis://:pw@h:1/cache", UrlError::Database("cache".into())),
            ("no url :pw", UrlError::Syntax),
        ] {
            let got = RedisUrl::parse(text).unwrap_err();
            assert_eq!(got, err, "{text}");
            assert!(!got.to_string().contains("pw"), "{got}");
        }
    }
}
