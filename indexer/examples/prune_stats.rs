//! How tight are the bounds? For each query: the exhaustive 10th score θ, and the share of
//! blocks whose bound reaches θ (what an exact search must score at least). Also, for
//! superblocks (groups of 4-64 blocks bounded first, Carlson et al., SIGIR 2025): the share that
//! reaches θ even when θ is known from the start (their best case), and the share of the rare
//! terms' blocks inside those (what a search would still walk to bound them).
//! `prune_stats [docs] [topical|independent]`
use lexlip_index::forward_index::ForwardIndex;
use lexlip_index::synth::{Corpus, Generator, Rng};
use lexlip_index::{Algorithm, Collection, CollectionSettings, SearchOptions};
use lexlip_proto::{DocId, Document, Modality, TermSpace};

/// Blocks per superblock; 1 is the blocks themselves.
const GROUPS: [usize; 6] = [1, 4, 8, 16, 32, 64];

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
    let plan = lexlip_index::forward_index::ForwardPlan {
        shift: Some(lexlip_index::forward_index::DEFAULT_BLOCK_SHIFT),
        layout: Some(lexlip_index::forward_index::Layout::Terms),
    };
    let m = ForwardIndex::compute(reader, field, plan)?;
    let inverted = reader.inverted_index(field)?;
    let num_blocks = m.num_blocks as usize;
    let (mut reach, mut rare_inside) = ([0.0; GROUPS.len()], [0.0; GROUPS.len()]);
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
        // Each term's bound per block, and whether the term is rare (bounded from postings).
        let mut terms: Vec<(bool, Vec<u64>)> = Vec::new();
        for (t, w) in q.iter() {
            let Some(tm) = m.term(t.as_bytes()) else {
                continue;
            };
            let mut bounds = vec![0u64; num_blocks];
            tm.add_bounds(u64::from(w), &mut bounds, &inverted)?;
            terms.push((!tm.has_bound_bytes(), bounds));
        }
        for (i, &size) in GROUPS.iter().enumerate() {
            let mut bound = vec![0u64; num_blocks.div_ceil(size)];
            for (_, b) in &terms {
                for (u, group) in bound.iter_mut().zip(b.chunks(size)) {
                    *u += group.iter().copied().max().unwrap_or(0);
                }
            }
            let kept: Vec<bool> = bound.iter().map(|&u| u >= theta).collect();
            reach[i] += kept.iter().filter(|&&k| k).count() as f64 / kept.len() as f64;
            let (mut all, mut inside) = (0u64, 0u64);
            for (_, b) in terms.iter().filter(|(rare, _)| *rare) {
                for (r, _) in b.iter().enumerate().filter(|&(_, &u)| u > 0) {
                    all += 1;
                    inside += u64::from(kept[r / size]);
                }
            }
            rare_inside[i] += inside as f64 / all.max(1) as f64;
        }
    }
    println!(
        "blocks whose bound reaches the 10th score: {:.4}",
        reach[0] / nq as f64
    );
    for (i, size) in GROUPS.iter().enumerate().skip(1) {
        println!(
            "superblocks of {size:2} blocks reaching it: {:.4}, holding {:.4} of the rare terms' blocks",
            reach[i] / nq as f64,
            rare_inside[i] / nq as f64
        );
    }
    Ok(())
}
