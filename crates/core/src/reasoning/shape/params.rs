//! Shaping's top-level parameters and headers: learned-unknown parameters dropped, reasoning
//! controls a strict host does not take removed, keep-thinking flags added, rejected
//! `anthropic-beta` values removed.

use super::*;

impl Shaper<'_, '_> {
    pub(super) fn is_droppable(&self, name: &str) -> bool {
        !PROTECTED_PARAMS.contains(&name)
            && (self.ctx.droppable_params.iter().any(|p| p == name)
                || KEEP_THINKING_PARAMS.contains(&name))
    }

    /// Remove learned-unknown droppable parameters. Returns the top-level keys removed whole.
    pub(super) fn drop_params(&mut self, top: &Object) -> BTreeSet<String> {
        let mut whole: Vec<usize> = Vec::new();
        let mut nested: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let omit = self.ctx.omit;
        for name in omit.params().filter(|n| self.is_droppable(n)) {
            match name.split_once('.') {
                None => {
                    whole.extend(top.indexes_of(name));
                    // Also where the wire passes the model's own parameters through.
                    if let Some(m) = self.ctx.dialect.format().model_fields() {
                        nested.entry(m).or_default().push(name);
                    }
                }
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
    pub(super) fn controls_not_taken(
        &self,
        top: &Object,
        learned: &BTreeSet<String>,
    ) -> Vec<(usize, String)> {
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

    /// Add the route's keep-thinking flag when the request explicitly enables thinking, has not
    /// set the flag, carries no conflicting parameter, the flag was not learned unknown, and
    /// reasoning is replayed at all (RC sent).
    pub(super) fn keep_thinking(&mut self, top: &Object, removed_top: &BTreeSet<String>) {
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

    /// Remove from the client's `anthropic-beta` the values learned as rejected for (host,
    /// model) that are on `droppable_betas` (`docs/reasoning.md#beta-headers`).
    pub(super) fn drop_betas(&mut self) {
        let omit = self.ctx.omit;
        let droppable = self.ctx.droppable_betas;
        let doomed = |v: &str| {
            droppable.iter().any(|d| d.trim() == v) && omit.contains(&Field::Beta(v.to_owned()))
        };
        let current = self.beta.as_deref();
        let Some(kept) = crate::reasoning::betas::without(current, doomed) else {
            return;
        };
        for v in crate::reasoning::betas::values(current)
            .into_iter()
            .filter(|v| doomed(v))
        {
            self.drop_client_binding |= v == BINDING_BETA;
            self.reasons.push(format!(
                "reasoning: removed `{v}` from {} ({} rejected it for this model; on droppable_betas)",
                self.beta_site(),
                self.ctx.route.host
            ));
        }
        self.beta = Some(kept);
        self.beta_changed = true;
    }

    /// Where this route's betas travel, for the reasons.
    fn beta_site(&self) -> &'static str {
        if self.ctx.route.betas_in_body {
            "the body's anthropic_beta array"
        } else {
            "the anthropic-beta header"
        }
    }

    /// Write `value` (comma-separated; empty: none left) to the body's `anthropic_beta`
    /// array: the member's value replaced, the member removed when no value is left, or the
    /// member added.
    pub(super) fn set_body_betas(&mut self, top: &Object, value: &str) {
        let key = crate::reasoning::betas::BODY_MEMBER;
        let at = top.indexes_of(key);
        let array = crate::reasoning::betas::body_array(value);
        match at
            .first()
            .and_then(|i| top.members.get(*i).map(|m| (*i, m.value.clone())))
        {
            Some((i, _)) if value.trim().is_empty() => {
                let ranges = top.removal_ranges(&[i]);
                self.remove(ranges);
            }
            Some((_, range)) => self.edits.push(Edit {
                range,
                replacement: array.into_bytes(),
            }),
            None if value.trim().is_empty() => {}
            None => self.insert(top, &format!("\"{key}\":{array}")),
        }
    }
}
