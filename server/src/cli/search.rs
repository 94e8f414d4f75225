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
use lexlip_proto::api::{Hit, SearchPath};
use lexlip_proto::{DenseVector, Modality, QuantizedVector, VectorInput};
use lexlip_search::request::{Ask, Defaults, QueryKind};
use lexlip_search::{DenseNeed, Mode, SearchError, SearchPlan, Searcher};
use rayon::prelude::*;

use super::index::parse_modality;
use super::model_args::ModelArgs;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("query").required(true)))]
#[command(
    override_usage = "lexlip search [OPTIONS] --collection <DIR> --model <MODEL> --text <TEXT>
       lexlip search [OPTIONS] --collection <DIR> --model <MODEL> --image <FILE>
       lexlip search [OPTIONS] --collection <DIR> --vector <JSON>
       lexlip search [OPTIONS] --collection <DIR> --queries <FILE> --run <FILE>"
)]
pub struct SearchArgs {
    /// Collection directory.
    #[arg(long, value_name = "DIR")]
    pub collection: PathBuf,
    /// One query in words, encoded by --model's text encoder.
    #[arg(long, group = "query")]
    pub text: Option<String>,
    /// One query image, encoded by --model's image encoder.
    #[arg(long, group = "query", value_name = "FILE")]
    pub image: Option<PathBuf>,
    /// One query vector: a JSON object of term → weight.
    ///
    /// Integers are impacts, other numbers weights.
    #[arg(long, group = "query", value_name = "JSON")]
    pub vector: Option<String>,
    /// Many query vectors (JsonVectorCollection JSONL); needs --run.
    ///
    /// Each line's id is the query id.
    #[arg(long, group = "query", requires = "run", value_name = "FILE")]
    pub queries: Option<PathBuf>,
    /// Where to write the TREC run of --queries.
    ///
    /// Lines `qid Q0 docid rank score lexlip`.
    #[arg(long, value_name = "FILE")]
    pub run: Option<PathBuf>,
    /// Which index answers: sparse, dense, or hybrid (both, fused).
    ///
    /// sparse: the lexicon index; when it matches fewer than k documents and the collection
    /// keeps dense vectors, the dense index answers instead. hybrid: reciprocal-rank fusion of
    /// both. Dense and hybrid need a collection with dense vectors and a --model with a dense
    /// encoder.
    #[arg(long, value_enum, default_value_t = ModeArg::Sparse)]
    pub mode: ModeArg,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Number of results per query.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// Approximate search: skip blocks bounded below X × the k-th score.
    ///
    /// X ≥ 1: 1 is exact; larger is faster, with lower recall. Hits are still scored exactly.
    /// See docs/cli.md, *Search semantics*.
    #[arg(long, value_name = "X")]
    pub approx: Option<f32>,
    /// Approximate search: leave the lightest terms out of the bounds.
    ///
    /// Those whose largest contributions add up to at most C (0-1) of the query's largest
    /// possible score; they still count in every score. Runs at --approx or 1. See docs/cli.md,
    /// *Search semantics*.
    #[arg(long, value_name = "C")]
    pub term_cut: Option<f32>,
    /// Weight the query's terms by their rarity in the collection (0-4).
    ///
    /// Each impact times ln(1 + N / df)^ALPHA (0 is off; 1 is BM25's IDF); the search stays
    /// exact, with the weighted query. Default: for --text and --image, the model's (`idf` in
    /// its lexlip.json), else off. See docs/cli.md, *IDF weighting*.
    #[arg(long, value_name = "ALPHA")]
    pub idf: Option<f32>,
    /// Which documents a query may return: image, text or any.
    ///
    /// Default: as the page does, the other modality when the collection holds it (a --text query
    /// finds images, an --image query texts), else any.
    #[arg(long, value_parser = parse_target, value_name = "image|text|any")]
    pub modality: Option<Target>,
    /// Show the matched terms of each hit.
    #[arg(long)]
    pub explain: bool,
    /// Print the hits as one JSON object.
    ///
    /// `{"hits": [...], "path", "took_ms", "weak_match"?, "weak"?}`: `weak_match` is the query
    /// model's calibration; `weak` is true when the best hit is below it, and then every hit is
    /// weak (the table says `weak` on each line).
    #[arg(long)]
    pub json: bool,
    /// Threads for batch search (default: all cores).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Sparse,
    Dense,
    Hybrid,
}

/// The documents `--modality` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Only(Modality),
    Any,
}

fn parse_target(s: &str) -> Result<Target, String> {
    match s {
        "any" => Ok(Target::Any),
        _ => parse_modality(s)
            .map(Target::Only)
            .map_err(|e| format!("{e}, or any")),
    }
}

/// What a query returns: `--modality` as given, else the other modality than the query's when
/// the collection holds documents of it (as the page does), else every document.
fn target(c: &Collection, args: &SearchArgs, query: &Query) -> anyhow::Result<Option<Modality>> {
    let other = match (args.modality, query) {
        (Some(Target::Only(m)), _) => return Ok(Some(m)),
        (Some(Target::Any), _) | (None, Query::Vector(_)) => return Ok(None),
        (None, Query::Text(_)) => Modality::Image,
        (None, Query::Image(_)) => Modality::Text,
    };
    Ok((c.documents_of(other)? > 0).then_some(other))
}

/// What the command line asks: `lexlip_search::request` resolves it as it resolves a request to
/// the server (no server defaults here; the model's come with the query's encoders).
fn ask(args: &SearchArgs, query: QueryKind, target: Option<Modality>) -> Ask {
    Ask {
        mode: match args.mode {
            ModeArg::Sparse => Mode::Sparse,
            ModeArg::Dense => Mode::Dense,
            ModeArg::Hybrid => Mode::Hybrid,
        },
        approx: args.approx,
        term_cut: args.term_cut,
        idf: args.idf,
        target,
        explain: args.explain,
        ..Ask::new(query, args.k)
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
    let dense = c.manifest().settings.dense_dim.is_some();
    if let Some(q) = &args.queries {
        let only = match args.modality {
            Some(Target::Only(m)) => Some(m),
            _ => None,
        };
        let plan = ask(&args, QueryKind::Sparse, only)
            .resolve(&Defaults::default(), dense)?
            .plan;
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
    let asked = ask(&args, query.kind(), target(&c, &args, &query)?);
    // Refused before a model loads: what no model's defaults can mend.
    asked.resolve(&Defaults::default(), dense)?;
    single(&c, &args, &asked, dense, query)
}

/// One query as the user gave it.
enum Query {
    Text(String),
    Image(PathBuf),
    Vector(String),
}

impl Query {
    fn kind(&self) -> QueryKind {
        match self {
            Query::Text(_) => QueryKind::Text,
            Query::Image(_) => QueryKind::Image,
            Query::Vector(_) => QueryKind::Sparse,
        }
    }
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
    asked: &Ask,
    dense: bool,
    query: Query,
) -> anyhow::Result<()> {
    let loaded = match &query {
        Query::Text(_) => Some(encoders(c, args, "--text")?),
        Query::Image(_) => Some(encoders(c, args, "--image")?),
        Query::Vector(_) => None,
    };
    // A query the model encoded takes the model's settings, as the server gives them.
    let defaults = loaded.as_ref().map_or(Defaults::default(), |e| Defaults {
        model_idf: e.idf(),
        query_norm: of_query(e.query_norm(), &query),
        weak_match: of_query(e.weak_match(), &query),
        ..Defaults::default()
    });
    let resolved = asked.resolve(&defaults, dense)?;
    let plan = &resolved.plan;
    let encoded = encode(c, plan, &query, loaded.as_ref())?;
    let snap = c.snapshot()?;
    let t = Instant::now();
    let found =
        Searcher::new(&snap).search(plan, encoded.sparse.as_ref(), |need| encoded.dense(need))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let (hits, weak_match, weak) = resolved.answer(found.hits, found.path);
    if args.json {
        let mut out = serde_json::json!({
            "hits": hits,
            "path": found.path,
            "took_ms": ms,
        });
        if let (Some(w), Some(weak)) = (weak_match, weak) {
            out["weak_match"] = serde_json::json!(w);
            out["weak"] = serde_json::json!(weak);
        }
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    print_hits(&hits, weak == Some(true));
    if let (Some(w), Some(true)) = (weak_match, weak) {
        eprintln!(
            "weak match: the best hit's match strength is below {:.0} %, the model's \
             calibration (most real queries' best hits reach it; nonsense does not)",
            w * 100.0
        );
    }
    let path = match found.path {
        SearchPath::Sparse => "sparse",
        SearchPath::Dense => "dense",
        SearchPath::Hybrid => "hybrid",
        SearchPath::DenseFallback => "dense fallback: the sparse index matched fewer than k",
    };
    eprintln!("{} hits ({path}) in {ms:.2} ms", hits.len());
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

/// The hits, one a line; each says `weak` when the query matched them only weakly
/// ([`lexlip_proto::api::weak_list`]; the page greys them out).
fn print_hits(hits: &[Hit], weak: bool) {
    for (rank, h) in hits.iter().enumerate() {
        let strength = h
            .match_strength
            .map(|m| {
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
        .num_threads(args.threads.unwrap_or_else(rayon::current_num_threads))
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
