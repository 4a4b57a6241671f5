//! Fixed texts the passes insert. They never vary: tests and the provider prefix cache depend on
//! them never changing (design.md, "Fixed texts"). No time, no counter, no per-request data.

/// The sentence that replaces each retired image block / part (one text block per image).
///
/// ASCII only, with no `"` or `\`, so it can be written into JSON verbatim
/// (see [`RETIRED_IMAGE_JSON`]).
pub const RETIRED_IMAGE: &str = "[image removed by cachekeeper to stay within provider limits]";

/// [`RETIRED_IMAGE`] as a JSON string literal (with its quotes).
pub const RETIRED_IMAGE_JSON: &str =
    "\"[image removed by cachekeeper to stay within provider limits]\"";

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn json_literal_matches_the_text() {
        let encoded = serde_json::to_string(RETIRED_IMAGE).unwrap();
        assert_eq!(encoded, RETIRED_IMAGE_JSON);
        assert!(RETIRED_IMAGE.is_ascii());
    }
}
