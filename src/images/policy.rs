//! The retire-count step function: how many of the oldest carriers to retire so a request stays
//! within the provider's image-block and byte ceilings.
//!
//! A port of the Hermes agent's `agent/image_eviction_policy.py`, described in
//! `docs/images.md#the-retire-function` (constants `#constants`, worked cases `#worked-cases`). It
//! is recomputed from scratch on every request and only moves at batch boundaries, so the cached
//! prefix changes once per batch instead of once per image (`docs/images.md#why-batches`).

use crate::config::ImagesConfig;

/// The ceilings and step sizes of one route (from [`ImagesConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Block ceiling when any image may be over 2000 px.
    pub max_blocks: usize,
    /// Block ceiling when every image is known to be ≤ 2000 px.
    pub max_blocks_small: usize,
    /// Byte budget (summed base64 / data-URL string lengths).
    pub max_bytes: u64,
    /// Carriers retired per step (at least 1 is used).
    pub batch: usize,
    /// Satisfiability floor.
    pub floor: usize,
}

/// The `[images]` defaults ([`ImagesConfig::default`], where the values and their sources
/// live: 20 blocks, 100 small blocks, 24,000,000 bytes, batch 8, floor 3).
impl Default for Limits {
    fn default() -> Self {
        Self::from(&ImagesConfig::default())
    }
}

impl From<&ImagesConfig> for Limits {
    fn from(c: &ImagesConfig) -> Self {
        Self {
            max_blocks: c.max_blocks,
            max_blocks_small: c.max_blocks_small,
            max_bytes: c.max_bytes,
            batch: c.evict_batch,
            floor: c.evict_floor,
        }
    }
}

impl Limits {
    /// The block ceiling that applies: `max_blocks_small` when every image in the request is
    /// known to be ≤ 2000 px, else `max_blocks`.
    pub(crate) fn block_limit(&self, many_image_safe: bool) -> usize {
        if many_image_safe {
            self.max_blocks_small
        } else {
            self.max_blocks
        }
    }
}

/// What a request carries, as the policy sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Load<'a> {
    /// Image blocks per carrier, NEWEST first.
    pub carrier_blocks: &'a [usize],
    /// Bytes per carrier, newest first, same length as `carrier_blocks`; `None` = enforce the
    /// block ceiling only (`docs/images.md#the-retire-function`).
    pub carrier_bytes: Option<&'a [u64]>,
    /// Image blocks outside carriers (uploads): counted, never retired.
    pub reserved_blocks: usize,
    /// Bytes of the reserved images.
    pub reserved_bytes: u64,
    /// Every image in the request is known from its header to be ≤ 2000 px on both sides.
    pub many_image_safe: bool,
}

/// How many of the OLDEST carriers to retire (`docs/images.md#the-retire-function`).
///
/// 0 while both ceilings hold (append-only below the limit). Otherwise whole steps of
/// `min(batch, window - floor)` (at least 1) until the kept carriers fit, where `window` is the
/// largest number of newest carriers that fits. The floor protects the newest `floor` carriers
/// only when uploads alone break the block ceiling and keeping them still fits the byte budget:
/// it is never applied under byte pressure.
pub(crate) fn retire_count(load: &Load<'_>, limits: &Limits) -> usize {
    let total = load.carrier_blocks.len();
    let limit = limits.block_limit(load.many_image_safe);
    // Prefix sums over the k newest carriers, k = 0..=total.
    let mut kept_blocks = Vec::with_capacity(total + 1);
    let mut kept_bytes = Vec::with_capacity(total + 1);
    kept_blocks.push(0usize);
    kept_bytes.push(0u64);
    for (i, &b) in load.carrier_blocks.iter().enumerate() {
        let size = load
            .carrier_bytes
            .and_then(|s| s.get(i).copied())
            .unwrap_or(0);
        kept_blocks.push(kept_blocks[i].saturating_add(b));
        kept_bytes.push(kept_bytes[i].saturating_add(size));
    }
    let bytes_fit = |k: usize| {
        load.carrier_bytes.is_none()
            || load.reserved_bytes.saturating_add(kept_bytes[k]) <= limits.max_bytes
    };
    let fits =
        |k: usize| load.reserved_blocks.saturating_add(kept_blocks[k]) <= limit && bytes_fit(k);

    if fits(total) {
        return 0;
    }
    let floor = limits.floor.min(total);
    let max_retire = if !fits(0) && bytes_fit(floor) {
        total - floor
    } else {
        total
    };
    if max_retire == 0 {
        return 0;
    }
    let window = (0..=total).rev().find(|&k| fits(k)).unwrap_or(0);
    let quantum = limits.batch.min(window.saturating_sub(floor)).max(1);
    let mut retire = 0usize;
    loop {
        retire = (retire + quantum).min(max_retire);
        if fits(total - retire) || retire == max_retire {
            return retire;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    fn blocks_only(carriers: &[usize], reserved: usize) -> usize {
        retire_count(
            &Load {
                carrier_blocks: carriers,
                reserved_blocks: reserved,
                ..Load::default()
            },
            &Limits::default(),
        )
    }

    fn with_bytes(
        carriers: &[usize],
        sizes: &[u64],
        reserved: usize,
        reserved_bytes: u64,
    ) -> usize {
        retire_count(
            &Load {
                carrier_blocks: carriers,
                carrier_bytes: Some(sizes),
                reserved_blocks: reserved,
                reserved_bytes,
                many_image_safe: false,
            },
            &Limits::default(),
        )
    }

    // `docs/images.md#worked-cases` (the Hermes test_image_eviction_policy.py table), one test per
    // row.
    #[test]
    fn row_20_singles_retire_nothing() {
        assert_eq!(blocks_only(&[1; 20], 0), 0);
    }
    #[test]
    fn row_21_singles_retire_a_batch() {
        assert_eq!(blocks_only(&[1; 21], 0), 8);
    }
    #[test]
    fn row_28_singles_frontier_holds() {
        assert_eq!(blocks_only(&[1; 28], 0), 8);
    }
    #[test]
    fn row_29_singles_second_batch() {
        assert_eq!(blocks_only(&[1; 29], 0), 16);
    }
    #[test]
    fn row_one_carrier_of_25_floor_yields() {
        assert_eq!(blocks_only(&[25], 0), 1);
    }
    #[test]
    fn row_four_carriers_of_10() {
        assert_eq!(blocks_only(&[10, 10, 10, 10], 0), 2);
    }
    #[test]
    fn row_uploads_alone_breach_keep_floor() {
        assert_eq!(blocks_only(&[1; 5], 21), 2);
    }
    #[test]
    fn row_two_carriers_under_floor() {
        assert_eq!(blocks_only(&[1, 1], 25), 0);
    }
    #[test]
    fn row_bytes_override_the_floor() {
        assert_eq!(with_bytes(&[1, 1, 1], &[3 * MB; 3], 5, 25 * MB), 3);
    }
    #[test]
    fn row_13_carriers_of_2mb() {
        assert_eq!(with_bytes(&[1; 13], &[2 * MB; 13], 0, 0), 8);
    }
    #[test]
    fn row_empty() {
        assert_eq!(blocks_only(&[], 0), 0);
        assert_eq!(with_bytes(&[], &[], 0, 0), 0);
    }

    // test_outbound_stale_vision.py prose cases.
    #[test]
    fn frontier_moves_exactly_three_times_over_three_windows() {
        let limits = Limits::default();
        let mut moves = 0;
        let mut last = 0;
        for n in limits.floor + 1..=limits.max_blocks + 3 * limits.batch {
            let r = blocks_only(&vec![1; n], 0);
            assert!(n - r >= limits.floor.min(n), "n={n} kept {}", n - r);
            assert!(n - r <= limits.max_blocks, "n={n} kept {}", n - r);
            if r != last {
                moves += 1;
                last = r;
            }
        }
        assert_eq!(moves, 3);
    }

    #[test]
    fn three_image_carriers_count_blocks_not_messages() {
        // 8 tool results × 3 images = 24 blocks: the quantum shrinks to window - floor = 3.
        let r = blocks_only(&[3; 8], 0);
        assert_eq!(r, 3);
        assert!(3 * (8 - r) <= 20);
        assert!(8 - r >= Limits::default().floor);
    }

    #[test]
    fn uploads_plus_screenshots_end_within_the_ceiling() {
        for uploads in [8, 12] {
            let r = blocks_only(&[1; 16], uploads);
            assert!(uploads + 16 - r <= 20, "uploads {uploads}: retired {r}");
        }
        assert_eq!(blocks_only(&[1; 16], 8), 8);
        assert_eq!(blocks_only(&[1; 16], 12), 10);
    }

    #[test]
    fn twenty_one_uploads_keep_exactly_three_screenshots() {
        assert_eq!(5 - blocks_only(&[1; 5], 21), 3);
    }

    #[test]
    fn fifteen_uploads_six_screenshots_keep_at_least_the_floor() {
        let r = blocks_only(&[1; 6], 15);
        assert!(6 - r >= Limits::default().floor);
        assert!(15 + 6 - r <= 20);
        assert_eq!(r, 2);
    }

    #[test]
    fn byte_pressure_retires_every_frame() {
        // 5 × 5 MB uploads + 3 × 3 MB frames (~34 MB).
        assert_eq!(with_bytes(&[1; 3], &[3 * MB; 3], 5, 25 * MB), 3);
    }

    #[test]
    fn many_image_safe_uses_the_small_ceiling() {
        let load = Load {
            carrier_blocks: &[1; 30],
            many_image_safe: true,
            ..Load::default()
        };
        assert_eq!(retire_count(&load, &Limits::default()), 0);
        let load = Load {
            carrier_blocks: &[1; 101],
            many_image_safe: true,
            ..Load::default()
        };
        assert_eq!(retire_count(&load, &Limits::default()), 8);
    }

    #[test]
    fn default_limits_are_the_config_defaults() {
        let l = Limits::default();
        assert_eq!(
            (
                l.max_blocks,
                l.max_blocks_small,
                l.max_bytes,
                l.batch,
                l.floor
            ),
            (20, 100, 24_000_000, 8, 3)
        );
    }

    #[test]
    fn zero_batch_still_makes_progress() {
        let limits = Limits {
            batch: 0,
            ..Limits::default()
        };
        let load = Load {
            carrier_blocks: &[1; 21],
            ..Load::default()
        };
        assert_eq!(retire_count(&load, &limits), 1);
    }
}
