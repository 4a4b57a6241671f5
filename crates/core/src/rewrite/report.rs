//! The one report of what the request passes saw and did. The log line, the
//! `x-cachekeeper-rewrites` response header (and later the metrics) all derive from it:
//! [`RewriteReport::counters`] is the one list of counter names and values.

use crate::images::passes::ImageReport as ImageCounts;
use crate::reasoning::restore::RestoreCounts;
use crate::reasoning::ShapeCounts;

/// What the request passes saw and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RewriteReport {
    /// The request's `model`, when it has one.
    pub model: Option<String>,
    /// What the image passes (1–4) saw and did.
    pub images: ImageCounts,
    /// One human-readable line per rewrite, with its reason and position.
    pub reasons: Vec<String>,
    /// What reasoning shaping (pass 6) did.
    pub shape: ShapeCounts,
    /// `stream_options.include_usage` was added (`usage_in_streams`).
    pub usage_in_streams: bool,
    /// What carrier restore (pass 5) put back.
    pub restore: RestoreCounts,
    /// `cache_control` breakpoints the proxy added (`cache_breakpoints = "auto"`, ≤ 4).
    pub breakpoints_added: usize,
    /// Blocks a prefix stabiliser removed (`stabilize`).
    pub stabilized: usize,
}

/// Counters of the report's own list (every one but the restore kinds).
const FIXED: usize = 24;
/// Restore kinds ([`RestoreCounts::kinds`]).
const KINDS: usize = 8;
/// Number of entries [`RewriteReport::counters`] returns. Both parts are array lengths the
/// compiler checks, so a counter added to either list without its count is a build error,
/// never a counter silently cut off the end (the failing input: two counters added in two
/// branches, the last two restore kinds dropped from the header and the log).
pub(crate) const COUNTERS: usize = FIXED + KINDS;

impl RewriteReport {
    /// Every counter as `(name, value)`, in the order of `x-cachekeeper-rewrites`; the same
    /// names are the log line's fields. `reasoning_edits` is the sum of the shaping
    /// counters after it; `reasoning_restored` counts the assistant turns carrier restore
    /// changed, and the `restored_<kind>` counters after it what it put back.
    pub fn counters(&self) -> [(&'static str, usize); COUNTERS] {
        let c = &self.shape;
        let i = &self.images;
        let fixed: [(&'static str, usize); FIXED] = [
            ("images_seen", i.seen),
            ("images_repaired", i.repaired),
            ("images_downscaled", i.downscaled),
            ("images_repeat_capped", i.repeat_capped),
            ("images_replaced", i.replaced),
            ("images_retired", i.retired),
            ("carriers_retired", i.carriers_retired),
            ("images_set_retired", i.set_retired),
            ("images_cold_retired", i.cold_retired),
            ("images_failed_open", i.failed_open),
            ("reasoning_edits", self.reasoning_edits()),
            ("carriers_dropped", c.carriers_dropped),
            ("carriers_filled", c.carriers_filled),
            ("echo_pads", c.pads),
            ("thinking_stripped", c.thinking_stripped),
            ("thinking_rejected", c.thinking_rejected),
            ("cache_control_moved", c.cache_control_moved),
            ("params_dropped", c.params_dropped),
            ("flags_added", c.flags_added),
            ("binding_set", usize::from(c.binding_set)),
            ("usage_in_streams", usize::from(self.usage_in_streams)),
            ("breakpoints_added", self.breakpoints_added),
            ("stabilized", self.stabilized),
            ("reasoning_restored", self.restore.turns),
        ];
        // The restore kinds' names come from the restore pass (one list).
        let kinds: [(&'static str, usize); KINDS] = self.restore.kinds();
        let mut all = [("", 0); COUNTERS];
        let (head, tail) = all.split_at_mut(FIXED);
        head.copy_from_slice(&fixed);
        tail.copy_from_slice(&kinds);
        all
    }

    /// Every edit reasoning shaping made, summed.
    pub fn reasoning_edits(&self) -> usize {
        let c = &self.shape;
        c.carriers_dropped
            + c.carriers_filled
            + c.pads
            + c.thinking_stripped
            + c.thinking_rejected
            + c.cache_control_moved
            + c.params_dropped
            + c.flags_added
            + usize::from(c.binding_set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The failing case: two parts each added two counters and the merge kept COUNTERS at
    /// 30, so the zip silently dropped the last two restore kinds from the header and the log.
    #[test]
    fn every_counter_has_a_slot_and_none_is_dropped() {
        let names: Vec<&str> = RewriteReport::default()
            .counters()
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert!(names.iter().all(|n| !n.is_empty()), "{names:?}");
        for (kind, _) in RestoreCounts::default().kinds() {
            assert!(names.contains(&kind), "{kind} missing from {names:?}");
        }
        let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), COUNTERS);
        assert_eq!(names.last(), Some(&"restored_placeholder_signature"));
    }
}
