//! Every live document of a collection, read back through the engine, to compare collections
//! (a resumed run with a clean one, merged shards with one run); and collections as older
//! versions made them.

use std::collections::BTreeMap;
use std::path::Path;

use lexlip_index::{Collection, CollectionSettings};
use lexlip_proto::{Document, TermSpace};

/// Creates an empty collection at `dir` of the free term space `name` (any term) with the
/// default settings: what suites fill with precomputed vectors.
pub fn free_collection(dir: &Path, name: &str) -> Collection {
    Collection::create(
        dir,
        TermSpace::free(name),
        CollectionSettings::default(),
        None,
    )
    .expect("creating the collection")
}

/// Every live document of the collection at `dir`: id → `describe(document, sorted impacts)`.
pub fn documents<T>(
    dir: &Path,
    mut describe: impl FnMut(&Document, Vec<(String, u32)>) -> T,
) -> BTreeMap<String, T> {
    let c = Collection::open(dir).expect("opening the collection");
    let mut out = BTreeMap::new();
    c.snapshot()
        .expect("a snapshot")
        .for_each_document(|d| {
            let mut impacts: Vec<(String, u32)> = d
                .impacts
                .iter()
                .flat_map(|q| q.iter())
                .map(|(t, i)| (t.to_string(), i))
                .collect();
            impacts.sort();
            out.insert(d.doc.id.to_string(), describe(&d.doc, impacts));
            Ok(())
        })
        .expect("reading every document");
    out
}

/// Every live document: id → (modality, text, uri, metadata, impacts).
pub fn contents(dir: &Path) -> BTreeMap<String, String> {
    documents(dir, |d, impacts| {
        format!(
            "{:?}|{:?}|{:?}|{:?}|{impacts:?}",
            d.modality, d.text, d.uri, d.metadata
        )
    })
}

/// Every live document's sorted impacts.
pub fn impacts(dir: &Path) -> BTreeMap<String, Vec<(String, u32)>> {
    documents(dir, |_, impacts| impacts)
}

/// Creates at `dir` a collection as versions before image thumbnails made it: the same layout
/// and manifest, a tantivy schema without the `thumbnail` field.
pub fn legacy_without_thumbnails(dir: &Path, term_space: TermSpace, vocab: Option<&[String]>) {
    drop(
        Collection::create(dir, term_space, CollectionSettings::default(), vocab)
            .expect("creating the collection"),
    );
    let index = dir.join("index");
    std::fs::remove_dir_all(&index).expect("removing the new index");
    std::fs::create_dir_all(&index).expect("creating the index directory");
    tantivy::Index::create_in_dir(&index, lexlip_index::schema::build_legacy(true, false))
        .expect("creating the old index");
}
