//! Snapshots through the real binary: ten snapshots taken while a client keeps adding and
//! deleting each restore to exactly one committed state that includes every write
//! acknowledged before the snapshot was asked for (the oracle: the client's ledger); a
//! downloaded archive restores with `lexlip restore`; an altered one is refused by the route
//! and by the command, and changes nothing; an existing collection is replaced only when asked.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lexlip_tests::{Server, documents, lexlip};
use serde_json::{Value, json};

type State = BTreeMap<String, Option<String>>;

/// id → text of every live document of the collection `name` in `data`, read from its files.
fn state_of(data: &Path, name: &str) -> State {
    documents(&data.join("collections").join(name), |d, _| d.text.clone())
}

/// The client's ledger: the state each write leads to, in order, and how many were
/// acknowledged. A write's state is recorded before it is sent.
#[derive(Default)]
struct Ledger {
    states: Vec<State>,
    acked: usize,
}

fn write_until(s: &Server, ledger: &Mutex<Ledger>, stop: &AtomicBool) {
    let mut state = State::new();
    let mut k = 0u32;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        let delete = k.is_multiple_of(3).then(|| format!("b{}-0", k - 2));
        match &delete {
            Some(id) => {
                state.remove(id);
            }
            None => {
                for i in 0..20 {
                    state.insert(format!("b{k}-{i}"), Some(format!("batch {k}")));
                }
            }
        }
        ledger.lock().unwrap().states.push(state.clone());
        match delete {
            Some(id) => {
                let (status, body) =
                    s.call("DELETE", &format!("/v1/collections/c/documents/{id}"), None);
                assert_eq!(status, 200, "{body}");
            }
            None => {
                let docs = (0..20)
                    .map(|i| json!({"id": format!("b{k}-{i}"), "text": format!("batch {k}"), "vector": {"all": 1.0, format!("w{}", i % 5): 0.5}}))
                    .collect();
                s.add("c", docs);
            }
        }
        ledger.lock().unwrap().acked += 1;
    }
}

/// `lexlip restore --archive ARCHIVE --collection TARGET`.
fn restore_cli(archive: &Path, target: &Path) -> std::process::Output {
    let (archive, target) = (archive.to_str().unwrap(), target.to_str().unwrap());
    lexlip(&["restore", "--archive", archive, "--collection", target])
}

fn download(s: &Server, path: &str) -> Vec<u8> {
    let response = ureq::get(&s.url(path))
        .call()
        .expect("downloading a snapshot");
    assert_eq!(response.header("content-type"), Some("application/x-tar"));
    let mut bytes = Vec::new();
    response.into_reader().read_to_end(&mut bytes).unwrap();
    bytes
}

#[test]
fn snapshots_taken_during_writes_restore_exactly_a_committed_state() {
    let data = tempfile::tempdir().unwrap();
    let s = Arc::new(Server::start(data.path(), &[]));
    assert_eq!(s.call("PUT", "/v1/collections/c", Some(&json!({}))).0, 201);
    let ledger = Arc::new(Mutex::new(Ledger {
        states: vec![State::new()],
        acked: 0,
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, ledger, stop) = (s.clone(), ledger.clone(), stop.clone());
        std::thread::spawn(move || write_until(&s, &ledger, &stop))
    };
    let mut names = Vec::new();
    let mut last_at = 0;
    for round in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        let acked_before = ledger.lock().unwrap().acked;
        let (status, made) = s.call("POST", "/v1/collections/c/snapshots", None);
        assert_eq!(status, 201, "{made}");
        let name = made["name"].as_str().unwrap().to_string();
        let into = format!("r{round}");
        let (status, info) = s.call(
            "POST",
            &format!("/v1/collections/c/snapshots/{name}/restore"),
            Some(&json!({"into": into})),
        );
        assert_eq!(status, 201, "{info}");
        assert_eq!(info["documents"], made["documents"]);
        let got = state_of(data.path(), &into);
        let ledger = ledger.lock().unwrap();
        // States[0] is the empty start; states[i] is what write i (1-based) led to.
        let at = ledger.states.iter().rposition(|state| *state == got);
        let at = at.unwrap_or_else(|| {
            panic!("round {round}: {} documents, no committed state", got.len())
        });
        assert!(
            at >= acked_before,
            "round {round}: the snapshot lacks writes acknowledged before it (state {at}, acknowledged {acked_before})"
        );
        assert!(at >= last_at);
        last_at = at;
        names.push(name);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(last_at > 3, "writes ran during the snapshots");

    let (_, list) = s.call("GET", "/v1/collections/c/snapshots", None);
    let listed = list["snapshots"].as_array().unwrap().iter();
    assert_eq!(listed.map(|v| v["name"].clone()).collect::<Vec<_>>(), names);

    // Downloaded, the first archive restores with the command line too.
    let first = download(&s, &format!("/v1/collections/c/snapshots/{}", names[0]));
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("first.snapshot.tar"), &first).unwrap();
    let out = restore_cli(
        &tmp.path().join("first.snapshot.tar"),
        &tmp.path().join("copy"),
    );
    lexlip_tests::assert_success(&out);
    assert_eq!(
        documents(&tmp.path().join("copy"), |d, _| d.text.clone()),
        state_of(data.path(), "r0")
    );

    altered_archives_are_refused(&s, data.path(), &first);
    existing_collections_are_replaced_only_when_asked(&s, data.path(), &names[0]);

    let path = format!("/v1/collections/c/snapshots/{}", names[1]);
    assert_eq!(s.call("DELETE", &path, None).0, 200);
    assert_eq!(s.call("DELETE", &path, None).0, 404);
    assert_eq!(s.call("GET", "/v1/collections/nope/snapshots", None).0, 404);
    for bad in ["..%2Fc", "x.tar", ".snapshot.tar"] {
        let (status, body) = s.call("GET", &format!("/v1/collections/c/snapshots/{bad}"), None);
        assert_eq!(status, 404, "{bad}: {body}");
    }
}

/// One byte of a segment file changed: the route answers 422 and no collection appears; the
/// command fails and writes nothing.
fn altered_archives_are_refused(s: &Server, data: &Path, good: &[u8]) {
    let mut altered = good.to_vec();
    let at = altered.len() - 1024 - 700;
    altered[at] ^= 0x01;
    let dir = data.join("snapshots").join("c");
    std::fs::write(dir.join("altered.snapshot.tar"), &altered).unwrap();
    let (status, body) = s.call(
        "POST",
        "/v1/collections/c/snapshots/altered.snapshot.tar/restore",
        Some(&json!({"into": "altered"})),
    );
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("nothing was changed"), "{message}");
    assert_eq!(s.call("GET", "/v1/collections/altered", None).0, 404);
    let leftovers: Vec<_> = std::fs::read_dir(data.join("collections"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') || n == "altered")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let target = data.join("cli-altered");
    let out = restore_cli(&dir.join("altered.snapshot.tar"), &target);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("checksum") || stderr.contains("damaged"),
        "{stderr}"
    );
    assert!(!target.exists());
    // Cut short: refused the same way.
    std::fs::write(dir.join("cut.snapshot.tar"), &good[..good.len() / 2]).unwrap();
    let (status, body) = s.call(
        "POST",
        "/v1/collections/c/snapshots/cut.snapshot.tar/restore",
        Some(&json!({"into": "cut"})),
    );
    assert_eq!(status, 422, "{body}");
}

/// Restoring over `c` is refused (409, `c` unchanged) unless `replace` is set; replaced, `c`
/// holds the snapshot's documents and takes writes again.
fn existing_collections_are_replaced_only_when_asked(s: &Server, data: &Path, name: &str) {
    let before = state_of(data, "c");
    let path = format!("/v1/collections/c/snapshots/{name}/restore");
    let (status, body) = s.call("POST", &path, Some(&json!({})));
    assert_eq!(status, 409, "{body}");
    assert_eq!(state_of(data, "c"), before);
    let (status, body) = s.call("POST", &path, Some(&json!({"replace": true})));
    assert_eq!(status, 201, "{body}");
    let restored = state_of(data, "c");
    assert_eq!(restored, state_of(data, "r0"));
    assert_ne!(restored, before);
    let added = s.add(
        "c",
        vec![json!({"id": "after", "text": "after", "vector": {"all": 1.0}})],
    );
    assert_eq!(added["documents"], Value::from(restored.len() + 1));
    let (status, hits) = s.call(
        "POST",
        "/v1/collections/c/search",
        Some(&json!({"query": {"sparse": {"all": 1.0}}, "k": 5})),
    );
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits["hits"].as_array().unwrap().len(), 5, "{hits}");
}
