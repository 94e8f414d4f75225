//! The search policy on a real collection: hybrid fusion and the dense fallback worked out by
//! hand on four documents, and sparse search with its fallback against brute force.

use std::cell::Cell;
use std::collections::BTreeMap;

use lexlip_index::dense::DenseParams;
use lexlip_index::{Collection, CollectionSettings};
use lexlip_proto::api::SearchPath;
use lexlip_proto::{DenseVector, DocId, Document, Modality, QuantizedVector, TermSpace};
use lexlip_search::{DenseNeed, Mode, SearchError, SearchPlan, Searcher};
use proptest::prelude::*;

fn collection(dir: &std::path::Path, dim: usize) -> Collection {
    let settings = CollectionSettings {
        dense_dim: Some(dim),
        ..CollectionSettings::default()
    };
    let mut c =
        Collection::create(dir, TermSpace::from_tokens("free", []), settings, None).unwrap();
    // Exact scans only: the oracle is a brute-force cosine.
    c.set_dense_params(DenseParams {
        hnsw_min_docs: usize::MAX,
        ..DenseParams::default()
    });
    c
}

fn add(c: &Collection, id: &str, terms: &[(&str, u64)], dense: &[f32]) {
    let doc = Document::new(DocId::new(id).unwrap(), Modality::Image);
    let sparse = QuantizedVector::new(terms.iter().copied()).unwrap();
    let dense = DenseVector::new(dense.to_vec()).unwrap();
    c.add_with_dense(doc, sparse, Some(dense)).unwrap();
}

/// a {cat 3}, b {cat 2, dog 1}, c {dog 5}, d {fish 1}; dense vectors on the unit circle.
fn four_documents(dir: &std::path::Path) -> Collection {
    let c = collection(dir, 2);
    add(&c, "a", &[("cat", 3)], &[1.0, 0.0]);
    add(&c, "b", &[("cat", 2), ("dog", 1)], &[0.6, 0.8]);
    add(&c, "c", &[("dog", 5)], &[0.0, 1.0]);
    add(&c, "d", &[("fish", 1)], &[-1.0, 0.0]);
    c.commit().unwrap();
    c
}

/// [`four_documents`] in a new directory, with a snapshot of them.
fn four() -> (tempfile::TempDir, Collection, lexlip_index::Snapshot) {
    let tmp = tempfile::tempdir().unwrap();
    let c = four_documents(tmp.path());
    let snapshot = c.snapshot().unwrap();
    (tmp, c, snapshot)
}

fn cat() -> QuantizedVector {
    QuantizedVector::new([("cat", 1u64)]).unwrap()
}

/// Cosines with the documents: a 0.28, b 0.936, c 0.96, d -0.28.
fn dense_query() -> DenseVector {
    DenseVector::new(vec![0.28, 0.96]).unwrap()
}

fn ids(hits: &[lexlip_proto::api::Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.id.as_str()).collect()
}

fn plan(mode: Mode, k: usize) -> SearchPlan {
    SearchPlan {
        mode,
        ..SearchPlan::top(k)
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// Sparse ranks a (3), b (2); dense ranks c, b, a, d. Reciprocal ranks with 60:
/// a 1/61 + 1/63, b 1/62 + 1/62, c 1/61, d 1/64 — a wins by a hair.
#[test]
fn hybrid_fuses_by_hand() {
    let (_tmp, _c, snapshot) = four();
    let plan = plan(Mode::Hybrid, 3);
    let asked = Cell::new(None);
    let found = Searcher::new(&snapshot)
        .search(&plan, Some(&cat()), |need| {
            asked.set(Some(need));
            Ok::<_, SearchError>(Some(dense_query()))
        })
        .unwrap();
    assert_eq!(asked.get(), Some(DenseNeed::Required));
    assert_eq!(found.path, SearchPath::Hybrid);
    assert_eq!(found.sparse_matches, Some(2));
    assert_eq!(ids(&found.hits), ["a", "b", "c"]);
    let want = [1.0 / 61.0 + 1.0 / 63.0, 1.0 / 62.0 + 1.0 / 62.0, 1.0 / 61.0];
    for (hit, want) in found.hits.iter().zip(want) {
        assert!(
            close(hit.score, want),
            "{}: {} vs {want}",
            hit.id,
            hit.score
        );
        assert_eq!(hit.match_strength, None, "fused scores have no strength");
    }
}

/// Sparse matches 2 documents: k = 2 is answered by the sparse index without asking for the
/// dense query; k = 3 falls back to the dense index when there is a dense query, and keeps the
/// sparse answer when there is none.
#[test]
fn dense_fallback_by_hand() {
    let (_tmp, _c, snapshot) = four();
    let searcher = Searcher::new(&snapshot);

    let found = searcher
        .search(
            &SearchPlan::top(2),
            Some(&cat()),
            |_| -> Result<_, SearchError> { panic!("k documents matched: no fallback") },
        )
        .unwrap();
    assert_eq!(found.path, SearchPath::Sparse);
    assert_eq!(ids(&found.hits), ["a", "b"]);
    assert_eq!(found.hits[0].score, 3.0);
    // Match strength: score over the query's self-score (1), capped at 1.
    assert_eq!(found.hits[0].match_strength, Some(1.0));

    let found = searcher
        .search(&SearchPlan::top(3), Some(&cat()), |need| {
            assert_eq!(need, DenseNeed::Fallback);
            Ok::<_, SearchError>(Some(dense_query()))
        })
        .unwrap();
    assert_eq!(found.path, SearchPath::DenseFallback);
    assert_eq!(found.sparse_matches, Some(2));
    assert_eq!(ids(&found.hits), ["c", "b", "a"]);
    for (hit, want) in found.hits.iter().zip([0.96, 0.936, 0.28]) {
        assert!(
            close(hit.score, want),
            "{}: {} vs {want}",
            hit.id,
            hit.score
        );
        assert!(close(hit.match_strength.unwrap(), want));
    }

    let found = searcher
        .search(&SearchPlan::top(3), Some(&cat()), |_| {
            Ok::<_, SearchError>(None)
        })
        .unwrap();
    assert_eq!(found.path, SearchPath::Sparse);
    assert_eq!(ids(&found.hits), ["a", "b"]);
}

#[test]
fn dense_mode_without_a_dense_query_is_refused() {
    let (_tmp, _c, snapshot) = four();
    let plan = plan(Mode::Dense, 3);
    let e = Searcher::new(&snapshot)
        .search(&plan, Some(&cat()), |_| Ok::<_, SearchError>(None))
        .unwrap_err();
    assert!(matches!(e, SearchError::Invalid(_)), "{e}");
    let found = Searcher::new(&snapshot)
        .search(&plan, None, |_| Ok::<_, SearchError>(Some(dense_query())))
        .unwrap();
    assert_eq!(found.path, SearchPath::Dense);
    assert_eq!(found.sparse_matches, None);
    assert_eq!(ids(&found.hits), ["c", "b", "a"]);
}

/// Integer dot product of impacts, the sparse oracle.
fn dot(q: &BTreeMap<String, u64>, d: &BTreeMap<String, u64>) -> u64 {
    q.iter()
        .map(|(t, w)| w * d.get(t).copied().unwrap_or(0))
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Sparse mode against brute force: the sparse top-k scores when at least k documents
    /// share a term with the query, else the brute-force cosine top-k (the fallback).
    #[test]
    fn sparse_and_fallback_equal_brute_force(
        docs in proptest::collection::vec(
            (proptest::collection::btree_map(0u8..12, 1u64..50, 1..4),
             proptest::collection::vec(-1.0f32..1.0, 3)),
            1..40),
        query in proptest::collection::btree_map(0u8..12, 1u64..20, 1..3),
        dense_q in proptest::collection::vec(-1.0f32..1.0, 3),
        k in 1usize..12,
    ) {
        prop_assume!(dense_q.iter().any(|x| x.abs() > 0.1));
        prop_assume!(docs.iter().all(|(_, v)| v.iter().any(|x| x.abs() > 0.1)));
        let tmp = tempfile::tempdir().unwrap();
        let c = collection(tmp.path(), 3);
        let term = |t: &u8| format!("t{t}");
        let mut plain = Vec::new();
        for (i, (terms, v)) in docs.iter().enumerate() {
            let terms: BTreeMap<String, u64> = terms.iter().map(|(t, w)| (term(t), *w)).collect();
            let pairs: Vec<(&str, u64)> = terms.iter().map(|(t, w)| (t.as_str(), *w)).collect();
            add(&c, &format!("d{i}"), &pairs, v);
            plain.push((format!("d{i}"), terms, DenseVector::new(v.clone()).unwrap().normalized()));
        }
        c.commit().unwrap();
        let q: BTreeMap<String, u64> = query.iter().map(|(t, w)| (term(t), *w)).collect();
        let qv = QuantizedVector::new(q.iter().map(|(t, w)| (t.as_str(), *w))).unwrap();
        let dq = DenseVector::new(dense_q).unwrap();

        let snapshot = c.snapshot().unwrap();
        let found = Searcher::new(&snapshot)
            .search(&SearchPlan::top(k), Some(&qv), |_| Ok::<_, SearchError>(Some(dq.clone())))
            .unwrap();
        let mut sparse: Vec<u64> = plain.iter().map(|(_, d, _)| dot(&q, d)).filter(|s| *s > 0).collect();
        sparse.sort_unstable_by(|a, b| b.cmp(a));
        prop_assert_eq!(found.sparse_matches, Some(sparse.len().min(k)));
        let got: Vec<f64> = found.hits.iter().map(|h| h.score).collect();
        if sparse.len() >= k {
            prop_assert_eq!(found.path, SearchPath::Sparse);
            let want: Vec<f64> = sparse.iter().take(k).map(|s| *s as f64).collect();
            prop_assert_eq!(got, want);
        } else {
            prop_assert_eq!(found.path, SearchPath::DenseFallback);
            let unit = dq.normalized();
            let mut want: Vec<f32> = plain.iter().map(|(_, _, v)| v.dot(&unit)).collect();
            want.sort_by(|a, b| b.total_cmp(a));
            want.truncate(k);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((g - f64::from(*w)).abs() < 1e-5, "{} vs {}", g, w);
            }
        }
    }
}

/// The oracle's IDF weighting, written out: `round(w · ln(1 + n / max(df, 1))^alpha)` in
/// 1..=65,535.
fn idf_weight(w: u64, n: u64, df: u64, alpha: f32) -> u64 {
    let idf = (1.0 + n as f64 / df.max(1) as f64).ln();
    (w as f64 * idf.powf(f64::from(alpha)))
        .round()
        .clamp(1.0, 65_535.0) as u64
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// An IDF-weighted search against brute force over the live documents the filter allows,
    /// in two segments with deletions in the first: the document frequencies, the scores of
    /// the weighted query, each hit's match strength (its score over what a document equal to
    /// the query would score) and its explanation (which adds up to its score).
    #[test]
    fn idf_weighted_search_equals_brute_force(
        docs in proptest::collection::vec(
            (proptest::collection::btree_map(0u8..10, 1u64..60, 1..5), any::<bool>(), any::<bool>()),
            1..40),
        query in proptest::collection::btree_map(0u8..12, 1u64..200, 1..5),
        modality in proptest::option::of(any::<bool>()),
        alpha in prop_oneof![Just(0.5f32), Just(1.0), Just(2.0)],
        k in 1usize..8,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let c = Collection::create(
            tmp.path(), TermSpace::from_tokens("free", []), CollectionSettings::default(), None,
        ).unwrap();
        let term = |t: &u8| format!("t{t}");
        let as_modality = |image: bool| if image { Modality::Image } else { Modality::Text };
        let mut live = Vec::new();
        for (i, (terms, image, _)) in docs.iter().enumerate() {
            let doc = Document::new(DocId::new(format!("d{i}")).unwrap(), as_modality(*image));
            let v = QuantizedVector::new(terms.iter().map(|(t, w)| (term(t), *w))).unwrap();
            c.add(doc, v).unwrap();
            if i == docs.len() / 2 {
                c.commit().unwrap();
            }
        }
        c.commit().unwrap();
        for (i, (terms, image, deleted)) in docs.iter().enumerate() {
            if *deleted && i <= docs.len() / 2 {
                c.delete(&DocId::new(format!("d{i}")).unwrap()).unwrap();
            } else {
                let terms: BTreeMap<String, u64> = terms.iter().map(|(t, w)| (term(t), *w)).collect();
                live.push((format!("d{i}"), as_modality(*image), terms));
            }
        }
        c.commit().unwrap();
        let snapshot = c.snapshot().unwrap();

        let modality = modality.map(as_modality);
        let allowed: Vec<_> = live.iter().filter(|(_, m, _)| modality.is_none_or(|f| *m == f)).collect();
        let q: BTreeMap<String, u64> = query.iter().map(|(t, w)| (term(t), *w)).collect();
        let qv = QuantizedVector::new(q.iter().map(|(t, w)| (t.as_str(), *w))).unwrap();
        let n = allowed.len() as u64;
        let df: Vec<u64> = q.keys().map(|t| allowed.iter().filter(|(_, _, d)| d.contains_key(t)).count() as u64).collect();
        let filter = lexlip_proto::api::Filter { modality, ..Default::default() };
        let frequencies = snapshot.term_frequencies(&qv, &filter).unwrap();
        prop_assert_eq!(frequencies.docs, n);
        prop_assert_eq!(&frequencies.df, &df);

        let weighted: BTreeMap<String, u64> = if n == 0 {
            q.clone()
        } else {
            q.iter().zip(&df).map(|((t, w), df)| (t.clone(), idf_weight(*w, n, *df, alpha))).collect()
        };
        let mut want: Vec<(u64, String)> = allowed.iter()
            .map(|(id, _, d)| (dot(&weighted, d), id.clone()))
            .filter(|(s, _)| *s > 0)
            .collect();
        want.sort_by_key(|w| std::cmp::Reverse(w.0));
        let own: u64 = q.iter().map(|(t, w)| w * weighted[t]).sum();

        let plan = SearchPlan { idf: alpha, explain: true, filter, ..SearchPlan::top(k) };
        plan.check(false).unwrap();
        let found = Searcher::new(&snapshot)
            .search(&plan, Some(&qv), |_| Ok::<_, SearchError>(None))
            .unwrap();
        let got: Vec<u64> = found.hits.iter().map(|h| h.score as u64).collect();
        let scores: Vec<u64> = want.iter().take(k).map(|(s, _)| *s).collect();
        prop_assert_eq!(got, scores);
        for hit in &found.hits {
            let strength = hit.match_strength.unwrap();
            prop_assert!((strength - (hit.score / own as f64).min(1.0)).abs() < 1e-12);
            let explained: u64 = hit.explain.as_ref().unwrap().iter().map(|t| t.contribution).sum();
            prop_assert_eq!(explained, hit.score as u64);
            for t in hit.explain.as_ref().unwrap() {
                prop_assert_eq!(u64::from(t.query_impact), weighted[&t.term]);
            }
        }
    }
}

/// Worked out by hand on the four documents: `cat` is held by 2 of 4, `fish` by 1. Unweighted,
/// {cat 10, fish 10} ranks a 30, b 20, d 10. At α = 2, cat weighs round(10 · ln(3)²) = 12 and
/// fish round(10 · ln(5)²) = 26: a 36, d 26, b 24 — the rare term lifts d over b.
#[test]
fn idf_lifts_the_rare_term_by_hand() {
    let (_tmp, _c, snapshot) = four();
    let q = QuantizedVector::new([("cat", 10u64), ("fish", 10)]).unwrap();
    let search = |idf: f32| {
        let plan = SearchPlan {
            idf,
            ..SearchPlan::top(3)
        };
        Searcher::new(&snapshot)
            .search(&plan, Some(&q), |_| Ok::<_, SearchError>(None))
            .unwrap()
    };
    let scores = |f: &lexlip_search::Found| f.hits.iter().map(|h| h.score).collect::<Vec<_>>();
    let plain = search(0.0);
    assert_eq!(ids(&plain.hits), ["a", "b", "d"]);
    assert_eq!(scores(&plain), [30.0, 20.0, 10.0]);
    let weighted = search(2.0);
    assert_eq!(ids(&weighted.hits), ["a", "d", "b"]);
    assert_eq!(scores(&weighted), [36.0, 26.0, 24.0]);
    // A document equal to the query would score 10 · 12 + 10 · 26 = 380.
    assert!(close(
        weighted.hits[0].match_strength.unwrap(),
        36.0 / 380.0
    ));
}

/// Match strength in a collection that keeps 2 terms a document: a query equal to a stored
/// document's full lexicon {cat 10, dog 8, fish 5} finds it, stored as {cat 10, dog 8}, at
/// strength 1 (164 of the 164 a document equal to the query, cut as this collection cuts,
/// would score), not 164 / 189; a document holding only `cat` scores 100 / 164.
#[test]
fn match_strength_in_a_top_k_collection_is_against_the_query_cut_as_documents_are() {
    let tmp = tempfile::tempdir().unwrap();
    let settings = CollectionSettings {
        top_k_terms: Some(2),
        ..CollectionSettings::default()
    };
    let c = Collection::create(
        tmp.path(),
        TermSpace::from_tokens("free", []),
        settings,
        None,
    )
    .unwrap();
    let full = QuantizedVector::new([("cat", 10u64), ("dog", 8), ("fish", 5)]).unwrap();
    let only_cat = QuantizedVector::new([("cat", 10u64)]).unwrap();
    for (id, v) in [("a", &full), ("b", &only_cat)] {
        let stored = c
            .quantizer()
            .document(lexlip_proto::VectorInput::Impacts(v.clone()))
            .unwrap();
        let doc = Document::new(DocId::new(id).unwrap(), Modality::Image);
        c.add_with_dense(doc, stored, None).unwrap();
    }
    c.commit().unwrap();
    let snapshot = c.snapshot().unwrap();
    assert_eq!(snapshot.top_k_terms(), Some(2));
    let found = Searcher::new(&snapshot)
        .search(&SearchPlan::top(2), Some(&full), |_| {
            Ok::<_, SearchError>(None)
        })
        .unwrap();
    assert_eq!(ids(&found.hits), ["a", "b"]);
    assert_eq!(found.hits[0].score, 164.0);
    assert_eq!(found.hits[0].match_strength, Some(1.0));
    assert!(close(found.hits[1].match_strength.unwrap(), 100.0 / 164.0));
}

/// A query the model put little weight on is a weak match even where a document holds all of
/// it: with a typical query norm, strengths shrink by the query's squared share of it, and a
/// query at or above the norm keeps its strengths. Worked out by hand, at scale 100.
#[test]
fn a_query_lighter_than_the_models_typical_one_matches_weakly() {
    let tmp = tempfile::tempdir().unwrap();
    let c = collection(tmp.path(), 2);
    assert_eq!(c.snapshot().unwrap().scale(), 100.0);
    // Weights 0.6 and 0.8: norm 1.0.
    let light = QuantizedVector::new([("dog", 60u64), ("face", 80)]).unwrap();
    add(&c, "a", &[("dog", 60), ("face", 80)], &[1.0, 0.0]);
    c.commit().unwrap();
    let snapshot = c.snapshot().unwrap();
    let strength = |query: &QuantizedVector, norm: Option<f32>| {
        let plan = SearchPlan {
            query_norm: norm,
            ..SearchPlan::top(1)
        };
        let found = Searcher::new(&snapshot)
            .search(&plan, Some(query), |_| Ok::<_, SearchError>(None))
            .unwrap();
        assert_eq!(found.hits[0].score, 10_000.0);
        found.hits[0].match_strength.unwrap()
    };
    assert_eq!(strength(&light, None), 1.0);
    // Half the typical norm: a quarter of the strength.
    assert!(close(strength(&light, Some(2.0)), 0.25));
    assert!(close(strength(&light, Some(1.25)), 0.64));
    // At or under the query's own norm, nothing changes.
    assert_eq!(strength(&light, Some(1.0)), 1.0);
    assert_eq!(strength(&light, Some(0.5)), 1.0);
    // A heavier query whose first two terms the document holds: its strength is the share
    // of its self-score met (10,000 of 10,000 + 120²), untouched by a norm below its own 1.56.
    let heavy = QuantizedVector::new([("dog", 60u64), ("face", 80), ("puppy", 120)]).unwrap();
    assert!(close(strength(&heavy, Some(1.5)), 10_000.0 / 24_400.0));
    // A plan refuses a norm that is no positive number.
    for bad in [0.0, -1.0, f32::NAN] {
        let plan = SearchPlan {
            query_norm: Some(bad),
            ..SearchPlan::top(1)
        };
        assert!(plan.check(false).is_err(), "{bad}");
    }
}
