//! The Responses stream's own error event, for a stream the proxy cuts (its error body is
//! OpenAI's, [`crate::dialect::openai::errors::body`]).

/// The Responses API's stream error event (`event: error`, `type: "error"`) with the
/// `sequence_number` after `last_sequence` (the last one the stream carried; 0 when none), as
/// SSE text.
pub(crate) fn stream_error_event(message: &str, code: &str, last_sequence: Option<u64>) -> String {
    let sequence_number = last_sequence.map_or(0, |n| n.saturating_add(1));
    let v = serde_json::json!({"type":"error","code":code,"message":message,"param":null,"sequence_number":sequence_number});
    format!("event: error\ndata: {v}\n\n")
}
