//! The README's HTTP example, run as written: a server with the model the README names, each
//! `curl` line of its block run by bash from the repository's root (with this server's address
//! for `localhost:8080`), every answer free of errors, and every `# → ID first` it promises
//! checked on that command's hits.

use lexlip_tests::server::Server;
use lexlip_tests::workspace;
use serde_json::Value;

/// One command of the block and the hit it promises first, if any.
struct Step {
    command: String,
    first: Option<String>,
}

/// The section's model (`lexlip serve … --model DIR` in backticks) and its code block's steps.
fn example() -> (String, Vec<Step>) {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let start = readme
        .find("## The HTTP API in one minute")
        .expect("the README has its HTTP section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let serve = section
        .split('`')
        .find(|s| s.starts_with("lexlip serve "))
        .expect("the section names the server's command");
    let model = serve
        .split_whitespace()
        .skip_while(|w| *w != "--model")
        .nth(1)
        .expect("the server's command names its model")
        .to_string();
    let code = section
        .split("```sh\n")
        .nth(1)
        .and_then(|c| c.split("```").next())
        .expect("the section has a sh block");
    let mut steps = Vec::new();
    let mut pending = String::new();
    for line in code.lines() {
        let (text, comment) = match line.split_once(" # ") {
            Some((t, c)) => (t.trim_end(), Some(c)),
            None => (line.trim_end(), None),
        };
        pending.push_str(text.trim_end_matches('\\'));
        pending.push(' ');
        let first = comment
            .and_then(|c| c.split("→ ").nth(1))
            .and_then(|c| c.strip_suffix(" first"))
            .map(|id| id.trim().to_string());
        if let Some(f) = first {
            steps.push(Step {
                command: String::new(),
                first: Some(f),
            });
        }
        if text.ends_with('\\') {
            continue;
        }
        let command = std::mem::take(&mut pending).trim().to_string();
        match steps.last_mut() {
            Some(s) if s.command.is_empty() => s.command = command,
            _ => steps.push(Step {
                command,
                first: None,
            }),
        }
    }
    (model, steps)
}

#[test]
fn the_readmes_http_example_finds_what_it_says() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("curl is needed to run the README's example (.ci/run installs it)");
    }
    let (model, steps) = example();
    assert!(
        steps.len() >= 4 && steps.iter().filter(|s| s.first.is_some()).count() >= 2,
        "the example's commands and promises were not found"
    );
    let tmp = tempfile::tempdir().unwrap();
    let model = workspace().join(model);
    let s = Server::start(
        &tmp.path().join("data"),
        &["--model".into(), model.display().to_string()],
    );
    let host = s
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    for step in &steps {
        assert!(step.command.starts_with("curl "), "{}", step.command);
        let command = step.command.replace("localhost:8080", &host);
        let out = std::process::Command::new("bash")
            .args(["-c", &format!("{command} --silent --show-error")])
            .current_dir(workspace())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{command}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{command}: {e}: {stdout}"));
        assert!(answer.get("error").is_none(), "{command}: {answer}");
        if let Some(first) = &step.first {
            assert_eq!(
                answer["hits"][0]["id"],
                first.as_str(),
                "{command}: {answer}"
            );
        }
    }
    s.stop();
}
