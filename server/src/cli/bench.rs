//! `lexlip bench …`: measured ratios against baselines taken in the same run.

use clap::Subcommand;

use super::bench_encode;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Encoder throughput (texts/s, images/s) for several batch sizes.
    Encode(bench_encode::BenchEncodeArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Encode(args) => bench_encode::run(args),
    }
}
