//! The layering the compiler does not hold by itself: no import cycle between the top-level
//! modules of any crate of the workspace (issue 28; docs/dev/architecture.md#layers). Cargo
//! already forbids cycles between crates; this test forbids them inside each crate.
//!
//! Production code only: every `.rs` file under a crate's `src/` is parsed with `syn`, items
//! under `#[cfg(test)]` (and files named `tests.rs` / `testing.rs`) are skipped, and each
//! `crate::<module>` path (in `use` trees, types and expressions) is an edge from the file's
//! top-level module to `<module>`. Doc comments and macro bodies are not read.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Edges of one crate: `from -> to -> [file, ...]` (one entry per use).
type Edges = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let mut test = false;
            let _ = a.parse_nested_meta(|m| {
                if m.path.is_ident("test") {
                    test = true;
                }
                Ok(())
            });
            test
        }
    })
}

struct Collect<'a> {
    file: String,
    out: &'a mut Vec<(String, String)>,
}

impl Collect<'_> {
    fn note(&mut self, module: &syn::Ident) {
        self.out.push((module.to_string(), self.file.clone()));
    }

    fn use_tree(&mut self, tree: &syn::UseTree, after_crate: bool) {
        match tree {
            syn::UseTree::Path(p) if p.ident == "crate" => self.use_tree(&p.tree, true),
            syn::UseTree::Path(p) if after_crate => self.note(&p.ident),
            syn::UseTree::Name(n) if after_crate => self.note(&n.ident),
            syn::UseTree::Rename(r) if after_crate => self.note(&r.ident),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, after_crate);
                }
            }
            _ => {}
        }
    }
}

impl<'ast> Visit<'ast> for Collect<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => &[],
        };
        if is_cfg_test(attrs) {
            return;
        }
        if let syn::Item::Use(u) = item {
            self.use_tree(&u.tree, false);
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if let syn::ImplItem::Fn(f) = item {
            if is_cfg_test(&f.attrs) {
                return;
            }
        }
        syn::visit::visit_impl_item(self, item);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segs = path.segments.iter();
        if let (Some(first), Some(second)) = (segs.next(), segs.next()) {
            if first.ident == "crate" {
                self.note(&second.ident);
            }
        }
        syn::visit::visit_path(self, path);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of `src` belongs to (`src/a.rs` and `src/a/**` -> `a`); `None`
/// for the crate roots.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

fn edges_of(root: &Path, src: &Path) -> Edges {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges = Edges::new();
    for file in files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if matches!(name, "tests.rs" | "testing.rs")
            || file.components().any(|c| c.as_os_str() == "tests")
        {
            continue;
        }
        let Some(from) = module_of(src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut found = Vec::new();
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        Collect {
            file: shown,
            out: &mut found,
        }
        .visit_file(&ast);
        for (to, at) in found {
            if to != from && to != "self" && to != "super" {
                edges
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .push(at);
            }
        }
    }
    edges
}

/// Modules on a cycle: every strongly connected component with more than one module.
fn cycles(edges: &Edges) -> Vec<BTreeSet<String>> {
    let nodes: BTreeSet<&String> = edges
        .iter()
        .flat_map(|(a, tos)| std::iter::once(a).chain(tos.keys()))
        .collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for to in edges.get(&n).into_iter().flat_map(|t| t.keys()) {
                if seen.insert(to.clone()) {
                    stack.push(to.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for n in &nodes {
        if out.iter().any(|c| c.contains(*n)) {
            continue;
        }
        let scc: BTreeSet<String> = nodes
            .iter()
            .filter(|m| *m == n || (reaches[*n].contains(**m) && reaches[**m].contains(*n)))
            .map(|m| (*m).clone())
            .collect();
        if scc.len() > 1 {
            out.push(scc);
        }
    }
    out
}

/// Every crate's `src/`: the root package and `crates/*`.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("src")];
    if let Ok(entries) = std::fs::read_dir(root.join("crates")) {
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path().join("src")))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

#[test]
fn no_module_cycle_inside_any_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = String::new();
    for src in crate_sources(root) {
        let edges = edges_of(root, &src);
        for scc in cycles(&edges) {
            report.push_str(&format!(
                "\ncycle in {}: {}\n",
                src.strip_prefix(root).unwrap_or(&src).display(),
                scc.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
            for from in &scc {
                for (to, at) in edges.get(from).into_iter().flatten() {
                    if scc.contains(to) {
                        let files: BTreeSet<&str> = at.iter().map(String::as_str).collect();
                        let shown: Vec<&str> = files.iter().take(3).copied().collect();
                        report.push_str(&format!(
                            "  {from} -> {to} ({} uses, in {}{})\n",
                            at.len(),
                            shown.join(", "),
                            if files.len() > 3 { ", ..." } else { "" }
                        ));
                    }
                }
            }
        }
    }
    assert!(
        report.is_empty(),
        "top-level modules import each other:{report}"
    );
}

#[test]
fn the_checker_sees_a_cycle_and_skips_test_code() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a; mod b;").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "use crate::{b::X, c};\n#[cfg(test)]\nmod tests { use crate::d::Y; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b/mod.rs"),
        "pub struct X;\nfn f() -> crate::a::Z { todo!() }\n",
    )
    .unwrap();
    let edges = edges_of(dir.path(), &src);
    assert_eq!(
        edges["a"].keys().collect::<Vec<_>>(),
        ["b", "c"],
        "the cfg(test) module's import of d is not an edge"
    );
    assert_eq!(edges["b"]["a"], ["src/b/mod.rs"]);
    let found = cycles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].iter().collect::<Vec<_>>(), ["a", "b"]);
}
