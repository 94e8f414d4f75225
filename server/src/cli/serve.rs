//! `lexlip serve`: the HTTP API over collections under a data directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use lexlip_model::LoadOptions;

use super::model_args::{ModelArgs, resolve_model};
use crate::http::batcher::BatchConfig;
use crate::http::encoders::{EncoderService, ModelPaths};
use crate::http::metrics::Metrics;
use crate::http::state::{AppState, Limits};
use crate::http::{ConnectionLimits, ServerConfig, serve, shared};

/// `--model` gives text and image encoders together (a LexLIP .ckpt or directory); every model
/// flag also takes `hf:OWNER/NAME` (Hugging Face Hub, cached).
#[derive(clap::Args, Debug)]
#[command(mut_arg("model", |a| a.env("LEXLIP_MODEL")))]
pub struct ServeArgs {
    /// Data directory: collections live in DATA/collections/NAME.
    ///
    /// Created if missing.
    #[arg(long, env = "LEXLIP_DATA")]
    pub data: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    /// A text encoder (BERT masked LM / SPLADE) instead of --model's.
    #[arg(long, value_name = "DIR")]
    pub text_model: Option<PathBuf>,
    /// An image encoder (BEiT + MLM head) instead of --model's.
    #[arg(long, value_name = "DIR")]
    pub image_model: Option<PathBuf>,
    /// A dense encoder for the fallback and hybrid search.
    ///
    /// CLIP, or a dense dual encoder from `lexlip train --objective dense`.
    #[arg(long, value_name = "DIR")]
    pub dense_model: Option<PathBuf>,
    /// A re-ranker, for searches that ask for one.
    ///
    /// From `lexlip train --objective rerank`: searches that ask for `"rerank": {"top": N}`
    /// re-score their first N candidates with it.
    #[arg(long, value_name = "DIR")]
    pub rerank_model: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port).
    ///
    /// The chosen address is printed.
    #[arg(long, default_value = "127.0.0.1:8080", env = "LEXLIP_ADDR")]
    pub addr: SocketAddr,
    /// Largest request body in MiB (bigger requests get 413).
    #[arg(long, default_value_t = 32, value_name = "MIB")]
    pub max_body_mb: usize,
    /// Documents per add request.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub max_batch_docs: usize,
    /// Seconds before a request is abandoned with 503.
    #[arg(long, default_value_t = 30, value_name = "S")]
    pub request_timeout_s: u64,
    /// Seconds a client has to send a request's body.
    ///
    /// Read before the request takes one of --max-in-flight, so slow uploads do not starve
    /// other requests.
    #[arg(long, default_value_t = 10, value_name = "S")]
    pub body_timeout_s: u64,
    /// Seconds a client has to send a request's headers.
    ///
    /// And an idle kept-alive connection to start the next request, before its connection is
    /// closed.
    #[arg(long, default_value_t = 10, value_name = "S")]
    pub header_timeout_s: u64,
    /// Connections open at once; more wait until one closes.
    ///
    /// Keep it under the process's file-descriptor limit, `ulimit -n`.
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub max_connections: usize,
    /// Requests handled at once; more are refused with 503 + Retry-After.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub max_in_flight: usize,
    /// Threads a search may use while it runs alone (default: all cores).
    ///
    /// 1 keeps every search on one thread. Under concurrent load each search uses one.
    #[arg(long, value_name = "N")]
    pub query_threads: Option<usize>,
    /// IDF weighting of sparse searches that give no `idf` (0-4; 0 is off).
    ///
    /// Their terms are weighted by their rarity among the documents searched, to the power
    /// ALPHA. Default: the query model's (`idf` in its lexlip.json), else off. For collections
    /// of hundreds of thousands of pictures and more, 1 finds more (docs/cli.md, *IDF
    /// weighting*).
    #[arg(long, value_name = "ALPHA")]
    pub idf: Option<f32>,
    /// Term cut of sparse searches that set none (0-1; 0 searches exactly).
    ///
    /// Sparse searches that set none of `exact`, `approx` and `term_cut` leave the query's
    /// lightest terms, up to this share of its largest possible score, out of the pruning
    /// bounds: 0.05 kept 0.976 of the exact first 10 among a million pictures at 1.2× the
    /// speed (docs/cli.md, *Search semantics*).
    #[arg(long, default_value_t = 0.0, value_name = "C")]
    pub term_cut: f32,
    /// Largest encoder batch.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub max_batch: usize,
    /// Milliseconds an encoder waits for more items after the first.
    #[arg(long, default_value_t = 5, value_name = "MS")]
    pub max_wait_ms: u64,
    /// Items waiting per encoder before new ones get 503.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub queue: usize,
    /// API key required on write routes (repeat or comma-separate for several).
    #[arg(
        long,
        env = "LEXLIP_API_KEY",
        value_delimiter = ',',
        value_name = "KEY"
    )]
    pub api_key: Vec<String>,
    /// Require the API key on read routes too.
    #[arg(long)]
    pub protect_reads: bool,
    /// Allowed CORS origin (repeatable; `*` for any).
    ///
    /// None: no CORS headers.
    #[arg(long, value_name = "ORIGIN")]
    pub cors_origin: Vec<String>,
    /// A host name browsers reach this server by (repeatable; `*` for any).
    ///
    /// Writes from web pages (searches included) are accepted through IP addresses,
    /// `localhost` and these names only, against DNS rebinding.
    #[arg(long, value_name = "HOST")]
    pub allowed_host: Vec<String>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    crate::memory::tune_allocator();
    args.model.apply_limits();
    anyhow::ensure!(
        args.max_body_mb > 0 && args.max_in_flight > 0 && args.max_batch > 0 && args.queue > 0,
        "--max-body-mb, --max-in-flight, --max-batch and --queue must be at least 1"
    );
    if args.protect_reads && args.api_key.is_empty() {
        anyhow::bail!("--protect-reads needs --api-key");
    }
    if let Some(a) = args.idf {
        lexlip_search::plan::check_idf(a).map_err(|e| anyhow::anyhow!("--idf: {e}"))?;
    }
    lexlip_index::check_term_cut(args.term_cut).map_err(|e| anyhow::anyhow!("--term-cut: {e}"))?;
    let metrics = Metrics::new();
    let resolve = |p: &Option<PathBuf>| p.as_deref().map(resolve_model).transpose();
    let paths = ModelPaths {
        model: resolve(&args.model.model)?,
        text_model: resolve(&args.text_model)?,
        image_model: resolve(&args.image_model)?,
        dense_model: resolve(&args.dense_model)?,
        options: args.model.options(LoadOptions::default()),
        gpu: args.model.gpu,
    };
    let batch = BatchConfig {
        max_batch: args.max_batch,
        max_wait: Duration::from_millis(args.max_wait_ms),
        queue: args.queue,
    };
    let encoders = EncoderService::load(&paths, batch, &metrics)?;
    tracing::info!(models = %encoders.describe(), "encoders loaded");
    let limits = Limits {
        max_body_bytes: args.max_body_mb << 20,
        request_timeout: Duration::from_secs(args.request_timeout_s.max(1)),
        body_timeout: Duration::from_secs(args.body_timeout_s.max(1)),
        max_in_flight: args.max_in_flight,
        max_batch_docs: args.max_batch_docs.max(1),
        api_keys: args.api_key.into_iter().filter(|k| !k.is_empty()).collect(),
        protect_reads: args.protect_reads,
        query_threads: args
            .query_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .clamp(1, 64),
        idf: args.idf,
        term_cut: args.term_cut,
    };
    let mut state = AppState::open(&args.data, encoders, metrics, limits)?;
    if let Some(dir) = resolve(&args.rerank_model)? {
        let device = lexlip_model::device(args.model.gpu)?;
        let reranker = lexlip_model::Reranker::load(&dir, &device)
            .map_err(|e| anyhow::anyhow!("--rerank-model {}: {e}", dir.display()))?;
        tracing::info!(model = %dir.display(), "re-ranker loaded");
        state = state.with_reranker(reranker);
    }
    let state = shared(state);
    let config = ServerConfig {
        addr: args.addr,
        cors_origins: args.cors_origin,
        allowed_hosts: args.allowed_host,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("lexlip-http")
        .build()?;
    let connections = ConnectionLimits {
        header_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
        max_connections: args.max_connections.max(1),
    };
    runtime.block_on(serve(state, config, connections))
}
