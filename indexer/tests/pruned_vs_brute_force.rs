//! The pruned search against plain oracles, on random collections.
//!
//! Each case builds a real collection with several segments (small flushes, several commits),
//! replacements, deletes and sometimes a merge, then checks for random queries and k that:
//! - both pruned exact searches (block-max over the forward index, blocks over tantivy's
//!   postings) return exactly what the exhaustive search returns (ids, scores, order — ties
//!   broken by document order in all), at every block size, in both forward index layouts;
//! - both agree with a brute-force dot product over a plain map of the live documents.

use std::collections::BTreeMap;

use lexlip_index::forward_index::Layout;
use lexlip_index::{Algorithm, Collection, CollectionSettings, SearchOptions};
use lexlip_proto::api::{Filter, Precision};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add {
        id: u8,
        image: bool,
        terms: Vec<(u8, u32)>,
    },
    Delete {
        id: u8,
    },
    Commit,
}

/// The exhaustive search of the top `k`: the oracle every pruned search here is held to.
fn exhaustive_top(k: usize) -> SearchOptions {
    SearchOptions {
        k,
        algorithm: Algorithm::Exhaustive,
        ..SearchOptions::default()
    }
}

fn vector(terms: &[(u8, u32)]) -> QuantizedVector {
    let map: BTreeMap<String, u64> = terms
        .iter()
        .map(|&(t, i)| (format!("t{t}"), u64::from(i)))
        .collect();
    QuantizedVector::new(map).unwrap()
}

fn impact() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 1u32..=255, 1 => 256u32..=3000, 1 => Just(65_535u32)]
}

/// The forward index layout: chosen per segment (the documents layout for these short
/// documents) or either one.
fn layout() -> impl Strategy<Value = Option<Layout>> {
    prop::sample::select(vec![None, Some(Layout::Terms), Some(Layout::Documents)])
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0u8..60, any::<bool>(), prop::collection::vec((0u8..16, impact()), 0..8))
            .prop_map(|(id, image, terms)| Op::Add { id, image, terms }),
        2 => (0u8..60).prop_map(|id| Op::Delete { id }),
        1 => Just(Op::Commit),
    ]
}

/// Brute force: (id, modality, score) of live documents with score > 0, best first; ties in
/// any order.
fn brute_force(
    model: &BTreeMap<u8, (bool, QuantizedVector)>,
    q: &QuantizedVector,
    modality: Option<bool>,
) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = model
        .iter()
        .filter(|(_, (image, _))| modality.is_none_or(|m| m == *image))
        .map(|(id, (_, d))| (format!("d{id}"), d.dot(q)))
        .filter(|(_, s)| *s > 0)
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn pruned_equals_exhaustive_equals_brute_force(
        ops in prop::collection::vec(op(), 1..80),
        flush in 1usize..25,
        merge in any::<bool>(),
        block in prop::sample::select(vec![None, Some(8u32), Some(16), Some(32), Some(64)]),
        layout in layout(),
        queries in prop::collection::vec((prop::collection::vec((0u8..18, impact()), 1..8), 1usize..30, prop::option::of(any::<bool>())), 1..6),
        term_cut in prop::sample::select(vec![0.05f32, 0.2, 0.5, 0.9]),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Collection::create(dir.path(), TermSpace::from_tokens("t", []), CollectionSettings::default(), None).unwrap();
        c.set_flush_docs(flush);
        c.set_block_size(block).unwrap();
        c.set_forward_layout(layout);
        let mut model: BTreeMap<u8, (bool, QuantizedVector)> = BTreeMap::new();
        for op in &ops {
            match op {
                Op::Add { id, image, terms } => {
                    let m = if *image { Modality::Image } else { Modality::Text };
                    let v = vector(terms);
                    c.add(Document::new(DocId::new(format!("d{id}")).unwrap(), m), v.clone()).unwrap();
                    model.insert(*id, (*image, v));
                }
                Op::Delete { id } => {
                    let existed = c.delete(&DocId::new(format!("d{id}")).unwrap()).unwrap();
                    prop_assert_eq!(existed, model.remove(id).is_some());
                }
                Op::Commit => c.commit().unwrap(),
            }
        }
        c.commit().unwrap();
        if merge {
            c.merge_all().unwrap();
        }
        let snap = c.snapshot().unwrap();
        prop_assert_eq!(snap.num_docs(), model.len() as u64);

        for (terms, k, modality) in &queries {
            let q = vector(terms);
            let filter = Filter { modality: modality.map(|m| if m { Modality::Image } else { Modality::Text }), ..Filter::default() };
            let opts = |algorithm, precision| SearchOptions { k: *k, precision, filter: filter.clone(), algorithm, ..SearchOptions::default() };
            let pruned = snap.search(&q, &opts(Algorithm::BlockMax, Precision::Exact)).unwrap().hits;
            let exhaustive = snap.search(&q, &opts(Algorithm::Exhaustive, Precision::Exact)).unwrap().hits;
            prop_assert_eq!(&pruned, &exhaustive);
            let postings = snap.search(&q, &opts(Algorithm::Postings, Precision::Exact)).unwrap().hits;
            prop_assert_eq!(&postings, &exhaustive);
            for algorithm in [Algorithm::BlockMax, Algorithm::Postings] {
                let approx_one = snap.search(&q, &opts(algorithm, Precision::Approx(1.0))).unwrap().hits;
                prop_assert_eq!(&approx_one, &pruned);
            }

            let expected = brute_force(&model, &q, *modality);
            let got: Vec<(String, u64)> = pruned.iter().map(|h| (snap.hit(h, None).unwrap().id, h.score)).collect();
            let want_scores: Vec<u64> = expected.iter().take(*k).map(|e| e.1).collect();
            let got_scores: Vec<u64> = got.iter().map(|g| g.1).collect();
            prop_assert_eq!(&got_scores, &want_scores);
            for (id, score) in &got {
                prop_assert!(expected.iter().any(|(eid, es)| eid == id && es == score), "{} {} not in brute force", id, score);
            }
            // An approximate search never invents scores: each hit has its true score.
            for algorithm in [Algorithm::BlockMax, Algorithm::Postings] {
                let approx = snap.search(&q, &opts(algorithm, Precision::Approx(4.0))).unwrap().hits;
                for h in &approx {
                    let id = snap.hit(h, None).unwrap().id;
                    prop_assert!(expected.iter().any(|(eid, es)| *eid == id && *es == h.score));
                }
            }
            // Light terms left out of the bounds: each hit keeps its true score, and a document
            // left out scores at most f·θ + term_cut · the query's largest possible score (each
            // term's largest impact rounded up to its bound code's step, ≤ max/15 + 1 more).
            let f = 1.5f32;
            let cut = snap.search(&q, &SearchOptions { term_cut, ..opts(Algorithm::BlockMax, Precision::Approx(f)) }).unwrap().hits;
            let largest: f64 = q.iter().map(|(t, w)| {
                let max = ops.iter().filter_map(|op| match op {
                    Op::Add { terms, .. } => terms.iter().filter(|(u, _)| format!("t{u}") == t).map(|&(_, i)| i).max(),
                    _ => None,
                }).max().unwrap_or(0);
                f64::from(w) * (f64::from(max) * 16.0 / 15.0 + 1.0)
            }).sum();
            let theta = if cut.len() == *k { cut.last().map_or(0, |h| h.score) } else { 0 };
            let ids: Vec<String> = cut.iter().map(|h| snap.hit(h, None).unwrap().id).collect();
            for h in &cut {
                let id = snap.hit(h, None).unwrap().id;
                prop_assert!(expected.iter().any(|(eid, es)| *eid == id && *es == h.score));
            }
            for (id, score) in &expected {
                if !ids.contains(id) {
                    let most = f64::from(f) * theta as f64 + f64::from(term_cut) * largest;
                    prop_assert!(*score as f64 <= most, "{} scores {} > {}", id, score, most);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// Larger segments (many doc-id blocks) with LexLIP-shaped vectors grouped into topics that
    /// occupy runs of doc ids (as a corpus ingested source by source does), so that blocks are
    /// really skipped inside a segment.
    #[test]
    fn pruning_skips_ranges_and_stays_exact(seed in any::<u64>(), docs in 500usize..3000, k in 1usize..50, zipf in 0.6f64..1.4, layout in layout()) {
        use lexlip_index::synth::{Generator, Rng};
        let g = Generator::new(4000, zipf, seed);
        let mut rng = Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        let mut c = Collection::create(dir.path(), TermSpace::from_tokens("t", []), CollectionSettings::default(), None).unwrap();
        c.set_flush_docs(docs / 2 + 1);
        c.set_forward_layout(layout);
        let mut model: BTreeMap<usize, QuantizedVector> = BTreeMap::new();
        let topical = |topic: usize, v: QuantizedVector| {
            // Half of the vocabulary is topic-specific, half shared by all topics.
            let name = |t: &str| if t.ends_with(['0', '2', '4', '6', '8']) { format!("{topic}{t}") } else { t.to_string() };
            QuantizedVector::new(v.iter().map(|(t, i)| (name(t), u64::from(i)))).unwrap()
        };
        for i in 0..docs {
            let v = topical((i / 200) % 6, g.document(&mut rng));
            c.add(Document::new(DocId::new(format!("d{i}")).unwrap(), Modality::Image), v.clone()).unwrap();
            model.insert(i, v);
        }
        for i in (0..docs).step_by(7) {
            c.delete(&DocId::new(format!("d{i}")).unwrap()).unwrap();
            model.remove(&i);
        }
        c.commit().unwrap();
        let snap = c.snapshot().unwrap();
        for _ in 0..10 {
            let topic = rng.range(0, 5);
            let q = topical(topic, g.query(&mut rng));
            let pruned = snap.search(&q, &SearchOptions::top(k)).unwrap();
            let exhaustive = snap.search(&q, &exhaustive_top(k)).unwrap();
            prop_assert_eq!(&pruned.hits, &exhaustive.hits);
            let postings = snap.search(&q, &SearchOptions { k, algorithm: Algorithm::Postings, ..SearchOptions::default() }).unwrap();
            prop_assert_eq!(&postings.hits, &exhaustive.hits);
            let mut want: Vec<u64> = model.values().map(|d| d.dot(&q)).filter(|&s| s > 0).collect();
            want.sort_unstable_by(|a, b| b.cmp(a));
            want.truncate(k);
            let got: Vec<u64> = pruned.hits.iter().map(|h| h.score).collect();
            prop_assert_eq!(got, want);
        }
    }
}

/// Where the bounds allow it, whole blocks are skipped without reading their postings (or,
/// in the documents layout, their documents), in both layouts.
#[test]
fn ranges_below_the_threshold_are_skipped() {
    for layout in [Layout::Terms, Layout::Documents] {
        ranges_below_the_threshold_are_skipped_in(layout);
    }
}

/// An empty collection in `dir` whose segments take the forward `layout`.
fn collection_in(dir: &tempfile::TempDir, layout: Layout) -> Collection {
    let mut c = Collection::create(
        dir.path(),
        TermSpace::from_tokens("t", []),
        CollectionSettings::default(),
        None,
    )
    .unwrap();
    c.set_forward_layout(Some(layout));
    c
}

fn ranges_below_the_threshold_are_skipped_in(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = collection_in(&dir, layout);
    c.set_block_size(Some(32)).unwrap();
    for i in 0..1280u32 {
        let impact = if i < 64 {
            200 + u64::from(i % 7)
        } else {
            1 + u64::from(i % 3)
        };
        let v = QuantizedVector::new([("x", impact), ("y", 5)]).unwrap();
        c.add(
            Document::new(DocId::new(format!("d{i}")).unwrap(), Modality::Text),
            v,
        )
        .unwrap();
    }
    c.commit().unwrap();
    let snap = c.snapshot().unwrap();
    let q = QuantizedVector::new([("x", 10u64), ("y", 1)]).unwrap();
    let pruned = snap.search(&q, &SearchOptions::top(10)).unwrap();
    let exhaustive = snap.search(&q, &exhaustive_top(10)).unwrap();
    assert_eq!(pruned.hits, exhaustive.hits, "{layout:?}");
    // 1280 documents in 40 blocks of 32; the two blocks holding the strong "x" decide the top
    // 10, and the search stops after its first 16 blocks.
    assert_eq!(pruned.stats.blocks_candidate, 40);
    assert!(pruned.stats.blocks_scored <= 16, "{:?}", pruned.stats);
    assert_eq!(pruned.stats.segments_unpruned, 0);
    assert!(
        pruned.stats.postings_scored * 2 < exhaustive.stats.postings_scored,
        "{:?}",
        pruned.stats
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// One query on several threads (large segment, flat bounds: many blocks left after the
    /// first ones, so the threads share the work) returns exactly the one-thread result.
    #[test]
    fn threads_share_one_query_and_stay_exact(seed in any::<u64>(), k in 1usize..200, threads in 2usize..5, terms in any::<bool>()) {
        use lexlip_index::synth::{Corpus, Generator, Rng};
        let g = Generator::new(3000, 0.8, seed);
        let mut rng = Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        let mut c = Collection::create(dir.path(), TermSpace::from_tokens("t", []), CollectionSettings::default(), None).unwrap();
        c.set_forward_layout(Some(if terms { Layout::Terms } else { Layout::Documents }));
        c.set_block_size(Some(8)).unwrap();
        for i in 0..12_000 {
            c.add(Document::new(DocId::new(format!("d{i}")).unwrap(), Modality::Image), g.document_of(Corpus::Independent, &mut rng)).unwrap();
        }
        for i in (0..12_000).step_by(11) {
            c.delete(&DocId::new(format!("d{i}")).unwrap()).unwrap();
        }
        c.commit().unwrap();
        let snap = c.snapshot().unwrap();
        let mut busy = 0;
        for _ in 0..8 {
            let q = g.query_of(Corpus::Independent, &mut rng);
            let one = snap.search(&q, &SearchOptions::top(k)).unwrap();
            let many = snap.search(&q, &SearchOptions { k, threads, share_from_docs: Some(0), ..SearchOptions::default() }).unwrap();
            let exhaustive = snap.search(&q, &exhaustive_top(k)).unwrap();
            prop_assert_eq!(&many.hits, &exhaustive.hits);
            prop_assert_eq!(&one.hits, &exhaustive.hits);
            // More blocks than the first ones: threads shared them (from any number of
            // documents left, as asked below).
            if one.stats.blocks_scored > 16 + 64 {
                busy += 1;
            }
        }
        prop_assert!(busy > 0, "no query left enough blocks to share");
    }
}

/// `n` distinct terms of a vocabulary of 500 with random impacts: a long image lexicon, a long
/// image query, or a short caption, by `n`.
fn lexicon(n: std::ops::Range<usize>) -> impl Strategy<Value = Vec<(u16, u32)>> {
    prop::collection::btree_map(0u16..500, 1u32..=300, n).prop_map(|m| m.into_iter().collect())
}

fn named(terms: &[(u16, u32)]) -> QuantizedVector {
    QuantizedVector::new(terms.iter().map(|&(t, i)| (format!("w{t}"), u64::from(i)))).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// The image workload: images of hundreds of terms and captions of a few in one collection
    /// (segments of their own), searched with long image queries and short text queries, each
    /// for one modality or both, and for one of three metadata groups or all (a filter that
    /// allows part of a segment's blocks). Exact search equals brute force, and a term cut
    /// never invents a score.
    #[test]
    fn long_documents_and_long_queries_stay_exact(
        images in prop::collection::vec(lexicon(100..400), 1..60),
        texts in prop::collection::vec(lexicon(1..20), 1..120),
        queries in prop::collection::vec((prop_oneof![lexicon(100..400), lexicon(1..20)], prop::option::of(any::<bool>()), prop::option::of(0u64..3)), 1..5),
        flush in 10usize..80,
        merge in any::<bool>(),
        k in 1usize..25,
        threads in 1usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Collection::create(dir.path(), TermSpace::from_tokens("t", []), CollectionSettings::default(), None).unwrap();
        c.set_flush_docs(flush);
        // (id, image, group, vector)
        let mut model: Vec<(String, bool, u64, QuantizedVector)> = Vec::new();
        let (mut i, mut t) = (images.iter(), texts.iter());
        // Interleaved, as a corpus of images and their captions arrives.
        loop {
            let (a, b) = (i.next(), t.next());
            if a.is_none() && b.is_none() {
                break;
            }
            for (v, image) in [(a, true), (b, false)] {
                if let Some(v) = v {
                    let (id, group) = (format!("d{}", model.len()), model.len() as u64 % 3);
                    let m = if image { Modality::Image } else { Modality::Text };
                    let mut d = Document::new(DocId::new(id.clone()).unwrap(), m);
                    d.metadata.insert("group".into(), group.into());
                    c.add(d, named(v)).unwrap();
                    model.push((id, image, group, named(v)));
                }
            }
        }
        c.commit().unwrap();
        if merge {
            c.merge_all().unwrap();
        }
        let snap = c.snapshot().unwrap();
        for (terms, modality, group) in &queries {
            let q = named(terms);
            let mut filter = Filter { modality: modality.map(|m| if m { Modality::Image } else { Modality::Text }), ..Filter::default() };
            if let Some(g) = group {
                filter.metadata.insert("group".into(), (*g).into());
            }
            let opts = SearchOptions { k, filter, ..SearchOptions::default() };
            let pruned = snap.search(&q, &opts).unwrap().hits;
            let exhaustive = snap.search(&q, &SearchOptions { algorithm: Algorithm::Exhaustive, ..opts.clone() }).unwrap().hits;
            prop_assert_eq!(&pruned, &exhaustive);
            // Segments scored term-at-a-time (long queries) share the threads.
            let shared = snap.search(&q, &SearchOptions { threads, ..opts.clone() }).unwrap().hits;
            prop_assert_eq!(&shared, &exhaustive);
            let mut want: Vec<u64> = model.iter()
                .filter(|(_, image, g, _)| modality.is_none_or(|m| m == *image) && group.is_none_or(|want| want == *g))
                .map(|(_, _, _, d)| d.dot(&q))
                .filter(|&s| s > 0)
                .collect();
            want.sort_unstable_by(|a, b| b.cmp(a));
            want.truncate(k);
            prop_assert_eq!(pruned.iter().map(|h| h.score).collect::<Vec<_>>(), want);
            let cut = snap.search(&q, &SearchOptions { precision: Precision::Approx(1.0), term_cut: 0.2, ..opts.clone() }).unwrap().hits;
            for h in &cut {
                let id = snap.hit(h, None).unwrap().id;
                prop_assert!(model.iter().any(|(mid, _, _, d)| *mid == id && d.dot(&q) == h.score));
            }
        }
    }
}

/// Where the bounds cannot skip enough, block-max search scores segments term-at-a-time and
/// the result stays the exhaustive one, on one thread and on several: a query that touches
/// every document many times (not bounded at all), and flat bounds found out after the first
/// blocks (every document holds both query terms with impacts of the same range, and k is
/// large), in both layouts.
#[test]
fn segments_the_bounds_cannot_prune_are_scored_term_at_a_time() {
    use lexlip_index::synth::Rng;
    for layout in [Layout::Terms, Layout::Documents] {
        let dir = tempfile::tempdir().unwrap();
        let mut c = collection_in(&dir, layout);
        c.set_flush_docs(700);
        let mut rng = Rng::new(7);
        let mut model = Vec::new();
        for i in 0..2_800u32 {
            // Two flat terms in every document, and about 12 of 24 others.
            let mut terms = vec![
                ("x".to_string(), rng.range(1, 100) as u64),
                ("y".to_string(), rng.range(1, 100) as u64),
            ];
            for t in 0..24 {
                if rng.range(0, 1) == 1 {
                    terms.push((format!("w{t}"), rng.range(1, 50) as u64));
                }
            }
            let v = QuantizedVector::new(terms).unwrap();
            let d = Document::new(DocId::new(format!("d{i}")).unwrap(), Modality::Image);
            c.add(d, v.clone()).unwrap();
            model.push(v);
        }
        c.commit().unwrap();
        let snap = c.snapshot().unwrap();
        let flat = QuantizedVector::new([("x", 3u64), ("y", 2)]).unwrap();
        let every = QuantizedVector::new(
            std::iter::once(("x".to_string(), 1u64))
                .chain((0..24).map(|t| (format!("w{t}"), 2 + t as u64))),
        )
        .unwrap();
        for (q, k) in [(&flat, 600), (&every, 10), (&every, 900)] {
            let exhaustive = snap.search(q, &exhaustive_top(k)).unwrap();
            let mut want: Vec<u64> = model.iter().map(|d| d.dot(q)).collect();
            want.sort_unstable_by(|a, b| b.cmp(a));
            want.truncate(k);
            let scores: Vec<u64> = exhaustive.hits.iter().map(|h| h.score).collect();
            assert_eq!(scores, want, "{layout:?}");
            for threads in [1, 2, 3] {
                let options = SearchOptions {
                    k,
                    threads,
                    ..SearchOptions::default()
                };
                let pruned = snap.search(q, &options).unwrap();
                assert_eq!(
                    pruned.hits, exhaustive.hits,
                    "{layout:?}, k {k}, {threads} threads"
                );
                assert!(
                    pruned.stats.segments_unpruned > 0,
                    "{layout:?}, k {k}: {:?}",
                    pruned.stats
                );
            }
        }
    }
}
