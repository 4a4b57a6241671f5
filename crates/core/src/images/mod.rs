//! Images: where they are counted, probed and retired.
//!
//! The dialect modules walk a body and fill an [`Inventory`]: every image block they see
//! ([`Inventory::observe`]), the reserved ones (uploads: counted, never rewritten) and the
//! carriers (image-bearing tool results, retired as one unit each) with the edits that would
//! retire them. [`evict`] then applies the session's retired set ([`retired`]), asks
//! [`policy::retire_count`] how many of the oldest carriers left to retire, retires down to
//! the low-water mark on a cold cache, and returns those carriers' edits with report lines.

pub mod cache;
pub mod codec;
pub(crate) mod format;
pub mod passes;
pub(crate) mod policy;
pub(crate) mod probe;
pub(crate) mod profile;
pub mod recovery;
pub mod retired;
pub mod settings;

use crate::json::Edit;
use policy::{Limits, Load};
use retired::{ColdInputs, RetiredSet};

/// An image-bearing tool result: its images are counted as blocks and retired together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carrier {
    /// Where it sits in the body, e.g. `messages[3].content[1]` (for the report).
    pub path: String,
    /// What identifies it in the report, e.g. `tool_use_id toolu_01` or
    /// `user turn after tool messages`; `None` when nothing does.
    pub label: Option<String>,
    /// Image blocks / parts it holds.
    pub blocks: usize,
    /// Summed length of its base64 / data-URL strings as sent, bytes.
    pub bytes: u64,
    /// One edit per image: replace it with the retired-image text block.
    pub edits: Vec<Edit>,
    /// Keyed digests of its images, in document order ([`retired::image_digest`]); filled
    /// only when cold-cache eviction needs them ([`ColdInputs::needs_digests`]), else empty.
    pub digests: Vec<String>,
}

/// Every image of one request, as the eviction policy needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inventory {
    /// Carriers in document order (OLDEST first; sibling tool results in message order).
    pub carriers: Vec<Carrier>,
    /// Image blocks outside carriers (uploads).
    pub reserved_blocks: usize,
    /// Bytes of the reserved images.
    pub reserved_bytes: u64,
    /// All image blocks seen (carriers and reserved).
    pub images_seen: usize,
    /// Summed bytes of all images seen.
    pub bytes_seen: u64,
    /// Every image seen so far is known from its header to be ≤ 2000 px on both sides.
    pub many_image_safe: bool,
}

impl Default for Inventory {
    fn default() -> Self {
        Self {
            carriers: Vec::new(),
            reserved_blocks: 0,
            reserved_bytes: 0,
            images_seen: 0,
            bytes_seen: 0,
            many_image_safe: true,
        }
    }
}

impl Inventory {
    /// Count one image of `bytes` bytes; `probe_text` is its base64 / data URL (raw JSON
    /// string text), `None` when it has none (URL, file id, missing source). Probing stops at
    /// the first image that is not known to be small.
    #[cfg(test)]
    pub(crate) fn observe(&mut self, bytes: u64, probe_text: Option<&str>) {
        self.images_seen += 1;
        self.bytes_seen = self.bytes_seen.saturating_add(bytes);
        if self.many_image_safe {
            let dims = probe_text.and_then(probe::dimensions);
            self.many_image_safe = probe::within_many_image_limit(dims);
        }
    }

    /// Count one image of `bytes` bytes whose dimensions are known (`Some`) or not.
    pub(crate) fn observe_dims(&mut self, bytes: u64, dims: Option<probe::Dimensions>) {
        self.images_seen += 1;
        self.bytes_seen = self.bytes_seen.saturating_add(bytes);
        self.many_image_safe &= probe::within_many_image_limit(dims);
    }

    /// Count an already observed image as reserved (never rewritten).
    pub(crate) fn reserve(&mut self, bytes: u64) {
        self.reserved_blocks += 1;
        self.reserved_bytes = self.reserved_bytes.saturating_add(bytes);
    }
}

/// What [`evict`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Eviction {
    /// Edits retiring the chosen carriers' images.
    pub edits: Vec<Edit>,
    /// Which carriers are retired (indices into [`Inventory::carriers`], ascending).
    pub carriers: Vec<usize>,
    /// Image blocks retired (all reasons).
    pub images_retired: usize,
    /// Carriers retired (all reasons).
    pub carriers_retired: usize,
    /// Image blocks retired because the session's retired set names them.
    pub set_retired: usize,
    /// Image blocks retired by this turn's cold-cache decision.
    pub cold_retired: usize,
    /// The session's new retired set, when this turn's cold-cache decision changed it.
    pub retired_set: Option<RetiredSet>,
    /// One line per carrier the step function retired, one per cold-cache rule applied (and
    /// one when a ceiling still does not hold).
    pub reasons: Vec<String>,
}

/// Blocks and bytes of some carriers of `inv` (`idx`, oldest first), NEWEST first.
fn sizes(inv: &Inventory, idx: &[usize]) -> (Vec<usize>, Vec<u64>) {
    let blocks = idx.iter().rev().map(|&i| inv.carriers[i].blocks).collect();
    let bytes = idx.iter().rev().map(|&i| inv.carriers[i].bytes).collect();
    (blocks, bytes)
}

/// The policy's view of carriers of `blocks` / `bytes` (newest first) with `inv`'s uploads.
fn load<'v>(inv: &Inventory, blocks: &'v [usize], bytes: &'v [u64]) -> Load<'v> {
    Load {
        carrier_blocks: blocks,
        carrier_bytes: Some(bytes),
        reserved_blocks: inv.reserved_blocks,
        reserved_bytes: inv.reserved_bytes,
        many_image_safe: inv.many_image_safe,
    }
}

/// Retire carriers of `inv`: those the session's retired set names (`cold`), then the oldest
/// of the rest as [`policy::retire_count`] decides, then — on a cold cache — the oldest of what
/// is left down to the low-water mark ([`policy::cold_retire_count`]); see
/// [`retired`] for the rules. `cold = None` runs the step function alone. The carriers'
/// `digests` must be filled when `cold` needs them ([`ColdInputs::needs_digests`]).
pub(crate) fn evict(inv: Inventory, limits: &Limits, cold: Option<&ColdInputs<'_>>) -> Eviction {
    let mut out = Eviction::default();
    // (a) The session's retired set.
    let (set_idx, rest) = retire_remembered(&inv, cold, &mut out);
    // (b) The step function on the carriers left.
    let retire = retire_step(&inv, limits, &rest, &mut out);
    let (step_idx, left) = rest.split_at(retire);
    // (c) A cold cache: down to the low-water mark now, remembered.
    let cold_n = match cold.filter(|c| c.cold) {
        Some(c) => retire_cold(&inv, limits, c, step_idx, left, &mut out),
        None => 0,
    };
    let cold_idx = &left[..cold_n];

    let mut chosen: Vec<usize> = set_idx
        .iter()
        .chain(step_idx)
        .chain(cold_idx)
        .copied()
        .collect();
    chosen.sort_unstable();
    for (i, c) in inv.carriers.into_iter().enumerate() {
        if chosen.binary_search(&i).is_ok() {
            out.images_retired += c.blocks;
            out.carriers_retired += 1;
            out.edits.extend(c.edits);
        }
    }
    out.carriers = chosen;
    out
}

/// [`evict`]'s step (a): the carriers the session's retired set names, and the rest (indices
/// into `inv.carriers`, oldest first).
fn retire_remembered(
    inv: &Inventory,
    cold: Option<&ColdInputs<'_>>,
    out: &mut Eviction,
) -> (Vec<usize>, Vec<usize>) {
    let n = inv.carriers.len();
    let by_set = match cold {
        Some(c) if !c.retired.is_empty() => {
            let digests: Vec<&[String]> =
                inv.carriers.iter().map(|c| c.digests.as_slice()).collect();
            c.retired.take(&digests)
        }
        _ => vec![false; n],
    };
    let set_idx: Vec<usize> = (0..n).filter(|&i| by_set[i]).collect();
    let rest: Vec<usize> = (0..n).filter(|&i| !by_set[i]).collect();
    out.set_retired = set_idx.iter().map(|&i| inv.carriers[i].blocks).sum();
    if !set_idx.is_empty() {
        out.reasons.push(format!(
            "retired {} carrier{} ({} image block{}) this session retired on a cold cache \
             before (its remembered set), so the prefix stays as earlier turns sent it",
            set_idx.len(),
            plural(set_idx.len()),
            out.set_retired,
            plural(out.set_retired)
        ));
    }
    (set_idx, rest)
}

/// [`evict`]'s step (b): how many of the oldest of `rest` [`policy::retire_count`] retires,
/// each logged with the ceiling it broke.
fn retire_step(inv: &Inventory, limits: &Limits, rest: &[usize], out: &mut Eviction) -> usize {
    let limit = limits.block_limit(inv.many_image_safe);
    let (blocks, bytes) = sizes(inv, rest);
    let retire = policy::retire_count(&load(inv, &blocks, &bytes), limits);
    let blocks_total = inv.reserved_blocks + blocks.iter().sum::<usize>();
    let bytes_total = inv.reserved_bytes.saturating_add(bytes.iter().sum::<u64>());
    let mut why = Vec::new();
    if blocks_total > limit {
        why.push(format!("{blocks_total} blocks > ceiling {limit}"));
    }
    if bytes_total > limits.max_bytes {
        why.push(format!("{bytes_total} bytes > budget {}", limits.max_bytes));
    }
    let why = why.join(" and ");
    let (step_idx, left) = rest.split_at(retire.min(rest.len()));
    let (mut kept_blocks, mut kept_bytes) = (blocks_total, bytes_total);
    for &i in step_idx {
        let c = &inv.carriers[i];
        let id = c
            .label
            .as_deref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        out.reasons.push(format!(
            "retired carrier {}{id}: {} image block{}; reason: {why}",
            c.path,
            c.blocks,
            plural(c.blocks)
        ));
        kept_blocks -= c.blocks;
        kept_bytes = kept_bytes.saturating_sub(c.bytes);
    }
    if !why.is_empty() && (kept_blocks > limit || kept_bytes > limits.max_bytes) {
        out.reasons.push(format!(
            "still over a ceiling after retiring {retire} carriers ({kept_blocks} blocks, \
             {kept_bytes} bytes): the newest {} carriers are kept (evict_floor) because uploads \
             alone exceed the block ceiling",
            left.len()
        ));
    }
    step_idx.len()
}

/// [`evict`]'s step (c), on a cold cache: how many of the oldest of `left` go, down to the
/// low-water mark ([`policy::cold_retire_count`]); the new retired set (with step (b)'s
/// carriers) goes to `out.retired_set` when it changed.
fn retire_cold(
    inv: &Inventory,
    limits: &Limits,
    c: &ColdInputs<'_>,
    step_idx: &[usize],
    left: &[usize],
    out: &mut Eviction,
) -> usize {
    let low = limits.low_water_blocks(inv.many_image_safe);
    let (blocks, bytes) = sizes(inv, left);
    let k = policy::cold_retire_count(&load(inv, &blocks, &bytes), limits);
    let cold_idx = &left[..k.min(left.len())];
    if !cold_idx.is_empty() {
        out.cold_retired = cold_idx.iter().map(|&i| inv.carriers[i].blocks).sum();
        out.reasons.push(format!(
            "cold cache (session idle past the provider's TTL): retired {} oldest \
             carrier{} ({} image block{}) down to the low-water mark {low}; remembered for \
             this session",
            cold_idx.len(),
            plural(cold_idx.len()),
            out.cold_retired,
            plural(out.cold_retired)
        ));
        let mut set = c.retired.clone();
        for &i in step_idx.iter().chain(cold_idx) {
            set.add(&inv.carriers[i].digests);
        }
        out.retired_set = (set != *c.retired).then_some(set);
    }
    cold_idx.len()
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
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

    fn carrier(i: usize, blocks: usize) -> Carrier {
        Carrier {
            path: format!("messages[{i}]"),
            label: Some(format!("tool_call_id call_{i}")),
            blocks,
            bytes: 10,
            edits: vec![Edit {
                range: i..i + 1,
                replacement: vec![],
            }],
            digests: vec![format!("d{i}")],
        }
    }

    #[test]
    fn evicts_oldest_first_with_reasons() {
        let mut inv = Inventory::default();
        for i in 0..21 {
            inv.observe(10, None);
            inv.carriers.push(carrier(i, 1));
        }
        let ev = evict(inv, &Limits::default(), None);
        // Down to the low-water mark (half of 20): 11 retired, 10 left.
        assert_eq!(ev.carriers_retired, 11);
        assert_eq!(ev.images_retired, 11);
        assert_eq!(ev.edits.len(), 11);
        assert_eq!(ev.edits[0].range, 0..1);
        assert_eq!(ev.edits[10].range, 10..11);
        assert_eq!(
            ev.reasons[0],
            "retired carrier messages[0] (tool_call_id call_0): 1 image block; reason: 21 blocks > ceiling 20"
        );
        assert_eq!(ev.reasons.len(), 11);
    }

    #[test]
    fn floor_case_says_so() {
        let mut inv = Inventory {
            reserved_blocks: 21,
            many_image_safe: false,
            ..Inventory::default()
        };
        for i in 0..5 {
            inv.carriers.push(carrier(i, 1));
        }
        let ev = evict(inv, &Limits::default(), None);
        assert_eq!(ev.carriers_retired, 2);
        assert!(
            ev.reasons[2].contains("newest 3 carriers are kept"),
            "{:?}",
            ev.reasons
        );
    }

    fn small_inventory(n: usize, reserved: usize) -> Inventory {
        let mut inv = Inventory {
            reserved_blocks: reserved,
            ..Inventory::default()
        };
        for i in 0..n {
            inv.carriers.push(carrier(i, 1));
        }
        inv
    }

    #[test]
    fn a_cold_cache_retires_down_to_the_low_water_mark_and_remembers() {
        let key = crate::digest::DigestKey::for_credential(None);
        let empty = RetiredSet::default();
        let cold = ColdInputs {
            retired: &empty,
            cold: true,
            key: &key,
        };
        // 80 small screenshots + 5 uploads, ceiling 100, low water 50: 35 retired now.
        let ev = evict(small_inventory(80, 5), &Limits::default(), Some(&cold));
        assert_eq!(
            (ev.carriers_retired, ev.cold_retired, ev.set_retired),
            (35, 35, 0)
        );
        assert_eq!(ev.carriers, (0..35).collect::<Vec<_>>());
        assert_eq!(
            ev.reasons,
            vec![
                "cold cache (session idle past the provider's TTL): retired 35 oldest carriers \
                  (35 image blocks) down to the low-water mark 50; remembered for this session"
            ]
        );
        let set = ev.retired_set.unwrap();
        assert_eq!(set.images.len(), 35);
        assert_eq!(set.images.get("d0"), Some(&1));

        // The next turn (one more screenshot, warm): the set retires the same 35, the step
        // function on the 46 left does nothing, the set does not change.
        let warm = ColdInputs {
            retired: &set,
            cold: false,
            key: &key,
        };
        let ev = evict(small_inventory(81, 5), &Limits::default(), Some(&warm));
        assert_eq!(
            (ev.carriers_retired, ev.set_retired, ev.cold_retired),
            (35, 35, 0)
        );
        assert_eq!(ev.carriers, (0..35).collect::<Vec<_>>());
        assert_eq!(ev.retired_set, None);
        assert_eq!(ev.reasons.len(), 1, "{:?}", ev.reasons);
        // Cold again but already at the mark: no new decision.
        let again = ColdInputs { cold: true, ..warm };
        let ev = evict(small_inventory(50, 5), &Limits::default(), Some(&again));
        assert_eq!((ev.cold_retired, ev.retired_set), (0, None));
    }

    #[test]
    fn a_cold_decision_after_a_step_remembers_the_step_too() {
        let key = crate::digest::DigestKey::for_credential(None);
        let empty = RetiredSet::default();
        let cold = ColdInputs {
            retired: &empty,
            cold: true,
            key: &key,
        };
        // 21 singles over the strict ceiling of 20 (unknown dimensions): the step retires 11,
        // down to the low-water mark (10); nothing is cold-retired, no decision, no set.
        let mut inv = small_inventory(21, 0);
        inv.many_image_safe = false;
        let ev = evict(inv, &Limits::default(), Some(&cold));
        assert_eq!((ev.carriers_retired, ev.cold_retired), (11, 0));
        assert_eq!(ev.retired_set, None);
        // 30 singles: the step's 11 (at the 21st) leave 19; cold retires 9 more, down to 10,
        // and the set holds all 20.
        let mut inv = small_inventory(30, 0);
        inv.many_image_safe = false;
        let ev = evict(inv, &Limits::default(), Some(&cold));
        assert_eq!((ev.carriers_retired, ev.cold_retired), (20, 9));
        assert_eq!(ev.retired_set.unwrap().images.len(), 20);
        // Low water 5 on a 20 ceiling with a minimum step of 16: 26 singles → the step
        // retired 16 at the 21st, 10 are left; cold retires 5 more and the set holds all 21.
        let limits = Limits {
            low_water: Some(5),
            batch: 16,
            ..Limits::default()
        };
        let mut inv = small_inventory(26, 0);
        inv.many_image_safe = false;
        let ev = evict(inv, &limits, Some(&cold));
        assert_eq!((ev.carriers_retired, ev.cold_retired), (21, 5));
        let set = ev.retired_set.unwrap();
        assert_eq!(set.images.len(), 21);
        // Next turn: the set retires those 21, the step on the 6 left does not move.
        let warm = ColdInputs {
            retired: &set,
            cold: false,
            key: &key,
        };
        let mut inv = small_inventory(27, 0);
        inv.many_image_safe = false;
        let ev = evict(inv, &limits, Some(&warm));
        assert_eq!((ev.carriers_retired, ev.set_retired), (21, 21));
        assert_eq!(ev.carriers, (0..21).collect::<Vec<_>>());
    }

    #[test]
    fn observe_stops_probing_at_first_unknown() {
        let mut inv = Inventory::default();
        assert!(inv.many_image_safe);
        inv.observe(5, Some("https://example.com/x.png"));
        assert!(!inv.many_image_safe);
        assert_eq!((inv.images_seen, inv.bytes_seen), (1, 5));
    }
}
