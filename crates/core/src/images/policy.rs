//! The retire-count step function: how many of the oldest carriers to retire so a request stays
//! within the provider's image-block and byte ceilings.
//!
//! Derived from the Hermes agent's `agent/image_eviction_policy.py` (`docs/images.md#constants`,
//! worked cases `#worked-cases`), but it retires deeper and less often
//! (`docs/images.md#the-retire-function`): when a ceiling is crossed, the oldest carriers are
//! retired until what is left is at the low-water mark (`evict_low_water`, default half the
//! ceiling in force), at least `evict_batch` of them. Each batch rewrites nearly the whole
//! conversation, so what costs is the number of batches, not their size
//! (`docs/images.md#why-batches`).
//!
//! The count is recomputed from scratch on every request, and it only moves when a ceiling is
//! crossed: it replays the request's carriers oldest first as if they had arrived one turn at a
//! time, moving the frontier only at a crossing, so a request that appends a turn gets the
//! frontier of the request before it unless its own newest carrier crosses a ceiling.

use super::settings::ImagesConfig;

/// The ceilings and step sizes of one request (from [`ImagesConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Block ceiling when any image may be over 2000 px.
    pub max_blocks: usize,
    /// Block ceiling when every image is known to be ≤ 2000 px.
    pub max_blocks_small: usize,
    /// Byte budget (summed base64 / data-URL string lengths).
    pub max_bytes: u64,
    /// Fewest carriers retired per step (at least 1 is used).
    pub batch: usize,
    /// Satisfiability floor.
    pub floor: usize,
    /// Image blocks left after a step (`evict_low_water`); `None` = half the ceiling in force.
    /// Held below that ceiling ([`Limits::low_water_blocks`]).
    pub low_water: Option<usize>,
}

/// The `[images]` defaults ([`ImagesConfig::default`], where the values and their sources
/// live: 20 blocks, 100 small blocks, 24,000,000 bytes, batch 8, floor 3, low water half the
/// ceiling).
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
            low_water: c.evict_low_water,
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

    /// The low-water mark in image blocks: `evict_low_water` held below the ceiling in force
    /// (at most ceiling − 1), or half that ceiling (rounded down) when unset.
    pub(crate) fn low_water_blocks(&self, many_image_safe: bool) -> usize {
        let ceiling = self.block_limit(many_image_safe);
        match self.low_water {
            Some(v) => v.min(ceiling.saturating_sub(1)),
            None => ceiling / 2,
        }
    }

    /// The low-water mark in bytes: the same fraction of `max_bytes` as the block low-water
    /// mark is of the block ceiling in force (half by default); 0 when that ceiling is 0.
    pub(crate) fn low_water_bytes(&self, many_image_safe: bool) -> u64 {
        let ceiling = self.block_limit(many_image_safe) as u128;
        if ceiling == 0 {
            return 0;
        }
        let low = self.low_water_blocks(many_image_safe) as u128;
        u64::try_from(u128::from(self.max_bytes) * low / ceiling).unwrap_or(u64::MAX)
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

/// Prefix sums of a [`Load`], OLDEST carrier first, with the ceilings and low-water marks.
struct Sums<'a> {
    load: &'a Load<'a>,
    /// `blocks[i]` / `bytes[i]`: summed over the `i` oldest carriers.
    blocks: Vec<usize>,
    bytes: Vec<u64>,
    limit: usize,
    low_blocks: usize,
    low_bytes: u64,
    max_bytes: u64,
}

impl<'a> Sums<'a> {
    fn new(load: &'a Load<'a>, limits: &Limits) -> Self {
        let total = load.carrier_blocks.len();
        let mut blocks = Vec::with_capacity(total + 1);
        let mut bytes = Vec::with_capacity(total + 1);
        blocks.push(0usize);
        bytes.push(0u64);
        // Oldest first: the newest-first slices read backwards.
        for (j, &b) in load.carrier_blocks.iter().enumerate().rev() {
            let size = load
                .carrier_bytes
                .and_then(|s| s.get(j).copied())
                .unwrap_or(0);
            let (kept_b, kept_y) = (
                blocks.last().copied().unwrap_or(0),
                bytes.last().copied().unwrap_or(0),
            );
            blocks.push(kept_b.saturating_add(b));
            bytes.push(kept_y.saturating_add(size));
        }
        Self {
            load,
            blocks,
            bytes,
            limit: limits.block_limit(load.many_image_safe),
            low_blocks: limits.low_water_blocks(load.many_image_safe),
            low_bytes: limits.low_water_bytes(load.many_image_safe),
            max_bytes: limits.max_bytes,
        }
    }

    /// Blocks and bytes (uploads included) when the oldest carriers `f..t` are kept.
    fn kept(&self, f: usize, t: usize) -> (usize, u64) {
        (
            self.load
                .reserved_blocks
                .saturating_add(self.blocks[t] - self.blocks[f]),
            self.load
                .reserved_bytes
                .saturating_add(self.bytes[t] - self.bytes[f]),
        )
    }

    fn bytes_fit(&self, f: usize, t: usize) -> bool {
        self.load.carrier_bytes.is_none() || self.kept(f, t).1 <= self.max_bytes
    }

    /// Keeping carriers `f..t` fits both ceilings.
    fn fits(&self, f: usize, t: usize) -> bool {
        self.kept(f, t).0 <= self.limit && self.bytes_fit(f, t)
    }

    /// Keeping carriers `f..t` is at or under both low-water marks.
    fn at_low_water(&self, f: usize, t: usize) -> bool {
        let (blocks, bytes) = self.kept(f, t);
        blocks <= self.low_blocks && (self.load.carrier_bytes.is_none() || bytes <= self.low_bytes)
    }

    /// The smallest `f' ≥ f` for which `ok(f', t)` holds; `t` when none does.
    fn first(&self, f: usize, t: usize, ok: impl Fn(&Self, usize, usize) -> bool) -> usize {
        (f..=t).find(|&g| ok(self, g, t)).unwrap_or(t)
    }
}

/// How many of the OLDEST carriers to retire (`docs/images.md#the-retire-function`).
///
/// The carriers are replayed oldest first, one turn at a time, with the request's uploads
/// throughout. While both ceilings hold nothing moves (append-only below the limit). When the
/// newest carrier of turn `t` crosses a ceiling, the frontier moves to where the carriers left
/// (uploads included) are at the low-water mark, and at least `batch` carriers further; but a
/// step leaves at least `floor + 1` carriers unless fitting the ceilings needs more (heavy
/// carriers: it never jumps past the newest frames). The floor protects the newest `floor`
/// carriers only when uploads alone break the block ceiling and keeping them still fits the
/// byte budget: it is never applied under byte pressure.
pub(crate) fn retire_count(load: &Load<'_>, limits: &Limits) -> usize {
    let total = load.carrier_blocks.len();
    let sums = Sums::new(load, limits);
    let mut f = 0usize;
    for t in 1..=total {
        if sums.fits(f, t) {
            continue;
        }
        let fit = sums.first(f, t, Sums::fits);
        let low = sums.first(f, t, Sums::at_low_water);
        let cap = t.saturating_sub(limits.floor.saturating_add(1));
        let mut next = low
            .max(f.saturating_add(limits.batch))
            .min(cap)
            .max(f + 1)
            .max(fit)
            .min(t);
        let floor = limits.floor.min(t);
        if !sums.fits(t, t) && sums.bytes_fit(t - floor, t) {
            next = next.min(t - floor);
        }
        f = f.max(next);
    }
    f
}

/// Cold-cache eviction (`docs/images.md#cold-cache-eviction`): how many of the OLDEST carriers
/// of `load` (what is left after [`retire_count`]) to retire now so the image blocks left
/// (uploads included) are at the low-water mark. Leaves at least `floor + 1` carriers, as a
/// step does; 0 when already at the mark.
pub(crate) fn cold_retire_count(load: &Load<'_>, limits: &Limits) -> usize {
    let total = load.carrier_blocks.len();
    let sums = Sums::new(load, limits);
    if sums.at_low_water(0, total) {
        return 0;
    }
    let cap = total.saturating_sub(limits.floor.saturating_add(1));
    sums.first(0, total, Sums::at_low_water).min(cap)
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
    // row. Limit 20, batch 8, floor 3; the low-water mark (default half the ceiling: 10 blocks,
    // 12,000,000 bytes) replaces Hermes' fixed batches of 8, so rows that crossed by batches now
    // retire down to 10 blocks left.
    #[test]
    fn row_20_singles_retire_nothing() {
        assert_eq!(blocks_only(&[1; 20], 0), 0);
    }
    #[test]
    fn row_21_singles_retire_down_to_the_low_water_mark() {
        // Hermes: 8. Now 11, leaving 10 = the low-water mark.
        assert_eq!(blocks_only(&[1; 21], 0), 11);
    }
    #[test]
    fn row_28_singles_frontier_holds() {
        // Hermes: 8 (frontier holds from 21 to 28). Now 11 holds from 21 to 31.
        assert_eq!(blocks_only(&[1; 28], 0), 11);
        assert_eq!(blocks_only(&[1; 31], 0), 11);
    }
    #[test]
    fn row_29_singles_frontier_still_holds() {
        // Hermes: 16 (a second batch at 29). Now 29 - 11 = 18 blocks still fit: nothing moves
        // until 32, which retires 11 more.
        assert_eq!(blocks_only(&[1; 29], 0), 11);
        assert_eq!(blocks_only(&[1; 32], 0), 22);
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
        // Crosses 24 MB at the 13th; the byte low-water mark (12 MB) keeps 6, the minimum step
        // (8) keeps 5: 8, as in Hermes.
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
        // Hermes: 3 moves for n up to 20 + 3·8. Each step now retires ceiling + 1 − low water
        // = 11 carriers, so three moves span n up to 20 + 3·11 (at 21, 32 and 43).
        let limits = Limits::default();
        let step = limits.max_blocks + 1 - limits.low_water_blocks(false);
        assert_eq!(step, 11);
        let mut moves = vec![];
        let mut last = 0;
        for n in limits.floor + 1..=limits.max_blocks + 3 * step {
            let r = blocks_only(&vec![1; n], 0);
            assert!(n - r >= limits.floor.min(n), "n={n} kept {}", n - r);
            assert!(n - r <= limits.max_blocks, "n={n} kept {}", n - r);
            if r != last {
                moves.push(n);
                last = r;
            }
        }
        assert_eq!(moves, vec![21, 32, 43]);
    }

    #[test]
    fn three_image_carriers_count_blocks_not_messages() {
        // 8 tool results × 3 images = 24 blocks: the step is capped so floor + 1 = 4 carriers
        // survive it; the 7th carrier crossed (21 blocks) and 3 were retired then.
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
        // 8 uploads: the 13th screenshot crosses; the low-water mark (10 blocks, 8 of them
        // uploads) would keep 2, the step cap keeps floor + 1 = 4: 9 retired (Hermes: 8).
        assert_eq!(blocks_only(&[1; 16], 8), 9);
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
        // Down to half of 100 (Hermes: a batch of 8).
        assert_eq!(retire_count(&load, &Limits::default()), 51);
    }

    /// The dense session: 150 turns, a screenshot per turn, all small (ceiling 100,
    /// low water 50): 51 retired at n = 101, one collapse in 150 turns, ~58 images visible on
    /// average (Hermes' batches of 8: 7 collapses, ~66 visible).
    #[test]
    fn dense_session_collapses_once_in_150_turns() {
        let limits = Limits::default();
        let (mut moves, mut last, mut visible) = (vec![], 0, 0usize);
        for n in 1..=150 {
            let load = Load {
                carrier_blocks: &vec![1; n],
                many_image_safe: true,
                ..Load::default()
            };
            let r = retire_count(&load, &limits);
            if r != last {
                moves.push((n, r));
                last = r;
            }
            visible += n - r;
        }
        assert_eq!(moves, vec![(101, 51)]);
        assert_eq!(visible, 8775); // 58.5 on average
        let hermes = Limits {
            low_water: Some(99),
            ..limits
        };
        let mut collapses = 0;
        let mut last = 0;
        for n in 1..=150 {
            let load = Load {
                carrier_blocks: &vec![1; n],
                many_image_safe: true,
                ..Load::default()
            };
            let r = retire_count(&load, &hermes);
            collapses += usize::from(r != last);
            last = r;
        }
        assert_eq!(collapses, 7);
    }

    /// Appending a carrier never moves the frontier unless the new request crosses a ceiling,
    /// also with carriers of mixed sizes.
    #[test]
    fn frontier_moves_only_at_a_crossing_with_mixed_carriers() {
        let sizes: Vec<usize> = (0..80).map(|i| 1 + (i * 7 % 3)).collect();
        let limits = Limits::default();
        let mut last = 0;
        for n in 1..=sizes.len() {
            let newest_first: Vec<usize> = sizes[..n].iter().rev().copied().collect();
            let load = Load {
                carrier_blocks: &newest_first,
                many_image_safe: true,
                ..Load::default()
            };
            let r = retire_count(&load, &limits);
            let prev_kept: usize = sizes[last..n].iter().sum();
            if r != last {
                assert!(
                    prev_kept > 100,
                    "n={n}: moved {last} -> {r} without a crossing"
                );
                let kept: usize = sizes[r..n].iter().sum();
                assert!(kept <= 50, "n={n}: kept {kept}");
            }
            last = r;
        }
        assert!(last > 0);
    }

    #[test]
    fn low_water_is_held_below_the_ceiling() {
        let l = Limits {
            low_water: Some(500),
            ..Limits::default()
        };
        assert_eq!(l.low_water_blocks(false), 19);
        assert_eq!(l.low_water_blocks(true), 99);
        // 19 left of 20: every crossing retires the minimum step, as Hermes did.
        assert_eq!(
            retire_count(
                &Load {
                    carrier_blocks: &[1; 21],
                    ..Load::default()
                },
                &l
            ),
            8
        );
        assert_eq!(Limits::default().low_water_blocks(false), 10);
        assert_eq!(Limits::default().low_water_bytes(false), 12_000_000);
        let zero = Limits {
            max_blocks: 0,
            ..Limits::default()
        };
        assert_eq!(
            (zero.low_water_blocks(false), zero.low_water_bytes(false)),
            (0, 0)
        );
    }

    #[test]
    fn cold_retire_goes_down_to_the_low_water_mark() {
        let limits = Limits::default();
        let load = |n: usize, reserved: usize| Load {
            carrier_blocks: &[1; 200][..n],
            reserved_blocks: reserved,
            many_image_safe: true,
            ..Load::default()
        };
        assert_eq!(cold_retire_count(&load(50, 0), &limits), 0);
        assert_eq!(cold_retire_count(&load(80, 0), &limits), 30);
        assert_eq!(cold_retire_count(&load(80, 10), &limits), 40);
        // Uploads alone above the mark: the newest floor + 1 carriers stay.
        assert_eq!(cold_retire_count(&load(80, 60), &limits), 76);
        assert_eq!(cold_retire_count(&load(0, 60), &limits), 0);
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
                l.floor,
                l.low_water
            ),
            (20, 100, 24_000_000, 8, 3, None)
        );
    }

    #[test]
    fn zero_batch_still_reaches_the_low_water_mark() {
        let limits = Limits {
            batch: 0,
            ..Limits::default()
        };
        let load = Load {
            carrier_blocks: &[1; 21],
            ..Load::default()
        };
        assert_eq!(retire_count(&load, &limits), 11);
        let limits = Limits {
            batch: 0,
            low_water: Some(20),
            ..Limits::default()
        };
        assert_eq!(retire_count(&load, &limits), 2);
    }
}
