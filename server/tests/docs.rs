//! The commands the README and `docs/` give run as written: every `lexlip …` command line in a
//! code block or in backticks names a real subcommand, and every `--flag` on it is one that
//! subcommand's `--help` lists; every `scripts/…` path named exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use lexlip_tests::{lexlip, workspace};

/// The documents that tell users what to run.
fn documents() -> Vec<std::path::PathBuf> {
    let root = workspace();
    let mut out = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        // The journal (docs/journal/, not read here) keeps past measurements' commands as run.
        if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Every `lexlip …` command of a document: lines of code blocks (with their `\`-continued
/// lines) and backticked spans that start with `lexlip `.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            let code = line.split(" # ").next().unwrap_or_default().trim();
            pending.push_str(code.trim_end_matches('\\'));
            pending.push(' ');
            if code.ends_with('\\') {
                continue;
            }
            let whole = std::mem::take(&mut pending);
            if let Some(at) = whole.find("lexlip ")
                && (at == 0 || whole[..at].ends_with("$(") || whole[..at].ends_with(' '))
                && !whole[..at].contains('/')
            {
                // `cargo run … --bin lexlip -- demo` runs `lexlip demo`.
                let command = whole[at..].replacen("lexlip -- ", "lexlip ", 1);
                out.push(command.trim().to_string());
            }
        } else {
            for (i, span) in line.split('`').enumerate() {
                if i % 2 == 1 && span.starts_with("lexlip ") {
                    out.push(span.to_string());
                }
            }
        }
    }
    out
}

/// The subcommand path of a command line (`bench search`, `model convert`, …), found by asking
/// the binary, and its `--help` text.
fn subcommand(
    words: &[&str],
    help: &mut BTreeMap<String, Option<String>>,
) -> Option<(String, String)> {
    let mut best = None;
    for n in 1..=words.len().min(3) {
        let path = words[..n].join(" ");
        if !words[n - 1]
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '-')
        {
            break;
        }
        let text = help
            .entry(path.clone())
            .or_insert_with(|| {
                let mut args: Vec<&str> = words[..n].to_vec();
                args.push("--help");
                let out = lexlip(&args);
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            })
            .clone();
        match text {
            Some(t) => best = Some((path, t)),
            None => break,
        }
    }
    best
}

#[test]
fn documented_commands_exist_with_their_flags() {
    let mut help = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.file_name().unwrap().to_string_lossy().into_owned();
        for command in commands(&text) {
            let words: Vec<&str> = command.split_whitespace().skip(1).collect();
            // Prose about commands (`lexlip <command> --help`, `lexlip encode/index/serve`, the
            // log line `lexlip listening on …`, `lexlip --features cuda`) is not a command.
            let first = words.first().copied().unwrap_or_default();
            if !first.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                || first.starts_with('-')
                || first == "listening"
            {
                continue;
            }
            let Some((path, usage)) = subcommand(&words, &mut help) else {
                problems.push(format!("{name}: `{command}`: no such lexlip command"));
                continue;
            };
            let flags: BTreeSet<&str> = words
                .iter()
                .flat_map(|w| w.split(['[', ']', '(', ')', '|', '=', '/']))
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(|w| w.trim_end_matches(['…', ',', '.', ';', ':', '`']))
                .collect();
            for flag in flags {
                let listed = usage
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .any(|w| w == flag);
                if !listed {
                    problems.push(format!(
                        "{name}: `{command}`: `lexlip {path}` has no {flag}"
                    ));
                }
            }
            checked += 1;
        }
        for script in text.split(|c: char| c.is_whitespace() || "`()[]\"'".contains(c)) {
            if let Some(at) = script.find("scripts/") {
                let path = script[at..].trim_end_matches(['.', ',', ';', ':', ')']);
                if (path.ends_with(".sh") || path.ends_with(".py"))
                    && !workspace().join(path).is_file()
                {
                    problems.push(format!("{name}: {path} does not exist"));
                }
            }
        }
    }
    assert!(
        checked >= 40,
        "only {checked} commands found: is the extraction broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The README stays an overview: a newcomer reads it in five minutes.
#[test]
fn the_readme_is_short() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 150,
        "README.md has {lines} lines; move details to docs/"
    );
    assert!(Path::new(&workspace().join("docs/cli.md")).is_file());
}
