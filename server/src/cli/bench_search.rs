//! `lexlip bench search`: search speed and recall on a real collection and real queries, every
//! algorithm in the same run, one query at a time on one thread.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use lexlip_index::bench::{mean_nnz, measure};
use lexlip_index::{Collection, SearchOptions};

use super::search::read_queries;

#[derive(clap::Args, Debug)]
pub struct BenchSearchArgs {
    /// Collection directory.
    #[arg(long)]
    pub collection: PathBuf,
    /// Queries: JsonVectorCollection JSONL (weights, or integer impacts).
    #[arg(long)]
    pub queries: PathBuf,
    /// Results per query.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// Approximation factors to sweep.
    #[arg(long, value_delimiter = ',', default_value = "1.1,1.2,1.3,1.5")]
    pub approx: Vec<f32>,
    /// Term cuts to sweep, each at approximation factor 1.
    ///
    /// The query's lightest terms, whose largest contributions add up to at most this share of
    /// its largest possible score, are left out of the block bounds (as `lexlip search
    /// --term-cut`).
    #[arg(long, value_delimiter = ',', default_value = "0.05,0.1,0.15")]
    pub term_cut: Vec<f32>,
    /// Threads per query to also time exact search with.
    ///
    /// One thread is always measured.
    #[arg(long, value_delimiter = ',', default_value = "2")]
    pub threads: Vec<usize>,
    /// Search only the documents of this modality.
    ///
    /// E.g. `text` for image queries against the captions of a collection of images and
    /// captions, as image→text search does.
    #[arg(long, value_parser = super::index::parse_modality)]
    pub modality: Option<lexlip_proto::Modality>,
    #[command(flatten)]
    pub forward: super::forward_args::ForwardArgs,
    /// Write the exact top k of every query here as a TREC run.
    ///
    /// Lines `qid Q0 docid rank score lexlip`: the ground truth for comparing other engines.
    #[arg(long)]
    pub truth_run: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BenchSearchArgs) -> anyhow::Result<()> {
    let mut c = Collection::open(&args.collection)
        .with_context(|| format!("cannot open {}", args.collection.display()))?;
    c.set_block_size(args.forward.block_size.0)?;
    c.set_forward_layout(args.forward.layout.0);
    let queries = read_queries(&c, &args.queries)?;
    let t = Instant::now();
    let snap = c.snapshot()?;
    let warm_seconds = t.elapsed().as_secs_f64();
    let vectors: Vec<_> = queries.iter().map(|(_, q)| q.clone()).collect();
    let quiet = args.json;
    let m = measure(
        &snap,
        &vectors,
        &SearchOptions {
            k: args.k,
            filter: lexlip_proto::api::Filter {
                modality: args.modality,
                ..Default::default()
            },
            ..SearchOptions::default()
        },
        &args.approx,
        &args.term_cut,
        &args.threads,
        &mut |phase, f| {
            if !quiet {
                eprintln!("[bench] {phase} {f:.2}");
            }
        },
    )?;
    if let Some(path) = &args.truth_run {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        );
        for ((qid, _), hits) in queries.iter().zip(&m.truth) {
            for (rank, h) in hits.iter().enumerate() {
                let id = snap.hit(h, None)?.id;
                writeln!(out, "{qid} Q0 {id} {} {} lexlip", rank + 1, h.score)?;
            }
        }
        out.flush()?;
    }
    let stats = c.stats()?;
    let mean_query_nnz = mean_nnz(&vectors);
    let report = serde_json::json!({
        "collection": args.collection,
        "docs": snap.num_docs(),
        "queries": queries.len(),
        "mean_query_nnz": mean_query_nnz,
        "k": args.k,
        "modality": args.modality,
        "block_size": args.forward.block_size.0,
        "forward": snap.forward_summary(),
        "warm_seconds": warm_seconds,
        "nnz": stats.nnz,
        "bytes": stats.bytes,
        "bytes_per_nnz": stats.bytes_per_nnz,
        "pruning_memory_bytes": stats.pruning_memory_bytes,
        "forward_file_bytes": stats.forward_file_bytes,
        "index_bytes": stats.index_bytes,
        "index_bytes_per_nnz": stats.index_bytes_per_nnz,
        "vector_index_bytes": stats.vector_index_bytes,
        "vector_index_bytes_per_nnz": stats.vector_index_bytes_per_nnz,
        "stored_bytes": stats.stored_bytes,
        "search": m,
    });
    if args.json {
        println!("{report}");
        return Ok(());
    }
    println!(
        "{} documents, {} queries ({:.1} terms each), k = {}, {}",
        snap.num_docs(),
        queries.len(),
        mean_query_nnz,
        args.k,
        super::forward_args::ForwardArgs::describe(&snap.forward_summary())
    );
    println!(
        "{:.2} bytes per non-zero on disk: index structures {:.2} (vectors alone {:.2}; forward index files {:.2}), stored fields {:.2}; pruning structures {:.1} MB on the heap (ready in {:.2} s)",
        stats.bytes_per_nnz,
        stats.index_bytes_per_nnz,
        stats.vector_index_bytes_per_nnz,
        stats.forward_file_bytes as f64 / stats.nnz.max(1) as f64,
        stats.stored_bytes as f64 / stats.nnz.max(1) as f64,
        stats.pruning_memory_bytes as f64 / 1e6,
        warm_seconds
    );
    println!("exhaustive baseline  {:.3} ms/query", m.exhaustive.mean_ms);
    for (name, f) in [
        ("exact (block-max)", &m.exact),
        ("exact (postings)", &m.exact_postings),
    ] {
        println!(
            "{name:<20} {:.3} ms/query, p99 {:.2} ms, {:.2}x exhaustive, recall@{} {:.3}; {:.0} % of candidate blocks scored, {:.1} segments per query scored without pruning",
            f.mean_ms,
            f.p99_ms,
            f.speedup,
            args.k.min(10),
            f.recall_at_10,
            100.0 * f.blocks_scored_fraction,
            f.segments_unpruned_per_query
        );
    }
    for t in &m.exact_threads {
        let f = &t.figures;
        println!(
            "exact, {} threads     {:.3} ms/query, p99 {:.2} ms, {:.2}x exhaustive, recall@10 {:.3}",
            t.threads, f.mean_ms, f.p99_ms, f.speedup, f.recall_at_10
        );
    }
    for a in &m.approx {
        println!(
            "{:<20} {:.3} ms/query, p99 {:.2} ms, {:.2}x exhaustive, recall@10 {:.3}",
            a.label(),
            a.mean_ms,
            a.p99_ms,
            a.speedup,
            a.recall_at_10
        );
    }
    Ok(())
}
