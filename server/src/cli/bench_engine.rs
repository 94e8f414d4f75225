//! `lexlip bench engine`: ingest, size and search speed on LexLIP-shaped synthetic data.

use lexlip_index::bench::{EngineBenchConfig, run as run_bench};

#[derive(clap::Args, Debug)]
pub struct BenchEngineArgs {
    /// Documents to generate and index.
    #[arg(long, default_value_t = 1_000_000)]
    pub docs: usize,
    /// Queries to run, by each algorithm.
    #[arg(long, default_value_t = 1_000)]
    pub queries: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Results per query.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// Approximation factors to sweep.
    #[arg(long, value_delimiter = ',', default_value = "1.1,1.25,1.5,2,3")]
    pub approx: Vec<f32>,
    /// Term cuts to sweep, each at approximation factor 1.
    ///
    /// The query's lightest terms, whose largest contributions add up to at most this share of
    /// its largest possible score, are left out of the block bounds (as `lexlip search
    /// --term-cut`).
    #[arg(long, value_delimiter = ',', default_value = "0.05,0.1")]
    pub term_cut: Vec<f32>,
    /// Synthetic corpus: `topical` or `independent`.
    ///
    /// `topical`: documents and queries from latent topics, like real LexLIP vectors;
    /// `independent`: every term drawn independently, no structure.
    #[arg(long, default_value = "topical")]
    pub corpus: lexlip_index::synth::Corpus,
    /// Threads per query to also time exact search with.
    ///
    /// One thread is always measured.
    #[arg(long, value_delimiter = ',', default_value = "2")]
    pub threads: Vec<usize>,
    #[command(flatten)]
    pub forward: super::forward_args::ForwardArgs,
    /// Keep no forward index files (as `lexlip index --no-forward-files`).
    ///
    /// The first search builds the forward index from the postings.
    #[arg(long)]
    pub no_forward_files: bool,
    /// Build the collection here, and keep it, instead of in a temporary directory.
    ///
    /// So that other engines can be run on its export: `lexlip export --format jsonl`.
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Write the queries searched here, to search with them elsewhere.
    ///
    /// As JsonVectorCollection lines (`{"id": "q0", "vector": {token: impact}}`), to search the
    /// same collection with them elsewhere (`lexlip bench search --queries`,
    /// scripts/real_sparse_bench.py).
    #[arg(long)]
    pub write_queries: Option<std::path::PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BenchEngineArgs) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().join("bench"));
    let config = EngineBenchConfig {
        docs: args.docs,
        queries: args.queries,
        seed: args.seed,
        k: args.k,
        approx: args.approx,
        term_cuts: args.term_cut,
        corpus: args.corpus,
        block_size: args.forward.block_size.0,
        layout: args.forward.layout.0,
        threads: args.threads,
        forward_files: !args.no_forward_files,
    };
    // Checked before the minutes of ingest, not after.
    let mut queries_out = match &args.write_queries {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let quiet = args.json;
    let r = run_bench(&config, &dir, &mut |phase, f| {
        if !quiet {
            eprintln!("[bench] {phase} {f:.2}");
        }
    })?;
    if let Some(out) = &mut queries_out {
        write_queries(out, &r.query_vectors)?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!("corpus               {}", r.corpus);
    println!("documents            {}", r.docs);
    println!("ingest               {:.0} docs/s", r.ingest_docs_per_s);
    let per_nnz = |bytes: u64| bytes as f64 / r.nnz.max(1) as f64;
    println!(
        "size                 {:.2} bytes per non-zero ({} bytes, {} non-zeros)",
        r.bytes_per_nnz, r.bytes, r.nnz
    );
    println!(
        "index structures     {:.2} bytes per non-zero of that (forward index files {:.2}); stored fields {:.2}",
        r.index_bytes_per_nnz,
        per_nnz(r.forward_file_bytes),
        per_nnz(r.stored_bytes)
    );
    println!(
        "  vectors alone      {:.2} bytes per non-zero (impacts postings and dictionary, forward index files); documents' keys {:.2}",
        r.vector_index_bytes_per_nnz,
        per_nnz(r.index_bytes - r.vector_index_bytes)
    );
    println!(
        "open to first search {:.3} s ({}); building the forward index from the postings {:.3} s",
        r.open_seconds,
        if r.forward_file_bytes > 0 {
            "forward index read from its files"
        } else {
            "no files: forward index built"
        },
        r.build_seconds,
    );
    println!("exhaustive baseline  {:.1} QPS", r.search.exhaustive.qps);
    println!(
        "exact (block-max)    {:.1} QPS, p50 {:.2} ms, p99 {:.2} ms, {:.2}x exhaustive, recall@10 {:.3}",
        r.search.exact.qps,
        r.search.exact.p50_ms,
        r.search.exact.p99_ms,
        r.search.exact.speedup,
        r.search.exact.recall_at_10
    );
    println!(
        "exact (postings)     {:.1} QPS, p50 {:.2} ms, p99 {:.2} ms, {:.2}x exhaustive, recall@10 {:.3}",
        r.search.exact_postings.qps,
        r.search.exact_postings.p50_ms,
        r.search.exact_postings.p99_ms,
        r.search.exact_postings.speedup,
        r.search.exact_postings.recall_at_10
    );
    for t in &r.search.exact_threads {
        println!(
            "exact, {} threads    {:.1} QPS, p50 {:.2} ms, p99 {:.2} ms, {:.2}x exhaustive",
            t.threads, t.figures.qps, t.figures.p50_ms, t.figures.p99_ms, t.figures.speedup
        );
    }
    println!(
        "pruning memory       {:.1} MB on the heap and {:.1} MB mapped from the files (bounds and forward index: {})",
        r.pruning_memory_bytes as f64 / 1e6,
        r.forward_file_bytes as f64 / 1e6,
        super::forward_args::ForwardArgs::describe(&r.forward)
    );
    for a in &r.search.approx {
        println!(
            "{:<20} {:.1} QPS, {:.2}x exhaustive, recall@10 {:.3}",
            a.label(),
            a.qps,
            a.speedup,
            a.recall_at_10
        );
    }
    Ok(())
}

/// One JsonVectorCollection line per query, ids `q0`, `q1`, … in the order searched.
fn write_queries(
    out: &mut impl std::io::Write,
    queries: &[lexlip_proto::QuantizedVector],
) -> anyhow::Result<()> {
    for (i, q) in queries.iter().enumerate() {
        let vector: serde_json::Map<String, serde_json::Value> =
            q.iter().map(|(t, w)| (t.to_string(), w.into())).collect();
        let line = serde_json::json!({ "id": format!("q{i}"), "vector": vector });
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}
