//! Shaping on the Anthropic Messages wire: signed thinking replayed or stripped per the
//! route, `cache_control` moved off thinking blocks, and the prefix binding
//! (`docs/reasoning.md#signed-thinking-on-the-anthropic-wire`).

use super::*;

/// Whether `block` is a thinking block (`thinking` or `redacted_thinking`).
pub(super) fn is_thinking(block: &Block) -> bool {
    matches!(
        block.kind.as_deref(),
        Some("thinking" | "redacted_thinking")
    )
}

impl Shaper<'_, '_> {
    /// Strip or keep thinking blocks; take `cache_control` off them. Returns the byte ranges
    /// of the signed thinking blocks left in the body.
    pub(super) fn shape_anthropic(&mut self) -> Vec<Range<usize>> {
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
    pub(super) fn shape_thinking_turn(
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
    pub(super) fn move_marker(
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
    pub(super) fn report_stripped(&mut self, i: usize, stripped: usize, rejected: usize) {
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
    pub(super) fn remove_stripped(
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
    pub(super) fn binding(
        &mut self,
        top: &Object,
        signed: &[Range<usize>],
        removed_top: &BTreeSet<String>,
    ) {
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
}
