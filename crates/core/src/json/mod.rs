//! JSON as bytes: the one span scanner ([`scan`]) and splicing edits into the original bytes
//! ([`edit`]). Knows nothing of dialects or LLMs.
//!
//! A body is parsed once per run of the passes ([`parse`]): validated and indexed in one pass
//! ([`scan::validate`], so the scanner may assume valid JSON and jumps over nested values),
//! then its top-level object is scanned. Every view the dialects build, and every edit the
//! passes make, uses byte ranges of that one text.

pub(crate) mod edit;
pub(crate) mod scan;

pub(crate) use edit::{splice, Edit};

/// Why [`parse`] refused a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JsonError {
    /// Not UTF-8 or not valid JSON; the parser's message.
    Invalid(String),
    /// Valid JSON that is not an object.
    NotObject,
}

/// A validated body: its text, its top-level object and its [`scan::Index`].
#[derive(Debug, Clone)]
pub(crate) struct Parsed<'a> {
    pub text: &'a str,
    pub top: scan::Object,
    pub index: scan::Index,
}

/// Calls of [`parse`] in this process (every thread): what `tests/parses.rs` reads, through
/// [`crate::json_parses`], to count parses per request at the proxy level. One relaxed atomic
/// add per parse.
static PARSES_TOTAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// [`PARSES_TOTAL`]'s value.
pub(crate) fn parses_total() -> u64 {
    PARSES_TOTAL.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(any(test, feature = "testing"))]
thread_local! {
    /// Calls of [`parse`] on this thread (tests count parses per run of the passes).
    pub static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Validate `body` as JSON and scan its top-level object.
///
/// Errors: invalid UTF-8 or JSON ⇒ [`JsonError::Invalid`]; valid JSON that is not an object
/// ⇒ [`JsonError::NotObject`].
pub(crate) fn parse(body: &[u8]) -> Result<Parsed<'_>, JsonError> {
    PARSES_TOTAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(any(test, feature = "testing"))]
    PARSES.with(|n| n.set(n.get() + 1));
    let text = std::str::from_utf8(body).map_err(|e| JsonError::Invalid(e.to_string()))?;
    let index = scan::validate(text).map_err(|e| JsonError::Invalid(e.to_string()))?;
    let top = scan::object_in(text, Some(&index), 0).ok_or(JsonError::NotObject)?;
    Ok(Parsed { text, top, index })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]
mod tests {
    use super::*;

    #[test]
    fn parse_classifies() {
        assert!(matches!(parse(b"{\"a\":"), Err(JsonError::Invalid(_))));
        assert!(matches!(parse(b"\xff{}"), Err(JsonError::Invalid(_))));
        assert!(matches!(parse(b""), Err(JsonError::Invalid(_))));
        assert_eq!(parse(b"[1]").unwrap_err(), JsonError::NotObject);
        assert_eq!(parse(b" \"s\" ").unwrap_err(), JsonError::NotObject);
        let p = parse(b" {\"a\":1} ").unwrap();
        assert_eq!(p.top.members[0].key, "a");
    }
}
