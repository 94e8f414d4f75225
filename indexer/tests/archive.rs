//! Snapshot archives: an archive taken while another thread adds, deletes and commits holds
//! exactly one committed state (the oracle: the writer's ledger of what each commit held), a
//! restored collection searches like the original, and a truncated, altered or foreign
//! archive is refused with nothing left behind.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lexlip_index::archive::{self, ArchiveManifest};
use lexlip_index::{Collection, CollectionSettings, IndexError, SearchOptions};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};

/// Every live document: id → its text (which names its version).
fn contents(c: &Collection) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    c.snapshot()
        .unwrap()
        .for_each_document(|d| {
            let previous = out.insert(d.doc.id.to_string(), d.doc.text.unwrap_or_default());
            assert!(previous.is_none(), "an id stored twice");
            Ok(())
        })
        .unwrap();
    out
}

fn doc(id: u32, version: u32) -> (Document, QuantizedVector) {
    let mut d = Document::new(DocId::new(format!("d{id}")).unwrap(), Modality::Text);
    d.text = Some(format!("d{id} v{version}"));
    let terms = [
        ("dog", 10 + u64::from(id % 7)),
        ("grass", 1 + u64::from(version % 50)),
    ];
    (d, QuantizedVector::new(terms).unwrap())
}

fn new_collection(dir: &Path) -> Collection {
    let space = TermSpace::from_tokens("test", ["dog", "grass", "cat"]);
    let vocab: Vec<String> = ["dog", "grass", "cat"].map(String::from).into();
    let mut c =
        Collection::create(dir, space, CollectionSettings::default(), Some(&vocab)).unwrap();
    // Small segments, so that merges run (and remove files) while archives are taken.
    c.set_flush_docs(16);
    c
}

/// Entries left beside `dir` by staging (hidden siblings).
fn leftovers(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

#[test]
fn an_archive_taken_during_writes_restores_one_committed_state() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Arc::new(new_collection(&tmp.path().join("live")));
    // The ledger: what each commit held, in commit order.
    let ledger: Arc<Mutex<Vec<BTreeMap<String, String>>>> =
        Arc::new(Mutex::new(vec![BTreeMap::new()]));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (c, ledger, stop) = (c.clone(), ledger.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut state = BTreeMap::new();
            let mut version = 0u32;
            while !stop.load(Ordering::Relaxed) {
                version += 1;
                for k in 0..12 {
                    let id = (version * 7 + k * 13) % 200;
                    let (d, v) = doc(id, version);
                    state.insert(d.id.to_string(), d.text.clone().unwrap());
                    c.add(d, v).unwrap();
                }
                let gone = DocId::new(format!("d{}", (version * 11) % 200)).unwrap();
                c.delete(&gone).unwrap();
                state.remove(gone.as_str());
                // The ledger learns of a commit before it happens, so that an archive that
                // saw it finds it there.
                ledger.lock().unwrap().push(state.clone());
                c.commit().unwrap();
            }
        })
    };
    let mut seen_states = Vec::new();
    for round in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(60));
        let out = tmp.path().join(format!("s{round}.snapshot.tar"));
        let made = archive::write(&tmp.path().join("live"), "live", &out).unwrap();
        let target = tmp.path().join(format!("restored{round}"));
        let restored = archive::restore(&out, &target, false).unwrap();
        assert_eq!(restored.documents, made.documents);
        let got = contents(&Collection::open(&target).unwrap());
        assert_eq!(got.len() as u64, made.documents);
        let ledger = ledger.lock().unwrap();
        let at = ledger.iter().rposition(|state| *state == got);
        assert!(
            at.is_some(),
            "round {round}: the archive holds no committed state ({} documents)",
            got.len()
        );
        seen_states.push(at.unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        seen_states.windows(2).all(|w| w[0] <= w[1]),
        "{seen_states:?}"
    );
    assert!(
        seen_states.last() > seen_states.first(),
        "the writes moved on: {seen_states:?}"
    );
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}

/// A collection at `dir` with documents `d0`…`d{n-1}`, committed.
fn committed(dir: &Path, n: u32) -> Collection {
    let c = new_collection(dir);
    for id in 0..n {
        let (d, v) = doc(id, id);
        c.add(d, v).unwrap();
    }
    c.commit().unwrap();
    c
}

#[test]
fn a_restored_collection_searches_like_the_original() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let c = committed(&live, 100);
    c.delete(&DocId::new("d3").unwrap()).unwrap();
    c.commit().unwrap();
    let out = tmp.path().join("a.snapshot.tar");
    let made = archive::write(&live, "live", &out).unwrap();
    assert_eq!(made.documents, 99);
    assert_eq!(ArchiveManifest::read(&out).unwrap(), made);
    assert!(
        made.files.iter().any(|f| f.path.ends_with(".del")),
        "a delete file archived"
    );
    assert!(matches!(
        archive::write(&live, "live", &out),
        Err(IndexError::AlreadyExists(_))
    ));

    let target = tmp.path().join("copy");
    archive::restore(&out, &target, false).unwrap();
    let copy = Collection::open(&target).unwrap();
    assert_eq!(contents(&copy), contents(&c));
    let q = QuantizedVector::new([("dog", 3u64), ("grass", 2)]).unwrap();
    let options = SearchOptions::top(20);
    let ids = |c: &Collection| -> Vec<(String, u64)> {
        let snapshot = c.snapshot().unwrap();
        let hits = snapshot.search(&q, &options).unwrap().hits;
        hits.iter()
            .map(|h| (snapshot.hit(h, None).unwrap().id, h.score))
            .collect()
    };
    assert_eq!(ids(&copy), ids(&c));
    // The copy takes writes of its own.
    let (d, v) = doc(500, 1);
    copy.add(d, v).unwrap();
    copy.commit().unwrap();
    assert_eq!(copy.snapshot().unwrap().num_docs(), 100);

    // Not over an existing collection unless asked; asked, it replaces it.
    assert!(matches!(
        archive::restore(&out, &target, false),
        Err(IndexError::AlreadyExists(_))
    ));
    let documents = |dir: &Path| {
        Collection::open(dir)
            .unwrap()
            .snapshot()
            .unwrap()
            .num_docs()
    };
    assert_eq!(documents(&target), 100);
    drop(copy);
    archive::restore(&out, &target, true).unwrap();
    assert_eq!(documents(&target), 99);
    // Nor into a directory of other files.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    assert!(archive::restore(&out, &other, true).is_err());
    assert_eq!(
        std::fs::read_to_string(other.join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}

/// Restoring `bytes` as an archive fails with `BadArchive` and creates nothing.
fn assert_refused(tmp: &Path, bytes: &[u8], what: &str) -> String {
    let path = tmp.join("bad.snapshot.tar");
    std::fs::write(&path, bytes).unwrap();
    let target = tmp.join("target");
    let err = archive::restore(&path, &target, false).expect_err(what);
    assert!(
        matches!(err, IndexError::BadArchive { .. }),
        "{what}: {err}"
    );
    assert!(!target.exists(), "{what}: the target appeared");
    assert!(leftovers(tmp).is_empty(), "{what}: {:?}", leftovers(tmp));
    err.to_string()
}

#[test]
fn truncated_altered_and_foreign_archives_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    committed(&live, 40);
    let out = tmp.path().join("good.snapshot.tar");
    let made = archive::write(&live, "live", &out).unwrap();
    let good = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();

    // (The last 1,024 bytes are the tar end marker: an archive cut there still holds everything.)
    for cut in [
        0,
        100,
        511,
        512,
        1024,
        good.len() / 3,
        good.len() / 2,
        good.len() - 1025,
        good.len() - 1600,
    ] {
        assert_refused(&scratch, &good[..cut], &format!("cut at {cut}"));
    }
    // One byte changed in each file's data: its checksum no longer matches.
    let mut offset = 512
        + (serde_json::to_vec_pretty(&made)
            .unwrap()
            .len()
            .div_ceil(512)
            * 512);
    for f in &made.files {
        if f.bytes == 0 {
            offset += 512;
            continue;
        }
        let mut altered = good.clone();
        let at = offset + 512 + (f.bytes as usize) / 2;
        altered[at] ^= 0x20;
        let message = assert_refused(&scratch, &altered, &f.path);
        assert!(
            message.contains(&f.path) || message.contains("snapshot.json"),
            "{message}"
        );
        offset += 512 + (f.bytes as usize).div_ceil(512) * 512;
    }
    assert_refused(&scratch, b"not a tar file at all", "text");
    assert_refused(&scratch, &vec![0u8; 4096], "zeros");
    // A tar file that is not a snapshot.
    let mut foreign = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(5);
    header.set_mode(0o644);
    foreign
        .append_data(&mut header, "hello.txt", &b"hello"[..])
        .unwrap();
    let message = assert_refused(&scratch, &foreign.into_inner().unwrap(), "foreign tar");
    assert!(message.contains("snapshot.json"), "{message}");
    // The good archive, for contrast, restores.
    std::fs::write(scratch.join("ok.snapshot.tar"), &good).unwrap();
    archive::restore(
        &scratch.join("ok.snapshot.tar"),
        &scratch.join("target"),
        false,
    )
    .unwrap();
}
