//! Images: where they are counted, probed and retired.
//!
//! The dialect modules walk a body and fill an [`Inventory`]: every image block they see
//! ([`Inventory::observe`]), the reserved ones (uploads: counted, never rewritten) and the
//! carriers (image-bearing tool results, retired as one unit each) with the edits that would
//! retire them. [`evict`] then asks [`policy::retire_count`] how many of the oldest carriers to
//! retire and returns those carriers' edits with one report line each.

pub mod cache;
pub mod codec;
pub(crate) mod format;
pub(crate) mod passes;
pub(crate) mod policy;
pub(crate) mod probe;
pub(crate) mod profile;
pub mod recovery;
pub mod retired;

use crate::json::Edit;
use policy::{Limits, Load};

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
    /// Image blocks retired.
    pub images_retired: usize,
    /// Carriers retired.
    pub carriers_retired: usize,
    /// One line per retired carrier (and one when a ceiling still does not hold).
    pub reasons: Vec<String>,
}

/// Retire the oldest carriers of `inv` as [`policy::retire_count`] decides.
pub(crate) fn evict(inv: Inventory, limits: &Limits) -> Eviction {
    let carrier_blocks: Vec<usize> = inv.carriers.iter().rev().map(|c| c.blocks).collect();
    let carrier_bytes: Vec<u64> = inv.carriers.iter().rev().map(|c| c.bytes).collect();
    let load = Load {
        carrier_blocks: &carrier_blocks,
        carrier_bytes: Some(&carrier_bytes),
        reserved_blocks: inv.reserved_blocks,
        reserved_bytes: inv.reserved_bytes,
        many_image_safe: inv.many_image_safe,
    };
    let retire = policy::retire_count(&load, limits);
    let limit = limits.block_limit(inv.many_image_safe);
    let blocks_total = inv.reserved_blocks + carrier_blocks.iter().sum::<usize>();
    let bytes_total = inv
        .reserved_bytes
        .saturating_add(carrier_bytes.iter().sum::<u64>());
    let mut why = Vec::new();
    if blocks_total > limit {
        why.push(format!("{blocks_total} blocks > ceiling {limit}"));
    }
    if bytes_total > limits.max_bytes {
        why.push(format!("{bytes_total} bytes > budget {}", limits.max_bytes));
    }
    let why = why.join(" and ");

    let mut out = Eviction::default();
    let (mut kept_blocks, mut kept_bytes) = (blocks_total, bytes_total);
    for c in inv.carriers.into_iter().take(retire) {
        let id = c
            .label
            .as_deref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        let plural = if c.blocks == 1 { "" } else { "s" };
        out.reasons.push(format!(
            "retired carrier {}{id}: {} image block{plural}; reason: {why}",
            c.path, c.blocks
        ));
        out.images_retired += c.blocks;
        out.carriers_retired += 1;
        kept_blocks -= c.blocks;
        kept_bytes = kept_bytes.saturating_sub(c.bytes);
        out.edits.extend(c.edits);
    }
    if !why.is_empty() && (kept_blocks > limit || kept_bytes > limits.max_bytes) {
        out.reasons.push(format!(
            "still over a ceiling after retiring {retire} carriers ({kept_blocks} blocks, \
             {kept_bytes} bytes): the newest {} carriers are kept (evict_floor) because uploads \
             alone exceed the block ceiling",
            carrier_blocks.len() - retire
        ));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
        }
    }

    #[test]
    fn evicts_oldest_first_with_reasons() {
        let mut inv = Inventory::default();
        for i in 0..21 {
            inv.observe(10, None);
            inv.carriers.push(carrier(i, 1));
        }
        let ev = evict(inv, &Limits::default());
        assert_eq!(ev.carriers_retired, 8);
        assert_eq!(ev.images_retired, 8);
        assert_eq!(ev.edits.len(), 8);
        assert_eq!(ev.edits[0].range, 0..1);
        assert_eq!(ev.edits[7].range, 7..8);
        assert_eq!(
            ev.reasons[0],
            "retired carrier messages[0] (tool_call_id call_0): 1 image block; reason: 21 blocks > ceiling 20"
        );
        assert_eq!(ev.reasons.len(), 8);
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
        let ev = evict(inv, &Limits::default());
        assert_eq!(ev.carriers_retired, 2);
        assert!(
            ev.reasons[2].contains("newest 3 carriers are kept"),
            "{:?}",
            ev.reasons
        );
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
