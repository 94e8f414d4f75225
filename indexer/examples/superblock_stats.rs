//! Would superblocks (bounding groups of blocks first, Carlson et al., SIGIR 2025) prune here?
//! For 100 queries on a one-segment collection built by `search_profile` (`superblock_stats
//! DIR`): with the final 10th score θ already known (the best case), the share of superblocks of
//! 1-64 blocks whose bound reaches θ, and the share of the rare terms' blocks inside them (what a
//! search would still walk).
use lexlip_index::maxima::SegmentMaxima;
use lexlip_index::synth::{Generator, Rng};
use lexlip_index::{Algorithm, Collection, SearchOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: superblock_stats DIR (a collection search_profile built)")?,
    );
    let c = Collection::open(&dir)?;
    let snap = c.snapshot()?;
    let g = Generator::default();
    let field = snap.searcher().schema().get_field("impacts")?;
    let reader = &snap.searcher().segment_readers()[0];
    let m = SegmentMaxima::compute(reader, field, 5)?;
    let mut rng = Rng::new(99);
    let nq = 100;
    let sizes = [1usize, 4, 8, 16, 32, 64];
    let mut frac = vec![0.0; sizes.len()];
    let mut sparse_frac = vec![0.0; sizes.len()];
    for _ in 0..nq {
        let q = g.query_of(Default::default(), &mut rng);
        let o = SearchOptions {
            k: 10,
            algorithm: Algorithm::Exhaustive,
            ..SearchOptions::default()
        };
        let hits = snap.search(&q, &o)?.hits;
        let theta = hits.last().map(|h| h.score).unwrap_or(0);
        let nb = m.num_ranges as usize;
        let mut ub = vec![0u64; nb];
        let mut per_term: Vec<(bool, Vec<u64>)> = Vec::new();
        for (t, w) in q.iter() {
            if let Some(tm) = m.term(t.as_bytes()) {
                let mut b = vec![0u64; nb];
                tm.add_bounds(u64::from(w), &mut b);
                for i in 0..nb {
                    ub[i] += b[i];
                }
                per_term.push((tm.has_bound_bytes(), b));
            }
        }
        for (si, &s) in sizes.iter().enumerate() {
            let nsb = nb.div_ceil(s);
            let mut sbu = vec![0u64; nsb];
            for (_, b) in &per_term {
                for j in 0..nsb {
                    sbu[j] += b[j * s..((j + 1) * s).min(nb)]
                        .iter()
                        .copied()
                        .max()
                        .unwrap_or(0);
                }
            }
            let alive: Vec<bool> = sbu.iter().map(|&u| u >= theta).collect();
            frac[si] += alive.iter().filter(|&&a| a).count() as f64 / nsb as f64;
            let (mut tot, mut kept) = (0u64, 0u64);
            for (dense, b) in &per_term {
                if *dense {
                    continue;
                }
                for i in 0..nb {
                    if b[i] > 0 {
                        tot += 1;
                        if alive[i / s] {
                            kept += 1;
                        }
                    }
                }
            }
            sparse_frac[si] += kept as f64 / tot.max(1) as f64;
        }
    }
    for (si, &s) in sizes.iter().enumerate() {
        println!(
            "superblock of {s:2} blocks: {:.4} alive, sparse term blocks in alive {:.4}",
            frac[si] / nq as f64,
            sparse_frac[si] / nq as f64
        );
    }
    Ok(())
}
