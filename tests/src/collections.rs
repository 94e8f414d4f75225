//! Every live document of a collection, read back through the engine, to compare collections
//! (a resumed run with a clean one, merged shards with one run).

use std::collections::BTreeMap;
use std::path::Path;

use lexlip_index::Collection;
use lexlip_proto::Document;

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
