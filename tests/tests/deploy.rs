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
