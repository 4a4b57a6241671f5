//! `usage_in_streams` (per route, off by default): an OpenAI Chat streaming request
//! (`"stream": true`) that does not say `stream_options.include_usage` gets
//! `"include_usage": true`, so the provider ends the stream with a usage chunk (empty
//! `choices`; the official SDKs handle it) and the request's log line can report usage.
//! OpenAI Chat sends no usage in a stream otherwise (`docs/usage.md`).
//!
//! A pure function over the one body view: one insertion edit, or none. An explicit
//! `include_usage` (true or false) is the client's choice and is left alone; so is a
//! `stream_options` that is not an object or `null`.

use crate::dialect::doc::Doc;
use crate::json::edit::append_member;
use crate::json::scan;
use crate::json::Edit;

/// The reason logged for the edit.
pub(crate) const REASON: &str =
    "usage_in_streams: added stream_options.include_usage = true (the stream ends with its usage chunk)";

/// The edit that asks for the usage chunk, when the request is an OpenAI Chat stream that
/// lacks `stream_options.include_usage`.
pub(crate) fn edit(doc: &Doc<'_>) -> Option<Edit> {
    if !doc.dialect.format().stream_usage_option() {
        return None;
    }
    let text = doc.text;
    let stream = doc.top.get("stream")?;
    if scan::slice(text, &stream.value) != "true" {
        return None;
    }
    let Some(options) = doc.top.get("stream_options") else {
        return Some(append_member(
            &doc.top,
            r#""stream_options":{"include_usage":true}"#,
        ));
    };
    if scan::slice(text, &options.value) == "null" {
        return Some(Edit {
            range: options.value.clone(),
            replacement: br#"{"include_usage":true}"#.to_vec(),
        });
    }
    let obj = scan::object_at(text, options.value.start)?;
    if obj.get("include_usage").is_some() {
        return None;
    }
    Some(append_member(&obj, r#""include_usage":true"#))
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::disallowed_methods,
        clippy::disallowed_macros
    )]
    use super::*;
    use crate::dialect;
    use crate::dialect::Dialect;

    fn run(body: &str, d: Dialect) -> Option<String> {
        let doc = dialect::parse(body.as_bytes(), d).unwrap();
        let e = edit(&doc)?;
        let out = crate::json::splice(body.as_bytes(), vec![e]).unwrap();
        let s = String::from_utf8(out).unwrap();
        serde_json::from_str::<serde_json::Value>(&s).unwrap();
        Some(s)
    }

    #[test]
    fn adds_include_usage_where_it_is_missing() {
        let m = r#""model":"gpt-5","messages":[]"#;
        assert_eq!(
            run(&format!("{{{m},\"stream\":true}}"), Dialect::Openai).unwrap(),
            format!("{{{m},\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}")
        );
        assert_eq!(
            run(
                &format!("{{{m},\"stream\":true,\"stream_options\":{{}}}}"),
                Dialect::Openai
            )
            .unwrap(),
            format!("{{{m},\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}")
        );
        assert_eq!(
            run(
                &format!("{{{m},\"stream\":true,\"stream_options\":{{\"x\":1}} }}"),
                Dialect::Openai
            )
            .unwrap(),
            format!(
                "{{{m},\"stream\":true,\"stream_options\":{{\"x\":1,\"include_usage\":true}} }}"
            )
        );
        assert_eq!(
            run(
                &format!("{{{m},\"stream\":true,\"stream_options\":null}}"),
                Dialect::Openai
            )
            .unwrap(),
            format!("{{{m},\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}")
        );
    }

    #[test]
    fn leaves_everything_else_alone() {
        let m = r#""model":"gpt-5","messages":[]"#;
        for body in [
            format!("{{{m}}}"),
            format!("{{{m},\"stream\":false}}"),
            format!("{{{m},\"stream\":\"true\"}}"),
            format!("{{{m},\"stream\":true,\"stream_options\":{{\"include_usage\":false}}}}"),
            format!("{{{m},\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}"),
            format!("{{{m},\"stream\":true,\"stream_options\":7}}"),
        ] {
            assert_eq!(run(&body, Dialect::Openai), None, "{body}");
        }
        let stream = format!("{{{m},\"stream\":true}}");
        for d in [Dialect::Anthropic, Dialect::OpenaiResponses] {
            assert_eq!(run(&stream, d), None);
        }
    }
}
