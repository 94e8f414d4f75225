//! `lexlip search`: one query vector, or a batch of queries written as a TREC run.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use lexlip_index::{Collection, SearchOptions};
use lexlip_pipeline::sources::vectors::{open_lines, parse_line};
use lexlip_proto::api::{Filter, Precision};
use lexlip_proto::{Modality, QuantizedVector};
use rayon::prelude::*;

use super::index::parse_modality;

#[derive(clap::Args, Debug)]
pub struct SearchArgs {
    /// Collection directory.
    #[arg(long)]
    pub collection: PathBuf,
    /// One query: a JSON object of term → weight (integers are impacts, other numbers weights).
    #[arg(long, conflicts_with = "queries", required_unless_present = "queries")]
    pub vector: Option<String>,
    /// Many queries, JsonVectorCollection JSONL (the id is the query id); needs --run.
    #[arg(long, requires = "run")]
    pub queries: Option<PathBuf>,
    /// Where to write the TREC run (`qid Q0 docid rank score lexlip`).
    #[arg(long)]
    pub run: Option<PathBuf>,
    /// Number of results per query.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// Approximate search with factor X ≥ 1: doc-id ranges whose score bound is below X times
    /// the current k-th score are skipped (1 = exact; larger = faster, lower recall).
    #[arg(long)]
    pub approx: Option<f32>,
    /// Approximate search that leaves the query's lightest terms out of the block bounds: those
    /// whose largest contributions add up to at most this share (0-1) of the query's largest
    /// possible score (they still count in every score). Runs at `--approx` or 1.
    #[arg(long)]
    pub term_cut: Option<f32>,
    /// Only documents of this modality.
    #[arg(long, value_parser = parse_modality)]
    pub modality: Option<Modality>,
    /// Show the matched terms of each hit.
    #[arg(long)]
    pub explain: bool,
    /// Print {"hits": [...]} as JSON.
    #[arg(long)]
    pub json: bool,
    /// Threads for batch search (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

fn options(args: &SearchArgs) -> SearchOptions {
    SearchOptions {
        k: args.k,
        precision: match (args.approx, args.term_cut) {
            (Some(f), _) => Precision::Approx(f),
            (None, Some(c)) if c > 0.0 => Precision::Approx(1.0),
            _ => Precision::Exact,
        },
        term_cut: args.term_cut.unwrap_or(0.0),
        filter: Filter {
            modality: args.modality,
            ..Filter::default()
        },
        ..SearchOptions::default()
    }
}

fn query_vector(c: &Collection, json: &str) -> anyhow::Result<QuantizedVector> {
    let line = format!(r#"{{"id":"q","vector":{json}}}"#);
    let record = parse_line(&line, 1, Modality::Text)
        .map_err(|e| anyhow::anyhow!("--vector: {}", e.reason))?;
    Ok(c.quantizer().query(record.vector)?)
}

pub fn run(args: SearchArgs) -> anyhow::Result<()> {
    let c = Collection::open(&args.collection)?;
    let opts = options(&args);
    opts.validate().map_err(|e| anyhow::anyhow!(e))?;
    match (&args.vector, &args.queries) {
        (Some(v), _) => single(&c, &args, &opts, v),
        (None, Some(q)) => batch(&c, &args, &opts, q),
        (None, None) => bail!("give --vector or --queries"),
    }
}

fn single(
    c: &Collection,
    args: &SearchArgs,
    opts: &SearchOptions,
    vector: &str,
) -> anyhow::Result<()> {
    let q = query_vector(c, vector)?;
    let snap = c.snapshot()?;
    let t = Instant::now();
    let out = snap.search(&q, opts)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let explain = args.explain.then_some(&q);
    let hits = out
        .hits
        .iter()
        .map(|h| snap.hit(h, explain))
        .collect::<Result<Vec<_>, _>>()?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({"hits": hits, "took_ms": ms}))?
        );
        return Ok(());
    }
    for (rank, h) in hits.iter().enumerate() {
        println!(
            "{:>3}. {}  score {}  ({})",
            rank + 1,
            h.id,
            h.score,
            h.modality
        );
        if let Some(text) = &h.text {
            println!("     {text}");
        }
        for t in h.explain.iter().flatten() {
            println!(
                "     {:<20} q {:>5} × d {:>5} = {}",
                t.term, t.query_impact, t.doc_impact, t.contribution
            );
        }
    }
    eprintln!("{} hits in {ms:.2} ms", hits.len());
    Ok(())
}

/// (query id, query vector) of every line of a JsonVectorCollection file, quantized as the
/// collection quantizes queries.
pub(crate) fn read_queries(
    c: &Collection,
    path: &std::path::Path,
) -> anyhow::Result<Vec<(String, QuantizedVector)>> {
    let mut queries = Vec::new();
    for (i, line) in open_lines(path)?.lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let r = parse_line(&line, i as u64 + 1, Modality::Text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        queries.push((r.doc.id.to_string(), c.quantizer().query(r.vector)?));
    }
    Ok(queries)
}

fn batch(
    c: &Collection,
    args: &SearchArgs,
    opts: &SearchOptions,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let queries = read_queries(c, path)?;
    let snap = c.snapshot()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.unwrap_or(0))
        .build()?;
    let start = Instant::now();
    let results: Vec<anyhow::Result<(Vec<lexlip_index::ScoredDoc>, f64)>> = pool.install(|| {
        queries
            .par_iter()
            .map(|(_, q)| {
                let t = Instant::now();
                let out = snap.search(q, opts)?;
                Ok((out.hits, t.elapsed().as_secs_f64() * 1e3))
            })
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let run_path = args
        .run
        .as_ref()
        .context("--queries needs --run OUT.trec")?;
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(run_path)
            .with_context(|| format!("cannot create {}", run_path.display()))?,
    );
    let mut latencies = Vec::with_capacity(results.len());
    for ((qid, _), r) in queries.iter().zip(results) {
        let (hits, ms) = r?;
        latencies.push(ms);
        for (rank, h) in hits.iter().enumerate() {
            let id = snap.hit(h, None)?.id;
            writeln!(out, "{qid} Q0 {id} {} {} lexlip", rank + 1, h.score)?;
        }
    }
    out.flush()?;
    latencies.sort_by(f64::total_cmp);
    let p = |x| lexlip_index::bench::percentile(&latencies, x);
    eprintln!(
        "{} queries in {wall:.2} s: {:.1} queries/s, p50 {:.2} ms, p99 {:.2} ms (search only); run written to {}",
        queries.len(),
        queries.len() as f64 / wall.max(1e-9),
        p(0.5),
        p(0.99),
        run_path.display()
    );
    Ok(())
}
