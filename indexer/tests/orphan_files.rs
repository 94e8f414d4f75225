//! A commit killed after tantivy wrote a segment's new delete file (`<segment>.<opstamp>.del`)
//! but before `meta.json` named it leaves that file behind. The same write, retried after a
//! restart, comes to the same opstamp and must not fail on the leftover.
//!
//! The crash state is made exactly: the collection is copied before the write, the write runs
//! on the original, and the files it created are put into the copy as the killed commit left
//! them (on disk, and registered in tantivy's `.managed.json`, which tantivy writes before it
//! creates a file).

use std::collections::BTreeSet;
use std::path::Path;

use lexlip_index::{Collection, CollectionSettings};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};

fn files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir.join("index"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Writes (adds or replaces) documents `0..n` at `version` and commits.
fn write_docs(c: &Collection, version: u64, n: usize) {
    for i in 0..n {
        let mut d = Document::new(DocId::new(format!("d{i}")).unwrap(), Modality::Text);
        d.text = Some(format!("v{version}"));
        let v = QuantizedVector::new([("x", 1 + version), (format!("t{}", i % 13).as_str(), 2)])
            .unwrap();
        c.add(d, v).unwrap();
    }
    c.commit().unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

#[test]
fn a_retried_write_passes_a_killed_commits_delete_file() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("a");
    let c = Collection::create(
        &original,
        TermSpace::free("any"),
        CollectionSettings::default(),
        None,
    )
    .unwrap();
    write_docs(&c, 1, 300);
    drop(c);
    let crashed = tmp.path().join("b");
    copy_dir(&original, &crashed);
    let before = files(&original);

    // A replace of a third, on the original: which files does its commit create?
    let c = Collection::open(&original).unwrap();
    write_docs(&c, 2, 100);
    drop(c);
    let del: Vec<String> = files(&original)
        .difference(&before)
        .filter(|f| f.ends_with(".del"))
        .cloned()
        .collect();
    assert!(!del.is_empty(), "the replace wrote no delete file");

    // The copy as the killed commit left it: the delete file on disk and managed, no meta.
    let index = crashed.join("index");
    let managed_path = index.join(".managed.json");
    let mut managed: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(&managed_path).unwrap()).unwrap();
    for f in &del {
        std::fs::copy(original.join("index").join(f), index.join(f)).unwrap();
        managed.push(f.clone());
    }
    std::fs::write(&managed_path, serde_json::to_string(&managed).unwrap()).unwrap();

    // Restarted, the same write (the client's retry) succeeds, every time it is retried.
    let c = Collection::open(&crashed).unwrap();
    write_docs(&c, 2, 100);
    assert_eq!(c.snapshot().unwrap().num_docs(), 300);
    write_docs(&c, 3, 100);
    assert_eq!(c.snapshot().unwrap().num_docs(), 300);
}
