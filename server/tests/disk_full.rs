//! A full disk: writes answer 507 and store nothing, reads keep working, and once space returns
//! every acknowledged write is there and nothing of a refused one. Runs on a small tmpfs;
//! skipped, with a message, where this process may not mount one (it needs root).

use std::path::Path;
use std::process::Command;

use lexlip_tests::Server;
use serde_json::{Value, json};

struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(dir: &'a Path, size: &str) -> Option<Self> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self(dir))
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.0)
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

fn batch(n: u32) -> Value {
    // ~100 KB of incompressible stored text per request: a 4 MB disk fills within a few
    // dozen requests.
    let mut x = u64::from(n) * 0x9e37_79b9 + 1;
    let text: String = (0..100_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    let docs: Vec<Value> = (0..4)
        .map(|i| json!({"id": format!("b{n}-{i}"), "text": text, "vector": {format!("t{n}"): 1.0, "all": 0.5}}))
        .collect();
    json!({"documents": docs})
}

#[test]
fn a_full_disk_refuses_writes_with_507_and_keeps_acknowledged_ones() {
    let holder = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(holder.path(), "4m") else {
        eprintln!(
            "skipped: cannot mount a tmpfs here (needs root); the disk-full test did not run"
        );
        return;
    };
    let data = holder.path().join("data");
    let s = Server::start(&data, &[]);
    let (status, body) = s.call("PUT", "/v1/collections/c", Some(&json!({})));
    assert_eq!(status, 201, "{body}");

    let mut acked = Vec::new();
    let mut refused = None;
    for n in 0..200 {
        let (status, body) = s.call("POST", "/v1/collections/c/documents", Some(&batch(n)));
        match status {
            200 => acked.push(n),
            507 => {
                assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains("disk is full"), "{body}");
                refused = Some(n);
                break;
            }
            other => panic!("write {n}: {other} {body}"),
        }
    }
    let refused = refused.expect("the 4 MB disk filled up");
    assert!(!acked.is_empty());

    // Reads keep working on a full disk.
    let (status, info) = s.call("GET", "/v1/collections/c", None);
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["documents"], 4 * acked.len(), "{info}");
    let query = json!({"query": {"sparse": {"t0": 1.0}}, "k": 4});
    let (status, found) = s.call("POST", "/v1/collections/c/search", Some(&query));
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["hits"].as_array().unwrap().len(), 4);

    // Deletes on the full disk either succeed or change nothing and say why (507), never 500
    // (a failed commit left a delete file behind that the next delete collided with, and it
    // answered 500 even after space returned); once space returns, the refused ones succeed.
    let mut refused_deletes = Vec::new();
    let mut deleted = 0;
    for (i, n) in acked.iter().take(4).enumerate() {
        // Documents -0 to -2 (the checks below read the -3 ones).
        let victim = format!("/v1/collections/c/documents/b{n}-{}", i % 3);
        let (status, body) = s.call("DELETE", &victim, None);
        match status {
            200 => deleted += 1,
            507 => refused_deletes.push(victim),
            other => panic!("delete on a full disk: {other} {body}"),
        }
    }

    eprintln!(
        "deletes on the full disk: {deleted} succeeded, {} refused with 507",
        refused_deletes.len()
    );
    // Space returns: the next write succeeds and publishes only itself.
    disk.resize("64m");
    for victim in &refused_deletes {
        let (status, body) = s.call("DELETE", victim, None);
        assert_eq!(status, 200, "{body}");
        deleted += 1;
    }
    let next = refused + 1;
    let (status, body) = s.call("POST", "/v1/collections/c/documents", Some(&batch(next)));
    assert_eq!(status, 200, "{body}");
    let (_, info) = s.call("GET", "/v1/collections/c", None);
    assert_eq!(info["documents"], 4 * (acked.len() + 1) - deleted, "{info}");
    let (status, _) = s.call(
        "GET",
        &format!("/v1/collections/c/documents/b{refused}-0"),
        None,
    );
    assert_eq!(
        status, 404,
        "a refused write's document was published later"
    );
    s.stop();

    // And after a restart, the same.
    let s = Server::start(&data, &[]);
    let (_, info) = s.call("GET", "/v1/collections/c", None);
    assert_eq!(info["documents"], 4 * (acked.len() + 1) - deleted, "{info}");
    for n in acked.iter().chain([&next]) {
        let (status, _) = s.call("GET", &format!("/v1/collections/c/documents/b{n}-3"), None);
        assert_eq!(status, 200, "acknowledged write {n} lost");
    }
    s.stop();
}
