//! `lexlip index --vectors` holds a bounded amount of the input in memory whatever the lines
//! carry: 30 lines with 8 MiB of `contents` each (240 MiB of text, a 250 KB gzip) are read in
//! chunks bounded in bytes and written in segments cut by stored bytes, so the process peaks
//! below the text's size (it held all of it twice before: 505 MB). With 100 lines of 15 MiB
//! the peak stays near 350 MB (3.1 GB before); `docs/benchmarks.md`.

use std::io::Write;
use std::process::Command;
use std::time::Duration;

/// The peak resident memory (`VmHWM`) of a running process, in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

#[test]
fn long_lines_are_indexed_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let vectors = tmp.path().join("long.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&vectors).unwrap(),
        flate2::Compression::fast(),
    );
    let contents = "x".repeat(8 << 20);
    for i in 0..30 {
        writeln!(
            gz,
            r#"{{"id": "d{i}", "vector": {{"a": 3, "t{i}": 2}}, "contents": "{contents}"}}"#
        )
        .unwrap();
    }
    gz.finish().unwrap();
    let collection = tmp.path().join("c");
    let mut child = Command::new(lexlip_tests::lexlip_bin())
        .args([
            "index",
            "--collection",
            collection.to_str().unwrap(),
            "--vectors",
        ])
        .arg(&vectors)
        .arg("--json")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak = 0;
    let status = loop {
        if let Some(p) = peak_rss(child.id()) {
            peak = peak.max(p);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["indexed"], 30, "{summary}");
    let text_bytes = 30u64 * (8 << 20);
    assert!(
        peak < 400 << 20,
        "peak RSS {} MB for {} MB of text",
        peak >> 20,
        text_bytes >> 20
    );
    eprintln!(
        "peak RSS {} MB for {} MB of text",
        peak >> 20,
        text_bytes >> 20
    );
}
