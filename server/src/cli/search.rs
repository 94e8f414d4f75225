//! `lexlip search`: one query (words, an image or a vector), or a batch of query vectors written
//! as a TREC run. The same search policy as the server (`lexlip_search`): sparse, dense,
//! hybrid and the dense fallback.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::ValueEnum;
use lexlip_index::Collection;
use lexlip_model::Encoders;
use lexlip_pipeline::sources::vectors::{open_lines, parse_line};
use lexlip_proto::api::{Filter, Hit, SearchPath};
use lexlip_proto::{DenseVector, Modality, QuantizedVector, VectorInput};
use lexlip_search::{DenseNeed, Mode, SearchError, SearchPlan, Searcher};
use rayon::prelude::*;

use super::index::parse_modality;
use super::model_args::ModelArgs;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("query").required(true)))]
pub struct SearchArgs {
    /// Collection directory.
    #[arg(long)]
    pub collection: PathBuf,
    /// One query in words, encoded by --model's text encoder.
    #[arg(long, group = "query")]
    pub text: Option<String>,
    /// One query image (a file), encoded by --model's image encoder.
    #[arg(long, group = "query", value_name = "FILE")]
    pub image: Option<PathBuf>,
    /// One query vector: a JSON object of term → weight (integers are impacts, other numbers
    /// weights).
    #[arg(long, group = "query")]
    pub vector: Option<String>,
    /// Many query vectors, JsonVectorCollection JSONL (the id is the query id); needs --run.
    #[arg(long, group = "query", requires = "run")]
    pub queries: Option<PathBuf>,
    /// Where to write the TREC run (`qid Q0 docid rank score lexlip`).
    #[arg(long)]
    pub run: Option<PathBuf>,
    /// Which index answers: sparse (the lexicon index; when it matches fewer than k documents
    /// and the collection keeps dense vectors, the dense index answers instead), dense, or
    /// hybrid (reciprocal-rank fusion of both). Dense and hybrid need a collection with dense
    /// vectors and a --model with a dense encoder.
    #[arg(long, value_enum, default_value_t = ModeArg::Sparse)]
    pub mode: ModeArg,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Number of results per query.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// Approximate search with factor X ≥ 1: doc-id blocks whose score bound is below X times
    /// the current k-th score are skipped (1 = exact; larger = faster, lower recall).
    #[arg(long)]
    pub approx: Option<f32>,
    /// Approximate search that leaves the query's lightest terms out of the block bounds: those
    /// whose largest contributions add up to at most this share (0-1) of the query's largest
    /// possible score (they still count in every score). Runs at `--approx` or 1.
    #[arg(long)]
    pub term_cut: Option<f32>,
    /// Weight the query's terms by their rarity among the documents searched: each impact
    /// times ln(1 + N / df)^ALPHA, N the documents the search may return (of --modality) and df
    /// those holding the term (0-4; 0 is off; 1 is BM25's IDF). Terms that a model puts on most
    /// pictures of a large collection then weigh less than the ones that tell them apart. The
    /// search stays exact, with the weighted query. Default: for --text and --image, the
    /// model's (`idf` in its lexlip.json), else off.
    #[arg(long, value_name = "ALPHA")]
    pub idf: Option<f32>,
    /// Only documents of this modality.
    #[arg(long, value_parser = parse_modality)]
    pub modality: Option<Modality>,
    /// Show the matched terms of each hit.
    #[arg(long)]
    pub explain: bool,
    /// Print {"hits": [...], "path", "took_ms", "weak_match"?} as JSON (`weak_match`: the query
    /// model's calibration, below which a hit's match strength is weak; the table says `weak`).
    #[arg(long)]
    pub json: bool,
    /// Threads for batch search (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Sparse,
    Dense,
    Hybrid,
}

fn plan(args: &SearchArgs, dense: bool) -> anyhow::Result<SearchPlan> {
    let (precision, term_cut) = lexlip_search::precision(None, args.approx, args.term_cut)?;
    let plan = SearchPlan {
        k: args.k,
        mode: match args.mode {
            ModeArg::Sparse => Mode::Sparse,
            ModeArg::Dense => Mode::Dense,
            ModeArg::Hybrid => Mode::Hybrid,
        },
        precision,
        term_cut,
        filter: Filter {
            modality: args.modality,
            ..Filter::default()
        },
        explain: args.explain,
        threads: 0,
        idf: args.idf.unwrap_or(0.0),
        query_norm: None,
    };
    plan.check(dense)?;
    Ok(plan)
}

fn query_vector(c: &Collection, json: &str) -> anyhow::Result<QuantizedVector> {
    let line = format!(r#"{{"id":"q","vector":{json}}}"#);
    let record = parse_line(&line, 1, Modality::Text)
        .map_err(|e| anyhow::anyhow!("--vector: {}", e.reason))?;
    Ok(c.quantizer().query(record.vector)?)
}

pub fn run(args: SearchArgs) -> anyhow::Result<()> {
    let c = Collection::open(&args.collection)?;
    let plan = plan(&args, c.manifest().settings.dense_dim.is_some())?;
    if let Some(q) = &args.queries {
        if plan.mode != Mode::Sparse {
            bail!("--queries holds sparse vectors: search them with --mode sparse");
        }
        return batch(&c, &args, &plan, q);
    }
    let query = match (&args.text, &args.image, &args.vector) {
        (Some(t), _, _) => Query::Text(t.clone()),
        (_, Some(p), _) => Query::Image(p.clone()),
        (_, _, Some(v)) => Query::Vector(v.clone()),
        _ => bail!("give a query: --text, --image, --vector, or --queries with --run"),
    };
    single(&c, &args, &plan, query)
}

/// One query as the user gave it.
enum Query {
    Text(String),
    Image(PathBuf),
    Vector(String),
}

/// The query encoded: its sparse vector (none in dense mode) and, when the model has a dense
/// encoder, how to get its dense one.
struct Encoded<'a> {
    sparse: Option<QuantizedVector>,
    encoders: Option<&'a Encoders>,
    source: &'a Query,
    image: Option<Vec<u8>>,
}

impl Encoded<'_> {
    /// The dense query, encoded only when the search asks for it. Without a dense encoder a
    /// fallback keeps the sparse answer, and dense or hybrid mode are refused with what to do.
    fn dense(&self, need: DenseNeed) -> anyhow::Result<Option<DenseVector>> {
        let dense = self.encoders.and_then(|e| e.dense());
        let Some(d) = dense else {
            return match (need, self.source) {
                (DenseNeed::Fallback, _) | (_, Query::Vector(_)) => Ok(None),
                _ => bail!(
                    "--model has no dense encoder: give a CLIP, SigLIP or MobileCLIP directory or a model from \
                     `lexlip train --objective dense`, or search with --mode sparse"
                ),
            };
        };
        let mut out = match (self.source, &self.image) {
            (Query::Text(t), _) => d.encode_texts(&[t.as_str()])?,
            (Query::Image(p), Some(bytes)) => {
                let image = d.preprocess_image(bytes, &p.display().to_string())?;
                d.encode_images(&[image])?
            }
            _ => return Ok(None),
        };
        Ok(out.pop())
    }
}

/// Loads --model for a text or image query and checks it writes the collection's terms.
fn encoders(c: &Collection, args: &SearchArgs, what: &str) -> anyhow::Result<Encoders> {
    let (path, encoders) = args
        .model
        .load(what, lexlip_model::LoadOptions::default())?;
    let space = &c.manifest().term_space;
    let model_space = encoders
        .text()
        .map(|t| t.term_space().clone())
        .or_else(|_| encoders.image().map(|i| i.term_space().clone()));
    if let Ok(ts) = model_space
        && !space.is_free()
        && !space.same_vocabulary(&ts)
    {
        bail!(
            "the collection was built for {space}, but {} writes {ts}: search it with the model \
             that indexed it",
            path.display()
        );
    }
    Ok(encoders)
}

fn encode<'a>(
    c: &Collection,
    plan: &SearchPlan,
    query: &'a Query,
    encoders: Option<&'a Encoders>,
) -> anyhow::Result<Encoded<'a>> {
    let image = match query {
        Query::Image(p) => {
            Some(std::fs::read(p).with_context(|| format!("cannot read --image {}", p.display()))?)
        }
        _ => None,
    };
    let weights = match (query, &image) {
        (Query::Vector(v), _) => {
            return Ok(Encoded {
                sparse: Some(query_vector(c, v)?),
                encoders,
                source: query,
                image,
            });
        }
        _ if plan.mode == Mode::Dense => None,
        _ if encoders.is_some_and(Encoders::is_dense_only) => {
            bail!("the model is dense only (it gives no lexicon): search it with --mode dense")
        }
        (Query::Text(t), _) => {
            let e = encoders.context("--text needs --model")?;
            e.text()?.encode_queries(&[t.as_str()])?.pop()
        }
        (Query::Image(p), Some(bytes)) => {
            let e = encoders.context("--image needs --model")?.image()?;
            let pre = e.preprocess_named(bytes, &p.display().to_string())?;
            e.encode(&[pre])?.pop()
        }
        (Query::Image(_), None) => None,
    };
    let sparse = match weights {
        Some(w) => Some(c.quantizer().query(VectorInput::Weights(w))?),
        None if plan.mode == Mode::Dense => None,
        None => bail!("the encoder returned no vector"),
    };
    Ok(Encoded {
        sparse,
        encoders,
        source: query,
        image,
    })
}

fn single(
    c: &Collection,
    args: &SearchArgs,
    plan: &SearchPlan,
    query: Query,
) -> anyhow::Result<()> {
    let loaded = match &query {
        Query::Text(_) => Some(encoders(c, args, "--text")?),
        Query::Image(_) => Some(encoders(c, args, "--image")?),
        Query::Vector(_) => None,
    };
    let encoded = encode(c, plan, &query, loaded.as_ref())?;
    // Without --idf, a query the model encoded is weighted as the model asks.
    let mut plan = plan.clone();
    if args.idf.is_none()
        && let Some(a) = loaded.as_ref().and_then(Encoders::idf)
    {
        // In range: the model refuses an `idf` out of it when it loads.
        plan.idf = a;
    }
    // Strengths as the server gives them: scaled down for a query the model made little of.
    plan.query_norm = loaded
        .as_ref()
        .and_then(|e| of_query(e.query_norm(), &query));
    let snap = c.snapshot()?;
    let t = Instant::now();
    let found =
        Searcher::new(&snap).search(&plan, encoded.sparse.as_ref(), |need| encoded.dense(need))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    // As the server: the calibration is of the sparse strengths of the model's own queries.
    let weak_match = match found.path {
        SearchPath::Sparse => loaded
            .as_ref()
            .and_then(|e| of_query(e.weak_match(), &query)),
        _ => None,
    };
    if args.json {
        let mut out = serde_json::json!({
            "hits": found.hits,
            "path": found.path,
            "took_ms": ms,
        });
        if let Some(w) = weak_match {
            out["weak_match"] = serde_json::json!(w);
        }
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    print_hits(&found.hits, weak_match);
    let path = match found.path {
        SearchPath::Sparse => "sparse",
        SearchPath::Dense => "dense",
        SearchPath::Hybrid => "hybrid",
        SearchPath::DenseFallback => "dense fallback: the sparse index matched fewer than k",
    };
    eprintln!("{} hits ({path}) in {ms:.2} ms", found.hits.len());
    Ok(())
}

/// A model's setting for the modality of `query` (none for a vector, which no model encoded).
fn of_query<T>(setting: lexlip_model::ByQueryModality<T>, query: &Query) -> Option<T> {
    match query {
        Query::Text(_) => setting.text,
        Query::Image(_) => setting.image,
        Query::Vector(_) => None,
    }
}

/// The hits, one a line; with the query model's weak-match calibration, a hit whose match
/// strength is below it says so (the page greys it out).
fn print_hits(hits: &[Hit], weak_match: Option<f64>) {
    for (rank, h) in hits.iter().enumerate() {
        let strength = h
            .match_strength
            .map(|m| {
                let weak = weak_match.is_some_and(|w| m < w);
                format!(
                    ", match {:.0} %{}",
                    m * 100.0,
                    if weak { ", weak" } else { "" }
                )
            })
            .unwrap_or_default();
        println!(
            "{:>3}. {}  score {}  ({}{strength})",
            rank + 1,
            h.id,
            h.score,
            h.modality
        );
        if let Some(text) = &h.text {
            println!("     {text}");
        } else if let Some(uri) = &h.uri {
            println!("     {uri}");
        }
        for t in h.explain.iter().flatten() {
            println!(
                "     {:<20} q {:>5} × d {:>5} = {}",
                t.term, t.query_impact, t.doc_impact, t.contribution
            );
        }
    }
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
    plan: &SearchPlan,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let queries = read_queries(c, path)?;
    let snap = c.snapshot()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.unwrap_or(0))
        .build()?;
    let no_dense = |_| Ok::<_, SearchError>(None);
    let start = Instant::now();
    let results: Vec<anyhow::Result<(lexlip_search::Ranking, f64)>> = pool.install(|| {
        queries
            .par_iter()
            .map(|(_, q)| {
                let t = Instant::now();
                let ranking = Searcher::new(&snap).rank(plan, Some(q), no_dense)?;
                Ok((ranking, t.elapsed().as_secs_f64() * 1e3))
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
        let (ranking, ms) = r?;
        latencies.push(ms);
        for (rank, h) in ranking.docs.iter().enumerate() {
            let id = snap.hit_at(h.segment_ord, h.doc, h.score)?.id;
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
