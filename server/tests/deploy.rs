//! deploy/: the systemd unit is valid for systemd (`systemd-analyze verify`, where installed)
//! and starts `lexlip serve` with options the binary has.

use std::process::Command;

use lexlip_tests::{lexlip, lexlip_bin, workspace};

fn unit() -> String {
    std::fs::read_to_string(workspace().join("deploy/systemd/lexlip.service")).unwrap()
}

#[test]
fn the_systemd_unit_verifies_and_names_real_options() {
    let unit = unit();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let args: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(args[..2], ["/usr/local/bin/lexlip", "serve"]);
    let help = lexlip(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag), "`lexlip serve` has no {flag}");
    }

    let Ok(status) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: systemd-analyze is not installed; the unit was not verified");
        return;
    };
    assert!(status.status.success());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lexlip.service");
    let bin = lexlip_bin();
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/lexlip", &bin.display().to_string()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("lexlip.service"),
        "systemd-analyze warns about the unit: {stderr}"
    );
}

/// Runs `tool args…` when it is installed (`.ci/run` installs it); None when it is not.
fn run_if_installed(tool: &str, args: &[&std::ffi::OsStr]) -> Option<std::process::Output> {
    match Command::new(tool).args(args).output() {
        Ok(out) => Some(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: {tool} is not installed (.ci/run installs it from PyPI)");
            None
        }
        Err(e) => panic!("running {tool}: {e}"),
    }
}

#[test]
fn the_dockerfiles_pass_hadolint() {
    for file in ["deploy/docker/Dockerfile", "deploy/docker/Dockerfile.cuda"] {
        let path = workspace().join(file);
        let Some(out) = run_if_installed("hadolint", &[path.as_os_str()]) else {
            return;
        };
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // The image builds the binary as the README does.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("cargo build --release -p lexlip-server"),
            "{file}"
        );
    }
}

#[test]
fn the_kubernetes_manifests_validate_against_the_schemas() {
    let dir = workspace().join("deploy/k8s");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    let mut args: Vec<&std::ffi::OsStr> = vec!["--strict".as_ref()];
    args.extend(files.iter().map(|p| p.as_os_str()));
    let Some(out) = run_if_installed("kubernetes-validate", &args) else {
        return;
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // Every document was checked (a file that is not Kubernetes YAML fails loudly above).
    assert!(text.matches("passed").count() >= 4, "{text}");
}
