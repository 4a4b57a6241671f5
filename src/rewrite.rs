//! The request passes, run in order on one parsed body. Pure: no I/O, no clock, no
//! randomness, so the same input gives the same bytes on every turn and after restarts.
//!
//! INTERFACE CONTRACT (used by `server.rs`; keep the signatures):
//! - [`rewrite_request`] returns `Ok(outcome)` with `outcome.body == None` when nothing
//!   changed (the server then forwards the ORIGINAL bytes, byte-identical), or
//!   `Some(new_bytes)` when a pass changed something.
//! - It returns `Err(RewriteError)` when the body is not something the passes understand
//!   (not JSON, `messages` of the wrong type, ...): the server forwards the original bytes.

use crate::config::{Dialect, ImagesConfig};
use crate::images::policy::Limits;
use crate::{dialect, images, json_edit};

/// What the request passes saw and did; goes into the request's log line and the
/// `x-cachekeeper-rewrites` response header.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RewriteReport {
    /// The request's `model`, when it has one.
    pub model: Option<String>,
    /// Image blocks / parts seen in the request (agent images and uploads).
    pub images_seen: usize,
    /// Image blocks replaced by the retired-image text.
    pub images_retired: usize,
    /// Carriers (image-bearing tool results) retired.
    pub carriers_retired: usize,
    /// One human-readable line per rewrite, with its reason and position.
    pub reasons: Vec<String>,
}

/// Result of [`rewrite_request`].
#[derive(Debug, Default, Clone)]
pub struct RewriteOutcome {
    /// `None`: nothing changed, forward the original bytes.
    pub body: Option<Vec<u8>>,
    pub report: RewriteReport,
}

/// Per-request inputs of the passes besides the body.
#[derive(Debug, Clone, Copy)]
pub struct RewriteContext<'a> {
    pub dialect: Dialect,
    pub images: &'a ImagesConfig,
}

/// Why a body was left alone.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// Not valid JSON (truncated, wrong encoding, ...).
    #[error("body is not valid JSON: {0}")]
    NotJson(String),
    /// Valid JSON of a shape the dialect does not describe (e.g. `messages` not an array).
    #[error("body does not have the {dialect} shape: {detail}")]
    Shape { dialect: &'static str, detail: String },
}

/// Run every request pass for the dialect on `body`.
///
/// Today that is batch image eviction (design.md pass 4) for Anthropic Messages and OpenAI
/// Chat; OpenAI Responses and Gemini bodies are validated and their `model` read, but nothing is
/// rewritten yet. Edits are spliced into the original bytes, so everything a pass does not
/// rewrite stays byte-identical.
pub fn rewrite_request(
    ctx: &RewriteContext<'_>,
    body: &[u8],
) -> Result<RewriteOutcome, RewriteError> {
    let (model, inventory) = match ctx.dialect {
        Dialect::Anthropic => dialect::anthropic::inventory(body)?,
        Dialect::Openai => {
            dialect::openai::inventory(body, ctx.images.agent_images_in_user_turns)?
        }
        Dialect::OpenaiResponses | Dialect::Gemini => {
            let model = dialect::model_only(body, ctx.dialect.as_str())?;
            return Ok(RewriteOutcome {
                body: None,
                report: RewriteReport {
                    model,
                    ..RewriteReport::default()
                },
            });
        }
    };
    let images_seen = inventory.images_seen;
    let eviction = images::evict(inventory, &Limits::from(ctx.images));
    let mut report = RewriteReport {
        model,
        images_seen,
        images_retired: eviction.images_retired,
        carriers_retired: eviction.carriers_retired,
        reasons: eviction.reasons,
    };
    if eviction.edits.is_empty() {
        return Ok(RewriteOutcome { body: None, report });
    }
    match json_edit::splice(body, eviction.edits) {
        Ok(new_body) => Ok(RewriteOutcome {
            body: Some(new_body),
            report,
        }),
        Err(e) => {
            // Cannot happen for spans taken from one parse; forward the original if it does.
            report.images_retired = 0;
            report.carriers_retired = 0;
            report.reasons = vec![format!("eviction skipped: {e}")];
            Ok(RewriteOutcome { body: None, report })
        }
    }
}
