//! `lexlip bench …`: measured ratios against baselines taken in the same run.

use clap::Subcommand;

use super::{bench_encode, bench_engine};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The engine on LexLIP-shaped synthetic data: ingest, bytes per non-zero, exhaustive vs
    /// exact vs approximate search.
    Engine(bench_engine::BenchEngineArgs),
    /// Encoder throughput (texts/s, images/s) for several batch sizes.
    Encode(bench_encode::BenchEncodeArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Engine(args) => bench_engine::run(args),
        BenchCommand::Encode(args) => bench_encode::run(args),
    }
}
