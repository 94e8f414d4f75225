//! Writes are all-or-nothing. Whatever sequence of adds, replaces and deletes a collection takes
//! (with segments flushed mid-way, as large batches do), the directory on disk holds exactly the
//! last commit at every moment — what a process killed with SIGKILL there would leave — and a
//! rolled-back write is never published. The oracle is a map from id to version.

use std::collections::BTreeMap;
use std::path::Path;

use lexlip_index::{Collection, CollectionSettings, schema};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};
use proptest::prelude::*;

const IDS: u8 = 6;

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    Delete(u8),
    Commit,
    Rollback,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..IDS).prop_map(Op::Add),
        2 => (0..IDS).prop_map(Op::Delete),
        2 => Just(Op::Commit),
        1 => Just(Op::Rollback),
    ]
}

/// Without rollbacks: collections made before the `batch` field commit mid-way, which a
/// rollback cannot undo.
fn op_no_rollback() -> impl Strategy<Value = Op> {
    op().prop_filter("no rollback", |o| !matches!(o, Op::Rollback))
}

fn doc(id: u8, version: u32) -> (Document, QuantizedVector) {
    let mut d = Document::new(DocId::new(format!("d{id}")).unwrap(), Modality::Text);
    d.text = Some(format!("v{version}"));
    let impacts = QuantizedVector::new([("word", 1 + u64::from(version)), ("other", 3)]).unwrap();
    (d, impacts)
}

/// id → version of the `d*` documents, read through a snapshot.
fn contents(c: &Collection) -> BTreeMap<u8, u32> {
    let snapshot = c.snapshot().unwrap();
    let mut out = BTreeMap::new();
    for id in 0..IDS {
        if let Some(found) = snapshot.get(&format!("d{id}"), false).unwrap() {
            let text = found.doc.text.expect("text stored");
            out.insert(id, text[1..].parse().unwrap());
        }
    }
    out
}

/// [`contents`], checking that no id is stored twice (the collection holds `d*` only).
fn all_contents(c: &Collection) -> BTreeMap<u8, u32> {
    let out = contents(c);
    assert_eq!(
        c.snapshot().unwrap().num_docs(),
        out.len() as u64,
        "an id is stored twice: {out:?}"
    );
    out
}

/// What a process started now on the directory would see.
fn on_disk(dir: &Path) -> BTreeMap<u8, u32> {
    all_contents(&Collection::open(dir).unwrap())
}

fn new_collection(dir: &Path) -> Collection {
    Collection::create(
        dir,
        TermSpace::free("t"),
        CollectionSettings::default(),
        None,
    )
    .unwrap()
}

/// A collection whose schema predates the `batch` field.
fn legacy_collection(dir: &Path) -> Collection {
    drop(new_collection(dir));
    let index_dir = dir.join("index");
    std::fs::remove_dir_all(&index_dir).unwrap();
    std::fs::create_dir_all(&index_dir).unwrap();
    tantivy::Index::create_in_dir(&index_dir, schema::build_legacy(true, true)).unwrap();
    Collection::open(dir).unwrap()
}

/// Runs `ops`; after every step the live collection and (where `atomic`) the directory match
/// the oracle at its last commit; without `atomic`, the live collection after each commit.
fn run(c: &mut Collection, dir: &Path, ops: &[Op], atomic: bool) {
    c.set_flush_docs(2);
    let mut current: BTreeMap<u8, u32> = BTreeMap::new();
    let mut committed = current.clone();
    for (version, op) in (0u32..).zip(ops) {
        match op {
            Op::Add(id) => {
                let (d, impacts) = doc(*id, version);
                c.add(d, impacts).unwrap();
                current.insert(*id, version);
            }
            Op::Delete(id) => {
                let existed = c.delete(&DocId::new(format!("d{id}")).unwrap()).unwrap();
                assert_eq!(existed, current.remove(id).is_some(), "delete d{id}");
            }
            Op::Commit => {
                c.commit().unwrap();
                committed = current.clone();
            }
            Op::Rollback => {
                c.rollback().unwrap();
                current = committed.clone();
            }
        }
        if atomic || matches!(op, Op::Commit) {
            assert_eq!(all_contents(c), committed, "live view after {op:?}");
        }
        if atomic {
            assert_eq!(on_disk(dir), committed, "on disk after {op:?}");
        }
    }
    c.commit().unwrap();
    assert_eq!(all_contents(c), current);
    assert_eq!(on_disk(dir), current);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn disk_holds_the_last_commit_at_every_step(ops in prop::collection::vec(op(), 1..28)) {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = new_collection(tmp.path());
        run(&mut c, tmp.path(), &ops, true);
    }

    /// Collections made before the `batch` field replace in two commits: not atomic on disk,
    /// but the same documents once committed.
    #[test]
    fn collections_without_the_batch_field_keep_the_same_semantics(ops in prop::collection::vec(op_no_rollback(), 1..28)) {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = legacy_collection(tmp.path());
        run(&mut c, tmp.path(), &ops, false);
    }
}

/// The case the crash probe found: a committed document, then a batch large enough to be
/// written as segments before its commit, replacing it. Until the commit the directory still
/// holds the old version; after it, only the new one.
#[test]
fn a_large_replacing_batch_is_invisible_on_disk_until_its_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = new_collection(tmp.path());
    let (d, impacts) = doc(0, 1);
    c.add(d, impacts).unwrap();
    c.commit().unwrap();
    c.set_flush_docs(10);
    for i in 0..95u32 {
        let mut d = Document::new(DocId::new(format!("n{i}")).unwrap(), Modality::Text);
        d.text = Some("new".into());
        c.add(d, QuantizedVector::new([("word", 2)]).unwrap())
            .unwrap();
        if i == 50 {
            let (d, impacts) = doc(0, 2);
            c.add(d, impacts).unwrap();
        }
    }
    let before = Collection::open(tmp.path()).unwrap();
    assert_eq!(before.snapshot().unwrap().num_docs(), 1);
    assert_eq!(contents(&before), BTreeMap::from([(0, 1)]));
    c.commit().unwrap();
    let after = Collection::open(tmp.path()).unwrap();
    assert_eq!(after.snapshot().unwrap().num_docs(), 96);
    assert_eq!(contents(&after), BTreeMap::from([(0, 2)]));
}

/// A write that fails half-way leaves nothing behind, and the next successful write publishes
/// only itself (before, it also committed what the failed one had buffered).
#[test]
fn a_failed_transaction_is_never_published() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = new_collection(tmp.path());
    c.set_flush_docs(2);
    c.transaction(|c| {
        let (d, impacts) = doc(0, 1);
        c.add(d, impacts)
    })
    .unwrap();
    let failed = c.transaction(|c| {
        for (id, version) in [(0, 2), (1, 2), (2, 2)] {
            let (d, impacts) = doc(id, version);
            c.add(d, impacts)?;
        }
        c.delete(&DocId::new("d0").unwrap())?;
        Err::<(), _>(lexlip_index::IndexError::ReadOnly)
    });
    assert!(failed.is_err());
    assert_eq!(all_contents(&c), BTreeMap::from([(0, 1)]));
    c.transaction(|c| {
        let (d, impacts) = doc(3, 3);
        c.add(d, impacts)
    })
    .unwrap();
    assert_eq!(all_contents(&c), BTreeMap::from([(0, 1), (3, 3)]));
    assert_eq!(on_disk(tmp.path()), BTreeMap::from([(0, 1), (3, 3)]));
}
