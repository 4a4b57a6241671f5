//! The docs hold together (issue 28, item 4):
//! - every relative link in `README.md` and `docs/**/*.md` names a file of the repository, and
//!   every `#anchor` (same file or another) names a heading of its target, by GitHub's slug
//!   rules;
//! - every `docs/….md#anchor` a source comment cites (`src/`, `crates/`, `tests/`, `scripts/`,
//!   `benches/`, `examples/`, `proxy.toml`, `.ci/run`) or a doc names in a code span resolves the same way,
//!   and no comment cites a README section;
//! - `docs/reference/config.md` documents every key the config schema accepts, each exactly
//!   once in its section (a table row whose first cell is the key in backticks), and nothing
//!   else; the keys come from the binary itself (`cachekeeper check` on a file with one unknown
//!   key answers with every key that section accepts);
//! - every key the shipped `proxy.toml` sets is documented there, and every documented key is
//!   named in `proxy.toml`, set or commented out.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

const BIN: &str = env!("CARGO_BIN_EXE_cachekeeper");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every `.md` file under `docs/`, sorted.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut files);
    files.sort();
    files
}

/// GitHub's heading anchor: lowercase, every character but letters, digits, `-`, `_` and
/// spaces dropped, spaces turned into `-`.
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn parser(text: &str) -> Parser<'_> {
    Parser::new_ext(text, Options::ENABLE_TABLES)
}

/// A Markdown file's headings, in order: (level, plain text).
fn headings(text: &str) -> Vec<(HeadingLevel, String)> {
    let mut out = Vec::new();
    let mut current: Option<(HeadingLevel, String)> = None;
    for event in parser(text) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => current = Some((level, String::new())),
            Event::End(TagEnd::Heading(_)) => out.extend(current.take()),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, s)) = current.as_mut() {
                    s.push_str(&t);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some((_, s)) = current.as_mut() {
                    s.push(' ');
                }
            }
            _ => {}
        }
    }
    out
}

/// The anchors of a Markdown file: each heading's slug, a repeated one with `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, heading) in headings(text) {
        let base = slug(&heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Every link and image destination of a Markdown file.
fn links(text: &str) -> Vec<String> {
    parser(text)
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some(dest_url.to_string())
            }
            _ => None,
        })
        .collect()
}

/// `path` with `.` and `..` resolved lexically (None when it climbs above the filesystem root).
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// Why `dest` (a link found in `from`, or a path relative to the repository when `from` is
/// None) does not resolve, or None when it does. External links are not followed.
fn broken(
    from: &Path,
    dest: &str,
    cache: &mut HashMap<PathBuf, BTreeSet<String>>,
) -> Option<String> {
    if dest.contains("://") || dest.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match dest.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (dest, None),
    };
    let target = if path.is_empty() {
        from.to_path_buf()
    } else {
        match normalise(&from.parent().unwrap().join(path)) {
            Some(t) => t,
            None => return Some(format!("{dest}: climbs out of the filesystem")),
        }
    };
    if !target.starts_with(root()) {
        return Some(format!("{dest}: outside the repository"));
    }
    if !target.exists() {
        return Some(format!("{dest}: no such file {}", target.display()));
    }
    let anchor = anchor?;
    if target.extension().is_none_or(|e| e != "md") {
        return Some(format!(
            "{dest}: an anchor into a file that is not Markdown"
        ));
    }
    let known = cache
        .entry(target.clone())
        .or_insert_with(|| anchors(&std::fs::read_to_string(&target).unwrap()));
    (!known.contains(anchor))
        .then(|| format!("{dest}: no heading #{anchor} in {}", target.display()))
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(
        slug("Crashes (`kill -9`, power loss)"),
        "crashes-kill--9-power-loss"
    );
    assert_eq!(
        slug("`[images]` (overridable per route in `[routes.images]`)"),
        "images-overridable-per-route-in-routesimages"
    );
    assert_eq!(
        slug("The stack's floor (`examples/floor_proxy.rs`)"),
        "the-stacks-floor-examplesfloor_proxyrs"
    );
    assert_eq!(
        slug("Running N instances (a load balancer in front, one Redis)"),
        "running-n-instances-a-load-balancer-in-front-one-redis"
    );
    let text = "# A\n\n## Same\n\ntext\n\n### Same\n\n```\n# not a heading\n```\n\n## Same\n";
    let got: Vec<String> = anchors(text).into_iter().collect();
    assert_eq!(got, ["a", "same", "same-1", "same-2"]);
    // Links inside code spans and fenced blocks are not links.
    let text = "[a](x.md#y) `[b](z.md)`\n\n```\n[c](w.md)\n```\n![i](img.png)\n";
    assert_eq!(links(text), ["x.md#y", "img.png"]);
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut cache = HashMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for dest in links(&text) {
            checked += 1;
            if let Some(why) = broken(&file, &dest, &mut cache) {
                problems.push(format!(
                    "{}: {why}",
                    file.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(checked > 200, "only {checked} links found");
    assert!(
        problems.is_empty(),
        "{} broken:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The files whose comments may cite docs: sources, tests, scripts, benchmarks, the config.
fn source_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "fixtures" && name != "images_fixtures" && name != "__pycache__" {
                    walk(&path, out);
                }
            } else if ["rs", "py", "sh", "toml"]
                .iter()
                .any(|e| path.extension().is_some_and(|x| x == *e))
            {
                out.push(path);
            }
        }
    }
    let mut out = vec![root().join("proxy.toml"), root().join(".ci/run")];
    for dir in ["src", "crates", "tests", "scripts", "benches", "examples"] {
        walk(&root().join(dir), &mut out);
    }
    out.sort();
    out
}

/// Every `docs/….md` or `docs/….md#anchor` a source file or a Markdown file names as a path
/// from the repository's root (in a comment or a code span, not a link) resolves; no source
/// file cites a section of README.md (its content lives in docs/; the whole file may be named).
#[test]
fn source_comments_cite_docs_that_exist() {
    let mut cache = HashMap::new();
    let mut problems = Vec::new();
    let mut cited = 0;
    let me = Path::new(file!()).file_name().unwrap().to_owned();
    for file in source_files().into_iter().chain(markdown_files()) {
        let markdown = file.extension().is_some_and(|e| e == "md");
        if file.file_name() == Some(me.as_os_str()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let rel = file.strip_prefix(root()).unwrap().display().to_string();
        for (n, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("docs/") {
                // `docs/` at the start of a path, not inside another word (`mydocs/`).
                let before = rest[..at].chars().next_back();
                let tail = &rest[at..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "/_-.#".contains(c)))
                    .unwrap_or(tail.len());
                let cite = tail[..end].trim_end_matches(['.', '#']);
                rest = &tail[end.max(5)..];
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/') {
                    continue;
                }
                let path_part = cite.split('#').next().unwrap();
                if !path_part.ends_with(".md") {
                    continue;
                }
                cited += 1;
                let anchor_dest = format!("./{cite}");
                if let Some(why) = broken(&root().join("README.md"), &anchor_dest, &mut cache) {
                    problems.push(format!("{rel}:{}: {why}", n + 1));
                }
            }
            if !markdown && line.contains("README") {
                let whole_file = line.contains("`README.md`") && !line.contains("README.md#");
                let elsewhere = line.contains("fixtures/") || line.contains("docs/README.md");
                if !whole_file && !elsewhere {
                    problems.push(format!(
                        "{rel}:{}: cites README, not docs/: {}",
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(cited > 300, "only {cited} citations found");
    assert!(
        problems.is_empty(),
        "{} broken:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The keys one section of the config accepts, from the binary's own error for an unknown key
/// there (serde's `deny_unknown_fields`: "expected one of `a`, `b`, …" or "expected `a` or `b`").
fn accepted_keys(section: &str) -> BTreeSet<String> {
    const ROUTE: &str =
        "[[routes]]\nname = \"a\"\nprefix = \"/a\"\nupstream = \"http://127.0.0.1:9\"\n";
    let text = match section {
        "" => format!("zz_probe = 1\n{ROUTE}"),
        "routes" => format!("{ROUTE}zz_probe = 1\n"),
        "routes.images" => format!("{ROUTE}[routes.images]\nzz_probe = 1\n"),
        "routes.aws" => format!("{ROUTE}[routes.aws]\nzz_probe = 1\n"),
        "pricing" => format!(
            "{ROUTE}[[pricing]]\nmodel = \"*\"\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n\
             cache_read_per_mtok = 1.0\ncache_write_5m_per_mtok = 1.0\nzz_probe = 1\n"
        ),
        table => format!("[{table}]\nzz_probe = 1\n{ROUTE}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{section}: the probe key was accepted"
    );
    let expected = err
        .split("unknown field `zz_probe`, expected ")
        .nth(1)
        .unwrap_or_else(|| panic!("{section}: {err}"));
    let keys: BTreeSet<String> = expected
        .lines()
        .next()
        .unwrap()
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(!keys.is_empty(), "{section}: {err}");
    keys
}

/// `docs/reference/config.md`'s documented keys: per section (`""` for the file's top level,
/// `server`, `routes`, …), each key as often as a table row names it. A section is a `##`
/// heading that names a TOML table in a code span (`` ## `[server]` ``, `` ## `[[routes]]` ``);
/// it documents the top-level key of that name; its rows are the table rows whose first cell
/// is one code span (`` | `listen` | … ``). The `[[routes]]` row `` `[routes.images]` `` is
/// the route key `images` (and `` `[routes.aws]` `` the key `aws`); a `##` heading naming a
/// route's sub-table (`` ## `[routes.aws]` ``) is the section `routes.aws`, whose rows are
/// that table's keys.
fn documented_keys() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(root().join("docs/reference/config.md")).unwrap();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut section: Option<String> = None;
    let mut in_h2 = false;
    let mut h2_section: Option<String> = None;
    let mut in_head = false;
    let mut cell: Option<Vec<Event>> = None;
    let mut first_cell_of_row = false;
    for event in parser(&text) {
        match &event {
            Event::Start(Tag::Heading {
                level: HeadingLevel::H2,
                ..
            }) => {
                in_h2 = true;
                h2_section = None;
            }
            Event::End(TagEnd::Heading(HeadingLevel::H2)) => {
                in_h2 = false;
                section = h2_section.take();
                if let Some(s) = &section {
                    // A route's sub-table (`[routes.aws]`) is a key of `[[routes]]`, not of
                    // the file's top level.
                    if !s.contains('.') {
                        out.entry(String::new()).or_default().push(s.clone());
                    }
                    out.entry(s.clone()).or_default();
                }
            }
            Event::Code(code) if in_h2 && h2_section.is_none() => {
                let name = code.trim_start_matches('[').trim_end_matches(']');
                let sub_table = name
                    .strip_prefix("routes.")
                    .is_some_and(|t| !t.contains('.'));
                if code.starts_with('[') && !name.is_empty() && (!name.contains('.') || sub_table) {
                    h2_section = Some(name.to_owned());
                }
            }
            Event::Start(Tag::TableHead) => in_head = true,
            Event::End(TagEnd::TableHead) => in_head = false,
            Event::Start(Tag::TableRow) => first_cell_of_row = true,
            Event::Start(Tag::TableCell) if !in_head && first_cell_of_row => {
                cell = Some(Vec::new())
            }
            Event::End(TagEnd::TableCell) => {
                first_cell_of_row = false;
                if let (Some(events), Some(s)) = (cell.take(), &section) {
                    if let [Event::Code(key)] = events.as_slice() {
                        let sub_table = key
                            .strip_prefix("[routes.")
                            .and_then(|k| k.strip_suffix(']'))
                            .filter(|_| s == "routes");
                        let key = sub_table.map_or_else(|| key.to_string(), str::to_owned);
                        out.entry(s.clone()).or_default().push(key);
                    }
                }
            }
            _ => {
                if let Some(events) = cell.as_mut() {
                    events.push(event.clone());
                }
            }
        }
    }
    out
}

#[test]
fn config_reference_documents_every_accepted_key_once() {
    let documented = documented_keys();
    let mut problems = Vec::new();
    for section in [
        "",
        "server",
        "state",
        "images",
        "reasoning",
        "routes",
        "routes.aws",
        "pricing",
    ] {
        let accepted = accepted_keys(section);
        let rows = documented.get(section).cloned().unwrap_or_default();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for key in &rows {
            *counts.entry(key).or_default() += 1;
        }
        for key in &accepted {
            match counts.get(key.as_str()) {
                None => problems.push(format!("[{section}] {key}: not documented")),
                Some(1) => {}
                Some(n) => problems.push(format!("[{section}] {key}: documented {n} times")),
            }
        }
        for key in counts.keys().filter(|k| !accepted.contains(**k)) {
            problems.push(format!(
                "[{section}] {key}: documented, but the config refuses it"
            ));
        }
    }
    // `[routes.images]` takes the `[images]` keys (its row says so; the schema agrees).
    assert_eq!(accepted_keys("routes.images"), accepted_keys("images"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every key the shipped `proxy.toml` sets is a documented key of its section.
#[test]
fn shipped_proxy_toml_keys_are_documented() {
    let documented = documented_keys();
    let text = std::fs::read_to_string(root().join("proxy.toml")).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    let has = |section: &str, key: &str| {
        documented
            .get(section)
            .is_some_and(|k| k.iter().any(|d| d == key))
    };
    let mut missing = Vec::new();
    let mut seen = 0;
    for (name, value) in &doc {
        seen += 1;
        if !has("", name) {
            missing.push(name.clone());
        }
        let tables: Vec<&toml::Table> = match value {
            toml::Value::Table(t) => vec![t],
            toml::Value::Array(a) => a.iter().filter_map(toml::Value::as_table).collect(),
            _ => Vec::new(),
        };
        for table in tables {
            for (key, value) in table {
                seen += 1;
                if !has(name, key) {
                    missing.push(format!("{name}.{key}"));
                }
                if let (true, toml::Value::Table(inner)) =
                    (name == "routes" && key == "images", value)
                {
                    for key in inner.keys().filter(|k| !has("images", k)) {
                        missing.push(format!("routes.images.{key}"));
                    }
                }
            }
        }
    }
    assert!(seen > 40, "only {seen} keys in proxy.toml");
    assert!(
        missing.is_empty(),
        "proxy.toml sets undocumented keys: {missing:?}"
    );
}

/// Every key of the configuration reference's tables (`| `key` | … |` rows) is in the shipped
/// `proxy.toml`, set or commented out (`key =` / `# key =`), as the file's header promises
/// (the failing input of a fresh-user pass: `write_wait_ms`, `carriers`, `dry_run`,
/// `usage_in_streams` and `[[pricing]]` were missing). Moved from `src/config.rs`, where it
/// read README's "Configuration reference" before that moved to docs/reference/config.md.
#[test]
fn shipped_proxy_toml_names_every_documented_key() {
    let reference = std::fs::read_to_string(root().join("docs/reference/config.md")).unwrap();
    let toml = std::fs::read_to_string(root().join("proxy.toml")).unwrap();
    let mut keys = Vec::new();
    for line in reference.lines() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let key = &rest[..rest.find('`').unwrap()];
        if key.starts_with('[') {
            // A table (`[routes.images]`): its header, commented or not.
            assert!(toml.contains(key), "proxy.toml lacks {key}");
            continue;
        }
        keys.push(key);
    }
    assert!(keys.len() > 40, "{keys:?}");
    let named = |k: &str| {
        toml.lines().any(|l| {
            let l = l.trim_start().trim_start_matches('#').trim_start();
            l.strip_prefix(k)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
    };
    let missing: Vec<&str> = keys.into_iter().filter(|k| !named(k)).collect();
    assert!(missing.is_empty(), "proxy.toml lacks {missing:?}");
    assert!(toml.contains("[[pricing]]"));
}

/// README's minimal `proxy.toml` is a config the binary accepts, with the routes it shows.
#[test]
fn readme_minimal_config_loads() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut after_heading = false;
    let mut in_block = false;
    let mut block = String::new();
    for event in parser(&readme) {
        match event {
            Event::Start(Tag::Heading { .. }) => after_heading = false,
            Event::Text(t) if t.contains("A minimal ") => after_heading = true,
            Event::Start(Tag::CodeBlock(pulldown_cmark::CodeBlockKind::Fenced(lang)))
                if after_heading && lang.as_ref() == "toml" && block.is_empty() =>
            {
                in_block = true;
            }
            Event::Text(t) if in_block => block.push_str(&t),
            Event::End(TagEnd::CodeBlock) => in_block = false,
            _ => {}
        }
    }
    assert!(
        block.contains("[[routes]]"),
        "no toml block under README's minimal config heading"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, &block).unwrap();
    let out = Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for route in ["anthropic", "openai"] {
        assert!(stdout.contains(route), "{route} not in: {stdout}");
    }
}
