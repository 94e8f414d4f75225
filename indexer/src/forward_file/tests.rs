use std::path::Path;

use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};

use super::*;
use crate::collection::Collection;
use crate::manifest::CollectionSettings;
use crate::search::{Algorithm, SearchOptions};
use crate::synth::Rng;

/// Documents whose terms cover every layout: common terms (dense), terms in many blocks
/// (sparse with bound bytes and skips), rare ones, and impacts above 255 (two bytes).
fn fill(c: &mut Collection, seed: u64, docs: u32) {
    fill_wide(c, seed, docs, 900);
}

/// [`fill`] with the `wide` terms' impacts up to `200 + wide`.
fn fill_wide(c: &mut Collection, seed: u64, docs: u32, wide: u64) {
    c.set_flush_docs(700);
    let mut rng = Rng::new(seed);
    for i in 0..docs {
        let mut terms = std::collections::BTreeMap::new();
        terms.insert("the".to_string(), 1 + rng.next_u64() % 90);
        for _ in 0..6 {
            let t = match rng.next_u64() % 3 {
                0 => format!("mid{}", rng.next_u64() % 8),
                1 => format!("rare{}", rng.next_u64() % 600),
                _ => format!("wide{}", rng.next_u64() % 30),
            };
            let w = if t.starts_with("wide") {
                200 + rng.next_u64() % wide
            } else {
                1 + rng.next_u64() % 250
            };
            terms.insert(t, w);
        }
        let id = DocId::new(format!("d{i}")).unwrap();
        c.add(
            Document::new(id, Modality::Image),
            QuantizedVector::new(terms).unwrap(),
        )
        .unwrap();
    }
    c.commit().unwrap();
}

fn create(dir: &Path) -> Collection {
    let space = TermSpace::from_tokens("free", []);
    Collection::create(dir, space, CollectionSettings::default(), None).unwrap()
}

/// (term, its bytes in the file format), by term.
type TermBytes = Vec<(Vec<u8>, Vec<u8>)>;

/// Every term's bytes in the file format, and the documents' vectors' (documents layout).
fn encoded(m: &ForwardIndex) -> (TermBytes, Vec<u8>) {
    let mut terms: TermBytes = m
        .iter()
        .map(|(key, t)| {
            let mut buf = Vec::new();
            let n = t.term_info.doc_freq;
            encode(&t.postings, n, t.max, &mut buf);
            (key.to_vec(), buf)
        })
        .collect();
    terms.sort();
    let mut docs = Vec::new();
    if let Some(d) = &m.docs {
        encode_docs(d, &mut docs);
    }
    (terms, docs)
}

/// Every segment's file, read back, is byte for byte the forward index built from its
/// postings: after flushes, after deletes and after a merge, for both layouts (3- and
/// 4-byte entries in the documents layout) and several block sizes.
#[test]
fn files_hold_the_forward_index_built_from_the_postings() {
    let cases = [
        (Some(Layout::Terms), Some(8), 900),
        (Some(Layout::Terms), Some(32), 900),
        (Some(Layout::Terms), Some(64), 900),
        (None, None, 900),
        (Some(Layout::Documents), Some(32), 900),
        (Some(Layout::Documents), None, 40_000),
    ];
    for (layout, docs_per_block, wide) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut c = create(dir.path());
        c.set_block_size(docs_per_block).unwrap();
        c.set_forward_layout(layout);
        let plan = ForwardPlan {
            shift: docs_per_block.map(u32::trailing_zeros),
            layout,
        };
        // Short documents: the documents layout unless asked otherwise.
        let (want_layout, want_shift) = match layout.unwrap_or(Layout::Documents) {
            Layout::Terms => (Layout::Terms, plan.shift.unwrap_or(5)),
            Layout::Documents => (Layout::Documents, plan.shift.unwrap_or(3)),
        };
        fill_wide(&mut c, u64::from(docs_per_block.unwrap_or(1)), 2_000, wide);
        for i in (0..2_000).step_by(7) {
            c.delete(&DocId::new(format!("d{i}")).unwrap()).unwrap();
        }
        c.commit().unwrap();
        let check = |c: &Collection, segments: std::ops::RangeInclusive<usize>| {
            let snap = c.snapshot().unwrap();
            let readers = snap.searcher().segment_readers();
            assert!(
                segments.contains(&readers.len()),
                "{} segments",
                readers.len()
            );
            for reader in readers {
                let impacts = snap.fields().impacts;
                let read = read(reader, impacts).unwrap().expect("a file");
                assert_eq!((read.layout(), read.shift), (want_layout, want_shift));
                if let Some(d) = &read.docs {
                    let entry_bytes = if wide > 30_000 { 4 } else { 3 };
                    assert_eq!(d.layout().entry_bytes, entry_bytes);
                }
                let built = ForwardIndex::compute(reader, impacts, plan).unwrap();
                assert_eq!(encoded(&read), encoded(&built));
                // Read from the mapped file, the arrays take no heap: only the term table.
                let keys: usize = built.iter().map(|(key, _)| key.len()).sum();
                assert_eq!(read.heap_bytes(), keys + read.table_bytes());
                assert!(built.heap_bytes() > keys + built.table_bytes());
            }
        };
        check(&c, 2..=4);
        c.merge_all().unwrap();
        check(&c, 1..=1);
        // Merged-away segments' files are gone with them.
        let index_dir = dir.path().join("index");
        let files = std::fs::read_dir(&index_dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some(EXTENSION.as_ref()))
            .count();
        assert_eq!(files, 1);
    }
}

fn exact(c: &Collection, seed: u64) {
    let snap = c.snapshot().unwrap();
    let mut rng = Rng::new(seed);
    for _ in 0..20 {
        let q = QuantizedVector::new([
            ("the".to_string(), 1 + rng.next_u64() % 9),
            (
                format!("mid{}", rng.next_u64() % 8),
                1 + rng.next_u64() % 99,
            ),
            (
                format!("rare{}", rng.next_u64() % 600),
                1 + rng.next_u64() % 99,
            ),
            (
                format!("wide{}", rng.next_u64() % 30),
                1 + rng.next_u64() % 99,
            ),
        ])
        .unwrap();
        let exhaustive = SearchOptions {
            k: 10,
            algorithm: Algorithm::Exhaustive,
            ..SearchOptions::default()
        };
        let want = snap.search(&q, &exhaustive).unwrap().hits;
        assert_eq!(snap.search(&q, &SearchOptions::top(10)).unwrap().hits, want);
    }
}

/// A file that does not belong to its segment is refused, whatever is wrong with it, and
/// search stays exact (the forward index is built from the postings instead).
#[test]
fn a_damaged_file_is_refused_and_search_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = create(dir.path());
    fill(&mut c, 3, 1_500);
    c.merge_all().unwrap();
    drop(c);
    let file = std::fs::read_dir(dir.path().join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension() == Some(EXTENSION.as_ref()))
        .unwrap();
    let original = std::fs::read(&file).unwrap();
    // The documents' starts, at the end of the file: its non-zeros and entry width from
    // the dictionary and the header.
    let (max_doc, nnz) = {
        let c = Collection::open(dir.path()).unwrap();
        let snap = c.snapshot().unwrap();
        let reader = &snap.searcher().segment_readers()[0];
        let inverted = reader.inverted_index(snap.fields().impacts).unwrap();
        let mut stream = inverted.terms().stream().unwrap();
        let mut nnz = 0usize;
        while stream.advance() {
            nnz += stream.value().doc_freq as usize;
        }
        (reader.max_doc() as usize, nnz)
    };
    assert_eq!(original[16], 1, "the documents layout");
    let entries = nnz * original[24] as usize + doc_vectors::PADDING;
    let starts = original.len() - entries.next_multiple_of(4) - 4 * (max_doc + 1);
    // (offset, bytes): the magic; the block count; the layout; the first term's posting
    // count; its layout; a start in the middle of the documents'.
    let damages: [(usize, &[u8]); 6] = [
        (0, b"XX"),
        (12, &[0xff, 0xff]),
        (16, &[7]),
        (28, &[0xff, 0xff, 0xff, 0x7f]),
        (40, &[7]),
        (starts + 4 * (max_doc / 2), &[0xff, 0xff, 0xff, 0xff]),
    ];
    let mut refused = 0;
    for (at, bytes) in damages {
        let mut damaged = original.clone();
        damaged[at..at + bytes.len()].copy_from_slice(bytes);
        std::fs::write(&file, &damaged).unwrap();
        let c = Collection::open(dir.path()).unwrap();
        let snap = c.snapshot().unwrap();
        let reader = &snap.searcher().segment_readers()[0];
        refused += usize::from(read(reader, snap.fields().impacts).is_err());
        exact(&c, at as u64);
    }
    assert_eq!(refused, damages.len());
    std::fs::write(&file, &original).unwrap();
    let c = Collection::open(dir.path()).unwrap();
    let snap = c.snapshot().unwrap();
    assert!(read(&snap.searcher().segment_readers()[0], snap.fields().impacts).is_ok());
}

/// A file of version 1 (doc ids always 32-bit) written before narrow doc ids is read and
/// searched in place.
#[test]
fn version_1_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = create(dir.path());
    fill(&mut c, 9, 1_500);
    c.merge_all().unwrap();
    let snap = c.snapshot().unwrap();
    let reader = &snap.searcher().segment_readers()[0];
    let (shift, max_doc) = (5, reader.max_doc());
    let mut v1 = MAGIC.to_vec();
    v1.push(1);
    put_u32(&mut v1, shift);
    put_u32(&mut v1, forward_index::num_blocks(max_doc, shift));
    let mut narrow = 0;
    forward_index::for_each_term(reader, snap.fields().impacts, |_, _, postings, max| {
        let blocks = forward_index::num_blocks(max_doc, shift);
        let t = match TermPostings::build(postings, max, shift, blocks) {
            TermPostings::Sparse {
                docs,
                impacts,
                maxima,
                groups,
                group_shift,
            } => {
                narrow += usize::from(matches!(docs, Docs::Narrow(_)));
                TermPostings::Sparse {
                    docs: Docs::Wide(postings.iter().map(|p| p.0).collect()),
                    impacts,
                    maxima,
                    groups,
                    group_shift,
                }
            }
            dense => dense,
        };
        encode(&t, postings.len() as u32, max, &mut v1);
        Ok(())
    })
    .unwrap();
    assert!(narrow > 0, "version 2 would write narrow doc ids");
    let file = format!("{}.{EXTENSION}", reader.segment_id().uuid_string());
    drop((snap, c));
    // Through tantivy's managed directory, which adds the footer it checks on open.
    use tantivy::directory::{Directory, ManagedDirectory, MmapDirectory};
    let mmap = MmapDirectory::open(dir.path().join("index")).unwrap();
    let index = ManagedDirectory::wrap(Box::new(mmap)).unwrap();
    index.delete(file.as_ref()).unwrap();
    let mut out = index.open_write(file.as_ref()).unwrap();
    out.write_all(&v1).unwrap();
    out.terminate().unwrap();
    drop(index);
    let c = Collection::open(dir.path()).unwrap();
    let snap = c.snapshot().unwrap();
    let read = read(&snap.searcher().segment_readers()[0], snap.fields().impacts)
        .unwrap()
        .expect("a version 1 file");
    assert_eq!((read.layout(), read.shift), (Layout::Terms, 5));
    assert!(read.iter().all(|(_, t)| !matches!(
        t.postings,
        TermPostings::Sparse {
            docs: Docs::Narrow(_),
            ..
        }
    )));
    exact(&c, 9);
}

/// A collection searched with another block size than its files were written for builds
/// the forward index from the postings; one made before the files existed works without.
#[test]
fn other_block_sizes_and_collections_without_files_build_from_postings() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = create(dir.path());
    fill(&mut c, 5, 1_000);
    drop(c);
    let mut c = Collection::open(dir.path()).unwrap();
    assert!(c.has_forward_files());
    c.set_block_size(Some(16)).unwrap();
    let snap = c.snapshot().unwrap();
    for reader in snap.searcher().segment_readers() {
        assert!(file_bytes(reader) > 0);
        let file = read(reader, snap.fields().impacts).unwrap().unwrap();
        assert_eq!(file.shift, 3);
    }
    assert!(snap.forward_summary().iter().all(|s| s.block_size == 16));
    exact(&c, 6);
    // And another layout than the files'.
    c.set_block_size(None).unwrap();
    c.set_forward_layout(Some(Layout::Terms));
    let snap = c.snapshot().unwrap();
    assert!(
        snap.forward_summary()
            .iter()
            .all(|s| s.layout == Layout::Terms)
    );
    exact(&c, 7);

    // An index created without the plugin, as lexlip did before forward index files.
    let legacy = tempfile::tempdir().unwrap();
    drop(create(legacy.path()));
    let index_dir = legacy.path().join("index");
    std::fs::remove_dir_all(&index_dir).unwrap();
    std::fs::create_dir_all(&index_dir).unwrap();
    tantivy::Index::create_in_dir(&index_dir, crate::schema::build().0).unwrap();
    let mut c = Collection::open(legacy.path()).unwrap();
    assert!(!c.has_forward_files());
    fill(&mut c, 7, 1_000);
    c.merge_all().unwrap();
    let snap = c.snapshot().unwrap();
    assert_eq!(file_bytes(&snap.searcher().segment_readers()[0]), 0);
    exact(&c, 8);
}
