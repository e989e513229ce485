//! The docs checked against the tree, so that what a newcomer reads in the
//! READMEs and ARCHITECTURE.md stays true: every check reads the files as
//! they are, from the crate's directory, at test time (no server; a
//! fraction of a second).
//!
//! 1. **A folder README lists its folder.** Every `src/<folder>/README.md`
//!    has a file table (a Markdown table whose first header cell is
//!    `file`), and its cells name each `.rs` file of the folder as
//!    `` `name.rs` `` and each subfolder as `` `name/` `` (or as a path
//!    inside it, `` `name/file.rs` ``). Every `` `x.rs` `` or `` `x/` `` in
//!    the table's first column exists: in the folder, or, for
//!    `` `<folder>.rs` ``, as the folder's facade `src/<folder>.rs`; a
//!    leading `../` leaves the folder (`` `../replay.rs` `` in
//!    `src/audit/` is `src/replay.rs`).
//! 2. **A path the docs name exists.** In README.md, ARCHITECTURE.md,
//!    benches/README.md, fuzz/README.md, solver/README.md and the folder
//!    READMEs, every code span (backticks outside fenced blocks; a span may
//!    wrap lines) whose text starts with `src/`, `tests/`, `benches/`,
//!    `policies/`, `schemas/`, `fuzz/`, `solver/` or `.ci/`, or is a
//!    Markdown file's name without a folder (`` `DEPENDENCIES.md` ``, read
//!    from the crate's root), names a path that exists. What is read as the
//!    path: the span's first word (a command line names its script,
//!    `` `benches/x.sh [rows]` ``), less a trailing `:line`, `:line-line` or
//!    `#anchor`; a trailing `/` asks for a folder. A `*` or a
//!    `<placeholder>` matches any part of one path segment, and such a
//!    pattern must match at least one path (`` `policies/*.cedar` ``). A
//!    path inside a folder that a `.gitignore` names from its own folder
//!    (`/artifacts` in `fuzz/.gitignore`) is something a build or a run
//!    writes, not part of the tree, and is not checked.
//! 3. **An error code the docs name is defined.** Every JSON-RPC error
//!    code (`-32` and three digits) that README.md, ARCHITECTURE.md,
//!    cedargate.example.toml or a folder README names is the value of a
//!    constant somewhere in `src/`: a line `const NAME: i64 = -32xxx;`
//!    (with any `pub`), as `src/mcp/jsonrpc.rs` and the bridges' failure
//!    codes are written.
//! 4. **ARCHITECTURE.md stays a map**: at most 300 lines, none longer than
//!    100 characters.
//!
//! A failure lists every offending file and line. The checks work on a
//! [`Tree`], so `the_checks_see_what_they_should` runs them on made-up
//! files too.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The documents whose named paths are checked (with the folder READMEs).
const PATH_DOCS: [&str; 5] = [
    "README.md",
    "ARCHITECTURE.md",
    "benches/README.md",
    "fuzz/README.md",
    "solver/README.md",
];

/// The documents whose JSON-RPC error codes are checked (with the folder
/// READMEs).
const CODE_DOCS: [&str; 3] = ["README.md", "ARCHITECTURE.md", "cedargate.example.toml"];

/// How a checked path starts.
const PATH_PREFIXES: [&str; 8] = [
    "src/",
    "tests/",
    "benches/",
    "policies/",
    "schemas/",
    "fuzz/",
    "solver/",
    ".ci/",
];

/// ARCHITECTURE.md's bounds.
const ARCHITECTURE_MAX_LINES: usize = 300;
const ARCHITECTURE_MAX_CHARS: usize = 100;

#[test]
fn folder_readmes_list_their_folders() {
    let tree = Disk::crate_root();
    let folders = readme_folders(&tree);
    assert!(
        folders.len() >= 10,
        "expected the ten folder READMEs, found {folders:?}"
    );
    let problems: String = folders.iter().map(|f| folder_readme(&tree, f)).collect();
    assert!(
        problems.is_empty(),
        "folder READMEs out of step with their folders (give each file and \
         subfolder a row, and a row only to what exists):\n{problems}"
    );
}

#[test]
fn paths_the_docs_name_exist() {
    let tree = Disk::crate_root();
    let mut checked = 0;
    let mut problems = String::new();
    for doc in path_docs(&tree) {
        let (n, found) = named_paths(&tree, &doc);
        checked += n;
        problems.push_str(&found);
    }
    assert!(
        checked > 100,
        "only {checked} named paths found: the check reads nothing"
    );
    assert!(
        problems.is_empty(),
        "paths named in the docs that are not in the tree:\n{problems}"
    );
}

#[test]
fn error_codes_the_docs_name_are_defined() {
    let tree = Disk::crate_root();
    let defined = defined_codes(&tree);
    assert!(
        defined.len() >= 10,
        "only {defined:?} found as constants in src/: the check reads nothing"
    );
    let mut docs: Vec<String> = CODE_DOCS.iter().map(ToString::to_string).collect();
    docs.extend(readme_folders(&tree).iter().map(|f| readme_of(f)));
    let problems = undefined_codes(&tree, &docs, &defined);
    assert!(
        problems.is_empty(),
        "JSON-RPC error codes named in the docs that no constant in src/ \
         holds (defined: {defined:?}):\n{problems}"
    );
}

#[test]
fn architecture_stays_a_map() {
    let tree = Disk::crate_root();
    let text = tree.read("ARCHITECTURE.md").expect("ARCHITECTURE.md");
    let problems = architecture_bounds(&text);
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md: at most {ARCHITECTURE_MAX_LINES} lines of at most \
         {ARCHITECTURE_MAX_CHARS} characters:\n{problems}"
    );
}

/// The checks themselves, on a small made-up tree: a file or subfolder
/// missing from a table, a table row naming nothing, a README without a
/// table; paths with a line, an anchor, a glob, a command line, a
/// placeholder under an ignored folder, a fenced block, a wrapped span and
/// a double-backtick span; codes defined, commented out and missing; a
/// map too long and too wide.
#[test]
fn the_checks_see_what_they_should() {
    let tree = Fake::new(&[
        ("src/a.rs", "pub mod one;\n"),
        (
            "src/a/one.rs",
            "pub const OK: i64 = -32001;\n    pub(crate) const ALSO: i64 = -32002;\n\
             // const GONE: i64 = -32050;\nlet x = -32060;\n",
        ),
        ("src/a/two.rs", ""),
        ("src/a/sub/x.rs", ""),
        ("src/a/shown/y.rs", ""),
        (
            "src/a/README.md",
            "# a\n\nProse names `two.rs`, which is not enough.\n\n\
             | File | job |\n|---|---|\n| `a.rs` | facade |\n| `one.rs` | codes \\| more |\n\
             | `gone.rs` + `../b.rs` | gone, and a file of `src/` |\n\
             | `shown/y.rs` | a subfolder by a path inside it |\n| `old/` | gone |\n\n\
             After the table: `sub/`.\n",
        ),
        ("src/b.rs", ""),
        ("src/c/z.rs", ""),
        ("src/c/README.md", "# c\n\nNo table, -32001 and -32060.\n"),
        ("benches/run.sh", ""),
        ("fuzz/.gitignore", "/artifacts\n"),
        ("DEPENDENCIES.md", ""),
        (
            "README.md",
            "`src/a/one.rs:12`, `src/a/two.rs:3-9`, `src/a.rs#facade`, `src/a/*.rs`,\n\
             `src/a/*.py`, `tests/gone.rs`, `benches/run.sh [n]`, `fuzz/artifacts/<t>/`,\n\
             `src/a/`, `src/a/one.rs/`, `src/<x>/README.md`, `DEPENDENCIES.md`, `DESIGN.md`,\n\
             `src/a/sub\n/x.rs`, ``src/b.rs``, `cargo test`, `docs/x.md`, `tests/later.rs`.\n\n\
             ```sh\nbash `src/fenced.rs`\n```\n\nCodes -32001, -32050 and -320011.\n",
        ),
    ]);
    assert_eq!(readme_folders(&tree), ["a", "c"]);
    assert_eq!(
        folder_readme(&tree, "a"),
        "  src/a/README.md:9: `gone.rs` names nothing in src/a/\n\
         \x20 src/a/README.md:11: `old/` names nothing in src/a/\n\
         \x20 src/a/README.md: `sub/` is not in the file table\n\
         \x20 src/a/README.md: `two.rs` is not in the file table\n"
    );
    assert_eq!(
        folder_readme(&tree, "c"),
        "  src/c/README.md: no file table (a table whose first header cell is `file`)\n"
    );
    let (checked, problems) = named_paths(&tree, "README.md");
    assert_eq!(
        problems,
        "  README.md:2: `src/a/*.py` names nothing\n\
         \x20 README.md:2: `tests/gone.rs` names nothing\n\
         \x20 README.md:3: `src/a/one.rs/` names nothing\n\
         \x20 README.md:3: `DESIGN.md` names nothing\n\
         \x20 README.md:5: `tests/later.rs` names nothing\n"
    );
    assert_eq!(checked, 16);
    let defined = defined_codes(&tree);
    assert_eq!(defined, BTreeSet::from([-32002, -32001]));
    let docs = ["README.md".to_string(), "src/c/README.md".to_string()];
    assert_eq!(
        undefined_codes(&tree, &docs, &defined),
        "  README.md:11: -32050\n  src/c/README.md:3: -32060\n"
    );
    let map = format!("{}\n{}", "x".repeat(101), "line\n".repeat(300));
    assert_eq!(
        architecture_bounds(&map),
        "  301 lines\n  line 1: 101 characters\n"
    );
    assert_eq!(architecture_bounds(&"é".repeat(100)), "");
}

// ---------------------------------------------------------------------------
// Check 1: folder READMEs.

/// The folders of `src/` that have a README, sorted.
fn readme_folders(tree: &dyn Tree) -> Vec<String> {
    let mut folders: Vec<String> = tree
        .list("src")
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, is_dir)| *is_dir && tree.is_file(&readme_of(name)))
        .map(|(name, _)| name)
        .collect();
    folders.sort();
    folders
}

/// `src/<folder>/README.md`.
fn readme_of(folder: &str) -> String {
    format!("src/{folder}/README.md")
}

/// What is wrong with `src/<folder>/README.md`'s file table, one problem
/// a line: first-column names that name nothing, then files and
/// subfolders the table does not name.
fn folder_readme(tree: &dyn Tree, folder: &str) -> String {
    let readme = readme_of(folder);
    let text = tree.read(&readme).unwrap_or_default();
    let Some(rows) = file_table(&text) else {
        return format!("  {readme}: no file table (a table whose first header cell is `file`)\n");
    };
    let mut problems = String::new();
    let mut named = BTreeSet::new();
    for (line, cells) in &rows {
        for (column, cell) in cells.iter().enumerate() {
            for (_, span) in code_spans(cell) {
                let listed = span.ends_with(".rs") || span.ends_with('/');
                if column == 0 && listed && !names_in_folder(tree, folder, &span) {
                    writeln!(
                        problems,
                        "  {readme}:{line}: `{span}` names nothing in src/{folder}/"
                    )
                    .unwrap();
                }
                named.insert(span);
            }
        }
    }
    for (name, is_dir) in tree.list(&format!("src/{folder}")).unwrap_or_default() {
        let shown = if is_dir {
            let inside = format!("{name}/");
            if named.iter().any(|n| n.starts_with(&inside)) {
                continue;
            }
            inside
        } else if name.ends_with(".rs") && !named.contains(&name) {
            name
        } else {
            continue;
        };
        writeln!(problems, "  {readme}: `{shown}` is not in the file table").unwrap();
    }
    problems
}

/// Whether a file table's first-column `name` (`x.rs` or `x/`) exists in
/// `src/<folder>/`, or is the folder's facade.
fn names_in_folder(tree: &dyn Tree, folder: &str, name: &str) -> bool {
    if name == format!("{folder}.rs") {
        return tree.is_file(&format!("src/{name}"));
    }
    let Some(path) = normalized(&format!("src/{folder}/{name}")) else {
        return false;
    };
    match path.strip_suffix('/') {
        Some(dir) => tree.list(dir).is_some(),
        None => tree.is_file(&path),
    }
}

/// The rows of a README's file table, each with its line and its cells:
/// the rows after the first table header whose first cell is `file`.
fn file_table(text: &str) -> Option<Vec<(usize, Vec<String>)>> {
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| {
        l.trim_start().starts_with('|')
            && cells(l)
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case("file"))
    })?;
    let rows = lines
        .iter()
        .enumerate()
        .skip(header + 2)
        .take_while(|(_, l)| l.trim_start().starts_with('|'))
        .map(|(i, l)| (i + 1, cells(l)))
        .collect();
    Some(rows)
}

/// The cells of a table row, trimmed; `\|` does not split.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = row.strip_suffix('|').unwrap_or(row);
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in row.chars() {
        if c == '|' && !escaped {
            cells.push(String::new());
        } else if let Some(cell) = cells.last_mut() {
            cell.push(c);
        }
        escaped = c == '\\';
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

// ---------------------------------------------------------------------------
// Check 2: named paths.

/// The documents whose named paths are checked.
fn path_docs(tree: &dyn Tree) -> Vec<String> {
    let mut docs: Vec<String> = PATH_DOCS.iter().map(ToString::to_string).collect();
    docs.extend(readme_folders(tree).iter().map(|f| readme_of(f)));
    docs
}

/// How many paths `doc` names, and those that name nothing in the tree,
/// one a line.
fn named_paths(tree: &dyn Tree, doc: &str) -> (usize, String) {
    let text = tree.read(doc).unwrap_or_default();
    let mut checked = 0;
    let mut problems = String::new();
    for (line, span) in code_spans(&text) {
        let Some(path) = named_path(&span) else {
            continue;
        };
        checked += 1;
        if !written_by_a_run(tree, path) && matches(tree, path).is_empty() {
            writeln!(problems, "  {doc}:{line}: `{path}` names nothing").unwrap();
        }
    }
    (checked, problems)
}

/// The path a code span names, if it names one of the checked kind: its
/// first word, less a trailing `:line`, `:line-line` or `#anchor`.
fn named_path(span: &str) -> Option<&str> {
    let word = span.split_whitespace().next()?;
    let word = word.split_once('#').map_or(word, |(path, _)| path);
    let word = match word.rsplit_once(':') {
        Some((path, line)) if line.chars().all(|c| c.is_ascii_digit() || c == '-') => path,
        _ => word,
    };
    let checked = PATH_PREFIXES.iter().any(|p| word.starts_with(p))
        || (word.ends_with(".md") && !word.contains('/'));
    checked.then_some(word)
}

/// Whether `path` lies in a folder that the `.gitignore` of a folder above
/// it names from there (`/artifacts` in `fuzz/.gitignore`).
fn written_by_a_run(tree: &dyn Tree, path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    (0..segments.len()).any(|i| {
        let dir = segments[..i].join("/");
        let ignore = if dir.is_empty() {
            ".gitignore".to_string()
        } else {
            format!("{dir}/.gitignore")
        };
        let name = segments[i];
        tree.read(&ignore).is_some_and(|text| {
            text.lines()
                .map(str::trim)
                .any(|l| l.strip_prefix('/').map(|l| l.trim_end_matches('/')) == Some(name))
        })
    })
}

/// The paths of the tree `pattern` matches: segment by segment, `*` and
/// `<…>` matching any part of one segment; a trailing `/` matches folders
/// only.
fn matches(tree: &dyn Tree, pattern: &str) -> Vec<String> {
    let Some(pattern) = normalized(pattern) else {
        return Vec::new();
    };
    let folder_only = pattern.ends_with('/');
    let segments: Vec<String> = pattern
        .split('/')
        .filter(|s| !s.is_empty())
        .map(placeholders_as_stars)
        .collect();
    let mut found = vec![String::new()];
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let mut next = Vec::new();
        for dir in &found {
            for (name, is_dir) in tree.list(dir).unwrap_or_default() {
                let kind_ok = is_dir || (last && !folder_only);
                if kind_ok && wildcard(segment.as_bytes(), name.as_bytes()) {
                    next.push(if dir.is_empty() {
                        name
                    } else {
                        format!("{dir}/{name}")
                    });
                }
            }
        }
        found = next;
    }
    found
}

/// `segment` with each `<placeholder>` written as `*`.
fn placeholders_as_stars(segment: &str) -> String {
    let mut out = String::new();
    let mut rest = segment;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push('*');
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Whether `name` matches `pattern`, whose `*` matches any run of bytes.
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| wildcard(rest, &name[i..])),
        Some((c, rest)) => name.first() == Some(c) && wildcard(rest, &name[1..]),
    }
}

/// `path` with `.` and `x/..` segments resolved (a trailing `/` kept);
/// `None` when it climbs above the root.
fn normalized(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for segment in path.split('/').filter(|s| !s.is_empty() && *s != ".") {
        if segment == ".." {
            parts.pop()?;
        } else {
            parts.push(segment);
        }
    }
    let mut out = parts.join("/");
    if path.ends_with('/') {
        out.push('/');
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Check 3: error codes.

/// Every JSON-RPC error code a constant of `src/` holds.
fn defined_codes(tree: &dyn Tree) -> BTreeSet<i64> {
    let mut defined = BTreeSet::new();
    for file in rs_files(tree, "src") {
        for line in tree.read(&file).unwrap_or_default().lines() {
            if let Some(code) = constant_code(line) {
                defined.insert(code);
            }
        }
    }
    defined
}

/// The code a line `[pub…] const NAME: TYPE = -32xxx;` defines.
fn constant_code(line: &str) -> Option<i64> {
    let line = line.trim_start();
    let line = match line.strip_prefix("pub") {
        Some(rest) if rest.starts_with('(') => rest.split_once(')')?.1.trim_start(),
        Some(rest) => rest.trim_start(),
        None => line,
    };
    let (_, value) = line.strip_prefix("const ")?.split_once('=')?;
    let code: i64 = value.trim().strip_suffix(';')?.trim().parse().ok()?;
    is_code(code).then_some(code)
}

/// Whether `n` is in the JSON-RPC server error range the docs name.
fn is_code(n: i64) -> bool {
    (-32999..=-32000).contains(&n)
}

/// Each code `docs` name that is not `defined`, with its line.
fn undefined_codes(tree: &dyn Tree, docs: &[String], defined: &BTreeSet<i64>) -> String {
    let mut problems = String::new();
    for doc in docs {
        let text = tree.read(doc).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            for code in codes_in(line) {
                if !defined.contains(&code) {
                    writeln!(problems, "  {doc}:{}: {code}", i + 1).unwrap();
                }
            }
        }
    }
    problems
}

/// The codes written in `line`: `-32` and three more digits, with no digit
/// either side.
fn codes_in(line: &str) -> Vec<i64> {
    let b = line.as_bytes();
    let mut codes = Vec::new();
    for (i, _) in line.match_indices("-32") {
        let digits = &b[i + 1..];
        let run = digits.iter().take_while(|c| c.is_ascii_digit()).count();
        let digit_before = i > 0 && b[i - 1].is_ascii_digit();
        if run == 5 && !digit_before {
            let text = &line[i..i + 6];
            codes.extend(text.parse::<i64>().ok().filter(|c| is_code(*c)));
        }
    }
    codes
}

// ---------------------------------------------------------------------------
// Check 4: ARCHITECTURE.md's bounds.

/// How `text` exceeds ARCHITECTURE.md's bounds, one problem a line.
fn architecture_bounds(text: &str) -> String {
    let mut problems = String::new();
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() > ARCHITECTURE_MAX_LINES {
        writeln!(problems, "  {} lines", lines.len()).unwrap();
    }
    for (i, line) in lines.iter().enumerate() {
        let chars = line.chars().count();
        if chars > ARCHITECTURE_MAX_CHARS {
            writeln!(problems, "  line {}: {chars} characters", i + 1).unwrap();
        }
    }
    problems
}

// ---------------------------------------------------------------------------
// Markdown.

/// The code spans of a Markdown text, each with the line it starts on: the
/// text between a run of backticks and the next run of the same length in
/// the same paragraph, outside fenced code blocks; a line break inside a
/// span reads as a space, and the span is trimmed.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~");
        if fence {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
        }
        prose.push('\n');
    }
    let b = prose.as_bytes();
    let run_at = |i: usize| b[i..].iter().take_while(|c| **c == b'`').count();
    let mut spans = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'`' => {
                let n = run_at(i);
                let mut j = i + n;
                let mut close = None;
                while j < b.len() {
                    if b[j] == b'`' {
                        let m = run_at(j);
                        if m == n {
                            close = Some(j);
                            break;
                        }
                        j += m;
                    } else {
                        j += 1;
                    }
                }
                let content = close.map(|j| &prose[i + n..j]);
                match content.filter(|c| !c.contains("\n\n")) {
                    Some(content) => {
                        let text = content.replace('\n', " ").trim().to_string();
                        spans.push((line, text));
                        line += content.matches('\n').count();
                        i += 2 * n + content.len();
                    }
                    None => i += n,
                }
            }
            _ => i += 1,
        }
    }
    spans
}

// ---------------------------------------------------------------------------
// Trees: the crate on disk, or made-up files.

/// A tree of files, by paths relative to its root with `/` separators.
trait Tree {
    /// The entries of folder `dir` (`""`: the root), each with whether it
    /// is a folder, sorted by name; `None` when `dir` is not a folder.
    fn list(&self, dir: &str) -> Option<Vec<(String, bool)>>;

    /// The text of `file`, when it is a readable file.
    fn read(&self, file: &str) -> Option<String>;

    /// Whether `path` is a file.
    fn is_file(&self, path: &str) -> bool {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        self.list(dir)
            .is_some_and(|entries| entries.iter().any(|(n, is_dir)| n == name && !is_dir))
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rs_files(tree: &dyn Tree, dir: &str) -> Vec<String> {
    let mut files = Vec::new();
    for (name, is_dir) in tree.list(dir).unwrap_or_default() {
        let path = format!("{dir}/{name}");
        if is_dir {
            files.extend(rs_files(tree, &path));
        } else if name.ends_with(".rs") {
            files.push(path);
        }
    }
    files
}

/// The crate's directory.
struct Disk {
    root: PathBuf,
}

impl Disk {
    fn crate_root() -> Disk {
        Disk {
            root: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        }
    }
}

impl Tree for Disk {
    fn list(&self, dir: &str) -> Option<Vec<(String, bool)>> {
        let mut entries: Vec<(String, bool)> = std::fs::read_dir(self.root.join(dir))
            .ok()?
            .filter_map(Result::ok)
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name, e.path().is_dir())
            })
            .collect();
        entries.sort();
        Some(entries)
    }

    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(file)).ok()
    }
}

/// Made-up files; their folders are the prefixes of their paths.
struct Fake {
    files: BTreeMap<String, String>,
}

impl Fake {
    fn new(files: &[(&str, &str)]) -> Fake {
        Fake {
            files: files
                .iter()
                .map(|(path, text)| ((*path).to_string(), (*text).to_string()))
                .collect(),
        }
    }
}

impl Tree for Fake {
    fn list(&self, dir: &str) -> Option<Vec<(String, bool)>> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let entries: BTreeMap<String, bool> = self
            .files
            .keys()
            .filter_map(|path| path.strip_prefix(&prefix))
            .map(|rest| match rest.split_once('/') {
                Some((folder, _)) => (folder.to_string(), true),
                None => (rest.to_string(), false),
            })
            .collect();
        (!entries.is_empty()).then(|| entries.into_iter().collect())
    }

    fn read(&self, file: &str) -> Option<String> {
        self.files.get(file).cloned()
    }
}
