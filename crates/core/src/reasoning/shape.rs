//! The reasoning shaping pass (`docs/dev/architecture.md#request-passes`): keep / strip / pad the
//! reasoning carriers of every outbound assistant turn per the route's carrier set minus the
//! learned verdicts, drop learned-unknown top-level parameters, add keep-thinking flags, and on the
//! Anthropic wire replay or strip signed thinking per the route.
//!
//! Pure and deterministic. A policy over the body's one view ([`crate::dialect::doc::Doc`]:
//! its top-level object and turns): it returns edits of the original bytes, which the
//! pipeline splices together with the image passes' edits ([`crate::json::splice`]). An
//! assistant turn that already matches stays byte-identical, and a body with nothing to change
//! gives no edit.
//!
//! OpenAI Chat, per assistant message (`docs/reasoning.md#shaping-an-assistant-turn`, made minimal:
//! a carrier that is already right is never rewritten, and reasoning is copied between carriers
//! only when the carrier that holds it is not sent):
//! - `reasoning_content` (RC), when the route reads it: a non-blank value is kept; otherwise
//!   the text of a non-blank `reasoning` is moved into it when `reasoning` is not sent (or the
//!   turn needs the must-echo pad); otherwise the must-echo pad `" "` (never `""`) on a turn
//!   that needs it (a tool-call turn; for DeepSeek, when the request carries `tools`, every
//!   assistant turn); otherwise an empty / null / blank RC is dropped.
//! - `reasoning` (R), when read: kept when non-blank, filled from RC when RC is not sent,
//!   else dropped.
//! - `reasoning_details`, `extra_content` (message and `tool_calls[i]`), `reasoning_opaque` /
//!   `reasoning_text`: kept as sent when read, dropped otherwise (Copilot: `reasoning_text` is
//!   sent only next to its `reasoning_opaque`). Where `reasoning_details` is read, its entries
//!   that carry nothing ([`crate::dialect::openai::details::carries_nothing`]) are removed, and the array with
//!   them when no other entry is left.
//! - A strict route (no carrier) never gets one, not even the pad. On a must-echo route RC is
//!   never omitted, even if `omit` names it (a complaint about RC there is about its value).
//!
//! Anthropic Messages (`docs/reasoning.md#signed-thinking-on-the-anthropic-wire`):
//! - `Native`, `Kimi`, `DeepSeek`, `Zai`: `thinking` / `redacted_thinking` blocks pass
//!   byte-exact on every turn (never rewritten by model age).
//! - `StripThirdParty`: every thinking block is removed; a turn left empty gets
//!   [`EMPTY_TURN_TEXT`].
//! - `cache_control` is never left on a thinking block (Anthropic rejects it there; a
//!   marker is not part of the signature or of the prefix binding). It moves to the
//!   last non-thinking block of the same message that has none, so the agent's breakpoint
//!   keeps caching (at least) the same prefix; when there is no such block it is dropped.
//! - When earlier passes changed bytes of the binding prefix (`system`, `tools`, or a message at or
//!   before a signed thinking block) on a route with binding controls, the request gets
//!   `thinking.block_binding.prefix_mismatch_behavior: "drop_block"` and the [`BINDING_BETA`]
//!   `anthropic-beta` token, so the provider drops the invalidated blocks instead of failing
//!   (`docs/reasoning.md#prefix-binding`). Only when thinking is enabled and the client has not set
//!   `block_binding` itself, and never once the host rejected [`BINDING_BETA`] for the model
//!   (`Field::Beta` in `omit`, `docs/reasoning.md#beta-headers`).
//!
//! OpenAI Chat, on a route whose row lists the top-level reasoning controls its host takes
//! ([`ResolvedRoute::reasoning_controls`]; `docs/reasoning.md#top-level-reasoning-controls`):
//! every other one of [`REASONING_CONTROLS`] the request carries is removed up front (Cerebras
//! rejects `enable_thinking` and a top-level `reasoning` object with a 400), each with its reason.
//!
//! Every dialect: top-level parameters in `omit` that are droppable (`droppable_params` plus
//! [`KEEP_THINKING_PARAMS`]) are removed; a dotted name (`thinking.keep`) removes a nested key.
//! A value of the client's `anthropic-beta` header that is learned as rejected (`Field::Beta`
//! in `omit`) and on `droppable_betas` is removed from the header (the header itself when no
//! value is left); removing the client's [`BINDING_BETA`] also removes its
//! `thinking.block_binding`, which the provider rejects without the beta.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::profiles::{
    Carrier, EchoFamily, KeepThinking, ResolvedRoute, ThinkingRoute, BINDING_BETA,
    KEEP_THINKING_PARAMS,
};
use crate::dialect::doc::{Block, Content, Doc};
use crate::dialect::format::ReasoningCarriers;
use crate::dialect::{Dialect, ParseError};
use crate::json::scan::{self, Object};
use crate::json::Edit;
use crate::provider::REASONING_CONTROLS;
use crate::state::rejected::{SignatureId, SignatureLookup};
use crate::state::{Field, FieldSet};
use crate::texts::{ECHO_PAD, EMPTY_TURN_TEXT};

/// Top-level keys never removed, whatever `droppable_params` says: they are the request.
const PROTECTED_PARAMS: [&str; 5] = ["model", "messages", "contents", "input", "system"];

/// Inputs of [`shape`] besides the body.
#[derive(Clone, Copy)]
pub struct ShapeContext<'a> {
    /// The body's wire format.
    pub dialect: Dialect,
    /// From [`super::resolve`] for this route and the request's model.
    pub route: &'a ResolvedRoute,
    /// Fields learned as unknown for (upstream host, model): message fields (carriers:
    /// `reasoning_content`, `reasoning`, `reasoning_details`, `extra_content`,
    /// `reasoning_opaque`) and top-level parameters (dotted when nested).
    pub omit: &'a FieldSet,
    /// `[reasoning] droppable_params`.
    pub droppable_params: &'a [String],
    /// `[reasoning] droppable_betas`: the client's own `anthropic-beta` values that may be
    /// removed once learned as rejected (default none).
    pub droppable_betas: &'a [String],
    /// Lowest byte offset of the original body that the image passes' edits touch; `None`
    /// when they made none.
    pub first_changed_byte: Option<usize>,
    /// The request's `anthropic-beta` header as it stands before shaping (the client's, or
    /// what earlier passes set), if any.
    pub anthropic_beta: Option<&'a str>,
    /// Anthropic thinking signatures the provider rejected for the request's credential scope
    /// ([`crate::state::rejected`]): those blocks are stripped.
    pub rejected: &'a dyn SignatureLookup,
}

/// What [`shape`] did, as counts (for `x-cachekeeper-rewrites` and the log line).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShapeCounts {
    /// Carrier fields removed from assistant messages / tool calls.
    pub carriers_dropped: usize,
    /// Carrier fields set from another carrier's text.
    pub carriers_filled: usize,
    /// Must-echo pads written.
    pub pads: usize,
    /// Thinking blocks removed (third-party Anthropic-wire hosts).
    pub thinking_stripped: usize,
    /// Signed thinking blocks removed because the provider rejected their signature before
    /// ([`crate::state::rejected`]).
    pub thinking_rejected: usize,
    /// `cache_control` markers taken off thinking blocks.
    pub cache_control_moved: usize,
    /// Top-level parameters removed because they were learned as unknown.
    pub params_dropped: usize,
    /// Keep-thinking flags added.
    pub flags_added: usize,
    /// `thinking.block_binding` drop-on-prefix-mismatch set.
    pub binding_set: bool,
}

/// What [`shape`] decided: edits of the original body (spliced by the pipeline together with
/// the image passes' edits), headers, reasons and counts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Shaped {
    /// Edits of the original body; empty when nothing changes.
    pub edits: Vec<Edit>,
    /// Headers to set on the upstream request (replacing any value the request had), e.g.
    /// `anthropic-beta` merged with [`BINDING_BETA`]; an empty value removes the header.
    pub set_headers: Vec<(String, String)>,
    /// One human-readable line per change.
    pub reasons: Vec<String>,
    pub counts: ShapeCounts,
}

/// What [`shape_request`] made of a body.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShapeOutcome {
    /// `None`: nothing changed, forward the input bytes.
    pub body: Option<Vec<u8>>,
    /// Headers to set on the upstream request.
    pub set_headers: Vec<(String, String)>,
    /// One human-readable line per change.
    pub reasons: Vec<String>,
    pub counts: ShapeCounts,
}

/// Shaping alone on `body` (its own parse and splice), for tests and tools; the pipeline
/// runs [`shape`] over its one parse instead.
///
/// Errors: the body is not JSON or not of `ctx.dialect`'s shape ([`ParseError`]).
pub fn shape_request(ctx: &ShapeContext<'_>, body: &[u8]) -> Result<ShapeOutcome, ParseError> {
    let doc = crate::dialect::parse(body, ctx.dialect)?;
    let s = shape(ctx, &doc);
    let new = crate::json::splice(body, s.edits).map_err(|e| ParseError::Shape {
        dialect: ctx.dialect.as_str(),
        detail: e.to_string(),
    })?;
    Ok(ShapeOutcome {
        body: (new != body).then_some(new),
        set_headers: s.set_headers,
        reasons: s.reasons,
        counts: s.counts,
    })
}

/// Run the shaping pass over `doc` (the body's one parse; `ctx.dialect` is its dialect).
pub(crate) fn shape(ctx: &ShapeContext<'_>, doc: &Doc<'_>) -> Shaped {
    let top = &doc.top;
    let mut s = Shaper {
        text: doc.text,
        doc,
        ctx,
        edits: Vec::new(),
        reasons: Vec::new(),
        counts: ShapeCounts::default(),
        set_headers: Vec::new(),
        beta: ctx.anthropic_beta.map(str::to_owned),
        beta_changed: false,
        drop_client_binding: false,
    };
    s.drop_betas();
    let removed_top = s.drop_params(top);
    match ctx.dialect.format().reasoning_carriers() {
        ReasoningCarriers::MessageFields => {
            s.shape_chat(top);
            s.keep_thinking(top, &removed_top);
        }
        ReasoningCarriers::SignedBlocks => {
            let signed = s.shape_anthropic();
            s.binding(top, &signed, &removed_top);
        }
        ReasoningCarriers::Untouched => {}
    }
    if s.beta_changed {
        let value = s.beta.take().unwrap_or_default();
        s.set_headers.push((super::betas::HEADER.to_owned(), value));
    }
    Shaped {
        edits: s.edits,
        set_headers: s.set_headers,
        reasons: s.reasons,
        counts: s.counts,
    }
}

/// What to do with one carrier field of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Keep,
    Set(String),
    Drop,
}

/// The decisions for one assistant message's `reasoning_content` and `reasoning`
/// ([`Shaper::carrier_plan`]).
struct CarrierPlan {
    /// What to do with `reasoning_content`.
    rc: Action,
    /// What to do with `reasoning`.
    r: Action,
    /// The first non-blank of the two as sent (`reasoning_content` first), if any.
    reasoning_text: Option<String>,
    /// The element spans of the message's `tool_calls` array, when it has one.
    tool_calls: Option<Vec<Range<usize>>>,
}

/// The members of one assistant message (`messages[i]`) to remove, collected so they are
/// removed in one edit set; each drop is counted and explained as it is collected.
struct Drops<'m> {
    /// The message's index in `messages`.
    i: usize,
    /// The message.
    msg: &'m Object,
    /// Indexes of the members to remove.
    idx: Vec<usize>,
}

impl Drops<'_> {
    /// Collect `msg`'s members named `key` (none: nothing happens), with the reason `why`.
    fn drop(&mut self, s: &mut Shaper<'_, '_>, key: &'static str, why: String) {
        let found = self.msg.indexes_of(key);
        if !found.is_empty() {
            s.reasons.push(format!(
                "reasoning: messages[{}]: dropped {key} ({why})",
                self.i
            ));
            s.counts.carriers_dropped += 1;
        }
        self.idx.extend(found);
    }
}

struct Shaper<'t, 'c> {
    text: &'t str,
    doc: &'c Doc<'t>,
    ctx: &'c ShapeContext<'c>,
    edits: Vec<Edit>,
    reasons: Vec<String>,
    counts: ShapeCounts,
    set_headers: Vec<(String, String)>,
    /// The `anthropic-beta` value being built (the request's, then without dropped values,
    /// then with [`BINDING_BETA`]); `""` when every value was dropped.
    beta: Option<String>,
    /// `beta` differs from the request's.
    beta_changed: bool,
    /// The client's [`BINDING_BETA`] was removed: its `thinking.block_binding` goes too (the
    /// provider rejects `block_binding` without the beta).
    drop_client_binding: bool,
}

/// The [`SignatureId`] of a signed Anthropic block: a `thinking` block's non-empty
/// `signature`, a `redacted_thinking` block's `data`. `None` for unsigned thinking.
pub(crate) fn signature_id(text: &str, obj: &Object, kind: Option<&str>) -> Option<SignatureId> {
    let (kind, field) = match kind? {
        "thinking" => ("thinking", "signature"),
        "redacted_thinking" => ("redacted_thinking", "data"),
        _ => return None,
    };
    let value = scan::string_at(text, &obj.get(field)?.value)?;
    (!value.is_empty()).then(|| SignatureId::of(kind, &value))
}

/// The message's (last) `reasoning_details` array, when it holds entries that carry nothing
/// ([`crate::dialect::openai::details::carries_nothing`]): its element ranges and the indexes of those entries.
/// `None` when there is no such entry (or no array).
fn empty_details(text: &str, msg: &Object) -> Option<(Vec<Range<usize>>, Vec<usize>)> {
    let ranges = scan::array_at(text, msg.get("reasoning_details")?.value.start)?;
    let empty: Vec<usize> = ranges
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            crate::dialect::openai::details::text_carries_nothing(scan::slice(text, r))
        })
        .map(|(i, _)| i)
        .collect();
    (!empty.is_empty()).then_some((ranges, empty))
}

/// Whether `block` is a thinking block (`thinking` or `redacted_thinking`).
fn is_thinking(block: &Block) -> bool {
    matches!(
        block.kind.as_deref(),
        Some("thinking" | "redacted_thinking")
    )
}

fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

fn json_string(s: &str) -> Vec<u8> {
    serde_json::to_string(s)
        .unwrap_or_else(|_| "\" \"".to_owned())
        .into_bytes()
}

impl Shaper<'_, '_> {
    fn remove(&mut self, ranges: Vec<Range<usize>>) {
        self.edits.extend(ranges.into_iter().map(|range| Edit {
            range,
            replacement: Vec::new(),
        }));
    }

    fn insert(&mut self, obj: &Object, member: &str) {
        let (at, comma) = obj.append_point();
        let mut bytes = Vec::with_capacity(member.len() + 1);
        if comma {
            bytes.push(b',');
        }
        bytes.extend_from_slice(member.as_bytes());
        self.edits.push(Edit {
            range: at..at,
            replacement: bytes,
        });
    }

    fn is_droppable(&self, name: &str) -> bool {
        !PROTECTED_PARAMS.contains(&name)
            && (self.ctx.droppable_params.iter().any(|p| p == name)
                || KEEP_THINKING_PARAMS.contains(&name))
    }

    /// Remove learned-unknown droppable parameters. Returns the top-level keys removed whole.
    fn drop_params(&mut self, top: &Object) -> BTreeSet<String> {
        let mut whole: Vec<usize> = Vec::new();
        let mut nested: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let omit = self.ctx.omit;
        for name in omit.params().filter(|n| self.is_droppable(n)) {
            match name.split_once('.') {
                None => whole.extend(top.indexes_of(name)),
                Some((parent, child)) if !child.contains('.') => {
                    nested.entry(parent).or_default().push(child);
                }
                Some(_) => {}
            }
        }
        if self.drop_client_binding {
            nested.entry("thinking").or_default().push("block_binding");
        }
        let learned: BTreeSet<String> = whole
            .iter()
            .filter_map(|i| top.members.get(*i))
            .map(|m| m.key.clone())
            .collect();
        for key in &learned {
            self.reasons.push(format!(
                "reasoning: dropped parameter {key} (learned unknown for {})",
                self.ctx.route.host
            ));
            self.counts.params_dropped += 1;
        }
        let not_taken = self.controls_not_taken(top, &learned);
        for (i, key) in &not_taken {
            let route = self.ctx.route;
            let takes = route.reasoning_controls.unwrap_or_default().join(", ");
            self.reasons.push(format!(
                "reasoning: dropped parameter {key} (profile {} takes no top-level {key}; \
                 its reasoning controls: {takes})",
                route.profile
            ));
            self.counts.params_dropped += 1;
            whole.push(*i);
        }
        whole.sort_unstable();
        whole.dedup();
        let mut removed = learned;
        removed.extend(not_taken.into_iter().map(|(_, k)| k));
        let ranges = top.removal_ranges(&whole);
        self.remove(ranges);
        for (parent, children) in nested {
            if removed.contains(parent) {
                continue;
            }
            let Some(pm) = top.get(parent) else { continue };
            let Some(obj) = scan::object_at(self.text, pm.value.start) else {
                continue;
            };
            let mut idx = Vec::new();
            for child in children {
                let found = obj.indexes_of(child);
                if !found.is_empty() {
                    let why = if (parent, child) == ("thinking", "block_binding") {
                        format!("its beta {BINDING_BETA} was removed from anthropic-beta")
                    } else {
                        format!("learned unknown for {}", self.ctx.route.host)
                    };
                    self.reasons.push(format!(
                        "reasoning: dropped parameter {parent}.{child} ({why})"
                    ));
                    self.counts.params_dropped += 1;
                }
                idx.extend(found);
            }
            let ranges = obj.removal_ranges(&idx);
            self.remove(ranges);
        }
        removed
    }

    /// The top-level reasoning controls ([`REASONING_CONTROLS`]) the request carries that the
    /// route's host does not take (OpenAI Chat only; none when the row lists none), as
    /// (member index, key), leaving out keys in `learned` (removed already).
    fn controls_not_taken(&self, top: &Object, learned: &BTreeSet<String>) -> Vec<(usize, String)> {
        let Some(takes) = self.ctx.route.reasoning_controls else {
            return Vec::new();
        };
        if self.ctx.dialect.format().reasoning_carriers() != ReasoningCarriers::MessageFields {
            return Vec::new();
        }
        top.members
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                REASONING_CONTROLS.contains(&m.key.as_str())
                    && !takes.contains(&m.key.as_str())
                    && !learned.contains(&m.key)
            })
            .map(|(i, m)| (i, m.key.clone()))
            .collect()
    }

    /// The carriers this request may carry: the route's set minus learned verdicts, except
    /// that a must-echo route never loses RC.
    fn effective(&self) -> BTreeSet<Carrier> {
        let route = self.ctx.route;
        route
            .carriers
            .iter()
            .copied()
            .filter(|c| {
                !self.ctx.omit.has_message_field(c.field())
                    || (*c == Carrier::ReasoningContent && route.echo.is_some())
            })
            .collect()
    }

    fn why_dropped(&self, c: Carrier) -> String {
        if self.ctx.route.carriers.contains(&c) {
            format!("learned unknown for {}", self.ctx.route.host)
        } else {
            format!("not read by profile {}", self.ctx.route.profile)
        }
    }

    // ---- OpenAI Chat ----------------------------------------------------------------------

    fn shape_chat(&mut self, top: &Object) {
        let text = self.text;
        let has_tools = top
            .get("tools")
            .and_then(|m| scan::array_at(text, m.value.start))
            .is_some_and(|a| !a.is_empty());
        let eff = self.effective();
        let doc = self.doc;
        for turn in &doc.turns {
            if turn.role.as_deref() == Some("assistant") {
                self.shape_assistant(turn.index, &turn.obj, &eff, has_tools);
            }
        }
    }

    /// Shape one assistant message `msg` (`messages[i]`): fill, pad or drop its
    /// `reasoning_content` and `reasoning` ([`Self::carrier_plan`]), then drop the other
    /// carriers the route does not take ([`Self::drop_other_carriers`]) and the Gemini
    /// signatures on its tool calls ([`Self::drop_call_signatures`]).
    fn shape_assistant(
        &mut self,
        i: usize,
        msg: &Object,
        eff: &BTreeSet<Carrier>,
        has_tools: bool,
    ) {
        let plan = self.carrier_plan(msg, eff, has_tools);
        let mut drops = Drops {
            i,
            msg,
            idx: Vec::new(),
        };
        for (key, carrier, action) in [
            ("reasoning_content", Carrier::ReasoningContent, &plan.rc),
            ("reasoning", Carrier::Reasoning, &plan.r),
        ] {
            match action {
                Action::Keep => {}
                Action::Drop => {
                    let why = if eff.contains(&carrier) {
                        "blank, nothing to carry".to_owned()
                    } else {
                        self.why_dropped(carrier)
                    };
                    drops.drop(self, key, why);
                }
                Action::Set(value) => {
                    let pad = value == ECHO_PAD && plan.reasoning_text.is_none();
                    self.set_carrier(i, msg, key, value, pad);
                }
            }
        }
        self.drop_other_carriers(eff, &mut drops);
        let ranges = msg.removal_ranges(&drops.idx);
        self.remove(ranges);
        if !eff.contains(&Carrier::GeminiThoughtSignature) {
            self.drop_call_signatures(i, plan.tool_calls.as_deref());
        }
    }

    /// What to do with `msg`'s `reasoning_content` and `reasoning` under the effective
    /// carriers `eff`: keep a non-blank one, fill one from the other, pad
    /// `reasoning_content` with [`ECHO_PAD`] where the route's must-echo family needs it
    /// (DeepSeek: any request with tools; others: a message with tool calls), else drop.
    fn carrier_plan(&self, msg: &Object, eff: &BTreeSet<Carrier>, has_tools: bool) -> CarrierPlan {
        let text = self.text;
        let str_of = |key: &str| msg.get(key).and_then(|m| scan::string_at(text, &m.value));
        let rc = str_of("reasoning_content");
        let r = str_of("reasoning");
        let rc_nonblank = rc.as_deref().is_some_and(|s| !is_blank(s));
        let rc_nonempty = rc.as_deref().is_some_and(|s| !s.is_empty());
        let r_nonblank = r.as_deref().is_some_and(|s| !is_blank(s));
        let reasoning_text = [rc.as_deref(), r.as_deref()]
            .into_iter()
            .flatten()
            .find(|s| !is_blank(s))
            .map(str::to_owned);
        let tool_calls = msg
            .get("tool_calls")
            .and_then(|m| scan::array_at(text, m.value.start));
        let has_tool_calls = tool_calls.as_ref().is_some_and(|a| !a.is_empty());
        let rc_allowed = eff.contains(&Carrier::ReasoningContent);
        let r_allowed = eff.contains(&Carrier::Reasoning);
        let pad_needed = rc_allowed
            && match self.ctx.route.echo {
                None => false,
                Some(EchoFamily::DeepSeek) => has_tool_calls || has_tools,
                Some(_) => has_tool_calls,
            };

        let rc_action = if !rc_allowed {
            Action::Drop
        } else if rc_nonblank {
            Action::Keep
        } else if let Some(t) = reasoning_text
            .as_ref()
            .filter(|_| pad_needed || !(r_allowed && r_nonblank))
        {
            Action::Set(t.clone())
        } else if pad_needed {
            if rc_nonempty {
                Action::Keep
            } else {
                Action::Set(ECHO_PAD.to_owned())
            }
        } else {
            Action::Drop
        };
        let rc_carries = match &rc_action {
            Action::Keep => rc_nonblank,
            Action::Set(t) => !is_blank(t),
            Action::Drop => false,
        };
        let r_action = if !r_allowed {
            Action::Drop
        } else if r_nonblank {
            Action::Keep
        } else if let Some(t) = reasoning_text.as_ref().filter(|_| !rc_carries) {
            Action::Set(t.clone())
        } else {
            Action::Drop
        };
        CarrierPlan {
            rc: rc_action,
            r: r_action,
            reasoning_text,
            tool_calls,
        }
    }

    /// Set `msg`'s `key` to `value` (replacing its value or appending the member), counted
    /// and explained as an echo pad (`pad`) or a fill from the other carrier.
    fn set_carrier(&mut self, i: usize, msg: &Object, key: &str, value: &str, pad: bool) {
        if let Some(m) = msg.get(key) {
            self.edits.push(Edit {
                range: m.value.clone(),
                replacement: json_string(value),
            });
        } else {
            let mut member = json_string(key);
            member.push(b':');
            member.extend_from_slice(&json_string(value));
            let member = String::from_utf8_lossy(&member).into_owned();
            self.insert(msg, &member);
        }
        if pad {
            self.counts.pads += 1;
            self.reasons.push(format!(
                "reasoning: messages[{i}]: {key} padded with \" \" (must-echo {})",
                self.ctx.route.profile
            ));
        } else {
            self.counts.carriers_filled += 1;
            let from = if key == "reasoning" {
                "reasoning_content"
            } else {
                "reasoning"
            };
            self.reasons
                .push(format!("reasoning: messages[{i}]: {key} set from {from}"));
        }
    }

    /// Drop the carriers besides `reasoning_content` / `reasoning` that the effective set
    /// `eff` leaves out: `reasoning_details` (or its entries with nothing in them),
    /// `extra_content` (Gemini signatures), `reasoning_opaque` / `reasoning_text` (Copilot;
    /// `reasoning_text` also when sent without `reasoning_opaque`).
    fn drop_other_carriers(&mut self, eff: &BTreeSet<Carrier>, drops: &mut Drops<'_>) {
        let (i, msg) = (drops.i, drops.msg);
        if !eff.contains(&Carrier::ReasoningDetails) {
            let why = self.why_dropped(Carrier::ReasoningDetails);
            drops.drop(self, "reasoning_details", why);
        } else if let Some((ranges, empty)) = empty_details(self.text, msg) {
            if empty.len() == ranges.len() {
                let why = "no entry carries data, text or summary".to_owned();
                drops.drop(self, "reasoning_details", why);
            } else {
                self.edits
                    .extend(crate::json::edit::removal_edits(&ranges, &empty));
                self.counts.carriers_dropped += empty.len();
                self.reasons.push(format!(
                    "reasoning: messages[{i}]: dropped {} reasoning_details entr{} at {:?} \
                     (no data, text or summary)",
                    empty.len(),
                    if empty.len() == 1 { "y" } else { "ies" },
                    empty
                ));
            }
        }
        if !eff.contains(&Carrier::GeminiThoughtSignature) {
            let why = self.why_dropped(Carrier::GeminiThoughtSignature);
            drops.drop(self, "extra_content", why);
        }
        if eff.contains(&Carrier::CopilotOpaque) {
            if msg.get("reasoning_opaque").is_none() {
                drops.drop(
                    self,
                    "reasoning_text",
                    "sent only next to reasoning_opaque".to_owned(),
                );
            }
        } else {
            let why = self.why_dropped(Carrier::CopilotOpaque);
            drops.drop(self, "reasoning_opaque", why.clone());
            drops.drop(self, "reasoning_text", why);
        }
    }

    /// Drop `extra_content` (a Gemini thought signature) from each of `messages[i]`'s
    /// `tool_calls` (the array's element spans), for a route that does not take it.
    fn drop_call_signatures(&mut self, i: usize, tool_calls: Option<&[Range<usize>]>) {
        let text = self.text;
        for (j, call) in tool_calls.into_iter().flatten().enumerate() {
            let Some(call) = scan::object_at(text, call.start) else {
                continue;
            };
            let idx = call.indexes_of("extra_content");
            if idx.is_empty() {
                continue;
            }
            self.counts.carriers_dropped += 1;
            self.reasons.push(format!(
                "reasoning: messages[{i}].tool_calls[{j}]: dropped extra_content ({})",
                self.why_dropped(Carrier::GeminiThoughtSignature)
            ));
            let ranges = call.removal_ranges(&idx);
            self.remove(ranges);
        }
    }

    /// Add the route's keep-thinking flag when the request explicitly enables thinking, has not
    /// set the flag, carries no conflicting parameter, the flag was not learned unknown, and
    /// reasoning is replayed at all (RC sent).
    fn keep_thinking(&mut self, top: &Object, removed_top: &BTreeSet<String>) {
        let text = self.text;
        let Some(flag) = self.ctx.route.keep_thinking else {
            return;
        };
        if self.ctx.omit.has_param(flag.param())
            || !self.effective().contains(&Carrier::ReasoningContent)
        {
            return;
        }
        let thinking_enabled = |obj: &Object| {
            obj.get("type")
                .and_then(|m| scan::string_at(text, &m.value))
                .as_deref()
                == Some("enabled")
        };
        let thinking_obj = || {
            top.get("thinking")
                .filter(|_| !removed_top.contains("thinking"))
                .and_then(|m| scan::object_at(text, m.value.start))
        };
        match flag {
            KeepThinking::GlmClearThinking | KeepThinking::KimiKeepAll => {
                let Some(obj) = thinking_obj() else { return };
                let (key, member) = if flag == KeepThinking::GlmClearThinking {
                    ("clear_thinking", "\"clear_thinking\":false")
                } else {
                    ("keep", "\"keep\":\"all\"")
                };
                // Moonshot rejects `thinking` together with `reasoning_effort`.
                let conflict = flag == KeepThinking::KimiKeepAll
                    && top.get("reasoning_effort").is_some()
                    && !removed_top.contains("reasoning_effort");
                if !thinking_enabled(&obj) || obj.get(key).is_some() || conflict {
                    return;
                }
                self.insert(&obj, member);
                self.counts.flags_added += 1;
                self.reasons
                    .push(format!("reasoning: added thinking.{key} (keep thinking)"));
            }
            KeepThinking::DashscopePreserve => {
                let enabled = top
                    .get("enable_thinking")
                    .is_some_and(|m| scan::slice(text, &m.value) == "true");
                if !enabled || top.get("preserve_thinking").is_some() {
                    return;
                }
                self.insert(top, "\"preserve_thinking\":true");
                self.counts.flags_added += 1;
                self.reasons
                    .push("reasoning: added preserve_thinking (keep thinking)".to_owned());
            }
        }
    }

    // ---- Anthropic Messages ---------------------------------------------------------------

    /// Strip or keep thinking blocks; take `cache_control` off them. Returns the byte ranges
    /// of the signed thinking blocks left in the body.
    fn shape_anthropic(&mut self) -> Vec<Range<usize>> {
        let mut signed = Vec::new();
        let strip = self.ctx.route.thinking == ThinkingRoute::StripThirdParty;
        let doc = self.doc;
        for turn in &doc.turns {
            if let Some(content) = &turn.content {
                self.shape_thinking_turn(turn.index, content, strip, &mut signed);
            }
        }
        signed
    }

    /// One turn (`messages[i]`, its `content`) of [`Self::shape_anthropic`]: its thinking
    /// blocks stripped (`strip`: a third-party host; else those whose signature the host
    /// rejected before) or kept (a signed one's span added to `signed`), each one's
    /// `cache_control` moved to the turn's last unmarked non-thinking block or dropped.
    fn shape_thinking_turn(
        &mut self,
        i: usize,
        content: &Content,
        strip: bool,
        signed: &mut Vec<Range<usize>>,
    ) {
        let text = self.text;
        let blocks = &content.blocks;
        if !blocks.iter().any(is_thinking) {
            return;
        }
        // The last non-thinking block without a marker, to receive a moved cache_control.
        let mut target = blocks
            .iter()
            .enumerate()
            .rev()
            .find(|(_, b)| {
                !is_thinking(b)
                    && b.obj
                        .as_ref()
                        .is_some_and(|o| o.get("cache_control").is_none())
            })
            .map(|(j, _)| j);
        let mut moved_marker: Option<Range<usize>> = None;
        let mut strip_idx = Vec::new();
        let mut rejected = 0;
        for (j, block) in blocks.iter().enumerate() {
            if !is_thinking(block) {
                continue;
            }
            let Some(obj) = &block.obj else { continue };
            let kind = block.kind.as_deref();
            let cc = obj.get("cache_control").map(|m| m.value.clone());
            let is_rejected = !strip
                && signature_id(text, obj, kind)
                    .is_some_and(|id| self.ctx.rejected.is_rejected(&id));
            if strip || is_rejected {
                strip_idx.push(j);
                rejected += usize::from(is_rejected);
                if cc.is_some() {
                    moved_marker = cc;
                }
                continue;
            }
            let is_signed = kind == Some("redacted_thinking")
                || obj
                    .get("signature")
                    .and_then(|m| scan::string_at(text, &m.value))
                    .is_some_and(|s| !s.is_empty());
            if is_signed {
                signed.push(block.span.clone());
            }
            if let Some(cc) = cc {
                self.move_marker(i, j, obj, &cc, blocks, target.take());
            }
        }
        if strip_idx.is_empty() {
            return;
        }
        self.report_stripped(i, strip_idx.len(), rejected);
        self.remove_stripped(content, &strip_idx, moved_marker, target);
    }

    /// Take the `cache_control` (value span `cc`) off the kept thinking block `obj`
    /// (`messages[i].content[j]`) and put it on `blocks[target]`; dropped when the turn has
    /// no target left.
    fn move_marker(
        &mut self,
        i: usize,
        j: usize,
        obj: &Object,
        cc: &Range<usize>,
        blocks: &[Block],
        target: Option<usize>,
    ) {
        let idx = obj.indexes_of("cache_control");
        let ranges = obj.removal_ranges(&idx);
        self.remove(ranges);
        self.counts.cache_control_moved += 1;
        match target {
            Some(t) => {
                if let Some(Block { obj: Some(tobj), .. }) = blocks.get(t) {
                    let member = format!("\"cache_control\":{}", scan::slice(self.text, cc));
                    self.insert(tobj, &member);
                }
                self.reasons.push(format!(
                    "reasoning: messages[{i}].content[{j}]: cache_control moved off the thinking block to content[{t}]"
                ));
            }
            None => self.reasons.push(format!(
                "reasoning: messages[{i}].content[{j}]: cache_control dropped from the thinking block"
            )),
        }
    }

    /// Count and explain `stripped` thinking blocks of `messages[i]`, `rejected` of them for
    /// a signature the host rejected before (then the reason names that; else the
    /// third-party host).
    fn report_stripped(&mut self, i: usize, stripped: usize, rejected: usize) {
        if rejected > 0 {
            self.counts.thinking_rejected += rejected;
            self.reasons.push(format!(
                "reasoning: messages[{i}]: stripped {rejected} thinking block(s) whose signature {} rejected before",
                self.ctx.route.host
            ));
        } else {
            self.counts.thinking_stripped += stripped;
            self.reasons.push(format!(
                "reasoning: messages[{i}]: stripped {stripped} thinking block(s) (third-party host {} cannot verify signatures)",
                self.ctx.route.host
            ));
        }
    }

    /// Remove the blocks `strip_idx` of `content`, the marker of a stripped block
    /// (`moved_marker`, a value span) moved to `blocks[target]`; a turn left empty becomes
    /// one [`EMPTY_TURN_TEXT`] block carrying the marker.
    fn remove_stripped(
        &mut self,
        content: &Content,
        strip_idx: &[usize],
        moved_marker: Option<Range<usize>>,
        target: Option<usize>,
    ) {
        let text = self.text;
        let blocks = &content.blocks;
        if strip_idx.len() == blocks.len() {
            let mut block = format!(
                "[{{\"type\":\"text\",\"text\":{}",
                String::from_utf8_lossy(&json_string(EMPTY_TURN_TEXT))
            );
            if let Some(cc) = &moved_marker {
                block.push_str(",\"cache_control\":");
                block.push_str(scan::slice(text, cc));
            }
            block.push_str("}]");
            self.edits.push(Edit {
                range: content.value.clone(),
                replacement: block.into_bytes(),
            });
            return;
        }
        let spans: Vec<Range<usize>> = blocks.iter().map(|b| b.span.clone()).collect();
        let ranges = crate::json::edit::removal_ranges(&spans, strip_idx);
        self.remove(ranges);
        if let Some(cc) = moved_marker {
            if let Some(Block {
                obj: Some(tobj), ..
            }) = target.and_then(|t| blocks.get(t))
            {
                let member = format!("\"cache_control\":{}", scan::slice(text, &cc));
                self.insert(tobj, &member);
                self.counts.cache_control_moved += 1;
            }
        }
    }

    /// Set drop-on-prefix-mismatch when earlier passes changed the binding prefix of a signed
    /// thinking block (`docs/reasoning.md#prefix-binding`).
    fn binding(&mut self, top: &Object, signed: &[Range<usize>], removed_top: &BTreeSet<String>) {
        let text = self.text;
        let route = self.ctx.route;
        let Some(fcb) = self.ctx.first_changed_byte else {
            return;
        };
        if !route.binding_controls || route.thinking != ThinkingRoute::Native || signed.is_empty() {
            return;
        }
        // Where did the change land? `system` and `tools` are part of every block's prefix;
        // inside `messages` only blocks ending after the change are affected; other top-level
        // members (max_tokens, metadata, thinking, ...) are not part of the check.
        let owner = top
            .members
            .iter()
            .find(|m| m.key_start <= fcb && fcb < m.value.end)
            .map(|m| m.key.as_str());
        let affected = match owner {
            Some("system" | "tools") => true,
            Some("messages") => signed.iter().any(|b| b.end > fcb),
            _ => false,
        };
        if !affected {
            return;
        }
        let Some(thinking) = top
            .get("thinking")
            .filter(|_| !removed_top.contains("thinking"))
            .and_then(|m| scan::object_at(text, m.value.start))
        else {
            return;
        };
        let kind = thinking
            .get("type")
            .and_then(|m| scan::string_at(text, &m.value));
        if !matches!(kind.as_deref(), Some("enabled" | "adaptive"))
            || thinking.get("block_binding").is_some()
        {
            return;
        }
        if self
            .ctx
            .omit
            .contains(&Field::Beta(BINDING_BETA.to_owned()))
        {
            self.reasons.push(format!(
                "reasoning: earlier rewrites changed the prefix of a signed thinking block (byte {fcb}), but {} rejected {BINDING_BETA} for this model: thinking.block_binding not set",
                route.host
            ));
            return;
        }
        self.insert(
            &thinking,
            "\"block_binding\":{\"prefix_mismatch_behavior\":\"drop_block\"}",
        );
        self.counts.binding_set = true;
        self.reasons.push(format!(
            "reasoning: earlier rewrites changed the prefix of a signed thinking block (byte {fcb}): thinking.block_binding.prefix_mismatch_behavior = drop_block"
        ));
        if let Some(value) = merge_beta(self.beta.as_deref(), BINDING_BETA) {
            self.beta = Some(value);
            self.beta_changed = true;
        }
    }

    /// Remove from the client's `anthropic-beta` the values learned as rejected for (host,
    /// model) that are on `droppable_betas` (`docs/reasoning.md#beta-headers`).
    fn drop_betas(&mut self) {
        let omit = self.ctx.omit;
        let droppable = self.ctx.droppable_betas;
        let doomed = |v: &str| {
            droppable.iter().any(|d| d.trim() == v) && omit.contains(&Field::Beta(v.to_owned()))
        };
        let current = self.beta.as_deref();
        let Some(kept) = super::betas::without(current, doomed) else {
            return;
        };
        for v in super::betas::values(current)
            .into_iter()
            .filter(|v| doomed(v))
        {
            self.drop_client_binding |= v == BINDING_BETA;
            self.reasons.push(format!(
                "reasoning: removed `{v}` from the anthropic-beta header ({} rejected it for this model; on droppable_betas)",
                self.ctx.route.host
            ));
        }
        self.beta = Some(kept);
        self.beta_changed = true;
    }
}

/// `existing` (a comma-separated `anthropic-beta` value) with `token` added; `None` when it is
/// already there.
pub fn merge_beta(existing: Option<&str>, token: &str) -> Option<String> {
    let existing = existing.map(str::trim).unwrap_or("");
    if existing.split(',').any(|t| t.trim() == token) {
        return None;
    }
    if existing.is_empty() {
        Some(token.to_owned())
    } else {
        Some(format!("{existing},{token}"))
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
    use crate::reasoning::profiles::resolve;
    use serde_json::{json, Value};

    fn droppable() -> Vec<String> {
        crate::config::ReasoningConfig::default().droppable_params
    }

    fn run(
        dialect: Dialect,
        route: &ResolvedRoute,
        omit: &[&str],
        fcb: Option<usize>,
        beta: Option<&str>,
        body: &str,
    ) -> ShapeOutcome {
        let omit = FieldSet::from_flat(omit.iter().copied());
        let d = droppable();
        let ctx = ShapeContext {
            dialect,
            route,
            omit: &omit,
            droppable_params: &d,
            droppable_betas: &[],
            first_changed_byte: fcb,
            anthropic_beta: beta,
            rejected: &(),
        };
        let out = shape_request(&ctx, body.as_bytes()).unwrap();
        let again = shape_request(&ctx, body.as_bytes()).unwrap();
        assert_eq!(out, again, "deterministic");
        if let Some(b) = &out.body {
            serde_json::from_slice::<Value>(b).expect("valid JSON out");
        }
        out
    }

    fn chat(host: &str, model: &str, omit: &[&str], body: &Value) -> (Option<Value>, ShapeOutcome) {
        let route = resolve(None, host, "/v1/chat/completions", Some(model), None);
        let out = run(Dialect::Openai, &route, omit, None, None, &body.to_string());
        (
            out.body
                .as_ref()
                .map(|b| serde_json::from_slice(b).unwrap()),
            out,
        )
    }

    fn turn_all() -> Value {
        json!({"role": "assistant", "content": "ok", "reasoning_content": "think",
               "reasoning": "think", "reasoning_details": [{"type": "reasoning.text", "text": "think"}]})
    }

    fn keys(v: &Value, i: usize) -> Vec<String> {
        let mut k: Vec<String> = v["messages"][i]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("reasoning"))
            .cloned()
            .collect();
        k.sort();
        k
    }

    #[test]
    fn strict_route_strips_everything_even_pad() {
        let body = json!({"model": "deepseek-r1", "messages": [
            {"role": "user", "content": "hi"}, turn_all(),
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
              "function": {"name": "f", "arguments": "{}"}}]}]});
        let (v, out) = chat("api.mistral.ai", "deepseek-r1", &[], &body);
        let v = v.unwrap();
        assert!(keys(&v, 1).is_empty());
        assert!(keys(&v, 2).is_empty());
        assert_eq!(out.counts.carriers_dropped, 3);
        assert_eq!(out.counts.pads, 0);
    }

    #[test]
    fn deepseek_pads_tool_turns_and_all_turns_with_tools() {
        let call =
            json!([{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
        let body = json!({"model": "deepseek-v4", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": call},
            {"role": "tool", "tool_call_id": "c", "content": "x"},
            {"role": "assistant", "content": "done"},
            {"role": "assistant", "content": null, "tool_calls": call, "reasoning_content": ""},
            {"role": "assistant", "content": null, "tool_calls": call, "reasoning_content": "real"}]});
        let (v, out) = chat("api.deepseek.com", "deepseek-v4", &[], &body);
        let v = v.unwrap();
        assert_eq!(v["messages"][1]["reasoning_content"], " ");
        assert!(
            v["messages"][3].get("reasoning_content").is_none(),
            "no tools: no pad"
        );
        assert_eq!(v["messages"][4]["reasoning_content"], " ");
        assert_eq!(v["messages"][5]["reasoning_content"], "real");
        assert_eq!(out.counts.pads, 2);
        let mut with_tools = body.clone();
        with_tools["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
        let (v, _) = chat("api.deepseek.com", "deepseek-v4", &[], &with_tools);
        assert_eq!(v.unwrap()["messages"][3]["reasoning_content"], " ");
        // Kimi pads tool turns only.
        let (v, _) = chat("api.moonshot.ai", "kimi-k2.5", &[], &with_tools);
        let v = v.unwrap();
        assert_eq!(v["messages"][1]["reasoning_content"], " ");
        assert!(v["messages"][3].get("reasoning_content").is_none());
    }

    #[test]
    fn must_echo_never_omits_rc_and_prefers_real_text() {
        let body = json!({"model": "deepseek-v4", "messages": [
            {"role": "assistant", "content": null, "reasoning": "why",
             "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]});
        let (v, out) = chat(
            "api.deepseek.com",
            "deepseek-v4",
            &["reasoning_content"],
            &body,
        );
        let v = v.unwrap();
        assert_eq!(v["messages"][0]["reasoning_content"], "why");
        assert!(v["messages"][0].get("reasoning").is_none());
        assert_eq!(out.counts.carriers_filled, 1);
    }

    #[test]
    fn matching_turn_is_byte_identical_and_unchanged_body_is_none() {
        let body = r#"{"model":"deepseek-v4","messages":[{"role":"user","content":"hi"},
            {"role":"assistant","reasoning_content":"x","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}"#;
        let route = resolve(None, "api.deepseek.com", "/v1", Some("deepseek-v4"), None);
        let out = run(Dialect::Openai, &route, &[], None, None, body);
        assert_eq!(out.body, None);
        assert!(out.reasons.is_empty());
        // A change in one turn leaves the others byte-identical.
        let body2 = body.replace(
            "]}]}",
            "]},{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_details\":[1]}]}",
        );
        let out = run(Dialect::Openai, &route, &[], None, None, &body2);
        let new = String::from_utf8(out.body.unwrap()).unwrap();
        assert_eq!(
            new,
            format!(
                "{}]}},{{\"role\":\"assistant\",\"content\":\"a\"}}]}}",
                &body[..body.len() - 4]
            )
        );
    }

    #[test]
    fn gemini_extra_content_only_for_gemini_models() {
        let body = json!({"model": "m", "messages": [
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"},
                 "extra_content": {"google": {"thought_signature": "sig"}}}]}]});
        let (v, _) = chat(
            "generativelanguage.googleapis.com",
            "gemini-3-pro",
            &[],
            &body,
        );
        assert!(v.is_none());
        let (v, out) = chat("api.openai.com", "gpt-5", &[], &body);
        assert!(v.unwrap()["messages"][0]["tool_calls"][0]
            .get("extra_content")
            .is_none());
        assert_eq!(out.counts.carriers_dropped, 1);
    }

    /// Issue 30: Cerebras rejects `enable_thinking` and a top-level `reasoning` object; its row
    /// lists the controls it takes, so the others go up front, each with its reason, also when
    /// one of them was learned as unknown too (one removal, never two overlapping edits).
    #[test]
    fn controls_a_strict_host_does_not_take_are_dropped_up_front() {
        let body = r#"{"model":"qwen-3","enable_thinking":true,"reasoning":{"effort":"high"},"messages":[],"reasoning_effort":"high","clear_thinking":false}"#;
        let route = resolve(None, "api.cerebras.ai", "/v1", Some("qwen-3"), None);
        for omit in [&[][..], &["enable_thinking"][..]] {
            let out = run(Dialect::Openai, &route, omit, None, None, body);
            assert_eq!(
                String::from_utf8(out.body.unwrap()).unwrap(),
                r#"{"model":"qwen-3","messages":[],"reasoning_effort":"high","clear_thinking":false}"#
            );
            assert_eq!(out.counts.params_dropped, 2, "{omit:?}");
            assert_eq!(out.reasons.len(), 2, "{:?}", out.reasons);
            assert!(out.reasons.iter().any(|r| r
                == "reasoning: dropped parameter reasoning (profile cerebras takes no top-level \
                    reasoning; its reasoning controls: reasoning_effort, reasoning_format, \
                    disable_reasoning, clear_thinking)"));
        }
        // Groq lists its own; a row with no list (OpenRouter) and other wires keep them all.
        let groq = resolve(None, "api.groq.com", "/v1", Some("m"), None);
        let out = run(Dialect::Openai, &groq, &[], None, None, body);
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"model":"qwen-3","messages":[],"reasoning_effort":"high"}"#
        );
        let openrouter = resolve(None, "openrouter.ai", "/v1", Some("m"), None);
        assert_eq!(
            run(Dialect::Openai, &openrouter, &[], None, None, body).body,
            None
        );
        let out = run(Dialect::OpenaiResponses, &route, &[], None, None, body);
        assert_eq!(out.body, None);
    }

    /// Issue 30: `reasoning_details` entries that carry nothing go where the route reads
    /// `reasoning_details`; the array goes when no other entry is left.
    #[test]
    fn reasoning_details_entries_without_data_are_dropped() {
        let text = json!({"type": "reasoning.text", "text": "t", "index": 0});
        let real = json!({"type": "reasoning.encrypted", "data": "EjQK", "id": "c1", "index": 1});
        let stub = json!({"type": "reasoning.encrypted", "id": "c1", "index": 2});
        let empty = json!({"type": "reasoning.summary", "summary": ""});
        let with = |details: Value| {
            json!({"model": "google/gemini-3-pro-preview", "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "reasoning_details": details,
                 "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "f", "arguments": "{}"}}]}]})
        };
        let model = "google/gemini-3-pro-preview";
        let (v, out) = chat(
            "openrouter.ai",
            model,
            &[],
            &with(json!([stub, text, real, empty])),
        );
        let v = v.unwrap();
        assert_eq!(v["messages"][1]["reasoning_details"], json!([text, real]));
        assert_eq!(out.counts.carriers_dropped, 2);
        assert_eq!(
            out.reasons,
            [
                "reasoning: messages[1]: dropped 2 reasoning_details entries at [0, 3] \
              (no data, text or summary)"
            ]
        );
        let (v, out) = chat("openrouter.ai", model, &[], &with(json!([stub])));
        assert_eq!(keys(&v.unwrap(), 1), Vec::<String>::new());
        assert_eq!(
            out.reasons,
            ["reasoning: messages[1]: dropped reasoning_details (no entry carries data, text or summary)"]
        );
        // Entries that carry something stay byte-identical.
        let (v, _) = chat("openrouter.ai", model, &[], &with(json!([text, real])));
        assert_eq!(v, None);
    }

    #[test]
    fn learned_params_are_dropped_in_any_dialect() {
        let body = r#"{"model":"m","store":true,"messages":[],"reasoning_effort":"high","zzz":1}"#;
        for dialect in [
            Dialect::Openai,
            Dialect::Anthropic,
            Dialect::OpenaiResponses,
            Dialect::Gemini,
        ] {
            let route = resolve(None, "example.com", "/v1", Some("m"), None);
            let out = run(
                dialect,
                &route,
                &["reasoning_effort", "store", "zzz", "messages"],
                None,
                None,
                body,
            );
            assert_eq!(
                String::from_utf8(out.body.unwrap()).unwrap(),
                r#"{"model":"m","messages":[],"zzz":1}"#
            );
            assert_eq!(out.counts.params_dropped, 2);
        }
    }

    #[test]
    fn keep_thinking_flags() {
        let route = resolve(
            Some("dashscope"),
            "dashscope.aliyuncs.com",
            "/compatible-mode/v1",
            Some("qwen3.7-plus"),
            None,
        );
        let out = run(
            Dialect::Openai,
            &route,
            &[],
            None,
            None,
            r#"{"model":"q","enable_thinking":true,"messages":[]}"#,
        );
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"model":"q","enable_thinking":true,"messages":[],"preserve_thinking":true}"#
        );
        let out = run(
            Dialect::Openai,
            &route,
            &[],
            None,
            None,
            r#"{"model":"q","enable_thinking":false,"messages":[]}"#,
        );
        assert_eq!(out.body, None);
        let out = run(
            Dialect::Openai,
            &route,
            &["preserve_thinking"],
            None,
            None,
            r#"{"model":"q","enable_thinking":true,"messages":[],"preserve_thinking":true}"#,
        );
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"model":"q","enable_thinking":true,"messages":[]}"#
        );
        // GLM: only when RC is replayed (carriers override) and thinking is enabled.
        let body = r#"{"model":"glm-5","thinking":{"type":"enabled"},"messages":[]}"#;
        let zai = resolve(None, "api.z.ai", "/api/paas/v4", Some("glm-5"), None);
        assert_eq!(run(Dialect::Openai, &zai, &[], None, None, body).body, None);
        let rc = vec!["reasoning_content".to_owned()];
        let zai = resolve(None, "api.z.ai", "/api/paas/v4", Some("glm-5"), Some(&rc));
        let out = run(Dialect::Openai, &zai, &[], None, None, body);
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"model":"glm-5","thinking":{"type":"enabled","clear_thinking":false},"messages":[]}"#
        );
        let out = run(
            Dialect::Openai,
            &zai,
            &["thinking.clear_thinking"],
            None,
            None,
            body,
        );
        assert_eq!(out.body, None);
    }

    #[test]
    fn kimi_keep_never_with_reasoning_effort() {
        let mut route = resolve(None, "api.moonshot.ai", "/v1", Some("kimi-k2.6"), None);
        assert_eq!(route.keep_thinking, None, "ships off");
        route.keep_thinking = Some(KeepThinking::KimiKeepAll);
        let out = run(
            Dialect::Openai,
            &route,
            &[],
            None,
            None,
            r#"{"thinking":{"type":"enabled"},"messages":[]}"#,
        );
        assert_eq!(
            String::from_utf8(out.body.unwrap()).unwrap(),
            r#"{"thinking":{"type":"enabled","keep":"all"},"messages":[]}"#
        );
        let out = run(
            Dialect::Openai,
            &route,
            &[],
            None,
            None,
            r#"{"thinking":{"type":"enabled"},"reasoning_effort":"high","messages":[]}"#,
        );
        assert_eq!(out.body, None);
    }

    const SIGNED: &str = r#"{"model":"claude-opus-4-5","thinking":{"type":"adaptive"},"system":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"EqQB","cache_control":{"type":"ephemeral"}},{"type":"redacted_thinking","data":"Em"},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"}]}]}"#;

    #[test]
    fn native_keeps_thinking_and_moves_cache_control() {
        let route = resolve(
            None,
            "api.anthropic.com",
            "/v1/messages",
            Some("claude-opus-4-5"),
            None,
        );
        let out = run(Dialect::Anthropic, &route, &[], None, None, SIGNED);
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        let c = &v["messages"][1]["content"];
        assert_eq!(
            c[0],
            json!({"type":"thinking","thinking":"t","signature":"EqQB"})
        );
        assert_eq!(c[1], json!({"type":"redacted_thinking","data":"Em"}));
        assert_eq!(c[2]["cache_control"], json!({"type":"ephemeral"}));
        assert_eq!(out.counts.cache_control_moved, 1);
        assert!(out.set_headers.is_empty());
        let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
        assert_eq!(
            run(Dialect::Anthropic, &route, &[], None, None, &plain).body,
            None
        );
    }

    #[test]
    fn third_party_strips_thinking() {
        let route = resolve(
            None,
            "api.minimax.io",
            "/anthropic/v1/messages",
            Some("MiniMax-M2"),
            None,
        );
        let out = run(Dialect::Anthropic, &route, &[], None, None, SIGNED);
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        let c = &v["messages"][1]["content"];
        assert_eq!(c.as_array().unwrap().len(), 1);
        assert_eq!(c[0]["type"], "tool_use");
        assert_eq!(c[0]["cache_control"], json!({"type":"ephemeral"}));
        assert_eq!(out.counts.thinking_stripped, 2);
        let only = r#"{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"}]}]}"#;
        let out = run(Dialect::Anthropic, &route, &[], None, None, only);
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        assert_eq!(
            v["messages"][0]["content"],
            json!([{"type":"text","text":EMPTY_TURN_TEXT}])
        );
        for (host, model) in [
            ("api.moonshot.ai", "kimi-k2"),
            ("api.deepseek.com", "deepseek-v4"),
            ("api.z.ai", "glm-5"),
        ] {
            let route = resolve(None, host, "/anthropic/v1/messages", Some(model), None);
            let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
            assert_eq!(
                run(Dialect::Anthropic, &route, &[], None, None, &plain).body,
                None,
                "{host}"
            );
        }
    }

    #[test]
    fn binding_when_prefix_changed_before_signed_block() {
        let route = resolve(
            None,
            "api.anthropic.com",
            "/v1/messages",
            Some("claude-fable-5-1"),
            None,
        );
        let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
        let in_first_user = plain.find("\"hi\"").unwrap();
        let out = run(
            Dialect::Anthropic,
            &route,
            &[],
            Some(in_first_user),
            Some("foo-1, bar-2"),
            &plain,
        );
        let v: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        assert_eq!(
            v["thinking"],
            json!({"type":"adaptive","block_binding":{"prefix_mismatch_behavior":"drop_block"}})
        );
        assert_eq!(
            out.set_headers,
            vec![(
                "anthropic-beta".to_owned(),
                format!("foo-1, bar-2,{BINDING_BETA}")
            )]
        );
        assert!(out.counts.binding_set);
        // A change after the last signed block, or outside the prefix: nothing.
        let after = plain.find("tool_result").unwrap();
        assert_eq!(
            run(Dialect::Anthropic, &route, &[], Some(after), None, &plain).body,
            None
        );
        let model = plain.find("claude").unwrap();
        assert_eq!(
            run(Dialect::Anthropic, &route, &[], Some(model), None, &plain).body,
            None
        );
        // `system` is always part of the prefix.
        let sys = plain.find("\"s\"").unwrap();
        let out = run(
            Dialect::Anthropic,
            &route,
            &[],
            Some(sys),
            Some(BINDING_BETA),
            &plain,
        );
        assert!(out.body.is_some());
        assert!(out.set_headers.is_empty(), "header already has the token");
        // Not on a gateway, not when the client set block_binding, not with thinking off.
        let gw = resolve(
            None,
            "llm.corp.example",
            "/v1/messages",
            Some("claude-opus-4-5"),
            None,
        );
        assert_eq!(
            run(
                Dialect::Anthropic,
                &gw,
                &[],
                Some(in_first_user),
                None,
                &plain
            )
            .body,
            None
        );
        let off = plain.replace(r#"{"type":"adaptive"}"#, r#"{"type":"disabled"}"#);
        assert_eq!(
            run(
                Dialect::Anthropic,
                &route,
                &[],
                Some(off.find("\"hi\"").unwrap()),
                None,
                &off
            )
            .body,
            None
        );
    }

    /// Shaping with `omit` holding `Field::Beta` values and `droppable_betas`.
    fn run_betas(
        route: &ResolvedRoute,
        betas: &[&str],
        droppable_betas: &[String],
        fcb: Option<usize>,
        header: Option<&str>,
        body: &str,
    ) -> ShapeOutcome {
        let omit: FieldSet = betas.iter().map(|b| Field::Beta((*b).to_owned())).collect();
        let ctx = ShapeContext {
            dialect: Dialect::Anthropic,
            route,
            omit: &omit,
            droppable_params: &[],
            droppable_betas,
            first_changed_byte: fcb,
            anthropic_beta: header,
            rejected: &(),
        };
        shape_request(&ctx, body.as_bytes()).unwrap()
    }

    #[test]
    fn no_binding_once_its_beta_was_rejected() {
        let route = resolve(
            None,
            "api.anthropic.com",
            "/v1/messages",
            Some("claude-fable-5-1"),
            None,
        );
        let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
        let fcb = Some(plain.find("\"hi\"").unwrap());
        let out = run_betas(&route, &[BINDING_BETA], &[], fcb, Some("foo-1"), &plain);
        assert_eq!(out.body, None, "no block_binding");
        assert!(out.set_headers.is_empty(), "no beta added");
        assert!(!out.counts.binding_set);
        assert!(
            out.reasons[0].contains("thinking.block_binding not set"),
            "{:?}",
            out.reasons
        );
        // Another beta learned: binding as before.
        let out = run_betas(&route, &["other-1"], &[], fcb, None, &plain);
        assert!(out.counts.binding_set);
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), BINDING_BETA.to_owned())]
        );
    }

    #[test]
    fn a_client_beta_is_removed_only_when_learned_and_droppable() {
        let route = resolve(None, "api.anthropic.com", "/v1/messages", Some("m"), None);
        let body = r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let listed = vec!["foo-1".to_owned()];
        let out = run_betas(
            &route,
            &["foo-1"],
            &listed,
            None,
            Some("foo-1, bar-2"),
            body,
        );
        assert_eq!(out.body, None);
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), "bar-2".to_owned())]
        );
        assert!(
            out.reasons[0].contains("removed `foo-1`"),
            "{:?}",
            out.reasons
        );
        // The only value: the header goes (an empty value removes it).
        let out = run_betas(&route, &["foo-1"], &listed, None, Some("foo-1"), body);
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), String::new())]
        );
        // Learned but not listed, or listed but not learned: kept.
        for (learned, droppable) in [(&["foo-1"][..], &[][..]), (&[][..], &listed[..])] {
            let out = run_betas(&route, learned, droppable, None, Some("foo-1"), body);
            assert!(out.set_headers.is_empty());
            assert!(out.reasons.is_empty());
        }
        // Dropped and binding added in one header.
        let fable = resolve(
            None,
            "api.anthropic.com",
            "/v1/messages",
            Some("claude-fable-5-1"),
            None,
        );
        let plain = SIGNED.replace(r#","cache_control":{"type":"ephemeral"}"#, "");
        let fcb = Some(plain.find("\"hi\"").unwrap());
        let out = run_betas(
            &fable,
            &["foo-1"],
            &listed,
            fcb,
            Some("foo-1,bar-2"),
            &plain,
        );
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), format!("bar-2,{BINDING_BETA}"))]
        );
        // The client's own binding beta, listed and learned: its block_binding goes with it.
        let own = plain.replace(
            r#"{"type":"adaptive"}"#,
            r#"{"type":"adaptive","block_binding":{"prefix_mismatch_behavior":"drop_block"}}"#,
        );
        let listed = vec![BINDING_BETA.to_owned()];
        let out = run_betas(
            &fable,
            &[BINDING_BETA],
            &listed,
            fcb,
            Some(BINDING_BETA),
            &own,
        );
        assert_eq!(out.body.as_deref(), Some(plain.as_bytes()));
        assert_eq!(
            out.set_headers,
            vec![("anthropic-beta".to_owned(), String::new())]
        );
        assert!(
            out.reasons
                .iter()
                .any(|r| r.contains("dropped parameter thinking.block_binding")),
            "{:?}",
            out.reasons
        );
    }

    #[test]
    fn merge_beta_cases() {
        assert_eq!(merge_beta(None, "x").as_deref(), Some("x"));
        assert_eq!(merge_beta(Some(" "), "x").as_deref(), Some("x"));
        assert_eq!(merge_beta(Some("a,x"), "x"), None);
        assert_eq!(merge_beta(Some("a"), "x").as_deref(), Some("a,x"));
    }

    #[test]
    fn not_json_is_an_error() {
        let route = resolve(None, "example.com", "/v1", None, None);
        let omit = FieldSet::new();
        let ctx = ShapeContext {
            dialect: Dialect::Openai,
            route: &route,
            omit: &omit,
            droppable_params: &[],
            droppable_betas: &[],
            first_changed_byte: None,
            anthropic_beta: None,
            rejected: &(),
        };
        assert!(shape_request(&ctx, b"{\"messages\":").is_err());
        assert!(shape_request(&ctx, b"[1]").is_err());
    }
}
