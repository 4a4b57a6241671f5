//! Splicing edits into the original JSON bytes, so untouched parts stay byte-exact.
//!
//! The passes compute edits as byte ranges of the original body (from the spans
//! [`super::scan`] gives); [`splice`] replaces those ranges without re-serializing anything
//! else, and [`removal_edits`] removes array elements / object members keeping valid JSON.

use std::ops::Range;

/// Replace `range` (byte offsets into the original body) with `replacement`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// Byte range of the original body to replace.
    pub range: Range<usize>,
    /// Bytes written in its place.
    pub replacement: Vec<u8>,
}

/// What one edit of a splice did, without its bytes: `range` of the original replaced by
/// `new_len` bytes. What a caller needs to map a range of the original to the output
/// ([`changes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    /// Byte range of the original body replaced.
    pub range: Range<usize>,
    /// Length of its replacement, bytes.
    pub new_len: usize,
}

/// The edits of `groups` that change a byte (a replacement other than the bytes it replaces),
/// sorted by position, as [`Change`]s: how [`splice_changed`]'s output relates to `original`.
pub(crate) fn changes(original: &[u8], groups: &[&[Edit]]) -> Vec<Change> {
    let mut out: Vec<Change> = groups
        .iter()
        .flat_map(|g| g.iter())
        .filter(|e| original.get(e.range.clone()) != Some(e.replacement.as_slice()))
        .map(|e| Change {
            range: e.range.clone(),
            new_len: e.replacement.len(),
        })
        .collect();
    out.sort_by_key(|c| (c.range.start, c.range.end));
    out
}

/// Why a set of edits could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EditError {
    /// An edit reaches past the end of the body or has `start > end`.
    #[error("edit {start}..{end} is outside the body of {len} bytes")]
    OutOfBounds {
        start: usize,
        end: usize,
        len: usize,
    },
    /// Two edits overlap.
    #[error("edits overlap at byte {at}")]
    Overlap { at: usize },
}

/// Apply `edits` (in any order, non-overlapping) to `original` and return the new bytes.
/// Bytes outside the edited ranges are copied unchanged.
/// The edit that adds `member` (`"key":value`, raw JSON text) as the last member of `obj`,
/// with the comma it needs: an insertion before the object's closing brace, so every byte of
/// the object already there is kept.
pub(crate) fn append_member(obj: &crate::json::scan::Object, member: &str) -> Edit {
    let (at, comma) = obj.append_point();
    let mut replacement = Vec::with_capacity(member.len() + 1);
    if comma {
        replacement.push(b',');
    }
    replacement.extend_from_slice(member.as_bytes());
    Edit {
        range: at..at,
        replacement,
    }
}

pub(crate) fn splice(original: &[u8], edits: Vec<Edit>) -> Result<Vec<u8>, EditError> {
    splice_all(original, &[&edits])
}

/// [`splice`] over several passes' edits at once (each group in any order; no edit of one
/// group may overlap an edit of another). Two zero-width insertions at one offset keep the
/// order of their groups.
pub(crate) fn splice_all(original: &[u8], groups: &[&[Edit]]) -> Result<Vec<u8>, EditError> {
    let (edits, grow) = check(original, groups)?;
    let mut out = Vec::with_capacity(original.len().saturating_add(grow));
    let mut cursor = 0usize;
    for e in &edits {
        out.extend_from_slice(&original[cursor..e.range.start]);
        out.extend_from_slice(&e.replacement);
        cursor = e.range.end;
    }
    out.extend_from_slice(&original[cursor..]);
    Ok(out)
}

/// [`splice_all`], without building a copy when no edit changes a byte: `Ok(None)` when every
/// edit's replacement equals the bytes it replaces (the common case of a request with nothing
/// to change, where the copy and the comparison with the original would cost two passes over
/// the body), else `Ok(Some(new))`. Errors as [`splice_all`], checked on every edit.
pub(crate) fn splice_changed(
    original: &[u8],
    groups: &[&[Edit]],
) -> Result<Option<Vec<u8>>, EditError> {
    let noop = |e: &Edit| original.get(e.range.clone()) == Some(e.replacement.as_slice());
    if groups.iter().all(|g| g.iter().all(noop)) {
        // Still checked as splice_all checks them (a no-op edit out of bounds is impossible
        // here; overlaps are what the callers fall back on).
        check(original, groups)?;
        return Ok(None);
    }
    splice_all(original, groups).map(Some)
}

/// The bounds and overlap checks of [`splice_all`]: the edits sorted by position, and the
/// bytes their replacements add up to.
fn check<'e>(original: &[u8], groups: &[&'e [Edit]]) -> Result<(Vec<&'e Edit>, usize), EditError> {
    let mut edits: Vec<&Edit> = groups.iter().flat_map(|g| g.iter()).collect();
    edits.sort_by_key(|e| (e.range.start, e.range.end));
    let mut grow: usize = 0;
    let mut cursor = 0usize;
    for e in &edits {
        let Range { start, end } = e.range;
        if start > end || end > original.len() {
            return Err(EditError::OutOfBounds {
                start,
                end,
                len: original.len(),
            });
        }
        if start < cursor {
            return Err(EditError::Overlap { at: start });
        }
        cursor = end;
        grow = grow.saturating_add(e.replacement.len());
    }
    Ok((edits, grow))
}

/// Byte ranges that remove the items (object members or array elements, each given by its
/// span) at `indexes` together with their separating commas, leaving valid JSON. Consecutive
/// removed items are merged into one range; the ranges never overlap.
pub(crate) fn removal_ranges(items: &[Range<usize>], indexes: &[usize]) -> Vec<Range<usize>> {
    let mut idx: Vec<usize> = indexes
        .iter()
        .copied()
        .filter(|i| *i < items.len())
        .collect();
    idx.sort_unstable();
    idx.dedup();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in idx {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == i => *end = i,
            _ => runs.push((i, i)),
        }
    }
    let mut out = Vec::with_capacity(runs.len());
    for (a, b) in runs {
        let (Some(first), Some(last)) = (items.get(a), items.get(b)) else {
            continue;
        };
        if let Some(next) = items.get(b + 1) {
            // Remove through the start of the next kept item (eats the comma after the run).
            out.push(first.start..next.start);
        } else if let Some(prev) = a.checked_sub(1).and_then(|p| items.get(p)) {
            // The run reaches the end: eat the comma after the kept item before it.
            out.push(prev.end..last.end);
        } else {
            out.push(first.start..last.end);
        }
    }
    out
}

/// Deletion edits removing the items at `indexes` (see [`removal_ranges`]).
pub(crate) fn removal_edits(items: &[Range<usize>], indexes: &[usize]) -> Vec<Edit> {
    removal_ranges(items, indexes)
        .into_iter()
        .map(|range| Edit {
            range,
            replacement: Vec::new(),
        })
        .collect()
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
    fn splice_in_any_order() {
        let out = splice(
            b"0123456789",
            vec![
                Edit {
                    range: 7..9,
                    replacement: b"xy".to_vec(),
                },
                Edit {
                    range: 1..3,
                    replacement: b"ABCD".to_vec(),
                },
                Edit {
                    range: 5..5,
                    replacement: b"-".to_vec(),
                },
            ],
        )
        .unwrap();
        assert_eq!(out, b"0ABCD34-56xy9");
    }

    #[test]
    fn splice_rejects_overlap_and_out_of_bounds() {
        let e = |r: Range<usize>| Edit {
            range: r,
            replacement: vec![],
        };
        assert_eq!(
            splice(b"0123", vec![e(0..2), e(1..3)]),
            Err(EditError::Overlap { at: 1 })
        );
        assert!(matches!(
            splice(b"0123", vec![e(2..9)]),
            Err(EditError::OutOfBounds { .. })
        ));
        assert_eq!(splice(b"0123", vec![]).unwrap(), b"0123");
    }

    #[test]
    fn splice_changed_copies_nothing_for_no_op_edits() {
        let e = |r: Range<usize>, s: &[u8]| Edit {
            range: r,
            replacement: s.to_vec(),
        };
        assert_eq!(splice_changed(b"0123", &[]), Ok(None));
        assert_eq!(splice_changed(b"0123", &[&[e(1..3, b"12")]]), Ok(None));
        assert_eq!(
            splice_changed(b"0123", &[&[e(1..3, b"12")], &[e(3..4, b"x")]]),
            Ok(Some(b"012x".to_vec()))
        );
        assert_eq!(
            splice_changed(b"0123", &[&[e(0..2, b"01")], &[e(1..3, b"12")]]),
            Err(EditError::Overlap { at: 1 })
        );
    }
}
