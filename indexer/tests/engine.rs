//! Collections end to end through the public API: write, commit, search, explain, filter,
//! replace, delete, reopen, term-space checks — on real tantivy directories.

use lexlip_index::{Collection, CollectionSettings, IndexError, SearchOptions};
use lexlip_proto::VectorInput;
use lexlip_proto::api::{Filter, Precision};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, SparseVector, TermSpace};

fn free_space() -> TermSpace {
    TermSpace::from_tokens("test", [])
}

fn new_collection(dir: &std::path::Path) -> Collection {
    Collection::create(dir, free_space(), CollectionSettings::default(), None).unwrap()
}

fn doc(id: &str, modality: Modality) -> Document {
    Document::new(DocId::new(id).unwrap(), modality)
}

fn q(pairs: &[(&str, u64)]) -> QuantizedVector {
    QuantizedVector::new(pairs.iter().map(|&(t, i)| (t, i))).unwrap()
}

fn ids(c: &Collection, query: &QuantizedVector, options: &SearchOptions) -> Vec<(String, u64)> {
    let snap = c.snapshot().unwrap();
    let out = snap.search(query, options).unwrap();
    out.hits
        .iter()
        .map(|h| (snap.hit(h, None).unwrap().id, h.score))
        .collect()
}

#[test]
fn impacts_are_term_frequencies_and_scores_are_dot_products() {
    let dir = tempfile::tempdir().unwrap();
    let c = new_collection(dir.path());
    let mut d = doc("a", Modality::Image);
    d.uri = Some("img/a.jpg".into());
    d.text = Some("a brown dog".into());
    d.metadata.insert("split".into(), "train".into());
    c.add(d.clone(), q(&[("dog", 200), ("brown", 90), ("grass", 3)]))
        .unwrap();
    c.add(doc("b", Modality::Text), q(&[("cat", 150), ("dog", 10)]))
        .unwrap();
    c.commit().unwrap();

    let query = q(&[("dog", 120), ("grass", 80)]);
    assert_eq!(
        ids(&c, &query, &SearchOptions::top(10)),
        vec![("a".into(), 120 * 200 + 80 * 3), ("b".into(), 120 * 10)]
    );
    let snap = c.snapshot().unwrap();
    let out = snap.search(&query, &SearchOptions::top(1)).unwrap();
    let hit = snap.hit(&out.hits[0], Some(&query)).unwrap();
    assert_eq!(hit.uri.as_deref(), Some("img/a.jpg"));
    assert_eq!(hit.text.as_deref(), Some("a brown dog"));
    assert_eq!(hit.metadata["split"], "train");
    let explain = hit.explain.unwrap();
    assert_eq!(explain.len(), 2);
    assert_eq!(
        (
            explain[0].term.as_str(),
            explain[0].query_impact,
            explain[0].doc_impact
        ),
        ("dog", 120, 200)
    );
    assert_eq!(explain[0].contribution, 24_000);
    assert_eq!(
        (explain[1].term.as_str(), explain[1].doc_impact),
        ("grass", 3)
    );

    // Impacts read back from tantivy's postings are exactly what was written.
    let stored = snap.get("a", true).unwrap().unwrap();
    assert_eq!(stored.doc, d);
    assert_eq!(
        stored.impacts.unwrap(),
        q(&[("dog", 200), ("brown", 90), ("grass", 3)])
    );

    let stats = c.stats().unwrap();
    assert_eq!(
        (
            stats.documents,
            stats.images,
            stats.texts,
            stats.terms,
            stats.nnz
        ),
        (2, 1, 1, 4, 5)
    );
}

#[test]
fn replace_delete_reopen_and_visibility() {
    let dir = tempfile::tempdir().unwrap();
    let c = new_collection(dir.path());
    c.add(doc("a", Modality::Text), q(&[("x", 5)])).unwrap();
    c.add(doc("b", Modality::Text), q(&[("x", 7)])).unwrap();
    c.commit().unwrap();
    // Uncommitted writes are invisible.
    c.add(doc("a", Modality::Text), q(&[("x", 9)])).unwrap();
    c.add(doc("c", Modality::Text), q(&[("x", 1)])).unwrap();
    assert_eq!(
        ids(&c, &q(&[("x", 1)]), &SearchOptions::top(10)),
        vec![("b".into(), 7), ("a".into(), 5)]
    );
    c.commit().unwrap();
    assert_eq!(
        ids(&c, &q(&[("x", 1)]), &SearchOptions::top(10)),
        vec![("a".into(), 9), ("b".into(), 7), ("c".into(), 1)]
    );
    // Re-add within one batch: last wins; delete of pending and of committed documents.
    c.add(doc("d", Modality::Text), q(&[("x", 2)])).unwrap();
    c.add(doc("d", Modality::Text), q(&[("x", 4)])).unwrap();
    assert!(c.delete(&DocId::new("b").unwrap()).unwrap());
    assert!(!c.delete(&DocId::new("zzz").unwrap()).unwrap());
    c.add(doc("e", Modality::Text), q(&[("x", 3)])).unwrap();
    assert!(c.delete(&DocId::new("e").unwrap()).unwrap());
    c.commit().unwrap();
    let expect = vec![("a".to_string(), 9), ("d".into(), 4), ("c".into(), 1)];
    assert_eq!(ids(&c, &q(&[("x", 1)]), &SearchOptions::top(10)), expect);
    drop(c);

    let c = Collection::open(dir.path()).unwrap();
    assert_eq!(ids(&c, &q(&[("x", 1)]), &SearchOptions::top(10)), expect);
    assert_eq!(c.snapshot().unwrap().num_docs(), 3);
    // Merging keeps impacts (tantivy's merger copies term frequencies).
    c.merge_all().unwrap();
    assert_eq!(c.stats().unwrap().segments, 1);
    assert_eq!(ids(&c, &q(&[("x", 1)]), &SearchOptions::top(10)), expect);
}

#[test]
fn filters_by_modality_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let c = new_collection(dir.path());
    for (i, (m, split, year, ok)) in [
        (Modality::Image, "train", 2020, true),
        (Modality::Image, "test", 2021, false),
        (Modality::Text, "train", 2021, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut d = doc(&format!("d{i}"), m);
        d.metadata.insert("split".into(), split.into());
        d.metadata.insert("year".into(), year.into());
        d.metadata.insert("ok".into(), ok.into());
        // Keys with dots and backslashes are matched whole.
        d.metadata
            .insert("source.name".into(), format!("s{}", i % 2).into());
        d.metadata.insert("a\\b".into(), "y".into());
        c.add(d, q(&[("x", 10 - i as u64)])).unwrap();
    }
    c.commit().unwrap();
    let query = q(&[("x", 1)]);
    let with = |filter: Filter| {
        let o = SearchOptions {
            k: 10,
            filter,
            ..SearchOptions::default()
        };
        ids(&c, &query, &o)
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>()
    };
    let meta = |k: &str, v: serde_json::Value| {
        let mut m = serde_json::Map::new();
        m.insert(k.into(), v);
        Filter {
            modality: None,
            metadata: m,
        }
    };
    assert_eq!(
        with(Filter {
            modality: Some(Modality::Image),
            ..Filter::default()
        }),
        ["d0", "d1"]
    );
    assert_eq!(
        with(Filter {
            modality: Some(Modality::Text),
            ..Filter::default()
        }),
        ["d2"]
    );
    assert_eq!(with(meta("split", "train".into())), ["d0", "d2"]);
    assert_eq!(with(meta("year", 2021.into())), ["d1", "d2"]);
    assert_eq!(with(meta("ok", false.into())), ["d1"]);
    assert_eq!(with(meta("source.name", "s0".into())), ["d0", "d2"]);
    assert_eq!(with(meta("a\\b", "y".into())), ["d0", "d1", "d2"]);
    assert!(with(meta("source", "s0".into())).is_empty());
    let mut both = meta("split", "train".into());
    both.modality = Some(Modality::Image);
    assert_eq!(with(both), ["d0"]);
    let bad = SearchOptions {
        k: 10,
        filter: meta("split", serde_json::json!([1])),
        ..SearchOptions::default()
    };
    assert!(matches!(
        c.snapshot().unwrap().search(&query, &bad),
        Err(IndexError::InvalidQuery(_))
    ));
}

#[test]
fn settings_vocabulary_and_term_space_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let vocab: Vec<String> = ["[PAD]", "dog", "cat"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let space = TermSpace::from_tokens("tiny", vocab.iter().map(String::as_str));
    let settings = CollectionSettings {
        scale: 100.0,
        top_k_terms: Some(1),
        dense_dim: None,
        ..CollectionSettings::default()
    };
    let c = Collection::create(dir.path(), space.clone(), settings, Some(&vocab)).unwrap();
    // Floats are quantized with the scale, then only the top-1 term is kept.
    let w = SparseVector::new([("dog", 1.234f32), ("cat", 0.5)]).unwrap();
    let v = c.quantizer().document(VectorInput::Weights(w)).unwrap();
    assert_eq!(v, q(&[("dog", 123)]));
    let unknown = c
        .quantizer()
        .document(VectorInput::Impacts(q(&[("zebra", 3)])));
    assert!(matches!(unknown, Err(IndexError::UnknownTerm { .. })));
    assert!(c.add(doc("a", Modality::Text), q(&[("zebra", 3)])).is_err());
    drop(c);

    let other = TermSpace::from_tokens("other", ["[PAD]", "dog"]);
    let err = Collection::open_for(dir.path(), &other).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("tiny") && msg.contains("other"), "{msg}");
    assert!(Collection::open_for(dir.path(), &space).is_ok());
    assert!(matches!(
        Collection::create(dir.path(), space, CollectionSettings::default(), None),
        Err(IndexError::AlreadyExists(_))
    ));
    let bad = CollectionSettings {
        scale: 0.0,
        ..CollectionSettings::default()
    };
    assert!(Collection::create(&dir.path().join("x"), free_space(), bad, None).is_err());
    assert!(Collection::open(&dir.path().join("nope")).is_err());
}

#[test]
fn invalid_search_options_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let c = new_collection(dir.path());
    let snap = c.snapshot().unwrap();
    let query = q(&[("x", 1)]);
    assert!(snap.search(&query, &SearchOptions::top(0)).is_err());
    let approx = SearchOptions {
        k: 3,
        precision: Precision::Approx(0.5),
        ..SearchOptions::default()
    };
    assert!(snap.search(&query, &approx).is_err());
    assert!(
        snap.search(&query, &SearchOptions::top(5))
            .unwrap()
            .hits
            .is_empty()
    );
}

/// A segment whose forward file is gone (a background merge deletes a merged segment's file
/// while a snapshot may still hold the segment) still has stats, and its search stays exact: the
/// bounds are built from the postings.
#[test]
fn stats_and_search_without_a_forward_file() {
    let dir = tempfile::tempdir().unwrap();
    let c = new_collection(dir.path());
    for i in 0..8u64 {
        c.add(doc(&format!("d{i}"), Modality::Text), q(&[("t", 1 + i)]))
            .unwrap();
    }
    c.commit().unwrap();
    let mut removed = 0;
    for entry in std::fs::read_dir(dir.path().join("index")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "fwd") {
            std::fs::remove_file(&path).unwrap();
            removed += 1;
        }
    }
    assert!(removed > 0, "the collection wrote no forward file");
    let reopened = Collection::open(dir.path()).unwrap();
    let stats = reopened.stats().unwrap();
    assert_eq!(stats.documents, 8);
    assert_eq!(stats.forward_file_bytes, 0);
    let hits = reopened
        .snapshot()
        .unwrap()
        .search(&q(&[("t", 1)]), &SearchOptions::top(3))
        .unwrap()
        .hits;
    let scores: Vec<u64> = hits.iter().map(|h| h.score).collect();
    assert_eq!(scores, [8, 7, 6]);
}

/// `stats` lists the directory while background merges delete the files of merged segments; a
/// file gone between listing and `stat` is not an error (CI once failed on exactly that).
#[test]
fn stats_while_merges_delete_files() {
    let dir = tempfile::tempdir().unwrap();
    let c = new_collection(dir.path());
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for i in 0..60 {
                for j in 0..4 {
                    let id = format!("d{i}-{j}");
                    c.add(doc(&id, Modality::Text), q(&[("t", 1 + j), ("u", i + 1)]))
                        .unwrap();
                }
                c.commit().unwrap();
            }
        });
        while !writer.is_finished() {
            let s = c.stats().unwrap();
            assert!(s.documents <= 240);
        }
        writer.join().unwrap();
    });
    c.wait_merges().unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.documents, 240);
    assert!(s.bytes > 0);
}

#[test]
fn a_cancelled_search_stops_and_an_uncancelled_one_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let c = new_collection(dir.path());
    for i in 0..500u64 {
        let d = doc(&format!("d{i}"), Modality::Text);
        c.add(d, q(&[("dog", 1 + i % 200), ("cat", 1 + (i * 7) % 90)]))
            .unwrap();
    }
    c.commit().unwrap();
    let query = q(&[("dog", 3), ("cat", 5)]);
    for algorithm in [
        lexlip_index::Algorithm::BlockMax,
        lexlip_index::Algorithm::Postings,
        lexlip_index::Algorithm::Exhaustive,
    ] {
        let plain = SearchOptions {
            k: 10,
            algorithm,
            ..SearchOptions::default()
        };
        let watched = SearchOptions {
            cancel: lexlip_index::Cancel::new(),
            ..plain.clone()
        };
        // A flag nobody sets changes nothing.
        assert_eq!(ids(&c, &query, &watched), ids(&c, &query, &plain));
        // A set flag stops the search with a `Cancelled` error.
        watched.cancel.cancel();
        let snap = c.snapshot().unwrap();
        assert!(matches!(
            snap.search(&query, &watched),
            Err(IndexError::Cancelled)
        ));
        // Dropping the guard of a fresh flag sets it.
        let flag = lexlip_index::Cancel::new();
        drop(flag.on_drop());
        assert!(flag.is_cancelled());
    }
}

/// Images and texts go to segments of their own and stay apart when segments merge, so each
/// segment gets the forward layout of its documents (long image lexicons: terms; short
/// captions: documents) and a search for one modality bounds none of the other's blocks. The
/// results equal the exhaustive search's, with and without the filter.
#[test]
fn images_and_texts_live_in_segments_of_their_own() {
    use lexlip_index::{Algorithm, forward_index::Layout};
    let dir = tempfile::tempdir().unwrap();
    let mut c = new_collection(dir.path());
    c.set_flush_docs(60);
    // Image lexicons of 300 terms, captions of 6, added in turn.
    let vector = |pairs: Vec<(u64, u64)>| {
        QuantizedVector::new(pairs.into_iter().map(|(t, w)| (format!("t{t}"), w))).unwrap()
    };
    let image = |i: u64| vector((0..300).map(|t| (t, 1 + (t * 7 + i) % 90)).collect());
    let text = |i: u64| {
        vector(
            (0..6)
                .map(|t| ((i + t * 37) % 300, 1 + (i + t) % 50))
                .collect(),
        )
    };
    for i in 0..240u64 {
        c.add(doc(&format!("img{i}"), Modality::Image), image(i))
            .unwrap();
        c.add(doc(&format!("txt{i}"), Modality::Text), text(i))
            .unwrap();
        if i % 80 == 79 {
            c.commit().unwrap();
        }
    }
    c.merge_all().unwrap();
    assert_eq!(c.stats().unwrap().segments, 2);
    let snap = c.snapshot().unwrap();
    let mut layouts: Vec<Layout> = snap.forward_summary().iter().map(|f| f.layout).collect();
    layouts.sort_by_key(|l| format!("{l:?}"));
    assert_eq!(layouts, vec![Layout::Documents, Layout::Terms]);

    // An image query against the captions, as image → text searches.
    let query = image(7);
    let mut candidates = Vec::new();
    for modality in [None, Some(Modality::Text), Some(Modality::Image)] {
        let filter = Filter {
            modality,
            ..Filter::default()
        };
        let options = SearchOptions {
            k: 10,
            filter: filter.clone(),
            ..SearchOptions::default()
        };
        let pruned = snap.search(&query, &options).unwrap();
        let exhaustive = snap
            .search(
                &query,
                &SearchOptions {
                    algorithm: Algorithm::Exhaustive,
                    ..options.clone()
                },
            )
            .unwrap();
        assert_eq!(pruned.hits, exhaustive.hits);
        for h in &pruned.hits {
            let hit = snap.hit(h, None).unwrap();
            assert!(modality.is_none_or(|m| hit.modality == m), "{hit:?}");
        }
        candidates.push(pruned.stats.blocks_candidate);
    }
    // A filtered search bounds only its modality's segment: the blocks of both add up to those
    // of the unfiltered search.
    assert!(candidates.iter().all(|&c| c > 0), "{candidates:?}");
    assert_eq!(
        candidates[1] + candidates[2],
        candidates[0],
        "{candidates:?}"
    );
}
