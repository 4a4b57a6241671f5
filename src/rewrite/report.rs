//! The one report of what the request passes saw and did. The log line, the
//! `x-cachekeeper-rewrites` response header (and later the metrics) all derive from it:
//! [`RewriteReport::counters`] is the one list of counter names and values.

use crate::reasoning::ShapeCounts;

/// What the request passes saw and did.
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
    /// Images repaired: media type from the magic bytes, a format conversion, or a shrink to a
    /// hard limit (pass 1; uploads included).
    pub images_repaired: usize,
    /// Agent images downscaled to `embed_target_bytes` / `max_dimension` (pass 2).
    pub images_downscaled: usize,
    /// Agent images replaced by the repeat-cap text (pass 3).
    pub images_repeat_capped: usize,
    /// Images replaced by a fixed text for their format (or, in a recovery, corruption or a
    /// model that cannot see images).
    pub images_replaced: usize,
    /// Images that needed a transcode but could not be decoded and were forwarded as sent.
    pub images_failed_open: usize,
    /// One human-readable line per rewrite, with its reason and position.
    pub reasons: Vec<String>,
    /// What reasoning shaping (pass 6) did.
    pub shape: ShapeCounts,
}

/// Number of entries [`RewriteReport::counters`] returns.
pub const COUNTERS: usize = 17;

impl RewriteReport {
    /// Every counter as `(name, value)`, in the order of `x-cachekeeper-rewrites`; the same
    /// names are the log line's fields. `reasoning_edits` is the sum of the reasoning
    /// counters after it.
    pub fn counters(&self) -> [(&'static str, usize); COUNTERS] {
        let c = &self.shape;
        [
            ("images_seen", self.images_seen),
            ("images_repaired", self.images_repaired),
            ("images_downscaled", self.images_downscaled),
            ("images_repeat_capped", self.images_repeat_capped),
            ("images_replaced", self.images_replaced),
            ("images_retired", self.images_retired),
            ("carriers_retired", self.carriers_retired),
            ("images_failed_open", self.images_failed_open),
            ("reasoning_edits", self.reasoning_edits()),
            ("carriers_dropped", c.carriers_dropped),
            ("carriers_filled", c.carriers_filled),
            ("echo_pads", c.pads),
            ("thinking_stripped", c.thinking_stripped),
            ("cache_control_moved", c.cache_control_moved),
            ("params_dropped", c.params_dropped),
            ("flags_added", c.flags_added),
            ("binding_set", usize::from(c.binding_set)),
        ]
    }

    /// Every edit reasoning shaping made, summed.
    pub fn reasoning_edits(&self) -> usize {
        let c = &self.shape;
        c.carriers_dropped
            + c.carriers_filled
            + c.pads
            + c.thinking_stripped
            + c.cache_control_moved
            + c.params_dropped
            + c.flags_added
            + usize::from(c.binding_set)
    }
}
