//! Splicing edits into the original JSON bytes, so untouched parts stay byte-exact.
//!
//! The dialect modules parse the body with borrowed slices (`&str`, `&RawValue`) that point into
//! the original text; [`span_of`] turns such a slice back into a byte range of the original, and
//! [`splice`] replaces ranges without re-serializing anything else.

use std::ops::Range;

/// Replace `range` (byte offsets into the original body) with `replacement`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// Byte range of the original body to replace.
    pub range: Range<usize>,
    /// Bytes written in its place.
    pub replacement: Vec<u8>,
}

/// Why a set of edits could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
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

/// The byte range of `part` inside `base`, when `part` is a sub-slice of `base`
/// (computed from the slices' addresses; no unsafe code). `None` when it is not.
pub fn span_of(base: &str, part: &str) -> Option<Range<usize>> {
    let base_start = base.as_ptr() as usize;
    let start = (part.as_ptr() as usize).checked_sub(base_start)?;
    let end = start.checked_add(part.len())?;
    if end > base.len() {
        return None;
    }
    Some(start..end)
}

/// Apply `edits` (in any order, non-overlapping) to `original` and return the new bytes.
/// Bytes outside the edited ranges are copied unchanged.
pub fn splice(original: &[u8], mut edits: Vec<Edit>) -> Result<Vec<u8>, EditError> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn span_of_sub_slice() {
        let base = "hello world";
        assert_eq!(span_of(base, &base[6..]), Some(6..11));
        assert_eq!(span_of(base, &base[0..0]), Some(0..0));
        let other = String::from("world");
        assert_eq!(span_of(base, &other), None);
    }

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
}
