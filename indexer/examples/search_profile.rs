//! Search only, on a collection built once: `search_profile DIR [docs] [corpus] [factor]`
//! (builds DIR on first use, then times exhaustive vs pruned on 200 queries, 3 rounds).
//! `PRUNED_ONLY=1`: only the pruned search, 20 rounds, recall against itself (for a profiler).
//! `QUERIES=FILE.jsonl`: an existing collection DIR searched with these queries (Anserini
//! `JsonVectorCollection` lines with integer impacts, as `lexlip export` writes them) instead of
//! synthetic ones; `BLOCK=16` sets the block size, `LAYOUT=terms|documents` the forward index
//! layout (both chosen per segment otherwise); `MERGE=1` merges the collection's segments
//! into one first; `TERM_CUT=0.1` leaves the query's lightest terms out of the bounds
//! (`SearchOptions::term_cut`; the search is then approximate even at factor 1).
use std::time::Instant;

use lexlip_index::synth::{Corpus, Generator, Rng};
use lexlip_index::{Algorithm, Collection, CollectionSettings, SearchOptions};
use lexlip_proto::api::Precision;
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(
        args.next()
            .ok_or("usage: search_profile DIR [docs] [corpus] [factor]")?,
    );
    let docs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let corpus: Corpus = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or_default();
    let factor: f32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let g = Generator::default();
    let mut rng = Rng::new(1);
    let c = if dir.exists() {
        Collection::open(&dir)?
    } else {
        let space = TermSpace::from_tokens("synthetic", g.vocabulary().iter().map(String::as_str));
        let c = Collection::create(&dir, space, CollectionSettings::default(), None)?;
        for i in 0..docs {
            c.add(
                Document::new(DocId::new(format!("doc{i}"))?, Modality::Image),
                g.document_of(corpus, &mut rng),
            )?;
        }
        c.merge_all()?;
        c
    };
    let mut c = c;
    if std::env::var_os("MERGE").is_some() {
        c.merge_all()?;
    }
    if let Some(b) = std::env::var("BLOCK").ok().and_then(|b| b.parse().ok()) {
        c.set_block_size(Some(b))?;
    }
    c.set_forward_layout(match std::env::var("LAYOUT").as_deref() {
        Ok("terms") => Some(lexlip_index::forward_index::Layout::Terms),
        Ok("documents") => Some(lexlip_index::forward_index::Layout::Documents),
        _ => None,
    });
    let snap = c.snapshot()?;
    let queries: Vec<QuantizedVector> = match std::env::var_os("QUERIES") {
        Some(path) => read_queries(std::path::Path::new(&path))?,
        None => {
            let mut qrng = Rng::new(99);
            (0..200).map(|_| g.query_of(corpus, &mut qrng)).collect()
        }
    };
    let per_query = 1e3 / queries.len() as f64;
    let opts = |algorithm, precision| SearchOptions {
        k: 10,
        algorithm,
        precision,
        ..SearchOptions::default()
    };
    let exh = opts(Algorithm::Exhaustive, Precision::Exact);
    let term_cut: f32 = std::env::var("TERM_CUT")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0.0);
    let pr = SearchOptions {
        term_cut,
        ..opts(
            Algorithm::BlockMax,
            if factor == 1.0 && term_cut == 0.0 {
                Precision::Exact
            } else {
                Precision::Approx(factor)
            },
        )
    };
    let only = std::env::var_os("PRUNED_ONLY").is_some();
    let truth: Vec<_> = queries
        .iter()
        .map(|q| {
            snap.search(q, if only { &pr } else { &exh })
                .map(|o| o.hits)
        })
        .collect::<Result<_, _>>()?;
    for _ in 0..if only { 20 } else { 3 } {
        let t = Instant::now();
        if !only {
            for q in &queries {
                snap.search(q, &exh)?;
            }
        }
        let te = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut hit = 0usize;
        let mut scored = 0u64;
        for (q, tr) in queries.iter().zip(&truth) {
            let o = snap.search(q, &pr)?;
            scored += o.stats.postings_scored;
            hit += o
                .hits
                .iter()
                .filter(|h| {
                    tr.iter()
                        .any(|x| x.doc == h.doc && x.segment_ord == h.segment_ord)
                })
                .count();
        }
        let tp = t.elapsed().as_secs_f64();
        println!(
            "exhaustive {:.3} ms/q, pruned {:.3} ms/q, speedup {:.2}, recall {:.4}, postings/q {}",
            te * per_query,
            tp * per_query,
            te / tp,
            hit as f64 / (10.0 * queries.len() as f64),
            scored / queries.len() as u64
        );
    }
    Ok(())
}

/// Integer-impact queries of a `JsonVectorCollection` file.
fn read_queries(
    path: &std::path::Path,
) -> Result<Vec<QuantizedVector>, Box<dyn std::error::Error>> {
    let mut queries = Vec::new();
    for line in std::fs::read_to_string(path)?.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line)?;
        let vector = value["vector"]
            .as_object()
            .ok_or("a line without \"vector\"")?;
        let pairs = vector
            .iter()
            .map(|(t, w)| Ok((t.clone(), w.as_u64().ok_or("impacts must be integers")?)))
            .collect::<Result<Vec<_>, &str>>()?;
        queries.push(QuantizedVector::new(pairs)?);
    }
    Ok(queries)
}
