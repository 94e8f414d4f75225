//! Segments whose documents are reordered (by clustering or by graph bisection; or left in
//! input order) against plain oracles: topical vectors, replacements, deletes, modality filters,
//! several segments or one merged segment. Checks, for random queries and k:
//! - the stored fields of every hit belong to the vector that was scored (the small fields and
//!   the impacts are written in the same clustered order);
//! - pruned exact == exhaustive (ids, scores, order) == brute force (scores; ids among those
//!   with that score), and approx 1.0 == exact.

use std::collections::BTreeMap;

use lexlip_index::synth::{Generator, Rng};
use lexlip_index::{Algorithm, Collection, CollectionSettings, DocOrder, SearchOptions};
use lexlip_proto::api::{Filter, Precision};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn clustered_segments_stay_exact(
        seed in any::<u64>(),
        docs in 300usize..1500,
        merge in any::<bool>(),
        order in prop::sample::select(vec![DocOrder::Clusters, DocOrder::Bisection, DocOrder::Input]),
        ks in prop::collection::vec(1usize..40, 6),
    ) {
        let g = Generator::new(3000, 1.0, seed);
        let mut rng = Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        let mut c = Collection::create(dir.path(), TermSpace::from_tokens("t", []), CollectionSettings::default(), None).unwrap();
        c.set_flush_docs(docs / 3 + 1);
        c.set_doc_order(order);
        // id -> (image?, vector)
        let mut model: BTreeMap<usize, (bool, QuantizedVector)> = BTreeMap::new();
        let add = |c: &Collection, model: &mut BTreeMap<usize, (bool, QuantizedVector)>, i: usize, rng: &mut Rng| {
            let image = rng.range(0, 1) == 0;
            let v = g.topical_document(rng);
            let m = if image { Modality::Image } else { Modality::Text };
            c.add(Document::new(DocId::new(format!("d{i}")).unwrap(), m), v.clone()).unwrap();
            model.insert(i, (image, v));
        };
        for i in 0..docs {
            add(&c, &mut model, i, &mut rng);
            if i == docs / 2 {
                c.commit().unwrap();
            }
        }
        // Replace some committed and some pending documents, delete others.
        for i in (0..docs).step_by(5) {
            add(&c, &mut model, i, &mut rng);
        }
        for i in (3..docs).step_by(11) {
            c.delete(&DocId::new(format!("d{i}")).unwrap()).unwrap();
            model.remove(&i);
        }
        c.commit().unwrap();
        if merge {
            c.merge_all().unwrap();
        }
        let snap = c.snapshot().unwrap();
        prop_assert_eq!(snap.num_docs(), model.len() as u64);
        for (n, &k) in ks.iter().enumerate() {
            let q = g.topical_query(&mut rng);
            let modality = match n % 3 { 0 => None, 1 => Some(true), _ => Some(false) };
            let filter = Filter { modality: modality.map(|m| if m { Modality::Image } else { Modality::Text }), ..Filter::default() };
            let opts = |algorithm, precision| SearchOptions { k, precision, filter: filter.clone(), algorithm, ..SearchOptions::default() };
            let pruned = snap.search(&q, &opts(Algorithm::BlockMax, Precision::Exact)).unwrap().hits;
            let exhaustive = snap.search(&q, &opts(Algorithm::Exhaustive, Precision::Exact)).unwrap().hits;
            prop_assert_eq!(&pruned, &exhaustive);
            let postings = snap.search(&q, &opts(Algorithm::Postings, Precision::Exact)).unwrap().hits;
            prop_assert_eq!(&postings, &exhaustive);
            let approx_one = snap.search(&q, &opts(Algorithm::BlockMax, Precision::Approx(1.0))).unwrap().hits;
            prop_assert_eq!(&approx_one, &pruned);

            let mut want: Vec<(usize, u64)> = model
                .iter()
                .filter(|(_, (image, _))| modality.is_none_or(|m| m == *image))
                .map(|(&id, (_, d))| (id, d.dot(&q)))
                .filter(|&(_, s)| s > 0)
                .collect();
            want.sort_by_key(|e| std::cmp::Reverse(e.1));
            let want_scores: Vec<u64> = want.iter().take(k).map(|e| e.1).collect();
            let got_scores: Vec<u64> = pruned.iter().map(|h| h.score).collect();
            prop_assert_eq!(got_scores, want_scores);
            for h in &pruned {
                let id: usize = snap.hit(h, None).unwrap().id[1..].parse().unwrap();
                let (_, v) = &model[&id];
                prop_assert_eq!(v.dot(&q), h.score, "hit d{} carries another document's impacts", id);
            }
        }
    }
}
