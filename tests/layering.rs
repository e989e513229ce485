//! The layering rules of `src/` (ARCHITECTURE.md, "Layering rules"), checked
//! on the source text so that a broken rule fails `cargo test` naming the
//! file and line that breaks it:
//!
//! 1. no import cycle between files: a file never imports a file that
//!    imports it;
//! 2. only `src/policy/` (with its facade file `src/policy.rs`) names
//!    `cedar_policy` or the Cedar crates beside it (`cedar_policy_core`,
//!    `cedar_policy_formatter`, `cedar_policy_symcc`);
//! 3. only `src/store/` (with `src/store.rs`) holds SQL text: a string
//!    literal starting with `SELECT `, `INSERT `, `UPDATE `, `DELETE `,
//!    `CREATE ` or `WITH `.
//!
//! What counts as file A importing file B (module paths follow file paths:
//! `src/a2a/admin.rs` is `a2a::admin`, `src/mcp.rs` is `mcp`):
//! - a path `crate::x::y::Z`: of its leading lowercase segments (`x::y`),
//!   the longest run that names a module with a file (`x::y`, else `x`);
//! - a path `super::x…` (or `super::super::x…`) that goes on with a
//!   lowercase name, resolved the same way from A's parent. A child that
//!   names only its parent's types or constants (`use super::StoreError`)
//!   does not import it: a folder's facade file is where the folder's
//!   shared vocabulary lives;
//! - each item of a grouped `use crate::…::{…}` or `use super::{…}`, read
//!   as the paths above;
//! - for a child B that A declares with `mod b;`, any `b::…` (or
//!   `self::b::…`) path in A, `pub use b::…` included. A parent that only
//!   declares `mod b;` does not import it;
//! - an intra-doc link `` [`crate::…`] ``, `` [`super::…`] `` or
//!   `` [`self::…`] `` in a doc comment, read as the paths above: a doc
//!   that links a module leans on it as much as code that names it.
//!
//! Comments (but those links) and the contents of string and char literals
//! are blanked before anything is read; for rule 1, `#[cfg(test)] mod … { … }` blocks are
//! skipped too (a unit test may reach anywhere). `src/main.rs` is the
//! binary's own crate: rules 2 and 3 read it, rule 1 leaves it out.
//!
//! A failure of rule 1 lists each group of files that import one another in
//! a circle, with the first line of every import inside the group; rules 2
//! and 3 list every offending line. The whole file reads `src/` once and
//! takes a fraction of a second.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The Cedar crates only `src/policy/` may name.
const CEDAR_CRATES: [&str; 4] = [
    "cedar_policy",
    "cedar_policy_core",
    "cedar_policy_formatter",
    "cedar_policy_symcc",
];

/// What a string literal holding SQL starts with (case-sensitive).
const SQL_KEYWORDS: [&str; 6] = [
    "SELECT ", "INSERT ", "UPDATE ", "DELETE ", "CREATE ", "WITH ",
];

#[test]
fn no_import_cycle_between_files() {
    let graph = ImportGraph::build(sources());
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "import cycles between files (a file imports a file that imports it); \
         each group below imports itself in a circle, every import shown with \
         its first line:\n{}",
        graph.describe(&cycles)
    );
}

#[test]
fn only_policy_names_cedar_policy() {
    let found = cedar_policy_outside_policy(sources());
    assert!(
        found.is_empty(),
        "`cedar_policy` named outside src/policy/ (use the policy facade):\n{found}"
    );
}

#[test]
fn only_store_holds_sql() {
    let found = sql_outside_store(sources());
    assert!(
        found.is_empty(),
        "SQL text outside src/store/ (give the statement a store function):\n{found}"
    );
}

/// The checks themselves, on small made-up files: each kind of import is
/// seen (a doc's link to a module too) and comments, strings and unit tests
/// are not; SQL and
/// `cedar_policy` are found where they are written, and only there.
#[test]
fn the_checks_see_what_they_should() {
    let files = [
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod d;\n"),
        (
            "a.rs",
            "mod child;\npub use child::Thing;\n// crate::c::y\n\
             const S: &str = \"crate::c::y\";\nfn f() { crate::b::go(); }\n\
             #[cfg(test)]\nmod tests {\n    use crate::d::Z;\n}\n",
        ),
        (
            "a/child.rs",
            "use super::{Thing2, helper};\nuse super::Other;\n",
        ),
        ("b.rs", "use crate::{\n    a::{self, X},\n    c,\n};\n"),
        (
            "c.rs",
            "fn y<'a>(s: &'a str) {\n    let _ = r#\"SELECT 1\"#;\n    let _ = ['\"', '\\''];\n    let _ = \"with x\";\n}\n\
             /// [`crate::d::Z`], not [`Z`] nor [`crate::b` here].\nfn z() {}\n",
        ),
        (
            "d.rs",
            "/* a /* nested */ cedar_policy */ use cedar_policy::EntityUid;\n",
        ),
        ("store/q.rs", "const Q: &str = \"DELETE FROM t\";\n"),
        (
            "e.rs",
            "fn f() {}\nuse cedar_policy_symcc::CedarSymCompiler;\n",
        ),
        ("policy/p.rs", "use cedar_policy_symcc::Env;\n"),
    ];
    let sources: Vec<Source> = files
        .iter()
        .map(|(rel, text)| Source::new(rel, text.as_bytes()))
        .collect();
    let graph = ImportGraph::build(&sources);
    let edges: Vec<String> = graph
        .edges
        .iter()
        .flat_map(|(from, to)| {
            to.iter()
                .map(move |(to, line)| format!("{from}:{line}->{to}"))
        })
        .collect();
    assert_eq!(
        edges,
        [
            "a:2->a::child",
            "a:5->b",
            "a::child:1->a",
            "b:2->a",
            "b:3->c",
            "c:6->d"
        ]
    );
    assert_eq!(graph.cycles(), [["a", "a::child", "b"]]);
    assert_eq!(sql_outside_store(&sources), "  src/c.rs:2: \"SELECT 1…\"\n");
    assert_eq!(
        cedar_policy_outside_policy(&sources),
        "  src/d.rs:1\n  src/e.rs:2\n"
    );
}

/// Every line outside `src/policy/` that names a Cedar crate
/// ([`CEDAR_CRATES`]), one per line of the answer.
fn cedar_policy_outside_policy(sources: &[Source]) -> String {
    let mut found = String::new();
    for source in sources.iter().filter(|s| !s.is_in("policy")) {
        let lines: BTreeSet<usize> = CEDAR_CRATES
            .iter()
            .flat_map(|word| word_lines(&source.lexed.code, word))
            .collect();
        for line in lines {
            writeln!(found, "  src/{}:{line}", source.rel).unwrap();
        }
    }
    found
}

/// Every string literal outside `src/store/` that starts with SQL, with its
/// line and its first words.
fn sql_outside_store(sources: &[Source]) -> String {
    let mut found = String::new();
    for source in sources.iter().filter(|s| !s.is_in("store")) {
        for (line, text) in &source.lexed.literals {
            let text = text.trim_start();
            if SQL_KEYWORDS.iter().any(|k| text.starts_with(k)) {
                let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
                let shown: String = words.chars().take(60).collect();
                writeln!(found, "  src/{}:{line}: \"{shown}…\"", source.rel).unwrap();
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------
// Source files.

/// One `.rs` file under `src/`.
struct Source {
    /// Path relative to `src/`, with `/` separators (`a2a/admin.rs`).
    rel: String,
    /// Module path (`a2a::admin`; empty for `lib.rs`); `None` for `main.rs`.
    module: Option<String>,
    /// The file taken apart.
    lexed: Lexed,
}

impl Source {
    /// A file at `rel` (relative to `src/`) with the text `text`.
    fn new(rel: &str, text: &[u8]) -> Source {
        Source {
            rel: rel.to_string(),
            module: module_of(rel),
            lexed: lex(text),
        }
    }

    /// Whether the file belongs to the top-level module `owner`: its file
    /// `owner.rs` or anything in its folder.
    fn is_in(&self, owner: &str) -> bool {
        self.rel == format!("{owner}.rs") || self.rel.starts_with(&format!("{owner}/"))
    }
}

/// Every `.rs` file under the crate's `src/`, read and lexed once for all
/// the tests of this file, sorted by path.
fn sources() -> &'static [Source] {
    static SOURCES: OnceLock<Vec<Source>> = OnceLock::new();
    SOURCES.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        collect_rs_files(&src, &mut files).expect("src/ is readable");
        files.sort();
        files
            .iter()
            .map(|path| {
                let rel = path
                    .strip_prefix(&src)
                    .expect("under src/")
                    .to_string_lossy()
                    .replace('\\', "/");
                let text = std::fs::read(path).expect("a readable source file");
                Source::new(&rel, &text)
            })
            .collect()
    })
}

/// Appends every `.rs` file under `dir` (recursively) to `out`.
fn collect_rs_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rs_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The module path of a file relative to `src/`: `a2a/admin.rs` is
/// `a2a::admin`, `x/mod.rs` is `x`, `lib.rs` is the crate root (empty);
/// `main.rs` belongs to another crate (`None`).
fn module_of(rel: &str) -> Option<String> {
    if rel == "main.rs" {
        return None;
    }
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<&str> = stem.split('/').collect();
    if matches!(parts.last(), Some(&"mod" | &"lib")) {
        parts.pop();
    }
    Some(parts.join("::"))
}

/// The lines on which `word` occurs in `code` as a whole identifier.
fn word_lines(code: &[u8], word: &str) -> Vec<usize> {
    let word = word.as_bytes();
    let mut lines = Vec::new();
    let mut line = 1;
    for i in 0..code.len() {
        if code[i] == b'\n' {
            line += 1;
        }
        let before_ok = i == 0 || !is_ident(code[i - 1]);
        let after_ok = code.get(i + word.len()).is_none_or(|c| !is_ident(*c));
        if before_ok && after_ok && code[i..].starts_with(word) {
            lines.push(line);
        }
    }
    lines
}

// ---------------------------------------------------------------------------
// Lexing: comments, literals, test modules. The lexer works on bytes: every
// delimiter it looks for is ASCII, and the bytes of a multi-byte character
// are never ASCII, so they cannot be mistaken for one.

/// A source file with comments and literals taken apart.
struct Lexed {
    /// The text with comments and the contents of string and char literals
    /// replaced by spaces; newlines are kept, so line numbers still match.
    code: Vec<u8>,
    /// `code` with the paths of intra-doc links (`` [`super::x`] ``) kept,
    /// and `#[cfg(test)] mod … { … }` blocks blanked: what rule 1 reads.
    code_without_tests: Vec<u8>,
    /// Every string literal's contents (escapes as written) and its line.
    literals: Vec<(usize, String)>,
}

/// What the lexer found at a position.
enum Token {
    /// One byte of code, kept.
    Code,
    /// A comment or a char literal, blanked.
    Blank,
    /// A string literal (its contents), blanked.
    Literal(String),
}

/// Whether `c` can be part of an identifier.
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Takes a Rust source text apart (see [`Lexed`]).
fn lex(src: &[u8]) -> Lexed {
    let mut code = Vec::with_capacity(src.len());
    let mut linked = Vec::with_capacity(src.len());
    let mut literals = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < src.len() {
        let (end, token) = token_at(src, i);
        let span = &src[i..end];
        match token {
            Token::Code => code.push(src[i]),
            Token::Blank => blank_into(&mut code, span),
            Token::Literal(text) => {
                literals.push((line, text));
                blank_into(&mut code, span);
            }
        }
        linked.extend_from_slice(&code[linked.len()..]);
        if span.starts_with(b"///") || span.starts_with(b"//!") {
            keep_doc_links(span, &mut linked[i..end]);
        }
        line += span.iter().filter(|c| **c == b'\n').count();
        i = end;
    }
    let code_without_tests = blank_test_modules(&linked);
    Lexed {
        code,
        code_without_tests,
        literals,
    }
}

/// Writes back into `blanked` (a doc comment's blanked span) the path of
/// each intra-doc link `` [`path`] `` of `doc` that starts at `crate::`,
/// `super::` or `self::`: a doc that links a module names it, so for rule 1
/// it imports it.
fn keep_doc_links(doc: &[u8], blanked: &mut [u8]) {
    let mut from = 0;
    while let Some(open) = find(doc, b"[`", from) {
        let start = open + 2;
        let Some(close) = find(doc, b"`]", start) else {
            return;
        };
        let path = &doc[start..close];
        let is_path = path.iter().all(|c| is_ident(*c) || *c == b':');
        if is_path
            && [&b"crate::"[..], b"super::", b"self::"]
                .iter()
                .any(|p| path.starts_with(p))
        {
            blanked[start..close].copy_from_slice(path);
        }
        from = close + 2;
    }
}

/// Appends `span` to `out` as spaces, keeping its newlines.
fn blank_into(out: &mut Vec<u8>, span: &[u8]) {
    out.extend(span.iter().map(|c| if *c == b'\n' { b'\n' } else { b' ' }));
}

/// The token starting at `i` and the index just past it.
fn token_at(src: &[u8], i: usize) -> (usize, Token) {
    let c = src[i];
    let next = src.get(i + 1).copied();
    let ident_before = i > 0 && is_ident(src[i - 1]);
    if c == b'/' && next == Some(b'/') {
        let end = src[i..].iter().position(|c| *c == b'\n');
        return (end.map_or(src.len(), |n| i + n), Token::Blank);
    }
    if c == b'/' && next == Some(b'*') {
        return (block_comment_end(src, i), Token::Blank);
    }
    if !ident_before {
        if let Some((quote, hashes)) = raw_string_quote(src, i) {
            let (end, text) = raw_string(src, quote, hashes);
            return (end, Token::Literal(text));
        }
        if matches!(c, b'b' | b'c') && next == Some(b'"') {
            let (end, text) = quoted_string(src, i + 1);
            return (end, Token::Literal(text));
        }
    }
    if c == b'"' {
        let (end, text) = quoted_string(src, i);
        return (end, Token::Literal(text));
    }
    if c == b'\''
        && let Some(end) = char_literal_end(src, i)
    {
        return (end, Token::Blank);
    }
    (i + 1, Token::Code)
}

/// The end of the (possibly nested) block comment opening at `i`.
fn block_comment_end(src: &[u8], i: usize) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j + 1 < src.len() {
        match (src[j], src[j + 1]) {
            (b'/', b'*') => {
                depth += 1;
                j += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                j += 2;
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    src.len()
}

/// For a raw string (`r"…"`, `r#"…"#`, `br"…"`, `cr"…"`) opening at `i`:
/// the index of its opening quote and its number of `#`.
fn raw_string_quote(src: &[u8], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if matches!(src.get(j), Some(b'b' | b'c')) {
        j += 1;
    }
    if src.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = src[j..].iter().take_while(|c| **c == b'#').count();
    (src.get(j + hashes) == Some(&b'"')).then_some((j + hashes, hashes))
}

/// A raw string's end and contents, from its opening quote.
fn raw_string(src: &[u8], quote: usize, hashes: usize) -> (usize, String) {
    let body = quote + 1;
    let closing = (body..src.len()).find(|j| {
        src[*j] == b'"'
            && src.len() > j + hashes
            && src[j + 1..=j + hashes].iter().all(|c| *c == b'#')
    });
    match closing {
        Some(j) => (j + 1 + hashes, text_of(&src[body..j])),
        None => (src.len(), text_of(&src[body..])),
    }
}

/// A quoted string's end and contents (escapes as written), from its
/// opening quote.
fn quoted_string(src: &[u8], quote: usize) -> (usize, String) {
    let mut j = quote + 1;
    while j < src.len() {
        match src[j] {
            b'\\' => j += 2,
            b'"' => return (j + 1, text_of(&src[quote + 1..j])),
            _ => j += 1,
        }
    }
    (src.len(), text_of(&src[(quote + 1).min(src.len())..]))
}

/// Literal contents as text.
fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The end of the char literal opening at `i`, or `None` for a lifetime or
/// a label (`'a`, `'static`, `'outer:`).
fn char_literal_end(src: &[u8], i: usize) -> Option<usize> {
    if src.get(i + 1) == Some(&b'\\') {
        let close = (i + 3..src.len()).find(|j| matches!(src[*j], b'\'' | b'\n'))?;
        return (src[close] == b'\'').then_some(close + 1);
    }
    // One character, which may take up to four bytes.
    let first = *src.get(i + 1)?;
    let width = match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    };
    (first != b'\'' && src.get(i + 1 + width) == Some(&b'\'')).then_some(i + 2 + width)
}

/// `code` with every `#[cfg(test)] mod name { … }` block blanked (newlines
/// kept).
fn blank_test_modules(code: &[u8]) -> Vec<u8> {
    const MARK: &[u8] = b"#[cfg(test)]";
    let mut out = code.to_vec();
    let mut from = 0;
    while let Some(start) = find(code, MARK, from) {
        from = start + MARK.len();
        let Some(open) = inline_mod_brace(code, from) else {
            continue;
        };
        let end = matching_brace(code, open).map_or(code.len(), |close| close + 1);
        for c in &mut out[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    out
}

/// The index of the first `needle` in `code` at or after `from`.
fn find(code: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    code.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|n| from + n)
}

/// If `code[from..]` is `[pub[(…)]] mod name {`, the index of its `{`.
fn inline_mod_brace(code: &[u8], from: usize) -> Option<usize> {
    let mut j = skip_space(code, from);
    let (word, end) = ident_at(code, j);
    if word == "pub" {
        j = skip_space(code, end);
        if code.get(j) == Some(&b'(') {
            j = find(code, b")", j)? + 1;
        }
        j = skip_space(code, j);
    }
    let (word, end) = ident_at(code, j);
    if word != "mod" {
        return None;
    }
    let (name, end) = ident_at(code, skip_space(code, end));
    let brace = skip_space(code, end);
    (!name.is_empty() && code.get(brace) == Some(&b'{')).then_some(brace)
}

/// The index of the `}` closing the `{` at `open`.
fn matching_brace(code: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// The first index at or after `i` that is not whitespace.
fn skip_space(code: &[u8], i: usize) -> usize {
    code.get(i..)
        .and_then(|rest| rest.iter().position(|c| !c.is_ascii_whitespace()))
        .map_or(code.len(), |n| i + n)
}

/// The identifier starting at `i` (empty if none) and the index past it.
fn ident_at(code: &[u8], i: usize) -> (&str, usize) {
    let rest = code.get(i..).unwrap_or_default();
    let len = rest
        .iter()
        .position(|c| !is_ident(*c))
        .unwrap_or(rest.len());
    // Identifier bytes are ASCII, so this is always valid UTF-8.
    (
        std::str::from_utf8(&rest[..len]).unwrap_or_default(),
        i + len,
    )
}

// ---------------------------------------------------------------------------
// The import graph between files.

/// Which file imports which, with the line of the first such import.
struct ImportGraph<'a> {
    /// Module path → its source file.
    files: BTreeMap<String, &'a Source>,
    /// Importing module → imported module → first line of the import.
    edges: BTreeMap<String, BTreeMap<String, usize>>,
}

impl<'a> ImportGraph<'a> {
    /// Reads every import of every file of the library crate.
    fn build(sources: &'a [Source]) -> Self {
        let files: BTreeMap<String, &Source> = sources
            .iter()
            .filter_map(|s| Some((s.module.clone()?, s)))
            .collect();
        let mut graph = ImportGraph {
            files,
            edges: BTreeMap::new(),
        };
        let modules: Vec<String> = graph.files.keys().cloned().collect();
        for module in modules {
            let imports = graph.imports_of(&module);
            graph.edges.insert(module, imports);
        }
        graph
    }

    /// The modules `module`'s file imports, each with its first line.
    fn imports_of(&self, module: &str) -> BTreeMap<String, usize> {
        let code = &self.files[module].lexed.code_without_tests;
        let children = declared_children(code);
        let mut imports = BTreeMap::new();
        for (line, path) in paths(code) {
            if let Some(target) = self.target(module, &children, &path)
                && target != module
            {
                imports.entry(target).or_insert(line);
            }
        }
        imports
    }

    /// The module a path written in `module` imports, if any (see the
    /// module doc for what counts).
    fn target(&self, module: &str, children: &BTreeSet<&str>, path: &[&str]) -> Option<String> {
        let first = *path.first()?;
        match first {
            "crate" => self.resolve(&lowercase_prefix(&path[1..])),
            "super" => {
                let ups = path.iter().take_while(|s| **s == "super").count();
                let rest = lowercase_prefix(&path[ups..]);
                let mut base = split_module(module);
                if rest.is_empty() || ups > base.len() {
                    return None;
                }
                base.truncate(base.len() - ups);
                base.extend(rest);
                self.resolve(&base)
            }
            "self" if path.len() > 2 && children.contains(path[1]) => self.child(module, path[1]),
            _ if path.len() > 1 && children.contains(first) => self.child(module, first),
            _ => None,
        }
    }

    /// The module file of `child`, declared in `module`.
    fn child(&self, module: &str, child: &str) -> Option<String> {
        let path = if module.is_empty() {
            child.to_string()
        } else {
            format!("{module}::{child}")
        };
        self.files.contains_key(&path).then_some(path)
    }

    /// The longest prefix of `segments` that is a module with a file (never
    /// the crate root).
    fn resolve(&self, segments: &[&str]) -> Option<String> {
        (1..=segments.len())
            .rev()
            .map(|n| segments[..n].join("::"))
            .find(|m| self.files.contains_key(m))
    }

    /// Every group of two or more modules that import each other in a
    /// circle (the strongly connected components of the graph).
    fn cycles(&self) -> Vec<Vec<String>> {
        let mut tarjan = Tarjan::default();
        for module in self.edges.keys() {
            if !tarjan.index.contains_key(module) {
                tarjan.visit(module, &self.edges);
            }
        }
        tarjan.components.retain(|c| c.len() > 1);
        for component in &mut tarjan.components {
            component.sort();
        }
        tarjan.components
    }

    /// Each cycle group with every import inside it, by file and line.
    fn describe(&self, cycles: &[Vec<String>]) -> String {
        let mut out = String::new();
        for group in cycles {
            let members: BTreeSet<&String> = group.iter().collect();
            let names: Vec<String> = group.iter().map(|m| self.file_of(m)).collect();
            writeln!(out, "{} files: {}", group.len(), names.join(", ")).unwrap();
            for module in group {
                let mut inside: Vec<(&usize, &String)> = self.edges[module]
                    .iter()
                    .filter(|(target, _)| members.contains(target))
                    .map(|(target, line)| (line, target))
                    .collect();
                inside.sort();
                for (line, target) in inside {
                    let (from, to) = (self.file_of(module), self.file_of(target));
                    writeln!(out, "  {from}:{line} imports {to}").unwrap();
                }
            }
        }
        out
    }

    /// `src/…` path of a module's file.
    fn file_of(&self, module: &str) -> String {
        format!("src/{}", self.files[module].rel)
    }
}

/// Tarjan's strongly connected components over module names.
#[derive(Default)]
struct Tarjan {
    next: usize,
    index: BTreeMap<String, usize>,
    low: BTreeMap<String, usize>,
    stack: Vec<String>,
    on_stack: BTreeSet<String>,
    components: Vec<Vec<String>>,
}

impl Tarjan {
    /// Visits `v` and everything reachable from it.
    fn visit(&mut self, v: &str, edges: &BTreeMap<String, BTreeMap<String, usize>>) {
        self.index.insert(v.to_string(), self.next);
        self.low.insert(v.to_string(), self.next);
        self.next += 1;
        self.stack.push(v.to_string());
        self.on_stack.insert(v.to_string());
        for w in edges.get(v).into_iter().flat_map(BTreeMap::keys) {
            if !self.index.contains_key(w) {
                self.visit(w, edges);
                let low = self.low[v].min(self.low[w]);
                self.low.insert(v.to_string(), low);
            } else if self.on_stack.contains(w) {
                let low = self.low[v].min(self.index[w]);
                self.low.insert(v.to_string(), low);
            }
        }
        if self.low[v] == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(&w);
                let done = w == v;
                component.push(w);
                if done {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// A module path as segments (`a2a::admin` → `[a2a, admin]`; root → `[]`).
fn split_module(module: &str) -> Vec<&str> {
    if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    }
}

/// The leading segments that are lowercase names (modules, functions),
/// stopping at the first type, constant, `self` or glob.
fn lowercase_prefix<'a>(segments: &[&'a str]) -> Vec<&'a str> {
    segments
        .iter()
        .take_while(|s| {
            !s.is_empty()
                && **s != "self"
                && s.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        })
        .copied()
        .collect()
}

/// The child modules a file declares with `mod name;`.
fn declared_children(code: &[u8]) -> BTreeSet<&str> {
    let mut children = BTreeSet::new();
    let mut i = 0;
    while i < code.len() {
        let (word, end) = ident_at(code, i);
        if word.is_empty() {
            i += 1;
            continue;
        }
        if word == "mod" && (i == 0 || !is_ident(code[i - 1])) {
            let (name, after) = ident_at(code, skip_space(code, end));
            if !name.is_empty() && code.get(skip_space(code, after)) == Some(&b';') {
                children.insert(name);
            }
        }
        i = end;
    }
    children
}

/// Every path of two or more segments written in `code` (`a::b::C`, one per
/// item of a `use` group), as segments, with the line it (or its group
/// item) starts on. A path starts at an identifier
/// not preceded by another identifier character or by `:`.
fn paths(code: &[u8]) -> Vec<(usize, Vec<&str>)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < code.len() {
        if code[i] == b'\n' {
            line += 1;
        }
        let starts =
            is_ident(code[i]) && (i == 0 || !(is_ident(code[i - 1]) || code[i - 1] == b':'));
        if !starts {
            i += 1;
            continue;
        }
        let end = use_tree(code, i, &[], &mut |at, path| {
            let at_line = line + code[i..at].iter().filter(|c| **c == b'\n').count();
            out.push((at_line, path));
        });
        line += code[i..end].iter().filter(|c| **c == b'\n').count();
        i = end.max(i + 1);
    }
    out
}

/// Reads the path (or `use` tree) at `i`, prefixed by `prefix`, calling
/// `emit` with each full path and the index its last part starts at;
/// returns the index past it.
fn use_tree<'a>(
    code: &'a [u8],
    i: usize,
    prefix: &[&'a str],
    emit: &mut dyn FnMut(usize, Vec<&'a str>),
) -> usize {
    let mut segments = prefix.to_vec();
    let mut j = i;
    loop {
        let (word, end) = ident_at(code, j);
        if word.is_empty() {
            break;
        }
        segments.push(word);
        j = end;
        let after = skip_space(code, j);
        if !(code.get(after) == Some(&b':') && code.get(after + 1) == Some(&b':')) {
            break;
        }
        let next = skip_space(code, after + 2);
        if code.get(next) == Some(&b'{') {
            return use_group(code, next, &segments, emit);
        }
        j = next;
    }
    if segments.len() > 1 {
        emit(i, segments);
    }
    j
}

/// Reads the `{ … }` group at `open` under `prefix`; returns the index past
/// its `}`.
fn use_group<'a>(
    code: &'a [u8],
    open: usize,
    prefix: &[&'a str],
    emit: &mut dyn FnMut(usize, Vec<&'a str>),
) -> usize {
    let mut j = open + 1;
    while j < code.len() {
        j = skip_space(code, j);
        match code.get(j) {
            Some(b'}') => return j + 1,
            Some(c) if is_ident(*c) => {
                j = use_tree(code, j, prefix, emit);
                // Skip `as name` and anything else up to the next item.
                while j < code.len() && !matches!(code[j], b',' | b'}') {
                    j += 1;
                }
            }
            _ => j += 1,
        }
    }
    code.len()
}
