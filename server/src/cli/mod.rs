//! Command-line interface: one module per subcommand.

mod bench;
mod bench_compose;
mod bench_encode;
mod bench_engine;
mod bench_search;
mod demo;
mod encode;
mod eval;
mod export;
mod forward_args;
mod index;
mod merge;
mod model;
pub mod model_args;
mod search;
mod serve;
mod stats;
mod train;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "lexlip",
    version,
    about = "Image-text retrieval in the lexicon space: index, search, serve."
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "LEXLIP_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build the emoji demo collection with the shipped model (models/emoji-tiny) and serve
    /// the search page: the one command to try lexlip.
    Demo(demo::DemoArgs),
    /// Serve the HTTP API: collections under --data, queries encoded with the given models.
    Serve(serve::ServeArgs),
    /// Build or extend a collection: precomputed vectors, or a corpus (TSV, JSONL manifest,
    /// WebDataset shards, image directory) encoded with --model.
    Index(index::IndexArgs),
    /// Combine compatible collections (e.g. the parts of --shard runs) into one.
    Merge(merge::MergeArgs),
    /// Write a collection's documents and impacts for another engine: Anserini JSONL,
    /// OpenSearch / Elasticsearch bulk, Qdrant points.
    Export(export::ExportArgs),
    /// Search a collection with a query vector, or a batch of queries into a TREC run.
    Search(search::SearchArgs),
    /// Documents, terms and bytes of a collection.
    Stats(stats::StatsArgs),
    /// Encode a text or an image into sparse lexicon terms.
    Encode(encode::EncodeArgs),
    /// Evaluate a model on a test corpus: text→image and image→text R@1/5/10, index bytes and
    /// non-zeros per item and search QPS, for full vectors and a top-K sweep (LexLIP Tables
    /// 1 and 2), through real collections.
    Eval(eval::EvalArgs),
    /// Benchmarks: the engine on synthetic data, the encoders.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Model weights: convert an official LexLIP checkpoint into a model directory.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Train a LexLIP model on image-text pairs (phase 1: lexicon-bottlenecked pre-training;
    /// phase 2: momentum lexicon-contrastive). Resumes from the checkpoint in --out.
    // Boxed: its options make it several times larger than the other commands.
    Train(Box<train::TrainArgs>),
    /// Print the HTTP API's OpenAPI document (JSON).
    Openapi,
}

pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("LEXLIP_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Demo(args) => demo::run(args),
        Command::Index(args) => index::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Export(args) => export::run(args),
        Command::Search(args) => search::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Encode(args) => encode::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Serve(args) => serve::run(args),
        Command::Model(cmd) => model::run(cmd),
        Command::Train(args) => train::run(*args),
        Command::Openapi => {
            let doc = crate::http::openapi::document();
            println!("{}", serde_json::to_string_pretty(&doc)?);
            Ok(())
        }
    }
}
