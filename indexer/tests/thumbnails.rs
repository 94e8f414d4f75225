//! Thumbnails in real collections: stored with image documents and read back, replaced and
//! deleted with them, kept through segment merges and reopening; off by setting; and collections
//! made before the thumbnail field existed still open, take the same documents, and search.

use std::path::Path;

use lexlip_index::schema;
use lexlip_index::{Collection, CollectionSettings, DocExtras, Manifest, SearchOptions};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};

fn doc(id: &str, m: Modality) -> Document {
    Document::new(DocId::new(id).unwrap(), m)
}

fn impacts(n: u64) -> QuantizedVector {
    QuantizedVector::new([("dog", 10 + n), ("grass", 5)]).unwrap()
}

fn with_thumbnail(bytes: &[u8]) -> DocExtras {
    DocExtras {
        dense: None,
        thumbnail: Some(bytes.to_vec()),
    }
}

fn create(dir: &Path, settings: CollectionSettings) -> Collection {
    Collection::create(dir, TermSpace::free("test"), settings, None).unwrap()
}

fn thumbnail_of(c: &Collection, id: &str) -> Option<Vec<u8>> {
    c.snapshot()
        .unwrap()
        .get(id, false)
        .unwrap()
        .expect("the document exists")
        .thumbnail
}

/// A collection whose tantivy schema has no thumbnail field, as every collection made before
/// thumbnails existed: the same directory layout and manifest, the older schema.
fn legacy_collection(dir: &Path) {
    drop(create(dir, CollectionSettings::default()));
    let index_dir = dir.join("index");
    std::fs::remove_dir_all(&index_dir).unwrap();
    std::fs::create_dir_all(&index_dir).unwrap();
    tantivy::Index::create_in_dir(&index_dir, schema::build_legacy(true, false)).unwrap();
}

#[test]
fn thumbnails_are_stored_replaced_merged_and_reopened() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = create(tmp.path(), CollectionSettings::default());
    c.set_flush_docs(3);
    assert!(c.stores_thumbnails());
    for i in 0..10u64 {
        let bytes = vec![0xff, 0xd8, i as u8, 0xff, 0xd9];
        c.add_with(
            doc(&format!("img{i}"), Modality::Image),
            impacts(i),
            with_thumbnail(&bytes),
        )
        .unwrap();
    }
    c.add(doc("txt", Modality::Text), impacts(0)).unwrap();
    c.commit().unwrap();
    assert_eq!(
        thumbnail_of(&c, "img4"),
        Some(vec![0xff, 0xd8, 4, 0xff, 0xd9])
    );
    assert_eq!(thumbnail_of(&c, "txt"), None);

    // Replacing a document replaces its thumbnail; a replacement without one has none.
    c.add_with(
        doc("img4", Modality::Image),
        impacts(4),
        with_thumbnail(b"new"),
    )
    .unwrap();
    c.add(doc("img5", Modality::Image), impacts(5)).unwrap();
    c.commit().unwrap();
    assert_eq!(thumbnail_of(&c, "img4").as_deref(), Some(&b"new"[..]));
    assert_eq!(thumbnail_of(&c, "img5"), None);
    c.delete(&DocId::new("img6").unwrap()).unwrap();
    c.commit().unwrap();
    assert!(c.snapshot().unwrap().get("img6", false).unwrap().is_none());

    // Merged segments and a reopened collection keep them; hits and export see them too.
    c.merge_all().unwrap();
    drop(c);
    let c = Collection::open(tmp.path()).unwrap();
    // One segment per modality: the images', and the caption's.
    assert_eq!(c.snapshot().unwrap().searcher().segment_readers().len(), 2);
    assert_eq!(thumbnail_of(&c, "img4").as_deref(), Some(&b"new"[..]));
    assert_eq!(
        thumbnail_of(&c, "img9"),
        Some(vec![0xff, 0xd8, 9, 0xff, 0xd9])
    );
    let mut exported = 0;
    c.snapshot()
        .unwrap()
        .for_each_document(|d| {
            let want = match d.doc.id.as_str() {
                "txt" | "img5" => None,
                "img4" => Some(b"new".to_vec()),
                id => {
                    let i: u8 = id.trim_start_matches("img").parse().unwrap();
                    Some(vec![0xff, 0xd8, i, 0xff, 0xd9])
                }
            };
            assert_eq!(d.thumbnail, want, "{}", d.doc.id);
            exported += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(exported, 10);
    // The API form says only whether there is one.
    let got = c.snapshot().unwrap().get("img4", false).unwrap().unwrap();
    let json = serde_json::to_value(&got).unwrap();
    assert_eq!(json["thumbnail"], true);
    assert_eq!(json["dense"], false);
}

#[test]
fn thumbnails_off_drops_them_and_is_kept_in_the_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let off = CollectionSettings {
        thumbnails: false,
        ..CollectionSettings::default()
    };
    let c = create(&tmp.path().join("off"), off.clone());
    assert!(!c.stores_thumbnails());
    c.add_with(doc("a", Modality::Image), impacts(1), with_thumbnail(b"x"))
        .unwrap();
    c.commit().unwrap();
    assert_eq!(thumbnail_of(&c, "a"), None);
    drop(c);
    let text = std::fs::read_to_string(Manifest::path(&tmp.path().join("off"))).unwrap();
    assert!(text.contains("\"thumbnails\": false"), "{text}");
    let c = Collection::open(&tmp.path().join("off")).unwrap();
    assert_eq!(c.manifest().settings, off);

    // The default (on) is not written: manifests stay what they were before thumbnails.
    let on = create(&tmp.path().join("on"), CollectionSettings::default());
    drop(on);
    let text = std::fs::read_to_string(Manifest::path(&tmp.path().join("on"))).unwrap();
    assert!(!text.contains("thumbnails"), "{text}");
}

#[test]
fn collections_made_before_thumbnails_open_and_work() {
    let tmp = tempfile::tempdir().unwrap();
    legacy_collection(tmp.path());
    let c = Collection::open(tmp.path()).unwrap();
    assert!(!c.has_thumbnail_field());
    assert!(!c.stores_thumbnails());
    // Documents with a thumbnail are taken; the thumbnail is dropped, not refused.
    c.add_with(doc("a", Modality::Image), impacts(1), with_thumbnail(b"x"))
        .unwrap();
    c.add(doc("b", Modality::Text), impacts(2)).unwrap();
    c.commit().unwrap();
    drop(c);
    let c = Collection::open(tmp.path()).unwrap();
    let s = c.snapshot().unwrap();
    assert!(!s.has_thumbnail_field());
    let got = s.get("a", true).unwrap().unwrap();
    assert_eq!(got.thumbnail, None);
    assert_eq!(got.impacts, Some(impacts(1)));
    let hits = s.search(&impacts(0), &SearchOptions::top(10)).unwrap();
    assert_eq!(hits.hits.len(), 2);
    assert_eq!(s.hit(&hits.hits[0], None).unwrap().id, "b");
}

/// Pending documents are written as a segment once their thumbnails add up to 128 MB, whatever
/// their number, so that memory stays bounded.
#[test]
fn large_pending_thumbnails_are_flushed_early() {
    let tmp = tempfile::tempdir().unwrap();
    let c = create(tmp.path(), CollectionSettings::default());
    let big = vec![0u8; 20 << 20];
    for i in 0..8u64 {
        c.add_with(
            doc(&format!("big{i}"), Modality::Image),
            impacts(i),
            with_thumbnail(&big),
        )
        .unwrap();
    }
    c.commit().unwrap();
    let s = c.snapshot().unwrap();
    let sizes: Vec<u32> = s
        .searcher()
        .segment_readers()
        .iter()
        .map(|r| r.num_docs())
        .collect();
    assert_eq!(
        sizes,
        [7, 1],
        "flushed after the 7th (140 MB), the 8th at commit"
    );
    assert_eq!(
        s.get("big7", false)
            .unwrap()
            .unwrap()
            .thumbnail
            .unwrap()
            .len(),
        big.len()
    );
}
