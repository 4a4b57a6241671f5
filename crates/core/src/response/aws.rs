//! Amazon Bedrock's stream framing around a model's own events: InvokeModelWithResponseStream
//! sends each event of the model's stream (for Claude, one Anthropic Messages event) as the
//! base64 `bytes` of a `chunk` event's JSON payload, `{"bytes": "…", "p": "…"}` (`p` is
//! padding). Source:
//! https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModelWithResponseStream.html
//! (`PayloadPart`).

use base64::Engine as _;
use serde::Deserialize;

use crate::wire::eventstream::Message;
use crate::wire::tee::SinkError;

/// The `:event-type` of a message that carries one event of the model's stream.
const CHUNK: &str = "chunk";

/// One event of the model's stream, unwrapped: its JSON and its `type`, which the SSE form
/// would carry as `event:`.
pub(super) struct Unwrapped {
    pub(super) kind: Option<String>,
    pub(super) data: Vec<u8>,
}

/// The `chunk` payload.
#[derive(Deserialize)]
struct PayloadPart<'a> {
    #[serde(borrow)]
    bytes: Option<std::borrow::Cow<'a, str>>,
}

/// The event a `chunk` message carries; `None` for any other event type (or a chunk with no
/// `bytes`).
///
/// Errors: a payload that is not JSON, or `bytes` that is not base64 ([`SinkError`]: the
/// stream's turn is not kept).
pub(super) fn invoke_chunk(message: &Message) -> Result<Option<Unwrapped>, SinkError> {
    if message.event_type.as_deref() != Some(CHUNK) {
        return Ok(None);
    }
    let part: PayloadPart<'_> = serde_json::from_slice(&message.payload)
        .map_err(|e| SinkError(format!("bedrock chunk payload is not JSON: {e}")))?;
    let Some(b64) = part.bytes else {
        return Ok(None);
    };
    let data = base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .map_err(|e| SinkError(format!("bedrock chunk bytes are not base64: {e}")))?;
    #[derive(Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let kind = serde_json::from_slice::<Typed<'_>>(&data)
        .ok()
        .and_then(|t| t.kind.map(|k| k.into_owned()));
    Ok(Some(Unwrapped { kind, data }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::wire::eventstream::MessageType;

    fn message(event_type: &str, payload: &str) -> Message {
        Message {
            message_type: Some(MessageType::Event),
            event_type: Some(event_type.to_owned()),
            content_type: Some("application/json".to_owned()),
            error_message: None,
            payload: bytes::Bytes::from(payload.to_owned()),
        }
    }

    #[test]
    fn a_chunk_unwraps_to_the_model_s_event() {
        let inner = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}"#;
        let b64 = base64::engine::general_purpose::STANDARD.encode(inner);
        let m = message("chunk", &format!(r#"{{"bytes":"{b64}","p":"abcdefghij"}}"#));
        let u = invoke_chunk(&m).unwrap().unwrap();
        assert_eq!(u.kind.as_deref(), Some("message_delta"));
        assert_eq!(u.data, inner.as_bytes());
        assert!(invoke_chunk(&message("metadata", "{}")).unwrap().is_none());
        assert!(invoke_chunk(&message("chunk", "{}")).unwrap().is_none());
        assert!(invoke_chunk(&message("chunk", "not json")).is_err());
        assert!(invoke_chunk(&message("chunk", r#"{"bytes":"!!"}"#)).is_err());
    }
}
