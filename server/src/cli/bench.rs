//! `lexlip bench …`: measured ratios against baselines taken in the same run.

use clap::Subcommand;

use super::{bench_compose, bench_encode, bench_engine, bench_scale, bench_search};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The engine on LexLIP-shaped synthetic data: ingest, bytes, exact and approximate search.
    ///
    /// Ingest, bytes per non-zero, exhaustive vs exact vs approximate search.
    Engine(bench_engine::BenchEngineArgs),
    /// Search on a real collection with real queries: exhaustive vs exact vs approximate.
    ///
    /// Exhaustive vs exact (block-max and postings) vs approximate, one query at a time on one
    /// thread; writes the exact ground truth as a TREC run for comparing other engines.
    Search(bench_search::BenchSearchArgs),
    /// Encoder throughput (texts/s, images/s) for several batch sizes.
    Encode(bench_encode::BenchEncodeArgs),
    /// Whether a quantization scale (and an image top-K) keeps a model's float ranking.
    ///
    /// Each caption's first 10 pictures by float dot product against those by impacts.
    Scale(bench_scale::BenchScaleArgs),
    /// Compose a benchmark corpus of any size from source pictures, as WebDataset shards.
    ///
    /// 1-4 sources placed per picture, captioned with what they show; the same seed gives the
    /// same bytes.
    Compose(bench_compose::BenchComposeArgs),
    /// Write a BEiT-B/16 + MLM head model directory with random weights.
    ///
    /// For timing `lexlip index` on images without a checkpoint.
    RandomBeitBase {
        /// Output directory.
        out: std::path::PathBuf,
        /// tokenizer.json giving the vocabulary (e.g. a BERT tokenizer's).
        #[arg(long)]
        tokenizer: std::path::PathBuf,
    },
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Engine(args) => bench_engine::run(args),
        BenchCommand::Encode(args) => bench_encode::run(args),
        BenchCommand::Scale(args) => bench_scale::run(args),
        BenchCommand::Search(args) => bench_search::run(args),
        BenchCommand::Compose(args) => bench_compose::run(args),
        BenchCommand::RandomBeitBase { out, tokenizer } => {
            lexlip_model::beit::random::write_random_beit_base(&out, &tokenizer, 42)?;
            println!("wrote {}", out.display());
            Ok(())
        }
    }
}
