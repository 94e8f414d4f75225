//! The real `lexlip` binary. The suites are lexlip-server's integration tests, so cargo builds
//! the binary before it runs them, in the same build (the same profile, target directory and
//! features): it lies next to their `deps/` folder. Nothing is built here: a nested `cargo
//! build` would resolve the features of the server alone and build every dependency again.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Path of the `lexlip` binary: `$LEXLIP_BIN`, else the one cargo built for this test run.
pub fn lexlip_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(find).clone()
}

fn find() -> PathBuf {
    if let Some(bin) = std::env::var_os("LEXLIP_BIN") {
        return PathBuf::from(bin);
    }
    // This test executable lives in TARGET/PROFILE/deps; the binary in TARGET/PROFILE.
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test executable lies in TARGET/PROFILE/deps");
    let bin = profile_dir.join(format!("lexlip{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: run the suites that use it as lexlip-server's integration tests \
         (cargo test -p lexlip-server), which build it, or set LEXLIP_BIN",
        bin.display()
    );
    bin
}

/// Runs `lexlip ARGS` and waits for it.
pub fn lexlip<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(lexlip_bin())
        .args(args)
        .output()
        .expect("running lexlip")
}

/// Flags with a value each (a path, a text with spaces), as [`line`] takes them: helpers that
/// build a command line pass them on under this name.
pub type Flags<'a> = [(&'a str, &'a dyn AsRef<OsStr>)];

/// A command line written as one line of words, then the flags that take a path or a text with
/// spaces: `line("search -k 5", &[("--collection", &dir)])` is `search -k 5 --collection DIR`.
/// Keeps tests' command lines readable (a line, not a word per line).
pub fn line(words: &str, values: &Flags) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = words.split_whitespace().map(Into::into).collect();
    for (flag, value) in values {
        out.push(flag.into());
        out.push(value.as_ref().to_owned());
    }
    out
}

/// [`line`] with the tiny LexLIP checkpoint's `--model … --tokenizer …` at the end: the
/// command line of most runs that encode with it.
pub fn lexlip_tiny_line(words: &str, values: &Flags) -> Vec<std::ffi::OsString> {
    let mut args = line(words, values);
    args.extend(crate::lexlip_tiny_args().into_iter().map(Into::into));
    args
}

/// Runs `lexlip ARGS` with the Hugging Face cache at `hf_home` and no network (an endpoint no
/// one answers): `hf:` ids must resolve from the cache.
pub fn lexlip_offline<S: AsRef<OsStr>>(hf_home: &std::path::Path, args: &[S]) -> Output {
    Command::new(lexlip_bin())
        .args(args)
        .env("HF_HOME", hf_home)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .expect("running lexlip")
}

/// Panics with its stderr unless the run succeeded.
#[track_caller]
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON a run printed on stdout; the run must have succeeded (else its stderr is shown).
#[track_caller]
pub fn success_json(out: &Output) -> serde_json::Value {
    assert_success(out);
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Runs `lexlip ARGS` and returns the JSON it printed; a failed run panics with its arguments
/// and stderr.
pub fn lexlip_json<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S]) -> serde_json::Value {
    let out = lexlip(args);
    assert!(
        out.status.success(),
        "lexlip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}
