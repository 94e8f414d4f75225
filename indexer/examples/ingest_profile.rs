//! Ingest only (add + commit of synthetic vectors), for profiling: `ingest_profile [docs]`.
use std::time::Instant;

use lexlip_index::synth::{Generator, Rng};
use lexlip_index::{Collection, CollectionSettings};
use lexlip_proto::{DocId, Document, Modality, QuantizedVector, TermSpace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let docs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir()?;
    let g = Generator::default();
    let mut rng = Rng::new(1);
    let space = TermSpace::from_tokens("synthetic", g.vocabulary().iter().map(String::as_str));
    let c = Collection::create(dir.path(), space, CollectionSettings::default(), None)?;
    let batch: Vec<(Document, QuantizedVector)> = (0..docs)
        .map(|i| {
            (
                Document::new(DocId::new(format!("doc{i}")).unwrap(), Modality::Image),
                g.document(&mut rng),
            )
        })
        .collect();
    let t = Instant::now();
    for (d, v) in batch {
        c.add(d, v)?;
    }
    let added = t.elapsed().as_secs_f64();
    c.commit()?;
    let total = t.elapsed().as_secs_f64();
    println!(
        "add {added:.2}s commit {:.2}s total {total:.2}s = {:.0} docs/s",
        total - added,
        docs as f64 / total
    );
    Ok(())
}
