//! Shaping on the OpenAI Chat wire: each assistant turn's reasoning carriers kept, moved,
//! padded or dropped per the route's carrier set (`docs/reasoning.md#shaping-an-assistant-turn`).

use super::*;

/// What to do with one carrier field of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    Keep,
    Set(String),
    Drop,
}

/// The decisions for one assistant message's `reasoning_content` and `reasoning`
/// ([`Shaper::carrier_plan`]).
pub(super) struct CarrierPlan {
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
pub(super) struct Drops<'m> {
    /// The message's index in `messages`.
    i: usize,
    /// The message.
    msg: &'m Object,
    /// Indexes of the members to remove.
    idx: Vec<usize>,
}

impl Drops<'_> {
    /// Collect `msg`'s members named `key` (none: nothing happens), with the reason `why`.
    pub(super) fn drop(&mut self, s: &mut Shaper<'_, '_>, key: &'static str, why: String) {
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

/// The message's (last) `reasoning_details` array, when it holds entries that carry nothing
/// ([`crate::dialect::openai::details::carries_nothing`]): its element ranges and the indexes of those entries.
/// `None` when there is no such entry (or no array).
pub(super) fn empty_details(text: &str, msg: &Object) -> Option<(Vec<Range<usize>>, Vec<usize>)> {
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

impl Shaper<'_, '_> {
    /// The carriers this request may carry: the route's set minus learned verdicts, except
    /// that a must-echo route never loses RC.
    pub(super) fn effective(&self) -> BTreeSet<Carrier> {
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

    pub(super) fn why_dropped(&self, c: Carrier) -> String {
        if self.ctx.route.carriers.contains(&c) {
            format!("learned unknown for {}", self.ctx.route.host)
        } else {
            format!("not read by profile {}", self.ctx.route.profile)
        }
    }

    // ---- OpenAI Chat ----------------------------------------------------------------------

    pub(super) fn shape_chat(&mut self, top: &Object) {
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
    pub(super) fn shape_assistant(
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
    pub(super) fn carrier_plan(
        &self,
        msg: &Object,
        eff: &BTreeSet<Carrier>,
        has_tools: bool,
    ) -> CarrierPlan {
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
    pub(super) fn set_carrier(
        &mut self,
        i: usize,
        msg: &Object,
        key: &str,
        value: &str,
        pad: bool,
    ) {
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
    pub(super) fn drop_other_carriers(&mut self, eff: &BTreeSet<Carrier>, drops: &mut Drops<'_>) {
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
    pub(super) fn drop_call_signatures(&mut self, i: usize, tool_calls: Option<&[Range<usize>]>) {
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
}
