//! What the subcommands' tables share: comfy-table with no borders, numbers right-aligned,
//! thousands grouped.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_macros,
    reason = "the CLI's home: subcommands print to stdout and stderr, off any request's path"
)]

use comfy_table::{presets, CellAlignment, Table};

/// A borderless table with `header`; columns from `right_from` on are right-aligned.
pub(crate) fn table(header: &[&str], right_from: usize) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(header.to_vec());
    for i in right_from..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// Append `t`'s lines to `out` without the padding after the last column.
pub(crate) fn push_table(out: &mut String, t: &Table) {
    for line in t.to_string().lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// `n` with `,` between thousands: `127720` → `127,720`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(127_720), "127,720");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn tables_have_no_trailing_padding() {
        let mut t = table(&["name", "n"], 1);
        t.add_row(vec!["a", "1"]);
        t.add_row(vec!["longer", "22"]);
        let mut out = String::new();
        push_table(&mut out, &t);
        assert!(out.lines().all(|l| !l.ends_with(' ')), "{out:?}");
        assert!(out.contains("longer  22"), "{out:?}");
    }
}
