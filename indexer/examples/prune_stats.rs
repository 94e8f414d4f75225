//! How tight are the bounds? For each query: the exhaustive 10th score θ, and the share of
//! ranges whose bound reaches θ (what an exact search must score at least).
//! `prune_stats [docs] [topical|independent]`
use lexlip_index::maxima::SegmentMaxima;
use lexlip_index::synth::{Corpus, Generator, Rng};
use lexlip_index::{Algorithm, Collection, CollectionSettings, SearchOptions};
use lexlip_proto::{DocId, Document, Modality, TermSpace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let docs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let corpus: Corpus = std::env::args()
        .nth(2)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or_default();
    let dir = tempfile::tempdir()?;
    let g = Generator::default();
    let mut rng = Rng::new(1);
    let space = TermSpace::from_tokens("synthetic", g.vocabulary().iter().map(String::as_str));
    let c = Collection::create(dir.path(), space, CollectionSettings::default(), None)?;
    for i in 0..docs {
        let v = g.document_of(corpus, &mut rng);
        c.add(
            Document::new(DocId::new(format!("doc{i}"))?, Modality::Image),
            v,
        )?;
    }
    c.merge_all()?;
    let snap = c.snapshot()?;
    let field = snap.searcher().schema().get_field("impacts")?;
    let reader = &snap.searcher().segment_readers()[0];
    let m = SegmentMaxima::compute(reader, field, lexlip_index::maxima::DEFAULT_RANGE_SHIFT)?;
    let mut fr = 0.0;
    let nq = 50;
    for _ in 0..nq {
        let q = g.query_of(corpus, &mut rng);
        let o = SearchOptions {
            k: 10,
            algorithm: Algorithm::Exhaustive,
            ..SearchOptions::default()
        };
        let hits = snap.search(&q, &o)?.hits;
        let theta = hits.last().map(|h| h.score).unwrap_or(0);
        let mut rub = vec![0u64; m.num_ranges as usize];
        for (t, w) in q.iter() {
            if let Some(tm) = m.term(t.as_bytes()) {
                tm.add_bounds(u64::from(w), &mut rub);
            }
        }
        fr += rub.iter().filter(|&&u| u >= theta).count() as f64 / rub.len() as f64;
    }
    println!(
        "ranges whose bound reaches the 10th score: {:.4}",
        fr / nq as f64
    );
    Ok(())
}
