//! The dense fallback index against a brute-force cosine over a plain map of live documents:
//! exact scans must agree exactly, HNSW graphs must keep a high recall, filters and deletes
//! must hold, and vectors must survive reopening.

use std::collections::BTreeMap;

use lexlip_index::dense::DenseParams;
use lexlip_index::{Collection, CollectionSettings};
use lexlip_proto::api::Filter;
use lexlip_proto::{DenseVector, DocId, Document, Modality, QuantizedVector, TermSpace};
use proptest::prelude::*;

const DIM: usize = 16;

fn unit(seed: u64) -> DenseVector {
    // SplitMix64 → uniform in [-1, 1): deterministic, well spread.
    let mut x = seed;
    let v = (0..DIM)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    DenseVector::new(v).unwrap().normalized()
}

/// A collection of a free term space (any term) at `dir` with `settings`.
fn free(dir: &std::path::Path, settings: CollectionSettings) -> Collection {
    Collection::create(dir, TermSpace::from_tokens("free", []), settings, None).unwrap()
}

fn create(dir: &std::path::Path, flush: usize, params: DenseParams) -> Collection {
    let settings = CollectionSettings {
        dense_dim: Some(DIM),
        ..CollectionSettings::default()
    };
    let mut c = free(dir, settings);
    c.set_flush_docs(flush);
    c.set_dense_params(params);
    c
}

fn doc(id: &str, modality: Modality) -> Document {
    Document::new(DocId::new(id).unwrap(), modality)
}

fn sparse() -> QuantizedVector {
    QuantizedVector::new([("x", 1u64)]).unwrap()
}

/// Brute force over the live map: ids by cosine, ties by insertion-independent id order is not
/// what the index does, so compare score lists and id sets above the k-th score.
fn brute(
    live: &BTreeMap<String, (DenseVector, Modality)>,
    q: &DenseVector,
    k: usize,
    m: Option<Modality>,
) -> Vec<(String, f32)> {
    let q = q.normalized();
    let mut all: Vec<(String, f32)> = live
        .iter()
        .filter(|(_, (_, mm))| m.is_none_or(|m| m == *mm))
        .map(|(id, (v, _))| (id.clone(), v.dot(&q)))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

/// A collection whose segments of 500 or more vectors get a graph, flushed only on commit.
fn with_graphs(dir: &std::path::Path) -> Collection {
    let params = DenseParams {
        hnsw_min_docs: 500,
        ..DenseParams::default()
    };
    create(dir, 100_000, params)
}

/// Adds the documents `d0..dN` (`n` of them) with the vectors `unit(i)` and the modalities
/// `modality(i)`, and commits; returns them as the live map [`brute`] searches.
fn add_units(
    c: &Collection,
    n: u64,
    modality: impl Fn(u64) -> Modality,
) -> BTreeMap<String, (DenseVector, Modality)> {
    let mut live = BTreeMap::new();
    for i in 0..n {
        let (id, v, m) = (format!("d{i}"), unit(i), modality(i));
        c.add_with_dense(doc(&id, m), sparse(), Some(v.clone()))
            .unwrap();
        live.insert(id, (v, m));
    }
    c.commit().unwrap();
    live
}

/// Adds 600 image documents with dense vectors (enough for a graph under [`with_graphs`]) and
/// commits.
fn add_600_images(c: &Collection) {
    add_units(c, 600, |_| Modality::Image);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Exact dense search == brute force, over several segments with replaces and deletes.
    #[test]
    fn exact_dense_equals_brute_force(
        n in 20usize..120,
        flush in 7usize..40,
        seed in 0u64..1000,
        k in 1usize..15,
        deletes in proptest::collection::vec(0usize..120, 0..20),
        images_only in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let c = create(tmp.path(), flush, DenseParams { hnsw_min_docs: usize::MAX, ..DenseParams::default() });
        let mut live = BTreeMap::new();
        for i in 0..n {
            // Every 5th id is written twice: the second vector replaces the first.
            let id = format!("d{}", if i % 5 == 4 { i - 1 } else { i });
            let m = if i % 3 == 0 { Modality::Text } else { Modality::Image };
            let v = unit(seed * 1000 + i as u64);
            c.add_with_dense(doc(&id, m), sparse(), Some(v.clone())).unwrap();
            live.insert(id, (v, m));
            if i % 17 == 16 { c.commit().unwrap(); }
        }
        c.commit().unwrap();
        for d in deletes {
            let id = format!("d{d}");
            let existed = c.delete(&DocId::new(&id).unwrap()).unwrap();
            prop_assert_eq!(existed, live.remove(&id).is_some());
        }
        c.commit().unwrap();
        let q = unit(seed + 7_777_777);
        let m = images_only.then_some(Modality::Image);
        let filter = Filter { modality: m, ..Filter::default() };
        let snap = c.snapshot().unwrap();
        let got = snap.search_dense(&q, k, true, &filter).unwrap();
        let want = brute(&live, &q, k, m);
        prop_assert_eq!(got.len(), want.len());
        for (g, (wid, ws)) in got.iter().zip(&want) {
            prop_assert!((g.score - ws).abs() < 1e-5, "{} vs {}", g.score, ws);
            let hit = snap.hit_at(g.segment_ord, g.doc, g.score as f64).unwrap();
            // Equal scores may come in a different order than the brute force's id order.
            if (g.score - ws).abs() > 1e-6 || want.iter().filter(|w| (w.1 - ws).abs() < 1e-6).count() == 1 {
                prop_assert_eq!(&hit.id, wid);
            }
            if let Some(m) = m { prop_assert_eq!(hit.modality, m); }
        }
    }
}

#[test]
fn hnsw_graph_keeps_recall_and_respects_deletes() {
    let tmp = tempfile::tempdir().unwrap();
    let c = with_graphs(tmp.path());
    let mut live = add_units(&c, 3000, |_| Modality::Image);
    for i in (0..3000).step_by(7) {
        let id = format!("d{i}");
        assert!(c.delete(&DocId::new(&id).unwrap()).unwrap());
        live.remove(&id);
    }
    c.commit().unwrap();
    let snap = c.snapshot().unwrap();
    let (mut found, mut total) = (0, 0);
    for qi in 0..50 {
        let q = unit(1_000_000 + qi);
        let want = brute(&live, &q, 10, None);
        let got = snap
            .search_dense(&q, 10, false, &Filter::default())
            .unwrap();
        let got_ids: Vec<String> = got
            .iter()
            .map(|g| snap.hit_at(g.segment_ord, g.doc, 0.0).unwrap().id)
            .collect();
        for id in &got_ids {
            assert!(live.contains_key(id), "deleted document {id} returned");
        }
        found += want.iter().filter(|(id, _)| got_ids.contains(id)).count();
        total += want.len();
    }
    let recall = found as f64 / total as f64;
    eprintln!("HNSW recall@10 over 50 queries: {recall:.3}");
    assert!(recall >= 0.9, "recall {recall}");
}

#[test]
fn dense_vectors_survive_reopen_and_bad_dimensions_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let c = create(tmp.path(), 1000, DenseParams::default());
    let v = unit(1);
    c.add_with_dense(doc("a", Modality::Image), sparse(), Some(v.clone()))
        .unwrap();
    let wrong = DenseVector::new(vec![1.0; DIM + 1]).unwrap();
    let err = c
        .add_with_dense(doc("b", Modality::Image), sparse(), Some(wrong))
        .unwrap_err();
    assert!(err.to_string().contains("dimension"), "{err}");
    c.commit().unwrap();
    drop(c);
    let c = Collection::open(tmp.path()).unwrap();
    let got = c.snapshot().unwrap().get("a", false).unwrap().unwrap();
    let stored = got.dense.unwrap();
    for (a, b) in stored.iter().zip(v.as_slice()) {
        assert!((a - b).abs() < 1e-6);
    }
    assert!(c.snapshot().unwrap().get("b", false).unwrap().is_none());
    let hits = c
        .snapshot()
        .unwrap()
        .search_dense(&v, 5, false, &Filter::default())
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert!((hits[0].score - 1.0).abs() < 1e-5);
}

#[test]
fn collections_without_dense_refuse_dense_vectors_and_queries() {
    let tmp = tempfile::tempdir().unwrap();
    let c = free(tmp.path(), CollectionSettings::default());
    assert!(
        c.add_with_dense(doc("a", Modality::Text), sparse(), Some(unit(3)))
            .is_err()
    );
    c.commit().unwrap();
    assert_eq!(c.snapshot().unwrap().num_docs(), 0);
    assert!(
        c.snapshot()
            .unwrap()
            .search_dense(&unit(3), 5, true, &Filter::default())
            .is_err()
    );
}

/// A zero vector has no direction: refused as a document and as a query, nothing stored.
#[test]
fn zero_vectors_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = create(dir.path(), 100, DenseParams::default());
    let zero = DenseVector::new(vec![0.0; DIM]).unwrap();
    let e = c
        .add_with_dense(doc("z", Modality::Text), sparse(), Some(zero.clone()))
        .unwrap_err();
    assert!(e.to_string().contains("all zeros"), "{e}");
    c.add_with_dense(doc("a", Modality::Text), sparse(), Some(unit(1)))
        .unwrap();
    c.commit().unwrap();
    let snapshot = c.snapshot().unwrap();
    assert_eq!(snapshot.num_docs(), 1);
    let e = snapshot
        .search_dense(&zero, 3, true, &Filter::default())
        .unwrap_err();
    assert!(e.to_string().contains("all zeros"), "{e}");
}

/// Images and texts (segments of their own) with graphs: a search filtered to one modality
/// returns that modality only, at the brute force's recall, and the unfiltered walk (no filter
/// checked per node) keeps recall over both.
#[test]
fn hnsw_graphs_per_modality_answer_filtered_and_unfiltered_searches() {
    let tmp = tempfile::tempdir().unwrap();
    let c = with_graphs(tmp.path());
    let live = add_units(&c, 2000, |i| {
        if i % 2 == 0 {
            Modality::Image
        } else {
            Modality::Text
        }
    });
    let snap = c.snapshot().unwrap();
    for m in [Some(Modality::Image), Some(Modality::Text), None] {
        let filter = Filter {
            modality: m,
            ..Filter::default()
        };
        let (mut found, mut total) = (0, 0);
        for qi in 0..30 {
            let q = unit(2_000_000 + qi);
            let want = brute(&live, &q, 10, m);
            let got = snap.search_dense(&q, 10, false, &filter).unwrap();
            assert_eq!(got.len(), 10);
            for g in &got {
                let hit = snap.hit_at(g.segment_ord, g.doc, 0.0).unwrap();
                if let Some(m) = m {
                    assert_eq!(hit.modality, m);
                }
                found += usize::from(want.iter().any(|(id, _)| *id == hit.id));
            }
            total += want.len();
        }
        let recall = found as f64 / total as f64;
        assert!(recall >= 0.9, "{m:?}: recall {recall}");
    }
}

/// A collection that does not warm its dense index on commit (a batch job) builds no graph
/// while it is written, and its first dense search loads what it needs: the exact scan finds
/// what a collection warmed at every commit finds.
#[test]
fn unwarmed_commits_build_no_graph_and_search_the_same() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let warmed = with_graphs(a.path());
    let mut cold = with_graphs(b.path());
    cold.set_warm_dense(false);
    for c in [&warmed, &cold] {
        add_600_images(c);
    }
    assert!(warmed.snapshot().unwrap().dense_ready());
    let snap = cold.snapshot().unwrap();
    assert!(!snap.dense_ready(), "a cold commit loaded the dense index");
    let q = unit(9_999);
    let hits = |s: &lexlip_index::Snapshot, exact: bool| -> Vec<(u32, u32, f32)> {
        s.search_dense(&q, 10, exact, &Filter::default())
            .unwrap()
            .iter()
            .map(|h| (h.segment_ord, h.doc, h.score))
            .collect()
    };
    assert_eq!(hits(&snap, true), hits(&warmed.snapshot().unwrap(), true));
    // The first search loaded the segment and built its graph. (Graphs built in parallel may
    // differ in what they find; their recall is another test's.)
    assert_eq!(hits(&snap, false).len(), 10);
    assert!(snap.dense_ready());
}

/// Graphs are built on a pool of their own: with every worker of rayon's global pool held (as a
/// server's query tokenizer or any other user of it may find them, busy), a graph still gets
/// built, and the global pool is not where it waits. Built on the global pool, this load would
/// wait until the workers are released.
#[test]
fn graphs_are_built_beside_a_busy_global_pool() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = with_graphs(dir.path());
    c.set_warm_dense(false);
    add_600_images(&c);
    let snap = c.snapshot().unwrap();
    assert!(!snap.dense_ready());

    let workers = rayon::current_num_threads();
    let all_busy = std::sync::Arc::new(std::sync::Barrier::new(workers + 1));
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Arc::new(std::sync::Mutex::new(released));
    for _ in 0..workers {
        let (all_busy, released) = (all_busy.clone(), released.clone());
        rayon::spawn(move || {
            all_busy.wait();
            let _ = released.lock().unwrap().recv();
        });
    }
    all_busy.wait();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(snap.warm_dense().map(|()| snap.dense_ready()));
    });
    let built = finished.recv_timeout(std::time::Duration::from_secs(120));
    // Release the global pool's workers (each takes one message), whatever happened.
    for _ in 0..workers {
        let _ = release.send(());
    }
    assert!(
        matches!(built, Ok(Ok(true))),
        "the graph was not built while the global pool was busy: {built:?}"
    );
}
