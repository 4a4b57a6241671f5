//! `[images]` and `[routes.images]`: the image passes' settings, their defaults and sources,
//! and their clamps. `crate::config` composes them into `proxy.toml`'s schema
//! (`docs/reference/config.md`).

use serde::Deserialize;

/// `[images]` (and `[routes.images]`): eviction ceilings and the downscale budget.
///
/// The defaults are Anthropic's documented limits (`docs/images.md#anthropic-limits`) and the
/// constants of the Hermes agent's eviction policy (`OUTBOUND_IMAGE_LIMIT` 20,
/// `OUTBOUND_IMAGE_HARD_LIMIT` 100, `OUTBOUND_IMAGE_BUDGET_BYTES` 24,000,000,
/// `IMAGE_EVICTION_BATCH` 8, `OUTBOUND_IMAGE_FLOOR` 3 in NousResearch/hermes-agent
/// `agent/image_eviction_policy.py`, `docs/images.md#constants`). This is the one place the eviction values are typed:
/// [`crate::images::policy::Limits::default`] reads them from here.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImagesConfig {
    /// Image-block ceiling when any image may be over 2000 px. Default 20: above 20 images
    /// Anthropic holds every image to 2000 px per side.
    pub max_blocks: usize,
    /// Image-block ceiling when every image is known from its header to be ≤ 2000 px.
    /// Default 100 (Anthropic's per-request count on 200K-context models).
    pub max_blocks_small: usize,
    /// Ceiling on the summed length of all base64 / data-URL strings, bytes. Default
    /// 24,000,000: headroom under Anthropic's 32 MB request limit.
    pub max_bytes: u64,
    /// Carriers retired per step. Default 8.
    pub evict_batch: usize,
    /// Newest carriers protected when uploads alone break the block ceiling. Default 3.
    pub evict_floor: usize,
    /// Image blocks (uploads included) left after a step retires carriers, the low-water
    /// mark. Default unset = half the ceiling in force (`max_blocks` or `max_blocks_small`,
    /// whichever the request is held to); a value not below that ceiling is held at
    /// ceiling − 1, with a warning at load (`docs/images.md#low-water-mark`).
    pub evict_low_water: Option<usize>,
    /// Cold-cache eviction: when the session's previous turn is older than the provider's
    /// cache TTL (the next turn is a full cache write anyway), retire down to the low-water
    /// mark at once and remember what was retired (`docs/images.md#cold-cache-eviction`).
    /// Default true.
    pub cold_eviction: bool,
    /// Agent images whose base64 / data-URL string is longer than this are downscaled,
    /// bytes. Default 262144; clamped to 64 KiB … 4 MiB.
    pub embed_target_bytes: u64,
    /// Longest side of a downscaled agent image, px. Default 1568 (Anthropic's native
    /// resolution).
    pub max_dimension: u32,
    /// Hard per-image limit on the base64 length, bytes. Default 5,000,000 (Anthropic's
    /// 5 MB on Bedrock / Vertex, with headroom).
    pub max_image_bytes: u64,
    /// Occurrences of one image allowed per request; 0 = unlimited. Default 0.
    pub max_calls_per_image: u32,
    /// OpenAI Chat: a user message right after tool messages holding only images and short
    /// text is the agent's (a carrier). Default true.
    pub agent_images_in_user_turns: bool,
    /// Memory for cached transcodes, bytes. Default 256 MiB.
    pub transcode_cache_bytes: u64,
    /// Which ceilings a `[routes.images]` table set (not a key: filled by
    /// [`ImagesConfig::with_overrides`]); those win over the provider table's per-model
    /// ceilings ([`ImagesConfig::for_model`]).
    #[serde(skip)]
    pub route_set: RouteCeilings,
}

/// Which image ceilings a route's `[routes.images]` table set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteCeilings {
    pub max_blocks: bool,
    pub max_blocks_small: bool,
}

/// Lower clamp of `embed_target_bytes` (64 KiB).
pub(crate) const EMBED_TARGET_MIN: u64 = 64 * 1024;
/// Upper clamp of `embed_target_bytes` (4 MiB).
pub(crate) const EMBED_TARGET_MAX: u64 = 4 * 1024 * 1024;

impl Default for ImagesConfig {
    fn default() -> Self {
        Self {
            max_blocks: 20,
            max_blocks_small: 100,
            max_bytes: 24_000_000,
            evict_batch: 8,
            evict_floor: 3,
            evict_low_water: None,
            cold_eviction: true,
            embed_target_bytes: 262_144,
            max_dimension: 1568,
            max_image_bytes: 5_000_000,
            max_calls_per_image: 0,
            agent_images_in_user_turns: true,
            transcode_cache_bytes: 256 * 1024 * 1024,
            route_set: RouteCeilings::default(),
        }
    }
}

/// `[routes.images]`: any `[images]` key, overriding the global value for one route.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImagesOverride {
    pub max_blocks: Option<usize>,
    pub max_blocks_small: Option<usize>,
    pub max_bytes: Option<u64>,
    pub evict_batch: Option<usize>,
    pub evict_floor: Option<usize>,
    pub evict_low_water: Option<usize>,
    pub cold_eviction: Option<bool>,
    pub embed_target_bytes: Option<u64>,
    pub max_dimension: Option<u32>,
    pub max_image_bytes: Option<u64>,
    pub max_calls_per_image: Option<u32>,
    pub agent_images_in_user_turns: Option<bool>,
    /// Rejected: the transcode cache is one per process, shared by every route; it is set in
    /// `[images]` only. Parsed so that the error can say so.
    pub transcode_cache_bytes: Option<u64>,
}

impl ImagesConfig {
    /// This config with a route's overrides applied.
    pub(crate) fn with_overrides(&self, o: &ImagesOverride) -> ImagesConfig {
        ImagesConfig {
            max_blocks: o.max_blocks.unwrap_or(self.max_blocks),
            max_blocks_small: o.max_blocks_small.unwrap_or(self.max_blocks_small),
            max_bytes: o.max_bytes.unwrap_or(self.max_bytes),
            evict_batch: o.evict_batch.unwrap_or(self.evict_batch),
            evict_floor: o.evict_floor.unwrap_or(self.evict_floor),
            evict_low_water: o.evict_low_water.or(self.evict_low_water),
            cold_eviction: o.cold_eviction.unwrap_or(self.cold_eviction),
            embed_target_bytes: o.embed_target_bytes.unwrap_or(self.embed_target_bytes),
            max_dimension: o.max_dimension.unwrap_or(self.max_dimension),
            max_image_bytes: o.max_image_bytes.unwrap_or(self.max_image_bytes),
            max_calls_per_image: o.max_calls_per_image.unwrap_or(self.max_calls_per_image),
            agent_images_in_user_turns: o
                .agent_images_in_user_turns
                .unwrap_or(self.agent_images_in_user_turns),
            // One cache per process: never per route (a route's override is rejected).
            transcode_cache_bytes: self.transcode_cache_bytes,
            route_set: RouteCeilings {
                max_blocks: self.route_set.max_blocks || o.max_blocks.is_some(),
                max_blocks_small: self.route_set.max_blocks_small || o.max_blocks_small.is_some(),
            },
        }
    }

    /// The settings for one request to a model whose provider row has a per-model image
    /// ceiling (`docs/images.md#per-model-ceilings`): a ceiling the route's `[routes.images]`
    /// set wins, then the row's value, then this config's (the global `[images]` value).
    /// `max_blocks_small` is kept ≥ `max_blocks`, as at load. `None` when nothing changes.
    pub(crate) fn for_model(
        &self,
        ceiling: Option<&crate::provider::ImageCeiling>,
    ) -> Option<ImagesConfig> {
        let c = ceiling?;
        let pick = |route_set: bool, row: Option<usize>, global: usize| match row {
            Some(v) if !route_set => v,
            _ => global,
        };
        let max_blocks = pick(self.route_set.max_blocks, c.max_blocks, self.max_blocks).max(1);
        let max_blocks_small = pick(
            self.route_set.max_blocks_small,
            c.max_blocks_small,
            self.max_blocks_small,
        )
        .max(max_blocks);
        let out = ImagesConfig {
            max_blocks,
            max_blocks_small,
            ..self.clone()
        };
        (out != *self).then_some(out)
    }

    /// Clamp out-of-range values; each clamp is described in the returned warnings.
    pub(crate) fn clamp(&mut self, scope: &str, warnings: &mut Vec<String>) {
        let clamped = self
            .embed_target_bytes
            .clamp(EMBED_TARGET_MIN, EMBED_TARGET_MAX);
        if clamped != self.embed_target_bytes {
            warnings.push(format!(
                "{scope}.embed_target_bytes = {} is outside {EMBED_TARGET_MIN}..={EMBED_TARGET_MAX}; using {clamped}",
                self.embed_target_bytes
            ));
            self.embed_target_bytes = clamped;
        }
        if self.max_blocks == 0 {
            warnings.push(format!("{scope}.max_blocks = 0 is not allowed; using 1"));
            self.max_blocks = 1;
        }
        if self.evict_batch == 0 {
            warnings.push(format!("{scope}.evict_batch = 0 is not allowed; using 1"));
            self.evict_batch = 1;
        }
        if self.max_blocks_small < self.max_blocks {
            warnings.push(format!(
                "{scope}.max_blocks_small = {} is below max_blocks = {}; using {}",
                self.max_blocks_small, self.max_blocks, self.max_blocks
            ));
            self.max_blocks_small = self.max_blocks;
        }
        if let Some(low) = self.evict_low_water {
            if low >= self.max_blocks_small {
                let held = self.max_blocks_small.saturating_sub(1);
                warnings.push(format!(
                    "{scope}.evict_low_water = {low} is not below max_blocks_small = {}; using {held}",
                    self.max_blocks_small
                ));
                self.evict_low_water = Some(held);
            }
        }
        if self.max_dimension < 64 {
            warnings.push(format!(
                "{scope}.max_dimension = {} is below 64 px; using 64",
                self.max_dimension
            ));
            self.max_dimension = 64;
        }
    }
}
