//! Reasoning carriers: the per-route table, shaping of assistant turns, and unknown-field verdicts.
//!
//! Three pure parts (no I/O, no clock, no randomness):
//! - [`profiles`]: the per-request refinement of the route's provider row
//!   ([`crate::provider`], resolved once per route). [`for_request`] turns the row, the
//!   upstream path and the request's model into a [`ResolvedRoute`]: the carriers sent on the
//!   OpenAI Chat wire, the must-echo family, the Anthropic-wire [`ThinkingRoute`], and the
//!   keep-thinking flag. Sources: `docs/providers.md`, `docs/reasoning.md`.
//! - [`shape`]: the shaping pass, a policy over the body's one view that returns edits; the
//!   pipeline ([`crate::rewrite`]) runs it after the image passes, on the same parse.
//! - [`unknown_field`]: [`detect`], which reads a 4xx and says which sent fields the provider
//!   called unknown (widened), or nothing.
//! - [`betas`]: which `anthropic-beta` values a 4xx rejects ([`betas::rejected`]).
//!
//! How the server uses them, per request:
//! 1. `route = for_request(&route.provider, upstream_path, model)`.
//! 2. `omit` = the verdict store's fields for (upstream host, model as sent, case kept).
//! 3. `shape(&ShapeContext { dialect, route: &route, omit: &omit, droppable_params,
//!    first_changed_byte, anthropic_beta }, &doc)` (in the pipeline): its edits are spliced
//!    with the image passes' edits; apply `set_headers`, log `reasons` / `counts`.
//! 4. On a 4xx: `detect(status, error_body, sent_body, &route, droppable_params)`. When it
//!    returns fields not already in `omit`: store them, add them to `omit`, shape the
//!    pre-shaping body again, and send once more. Otherwise pass the error through.

pub mod betas;
pub mod carriers;
pub(crate) mod profiles;
pub mod restore;
pub mod restore_rejected;

pub(crate) mod shape;
pub mod signatures;
pub mod unknown_field;

pub use crate::provider::Carrier;
pub(crate) use profiles::for_request;
pub use profiles::{resolve, ResolvedRoute, BINDING_BETA};
pub use shape::{merge_beta, shape_request, ShapeContext, ShapeCounts, ShapeOutcome, Shaped};
pub use unknown_field::{detect, Detected, WORDINGS};
