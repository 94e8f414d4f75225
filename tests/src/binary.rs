//! The real `lexlip` binary. Tests outside the server crate have no `CARGO_BIN_EXE_lexlip`, so
//! the binary is built once per test process with the cargo that runs the tests (a no-op when it
//! is up to date), in the same profile and target directory.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Path of the `lexlip` binary of this build (built on first call).
pub fn lexlip_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build).clone()
}

fn build() -> PathBuf {
    if let Some(bin) = std::env::var_os("LEXLIP_BIN") {
        return PathBuf::from(bin);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::models::workspace()).args([
        "build",
        "--quiet",
        "-p",
        "lexlip-server",
        "--bin",
        "lexlip",
    ]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    // What cargo sets for the running test only (its package's manifest, name, ...): build
    // scripts that watch such a variable (ring watches CARGO_MANIFEST_DIR) would otherwise
    // see it change and rebuild half the tree on every test run.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&name.as_ref())
        {
            cmd.env_remove(name.as_ref());
        }
    }
    let status = cmd
        .status()
        .expect("running cargo build for the lexlip binary");
    assert!(status.success(), "cargo build of the lexlip binary failed");
    // This test executable lives in TARGET/PROFILE/deps; the binary in TARGET/PROFILE.
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test executable lies in TARGET/PROFILE/deps");
    let bin = profile_dir.join(format!("lexlip{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "{} was not built", bin.display());
    bin
}

/// Runs `lexlip ARGS` and waits for it.
pub fn lexlip<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(lexlip_bin())
        .args(args)
        .output()
        .expect("running lexlip")
}

/// The JSON a run printed on stdout; the run must have succeeded (else its stderr is shown).
pub fn success_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
