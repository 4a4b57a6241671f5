//! Image passes 1–4 (`docs/dev/architecture.md#request-passes`) over one [`Walk`]:
//!
//! 1. **repair** (any image, uploads included — the one exception to "uploads are never
//!    touched"): the declared media type set from the magic bytes; formats the profile rejects
//!    converted (BMP, TIFF) or replaced by a fixed text (SVG, HEIC/HEIF off Gemini, AVIF);
//!    images over a hard limit (longest side over the profile's cap, base64 longer than
//!    `max_image_bytes` or the profile's own cap, the tighter) shrunk just enough;
//! 2. **downscale** of agent images over `embed_target_bytes` or `max_dimension` (JPEG, quality
//!    ladder, halvings; a note after the image gives the coordinate factor);
//! 3. **repeat cap** (`max_calls_per_image`): later occurrences of one agent image become a
//!    fixed text;
//! 4. **eviction** on the sizes and dimensions the first three passes produced; then, on a
//!    profile with the many-image rule, images still over its side cap in a request that still
//!    carries more than its image count are shrunk to fit.
//!
//! Pure: the edits are a function of the body and the settings; the transcode cache only
//! saves time. Any image that cannot be decoded is forwarded as sent (fail open).

use std::collections::HashMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::settings::ImagesConfig;
use crate::dialect::doc::{split_data_url, Payload, Placement, Site, TypeSpelling, Walk};
use crate::images::cache::{self, Entry, Transcodes};
use crate::images::codec::{self, Mode, Target, TranscodeError, Transcoded};
use crate::images::format::{self, Format};
use crate::images::policy::Limits;
use crate::images::profile::ImageProfile;
use crate::images::recovery::ImageRejectionKind;
use crate::images::retired::{image_digest, ColdInputs, RetiredSet};
use crate::images::{evict, Carrier, Inventory};
use crate::json::edit::{removal_edits, Edit};
use crate::provider::ImageLimits;
use crate::texts;

/// Hard per-image byte cap after a "too large" rejection without a stated pixel cap, bytes of
/// base64 (Hermes `_RESIZE_TARGET_BYTES` = 5 MiB, `docs/images.md#downscale`).
pub(crate) const RESIZE_TARGET_BYTES: u64 = 5 * 1024 * 1024;

/// The inputs of the image passes besides the body.
#[derive(Clone, Copy)]
pub(crate) struct Settings<'a> {
    /// The route's `[images]` settings.
    pub cfg: &'a ImagesConfig,
    /// The provider profile (accepted formats, side caps).
    pub profile: ImageProfile,
    /// The process's transcode cache, with the request credential's key for sharing it;
    /// `None` transcodes every time (same output).
    pub cache: Option<Transcodes<'a>>,
    /// The credential scope the cache entries belong to.
    pub scope: &'a str,
    /// A provider rejection being recovered from (reactive recovery,
    /// `docs/images.md#rejection-wordings`).
    pub recovery: Option<ImageRejectionKind>,
    /// Leave an image whose work needs a decode (a transcode not in the cache, a corruption
    /// check) as sent and count it in [`ImageReport::deferred`]
    /// ([`crate::rewrite::RewriteContext::defer_image_work`]).
    pub defer_image_work: bool,
    /// Most bytes one image's transcode may allocate ([`codec::decode_cost`]): what the proxy
    /// reserved in its memory budget for this run. An image that needs more is left as sent
    /// ([`TranscodeError::OverBudget`], counted in [`ImageReport::failed_open`]). `u64::MAX`
    /// outside the proxy.
    pub decode_allowance: u64,
    /// Cold-cache eviction inputs (`docs/images.md#cold-cache-eviction`); `None` runs the
    /// step function alone.
    pub cold: Option<ColdInputs<'a>>,
    /// The body text the walk's spans index (digests of images without base64 text).
    pub text: &'a str,
}

/// What the image passes saw and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageReport {
    /// Image blocks / parts seen (agent images and uploads).
    pub seen: usize,
    /// Image blocks replaced by the retired-image text (pass 4).
    pub retired: usize,
    /// Carriers retired (pass 4).
    pub carriers_retired: usize,
    /// Of `retired`: image blocks retired because the session's retired set names them
    /// (`docs/images.md#cold-cache-eviction`).
    pub set_retired: usize,
    /// Of `retired`: image blocks retired by this turn's cold-cache decision.
    pub cold_retired: usize,
    /// Images repaired (media type, format conversion, hard-limit shrink; pass 1).
    pub repaired: usize,
    /// Agent images downscaled to the budget (pass 2).
    pub downscaled: usize,
    /// Images replaced by the repeat-cap text (pass 3).
    pub repeat_capped: usize,
    /// Images replaced by a fixed text because of their format, corruption, or a model that
    /// cannot see images.
    pub replaced: usize,
    /// Images that needed a transcode but could not be decoded: forwarded as sent.
    pub failed_open: usize,
    /// Images whose work was deferred: it needs a decode and the run was told not to decode
    /// ([`Settings::defer_image_work`]). A run with any is discarded and run again.
    pub deferred: usize,
    /// The most one deferred image's transcode may allocate ([`codec::decode_cost`]), bytes:
    /// what the proxy reserves in its memory budget before the run that decodes (0: no
    /// deferred image, or sizes unknown).
    pub decode_bytes: u64,
    /// One line per rewrite, with its position and reason.
    pub reasons: Vec<String>,
}

/// What becomes of one image.
#[derive(Debug, Clone)]
enum Fate {
    /// Still an image: maybe with new bytes, a corrected media type (`fix_mime`: the
    /// declared type is set to the format of what is sent) and a note after it.
    Keep {
        new: Option<Transcoded>,
        note: bool,
        fix_mime: bool,
    },
    /// Replaced by a fixed text.
    Text(String),
}

#[derive(Debug, Clone)]
struct State {
    format: Option<Format>,
    dims: Option<(u32, u32)>,
    len: u64,
    fate: Fate,
}

impl State {
    fn current_format(&self) -> Option<Format> {
        match &self.fate {
            Fate::Keep { new: Some(t), .. } => Some(t.format),
            _ => self.format,
        }
    }
}

/// `walk` without the sites that are images only if their bytes say so and whose bytes are
/// not an image (a Gemini PDF / audio `inlineData`); borrowed when there is none.
fn images_only<'w, 'a>(walk: &'w Walk<'a>) -> std::borrow::Cow<'w, Walk<'a>> {
    if !walk.sites.iter().any(|s| s.needs_sniff) {
        return std::borrow::Cow::Borrowed(walk);
    }
    let mut owned = walk.clone();
    owned.sites.retain(|site| {
        !site.needs_sniff
            || site
                .payload
                .base64()
                .is_some_and(|(b64, _)| format::sniff_b64(b64).0.is_some())
    });
    std::borrow::Cow::Owned(owned)
}

/// Run passes 1–4 on `walk` (spans into `s.text`); returns the edits, the report and the
/// session's new retired set when a cold-cache decision changed it.
pub(crate) fn run(
    walk: &Walk<'_>,
    s: &Settings<'_>,
) -> (Vec<Edit>, ImageReport, Option<RetiredSet>) {
    let walk: &Walk<'_> = &images_only(walk);
    let mut report = ImageReport {
        seen: walk.sites.len(),
        ..ImageReport::default()
    };
    let mut states: Vec<State> = walk
        .sites
        .iter()
        .map(|site| {
            let (format, dims) = match site.payload.base64() {
                Some((b64, _)) => format::sniff_b64(b64),
                None => (None, None),
            };
            State {
                format,
                dims,
                len: site.payload.sent_len(),
                fate: Fate::Keep {
                    new: None,
                    note: false,
                    fix_mime: false,
                },
            }
        })
        .collect();

    if s.recovery == Some(ImageRejectionKind::ModelCannotSeeImages) {
        for (site, st) in walk.sites.iter().zip(&mut states) {
            st.fate = Fate::Text(texts::IMAGES_NOT_SUPPORTED.to_owned());
            report.replaced += 1;
            report.reasons.push(format!(
                "removed image {}: the model cannot see images",
                site.path
            ));
        }
        return (render(walk, &states), report, None);
    }

    repeat_cap(walk, s, &mut states, &mut report);
    for (i, st) in states.iter_mut().enumerate() {
        repair_and_downscale(walk, i, s, st, &mut report);
    }
    let (retired, set) = eviction(walk, s, &states, &mut report);
    for &i in &retired {
        states[i].fate = Fate::Text(texts::RETIRED_IMAGE.to_owned());
    }
    many_image_rule(walk, s, &mut states, &mut report);
    (render(walk, &states), report, set)
}

/// The eviction inventory of a walk as sent (no pass applied), with each carrier's retire
/// edits (what the dialect tests below check).
#[cfg(test)]
fn plain_inventory(walk: &Walk<'_>) -> Inventory {
    let states: Vec<State> = walk
        .sites
        .iter()
        .map(|site| {
            let dims = site
                .payload
                .base64()
                .and_then(|(b64, _)| format::sniff_b64(b64).1);
            State {
                format: None,
                dims,
                len: site.payload.sent_len(),
                fate: Fate::Keep {
                    new: None,
                    note: false,
                    fix_mime: false,
                },
            }
        })
        .collect();
    let (mut inv, members) = inventory(walk, &states, None);
    for (carrier, sites) in inv.carriers.iter_mut().zip(&members) {
        let mut retired = states.clone();
        for &i in sites {
            retired[i].fate = Fate::Text(texts::RETIRED_IMAGE.to_owned());
        }
        let all = render(walk, &retired);
        carrier.edits = all;
    }
    inv
}

/// Build the eviction inventory from the current states; also returns, per inventory carrier,
/// the site indices it holds. With `digests` (the key and the body text), each carrier gets
/// its images' digests ([`image_digest`], of the images as the client sent them).
fn inventory(
    walk: &Walk<'_>,
    states: &[State],
    digests: Option<(&crate::digest::DigestKey, &str)>,
) -> (Inventory, Vec<Vec<usize>>) {
    let mut inv = Inventory::default();
    let mut by_carrier: Vec<Vec<usize>> = vec![Vec::new(); walk.carriers.len()];
    for (i, (site, st)) in walk.sites.iter().zip(states).enumerate() {
        if matches!(st.fate, Fate::Text(_)) {
            continue;
        }
        inv.observe_dims(st.len, st.dims);
        match site.carrier {
            Some(c) => {
                if let Some(list) = by_carrier.get_mut(c) {
                    list.push(i);
                }
            }
            None => inv.reserve(st.len),
        }
    }
    let mut members = Vec::new();
    for (info, sites) in walk.carriers.iter().zip(by_carrier) {
        if sites.is_empty() {
            continue;
        }
        let digests = match digests {
            Some((key, text)) => sites
                .iter()
                .map(|&i| {
                    let site = &walk.sites[i];
                    let b64 = site.payload.base64().map(|(b, _)| b);
                    image_digest(key, b64, text.get(site.block.clone()).unwrap_or(""))
                })
                .collect(),
            None => Vec::new(),
        };
        inv.carriers.push(Carrier {
            path: info.path.clone(),
            label: info.label.clone(),
            blocks: sites.len(),
            bytes: sites.iter().map(|&i| states[i].len).sum(),
            edits: Vec::new(),
            digests,
        });
        members.push(sites);
    }
    (inv, members)
}

/// Pass 4: which sites the eviction policy retires, and the session's new retired set when a
/// cold-cache decision changed it.
fn eviction(
    walk: &Walk<'_>,
    s: &Settings<'_>,
    states: &[State],
    report: &mut ImageReport,
) -> (Vec<usize>, Option<RetiredSet>) {
    let cold = s.cold.filter(ColdInputs::needs_digests);
    let (inv, members) = inventory(walk, states, cold.as_ref().map(|c| (c.key, s.text)));
    let ev = evict(inv, &Limits::from(s.cfg), cold.as_ref());
    report.retired += ev.images_retired;
    report.carriers_retired += ev.carriers_retired;
    report.set_retired += ev.set_retired;
    report.cold_retired += ev.cold_retired;
    report.reasons.extend(ev.reasons);
    let sites = ev
        .carriers
        .iter()
        .filter_map(|&c| members.get(c))
        .flatten()
        .copied()
        .collect();
    (sites, ev.retired_set)
}

/// Pass 3: the (N+1)-th and later occurrences of one agent image (same base64, hence same
/// bytes) become the repeat-cap text. Counted in document order, so only the newest are
/// replaced and the prefix stays stable.
fn repeat_cap(walk: &Walk<'_>, s: &Settings<'_>, states: &mut [State], report: &mut ImageReport) {
    let n = s.cfg.max_calls_per_image;
    if n == 0 {
        return;
    }
    let mut seen: HashMap<[u8; 32], u32> = HashMap::new();
    for (site, st) in walk.sites.iter().zip(states.iter_mut()) {
        if site.carrier.is_none() {
            continue;
        }
        let Some((b64, _)) = site.payload.base64() else {
            continue;
        };
        let Some(text) = format::unescape_b64(b64) else {
            continue;
        };
        let id: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        let count = seen.entry(id).or_insert(0);
        *count += 1;
        if *count > n {
            st.fate = Fate::Text(texts::repeat_cap(n));
            report.repeat_capped += 1;
            report.reasons.push(format!(
                "repeat cap {}: occurrence {} of an image already loaded {n} times \
                 (max_calls_per_image)",
                site.path, *count
            ));
        }
    }
}

fn data_url(payload: &Payload<'_>) -> bool {
    matches!(payload, Payload::DataUrl(_))
}

/// The transcode of `raw_b64` (an image of `dims` px, from its header, when known) to
/// `target`, from the cache or computed; `None` (counted in [`ImageReport::deferred`], its
/// decode's cost in [`ImageReport::decode_bytes`]) when it is not cached and the run defers
/// image work. An image whose decode would allocate more than [`Settings::decode_allowance`]
/// is not decoded: [`TranscodeError::OverBudget`], never cached. The decoder's allocation
/// limit is the image's cost ([`codec::decode_cost`]), a function of the image alone, so
/// what is cached never depends on the budget.
fn transcode(
    raw_b64: &str,
    dims: Option<(u32, u32)>,
    target: &Target,
    s: &Settings<'_>,
    report: &mut ImageReport,
) -> Option<Arc<Entry>> {
    let cost = dims.map_or(0, |d| codec::decode_cost(d, target));
    let cached = s.cache.map(|c| (c, cache::key(s.scope, target, raw_b64)));
    if s.defer_image_work {
        let found = cached.and_then(|(c, k)| c.peek(&k));
        if found.is_none() {
            report.deferred += 1;
            report.decode_bytes = report.decode_bytes.max(cost);
        }
        return found;
    }
    let max_alloc = if cost == 0 { codec::MAX_ALLOC } else { cost };
    let compute = || codec::transcode_within(raw_b64, target, max_alloc);
    let over = cost > s.decode_allowance;
    let over_budget = || {
        Arc::new(Err(TranscodeError::OverBudget {
            need: cost,
            allowed: s.decode_allowance,
        }))
    };
    Some(match cached {
        Some((c, k)) => match c.peek(&k) {
            Some(hit) => hit,
            None if over => over_budget(),
            None => c.get_or_compute(k, s.scope, compute),
        },
        None if over => over_budget(),
        None => Arc::new(compute()),
    })
}

fn longest(dims: Option<(u32, u32)>) -> u32 {
    dims.map_or(0, |(w, h)| w.max(h))
}

/// Passes 1 and 2 for one image: an image of unknown format replaced on a rejection, the
/// corruption check, a format the profile rejects replaced or converted, a transcode to the
/// hard limits or the downscale budget, else the declared media type corrected.
fn repair_and_downscale(
    walk: &Walk<'_>,
    i: usize,
    s: &Settings<'_>,
    st: &mut State,
    report: &mut ImageReport,
) {
    if matches!(st.fate, Fate::Text(_)) {
        return;
    }
    let site = &walk.sites[i];
    let Some((b64, declared)) = site.payload.base64() else {
        return;
    };
    let limits = s.profile.limits();
    let Some(format) = st.format else {
        replace_unknown_format(site, s, st, report);
        return;
    };
    let img = Image {
        site,
        b64,
        declared,
        spelling: site.payload.spelling(),
        format,
        is_data_url: data_url(&site.payload),
        agent: site.carrier.is_some(),
        accepted: accepted(format, s, limits),
    };
    if s.recovery == Some(ImageRejectionKind::Corrupt) && !check_decodes(&img, s, st, report) {
        return;
    }
    if !img.accepted && !format.decodable() {
        st.fate = Fate::Text(texts::unsupported_format(format.mime()).to_owned());
        report.replaced += 1;
        report.reasons.push(format!(
            "replaced image {}: {} is not accepted by the {} profile and cannot be converted here",
            site.path,
            format.mime(),
            limits.name
        ));
        return;
    }
    let bounds = Bounds::of(s, limits, img.agent);
    let Some((entry, over_soft)) = planned_transcode(&img, &bounds, s, st, report) else {
        return;
    };
    if let Some(entry) = entry {
        if apply_transcode(&img, &bounds, over_soft, &entry, s, st, report) {
            return;
        }
    }
    fix_declared_mime(&img, st, report);
}

/// One image as passes 1 and 2 see it: what does not change while they run.
struct Image<'w, 'a> {
    /// The image's site in the walk (its path names it in reasons).
    site: &'w Site<'a>,
    /// Its base64 text as sent (JSON-escaped).
    b64: &'w str,
    /// Its declared media type, when the wire format carries one.
    declared: Option<&'w str>,
    /// How the wire spells that type (a media type, or Converse's bare format name).
    spelling: TypeSpelling,
    /// Its format, from the magic bytes.
    format: Format,
    /// Sent as a `data:` URL (the sent length counts the prefix).
    is_data_url: bool,
    /// An agent image (in a carrier), not an upload.
    agent: bool,
    /// Whether the provider accepts `format` ([`accepted`]).
    accepted: bool,
}

/// Whether the provider accepts `format`: the profile's list, or only PNG and JPEG while
/// recovering from an "unsupported image" rejection.
fn accepted(format: Format, s: &Settings<'_>, limits: &ImageLimits) -> bool {
    if s.recovery == Some(ImageRejectionKind::Unsupported) {
        matches!(format, Format::Png | Format::Jpeg)
    } else {
        limits.accepted.contains(&format)
    }
}

/// Pass 1 for an image whose bytes are no known format: replaced by a fixed text only while
/// recovering from a "corrupt" or "unsupported" rejection, else left as sent.
fn replace_unknown_format(
    site: &Site<'_>,
    s: &Settings<'_>,
    st: &mut State,
    report: &mut ImageReport,
) {
    if !matches!(
        s.recovery,
        Some(ImageRejectionKind::Corrupt | ImageRejectionKind::Unsupported)
    ) {
        return;
    }
    let text = if s.recovery == Some(ImageRejectionKind::Corrupt) {
        texts::CORRUPT_IMAGE
    } else {
        texts::UNSUPPORTED_UNKNOWN
    };
    st.fate = Fate::Text(text.to_owned());
    report.replaced += 1;
    report.reasons.push(format!(
        "replaced image {}: the bytes are not a known image format (provider rejection)",
        site.path
    ));
}

/// The corruption check after a "corrupt image" rejection: whether the data decodes, with the
/// decode charged to the memory budget as a transcode is (the failing input of a break-it
/// pass: this check decoded outside it). `true` when the image decodes and passes 1 and 2
/// go on; `false` when it was deferred, left as sent over the budget, or replaced by the
/// corrupt-image text.
fn check_decodes(
    img: &Image<'_, '_>,
    s: &Settings<'_>,
    st: &mut State,
    report: &mut ImageReport,
) -> bool {
    let cost = st.dims.map_or(0, codec::check_cost);
    if s.defer_image_work {
        report.deferred += 1;
        report.decode_bytes = report.decode_bytes.max(cost);
        return false;
    }
    if cost > s.decode_allowance {
        report.failed_open += 1;
        report.reasons.push(format!(
            "left image {} as sent: checking whether its {} data decodes needs {cost} bytes, \
             more than the memory budget allows ({} bytes, max_buffered_bytes)",
            img.site.path,
            img.format.mime(),
            s.decode_allowance
        ));
        return false;
    }
    // Header unreadable (no size): whatever the budget allowed, at most the decoder's cap.
    let limit = if cost == 0 {
        s.decode_allowance.min(codec::MAX_ALLOC)
    } else {
        cost
    };
    let decodes = format::decode_all(img.b64).is_some_and(|bytes| {
        codec::decode_within(&bytes, img.format, codec::MAX_PIXELS, limit).is_ok()
    });
    if !decodes {
        st.fate = Fate::Text(texts::CORRUPT_IMAGE.to_owned());
        report.replaced += 1;
        report.reasons.push(format!(
            "replaced image {}: its {} data does not decode (provider rejection)",
            img.site.path,
            img.format.mime()
        ));
    }
    decodes
}

/// The limits one image is held to in passes 1 and 2.
struct Bounds {
    /// Hard longest side, px: the profile's cap, lowered by a rejection's stated cap or, on a
    /// "dimensions" rejection, by `max_dimension`.
    hard_side: u32,
    /// Hard length, bytes of base64: `max_image_bytes` or the profile's own cap, the tighter
    /// ([`ImageLimits::hard_len`]), lowered to [`RESIZE_TARGET_BYTES`] on a "too large"
    /// rejection without a pixel cap.
    hard_len: u64,
    /// Whether the downscale budget applies: an agent image, or any image on a "dimensions"
    /// rejection.
    treat_as_agent: bool,
}

impl Bounds {
    /// The bounds for an image (`agent`: in a carrier) under `s` and the profile's `limits`.
    fn of(s: &Settings<'_>, limits: &ImageLimits, agent: bool) -> Self {
        let mut b = Bounds {
            hard_side: limits.max_side.unwrap_or(u32::MAX),
            hard_len: limits.hard_len(s.cfg.max_image_bytes),
            treat_as_agent: agent,
        };
        match s.recovery {
            Some(ImageRejectionKind::TooLarge { cap_px: Some(px) }) => {
                b.hard_side = b.hard_side.min(px)
            }
            Some(ImageRejectionKind::TooLarge { cap_px: None }) => {
                b.hard_len = b.hard_len.min(RESIZE_TARGET_BYTES)
            }
            Some(ImageRejectionKind::Dimensions) => {
                b.hard_side = b.hard_side.min(s.cfg.max_dimension);
                b.treat_as_agent = true;
            }
            _ => {}
        }
        b
    }

    /// The repair target: just under the hard limits.
    fn repair(&self, data_url: bool) -> Target {
        Target {
            max_side: self.hard_side,
            max_len: self.hard_len,
            data_url,
            mode: Mode::Repair,
        }
    }
}

/// The transcode passes 1 and 2 want for `img` and its result, with whether it is a
/// downscale (`over_soft`; else a repair): a downscale when the image is over the budget
/// (`embed_target_bytes`, `max_dimension`) and the budget applies, a repair when it is over
/// a hard limit or its format is not accepted, none otherwise. An image over the downscale
/// pixel bound is repaired instead when the provider would reject it, else left as sent.
/// `None` when a transcode was deferred ([`transcode`]).
fn planned_transcode(
    img: &Image<'_, '_>,
    b: &Bounds,
    s: &Settings<'_>,
    st: &State,
    report: &mut ImageReport,
) -> Option<(Option<Arc<Entry>>, bool)> {
    let side = longest(st.dims);
    let over_hard = st.len > b.hard_len || side > b.hard_side;
    let mut over_soft =
        b.treat_as_agent && (st.len > s.cfg.embed_target_bytes || side > s.cfg.max_dimension);
    let target = if over_soft {
        Some(Target {
            max_side: s.cfg.max_dimension.min(b.hard_side),
            max_len: s.cfg.embed_target_bytes.min(b.hard_len),
            data_url: img.is_data_url,
            mode: Mode::Downscale,
        })
    } else if over_hard || !img.accepted {
        Some(b.repair(img.is_data_url))
    } else {
        None
    };
    let mut entry = match target {
        Some(t) => Some(transcode(img.b64, st.dims, &t, s, report)?),
        None => None,
    };
    if let (true, Some(Err(TranscodeError::TooManyPixels { pixels, limit }))) =
        (over_soft, entry.as_deref())
    {
        // Over the downscale bound (`docs/images.md#decode-bounds`): not worth decoding for
        // cost; repaired (up to the repair bound) only when the provider would reject it.
        if over_hard || !img.accepted {
            over_soft = false;
            let repair = b.repair(img.is_data_url);
            entry = Some(transcode(img.b64, st.dims, &repair, s, report)?);
        } else {
            report.reasons.push(format!(
                "left image {} as sent: {pixels} px are over the {limit}-pixel downscale bound \
                 (within the {} profile's limits, so not repaired)",
                img.site.path,
                s.profile.limits().name
            ));
            entry = None;
        }
    }
    Some((entry, over_soft))
}

/// Apply a transcode's result to `img`'s state: a result smaller, resized or converted
/// becomes the image's new bytes (counted as downscaled or repaired, with its reason) and
/// returns `true`; a result that changes nothing returns `false`; a failed transcode leaves
/// the image as sent (counted in [`ImageReport::failed_open`], with why) and returns `false`.
fn apply_transcode(
    img: &Image<'_, '_>,
    b: &Bounds,
    over_soft: bool,
    entry: &Entry,
    s: &Settings<'_>,
    st: &mut State,
    report: &mut ImageReport,
) -> bool {
    let format = img.format;
    let name = s.profile.limits().name;
    match entry {
        Ok(t) if t.sent_len(img.is_data_url) < st.len || t.to != t.from || !img.accepted => {
            let what = if over_soft { "downscaled" } else { "repaired" };
            let why = if !img.accepted {
                format!("{} is not accepted by the {name} profile", format.mime())
            } else if over_soft {
                format!(
                    "over embed_target_bytes {} or max_dimension {}",
                    s.cfg.embed_target_bytes, s.cfg.max_dimension
                )
            } else {
                format!(
                    "over the hard limit ({} bytes, {} px)",
                    b.hard_len, b.hard_side
                )
            };
            report.reasons.push(format!(
                "{what} image {}: {} {}x{} {} B -> {} {}x{} {} B; reason: {why}",
                img.site.path,
                format.mime(),
                t.from.0,
                t.from.1,
                st.len,
                t.format.mime(),
                t.to.0,
                t.to.1,
                t.sent_len(img.is_data_url)
            ));
            if over_soft && img.agent {
                report.downscaled += 1;
            } else {
                report.repaired += 1;
            }
            st.len = t.sent_len(img.is_data_url);
            st.dims = Some(t.to);
            st.fate = Fate::Keep {
                note: img.agent && t.to != t.from,
                fix_mime: img
                    .declared
                    .is_some_and(|d| !declares(t.format, d, img.spelling, img.is_data_url)),
                new: Some(t.clone()),
            };
            true
        }
        Ok(_) => false,
        Err(e) => {
            report.failed_open += 1;
            // Every image forwarded as sent says why (the failing input of a break-it
            // pass: a PNG whose data does not decode was counted with no reason).
            let need = if img.accepted {
                "needs a transcode"
            } else {
                "needs converting"
            };
            report.reasons.push(format!(
                "left image {} as sent: {} {need} but {e}",
                img.site.path,
                format.mime()
            ));
            false
        }
    }
}

/// Pass 1's last repair: an accepted image whose declared media type does not match its
/// magic bytes gets the right type (bytes untouched).
fn fix_declared_mime(img: &Image<'_, '_>, st: &mut State, report: &mut ImageReport) {
    let Some(declared) = img.declared else {
        return;
    };
    if img.accepted && !declares(img.format, declared, img.spelling, img.is_data_url) {
        st.fate = Fate::Keep {
            new: None,
            note: false,
            fix_mime: true,
        };
        report.repaired += 1;
        report.reasons.push(format!(
            "repaired media type of image {}: declared {declared:?}, bytes are {}",
            img.site.path,
            img.format.mime()
        ));
    }
}

/// The many-image rule (Anthropic: more than 20 images ⇒ each ≤ 2000 px): after eviction,
/// when more images than the rule's count remain, shrink each remaining image over the side
/// cap just enough. Eviction is not recomputed (one pass, deterministic).
fn many_image_rule(
    walk: &Walk<'_>,
    s: &Settings<'_>,
    states: &mut [State],
    report: &mut ImageReport,
) {
    let Some((count, side_cap)) = s.profile.limits().many_image else {
        return;
    };
    let kept = states
        .iter()
        .filter(|st| matches!(st.fate, Fate::Keep { .. }))
        .count();
    if kept <= count {
        return;
    }
    for (site, st) in walk.sites.iter().zip(states.iter_mut()) {
        if !matches!(st.fate, Fate::Keep { .. }) || longest(st.dims) <= side_cap {
            continue;
        }
        let Some((b64, _)) = site.payload.base64() else {
            continue;
        };
        let is_data_url = data_url(&site.payload);
        let target = Target {
            max_side: side_cap,
            max_len: s.profile.limits().hard_len(s.cfg.max_image_bytes),
            data_url: is_data_url,
            mode: Mode::Repair,
        };
        let Some(entry) = transcode(b64, st.dims, &target, s, report) else {
            continue;
        };
        match entry.as_ref() {
            Ok(t) => {
                report.repaired += 1;
                report.reasons.push(format!(
                    "repaired image {}: {}x{} -> {}x{}; reason: {kept} images > {count} need \
                     every side <= {side_cap} px",
                    site.path, t.from.0, t.from.1, t.to.0, t.to.1
                ));
                st.len = t.sent_len(is_data_url);
                st.dims = Some(t.to);
                st.fate = Fate::Keep {
                    note: site.carrier.is_some(),
                    fix_mime: site.payload.base64().and_then(|(_, d)| d).is_some_and(|d| {
                        !declares(t.format, d, site.payload.spelling(), is_data_url)
                    }),
                    new: Some(t.clone()),
                };
            }
            Err(_) => report.failed_open += 1,
        }
    }
}

/// The edits of a kept image's payload: its new bytes (`new`; a data URL's header names
/// their format) and, with `fix_mime`, its declared media type set to `format` (the format of
/// what is sent).
fn payload_edits(
    site: &Site<'_>,
    new: Option<&Transcoded>,
    fix_mime: bool,
    format: Option<Format>,
    edits: &mut Vec<Edit>,
) {
    match &site.payload {
        Payload::Base64 {
            data,
            media_type,
            spelling,
        } => {
            if let Some(t) = new {
                edits.push(Edit {
                    range: data.span.clone(),
                    replacement: t.b64.clone().into_bytes(),
                });
            }
            if let (true, Some(mt), Some(f)) = (fix_mime, media_type, format) {
                edits.push(Edit {
                    range: mt.span.clone(),
                    replacement: spelled(f, *spelling).as_bytes().to_vec(),
                });
            }
        }
        Payload::DataUrl(url) => {
            if let Some(t) = new {
                edits.push(Edit {
                    range: url.span.clone(),
                    replacement: format!("data:{};base64,{}", t.format.mime(), t.b64).into_bytes(),
                });
            } else if let (true, Some((_, data)), Some(f)) =
                (fix_mime, split_data_url(url.text), format)
            {
                let header_end = url.span.end - data.len();
                edits.push(Edit {
                    range: url.span.start..header_end,
                    replacement: format!("data:{};base64,", f.mime()).into_bytes(),
                });
            }
        }
        Payload::Opaque { .. } => {}
    }
}

/// `format` as a declared type spelled `spelling` (`image/png`, or Converse's `png`).
fn spelled(format: Format, spelling: TypeSpelling) -> &'static str {
    match spelling {
        TypeSpelling::Mime => format.mime(),
        TypeSpelling::FormatName => format.name(),
    }
}

/// Whether `declared` (spelled `spelling`; in a data URL when `data_url`) names `format` in
/// its canonical spelling: case counts in a type field (Anthropic's `media_type` and Converse's
/// `format` are case-sensitive enums), not in a data URL's header (RFC 2045).
fn declares(format: Format, declared: &str, spelling: TypeSpelling, data_url: bool) -> bool {
    match spelling {
        TypeSpelling::Mime => format.matches_declared(declared, !data_url),
        TypeSpelling::FormatName => declared == format.name(),
    }
}

/// One edit per insertion point (a position after which texts go: notes, texts of removed
/// nested images), its texts joined in site order, each after a comma.
fn insertion_edits(inserts: Vec<(usize, String)>) -> Vec<Edit> {
    let mut edits = Vec::new();
    let mut merged: Vec<(usize, String)> = Vec::new();
    for (at, text) in inserts {
        match merged.iter_mut().find(|(a, _)| *a == at) {
            Some((_, acc)) => {
                acc.push(',');
                acc.push_str(&text);
            }
            None => merged.push((at, text)),
        }
    }
    for (at, text) in merged {
        edits.push(Edit {
            range: at..at,
            replacement: format!(",{text}").into_bytes(),
        });
    }
    edits
}

/// Turn the states into edits of the original body.
fn render(walk: &Walk<'_>, states: &[State]) -> Vec<Edit> {
    let mut edits = Vec::new();
    // Insertions after a position (notes, texts of removed nested images), in site order.
    let mut inserts: Vec<(usize, String)> = Vec::new();
    // Removed elements per nested array.
    let mut removed: HashMap<usize, Vec<usize>> = HashMap::new();
    for (site, st) in walk.sites.iter().zip(states) {
        match &st.fate {
            Fate::Text(text) => match site.placement {
                Placement::InList => edits.push(Edit {
                    range: site.block.clone(),
                    replacement: walk.style.block(text, site.keep).into_bytes(),
                }),
                Placement::Nested {
                    array,
                    index,
                    after,
                } => {
                    removed.entry(array).or_default().push(index);
                    inserts.push((after, walk.style.block(text, None)));
                }
            },
            Fate::Keep {
                new,
                note,
                fix_mime,
            } => {
                payload_edits(
                    site,
                    new.as_ref(),
                    *fix_mime,
                    st.current_format(),
                    &mut edits,
                );
                if let (true, Some(t)) = (*note, new) {
                    let at = match site.placement {
                        Placement::InList => site.block.end,
                        Placement::Nested { after, .. } => after,
                    };
                    inserts.push((
                        at,
                        walk.style.block(&texts::downscale_note(t.from, t.to), None),
                    ));
                }
            }
        }
    }
    let mut arrays: Vec<_> = removed.into_iter().collect();
    arrays.sort_by_key(|(a, _)| *a);
    for (array, mut idx) in arrays {
        let Some(spans) = walk.arrays.get(array) else {
            continue;
        };
        idx.sort_unstable();
        idx.dedup();
        edits.extend(removal_edits(spans, &idx));
    }
    edits.extend(insertion_edits(inserts));
    edits
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

    #[test]
    fn removals_keep_the_array_valid() {
        use std::ops::Range;
        let text = "[1, 2 ,3,4]";
        let spans: Vec<Range<usize>> = vec![1..2, 4..5, 7..8, 9..10];
        let apply = |idx: &[usize]| {
            String::from_utf8(
                crate::json::splice(text.as_bytes(), removal_edits(&spans, idx)).unwrap(),
            )
            .unwrap()
        };
        assert_eq!(apply(&[0]), "[2 ,3,4]");
        assert_eq!(apply(&[0, 1]), "[3,4]");
        assert_eq!(apply(&[1]), "[1, 3,4]");
        assert_eq!(apply(&[1, 2]), "[1, 4]");
        assert_eq!(apply(&[3]), "[1, 2 ,3]");
        assert_eq!(apply(&[0, 2]), "[2 ,4]");
        assert_eq!(apply(&[0, 1, 2, 3]), "[]");
        for idx in [&[0usize][..], &[0, 1], &[1, 3], &[0, 3], &[2, 3]] {
            let out = apply(idx);
            assert!(
                serde_json::from_str::<serde_json::Value>(&out).is_ok(),
                "{out}"
            );
        }
    }

    /// The dialect walks, checked through the eviction inventory they give.
    mod anthropic_walk {
        use super::super::plain_inventory;
        use crate::dialect::ParseError;
        use crate::images::Inventory;

        fn inventory(body: &[u8]) -> Result<(Option<String>, Inventory), ParseError> {
            let doc = crate::dialect::parse(body, crate::dialect::Dialect::Anthropic)?;
            let walk = crate::dialect::anthropic::walk(&doc);
            Ok((walk.model.clone(), plain_inventory(&walk)))
        }

        #[test]
        fn finds_uploads_and_carriers() {
            let body = br#"{"model":"claude-x","messages":[
              {"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},
              {"role":"user","content":[
                {"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]},
                {"type":"tool_result","tool_use_id":"toolu_2","content":"plain"},
                {"type":"tool_result","tool_use_id":"toolu_3","content":[{"type":"image","source":"bogus","cache_control":{"type":"ephemeral"}},{"type":"image"}]}
              ]}]}"#;
            let (model, inv) = inventory(body).unwrap();
            assert_eq!(model.as_deref(), Some("claude-x"));
            assert_eq!(inv.images_seen, 4);
            assert_eq!((inv.reserved_blocks, inv.reserved_bytes), (1, 4));
            assert_eq!(inv.carriers.len(), 2);
            assert_eq!(inv.carriers[0].path, "messages[1].content[0]");
            assert_eq!(
                inv.carriers[0].label.as_deref(),
                Some("tool_use_id toolu_1")
            );
            assert_eq!((inv.carriers[0].blocks, inv.carriers[0].bytes), (1, 0));
            assert_eq!(inv.carriers[1].path, "messages[1].content[2]");
            assert_eq!(inv.carriers[1].blocks, 2);
            assert!(!inv.many_image_safe);
            // The bogus-source block: bytes as sent (its string), cache_control kept.
            let first = &inv.carriers[1].edits[0];
            assert_eq!(
                &body[first.range.clone()],
                br#"{"type":"image","source":"bogus","cache_control":{"type":"ephemeral"}}"#
            );
            assert_eq!(inv.carriers[1].bytes, 5);
            assert_eq!(
                std::str::from_utf8(&first.replacement).unwrap(),
                r#"{"type":"text","text":"[image removed by cachekeeper to stay within provider limits]","cache_control":{"type":"ephemeral"}}"#
            );
        }

        #[test]
        fn wrong_shapes() {
            assert!(matches!(
                inventory(br#"{"messages":"nope"}"#),
                Err(ParseError::Shape { .. })
            ));
            assert!(matches!(
                inventory(br#"{"messages":[{"content":[1,2]}"#),
                Err(ParseError::NotJson(_))
            ));
            let (_, inv) = inventory(br#"{"messages":[{"content":[1,{"type":5},[2],null,{"type":"tool_result","content":[7,{"type":"image","source":[1],"type":"image"}]}]}],"x":{}}"#).unwrap();
            assert_eq!((inv.images_seen, inv.carriers.len()), (1, 1));
            let (m, inv) = inventory(br#"{"system":"s"}"#).unwrap();
            assert_eq!((m, inv.images_seen), (None, 0));
        }
    }

    mod openai_walk {
        use super::super::plain_inventory;
        use crate::dialect::openai::SHORT_TEXT_CHARS;
        use crate::dialect::ParseError;
        use crate::images::Inventory;

        fn inventory(
            body: &[u8],
            agent_images_in_user_turns: bool,
        ) -> Result<(Option<String>, Inventory), ParseError> {
            let doc = crate::dialect::parse(body, crate::dialect::Dialect::Openai)?;
            let walk = crate::dialect::openai::walk(&doc, agent_images_in_user_turns);
            Ok((walk.model.clone(), plain_inventory(&walk)))
        }

        const IMG: &str = r#"{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"high"}}"#;

        fn body(messages: &[String]) -> Vec<u8> {
            format!(r#"{{"model":"gpt-x","messages":[{}]}}"#, messages.join(",")).into_bytes()
        }

        #[test]
        fn tool_messages_are_carriers_uploads_reserved() {
            let b = body(&[
                format!(r#"{{"role":"user","content":[{{"type":"text","text":"look"}},{IMG}]}}"#),
                r#"{"role":"assistant","content":null,"tool_calls":[]}"#.to_owned(),
                format!(r#"{{"role":"tool","tool_call_id":"call_1","content":[{IMG},{IMG}]}}"#),
            ]);
            let (model, inv) = inventory(&b, true).unwrap();
            assert_eq!(model.as_deref(), Some("gpt-x"));
            assert_eq!(inv.images_seen, 3);
            assert_eq!(inv.reserved_blocks, 1);
            assert_eq!(inv.reserved_bytes, 26);
            assert_eq!(inv.carriers.len(), 1);
            assert_eq!(inv.carriers[0].blocks, 2);
            assert_eq!(
                inv.carriers[0].label.as_deref(),
                Some("tool_call_id call_1")
            );
        }

        #[test]
        fn user_turn_after_tool_is_a_carrier_only_when_short() {
            let tool = r#"{"role":"tool","tool_call_id":"c","content":"done"}"#.to_owned();
            let short = format!(
                r#"{{"role":"user","content":[{{"type":"text","text":"screenshot"}},{IMG}]}}"#
            );
            let long_text = "x".repeat(SHORT_TEXT_CHARS + 1);
            let long = format!(
                r#"{{"role":"user","content":[{{"type":"text","text":"{long_text}"}},{IMG}]}}"#
            );
            let bare = r#"{"role":"user","content":[{"type":"image_url","image_url":"data:image/png;base64,AAAA"}]}"#.to_owned();

            let (_, inv) = inventory(&body(&[tool.clone(), short.clone()]), true).unwrap();
            assert_eq!((inv.carriers.len(), inv.reserved_blocks), (1, 0));
            let (_, inv) = inventory(&body(&[tool.clone(), short.clone()]), false).unwrap();
            assert_eq!((inv.carriers.len(), inv.reserved_blocks), (0, 1));
            let (_, inv) = inventory(&body(&[tool.clone(), long]), true).unwrap();
            assert_eq!((inv.carriers.len(), inv.reserved_blocks), (0, 1));
            let (_, inv) = inventory(&body(std::slice::from_ref(&short)), true).unwrap();
            assert_eq!((inv.carriers.len(), inv.reserved_blocks), (0, 1));
            let (_, inv) = inventory(&body(&[tool, bare]), true).unwrap();
            assert_eq!(inv.carriers.len(), 1);
            assert_eq!(inv.carriers[0].bytes, 26);
        }

        #[test]
        fn odd_parts_do_not_fail() {
            let b = body(&[
                r#"{"role":"tool","content":[{"type":"image_url","image_url":5},{"type":"image_url"},{"type":3},7]}"#.to_owned(),
            ]);
            let (_, inv) = inventory(&b, true).unwrap();
            assert_eq!(inv.images_seen, 2);
            assert_eq!(inv.carriers[0].blocks, 2);
            assert!(matches!(
                inventory(br#"{"messages":{"role":"user"}}"#, true),
                Err(ParseError::Shape { .. })
            ));
        }
    }
}
