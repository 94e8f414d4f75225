//! `lexlip bench encode`: encoder throughput.

#[derive(clap::Args, Debug)]
pub struct BenchEncodeArgs {
    /// Model directory.
    #[arg(long)]
    pub model: std::path::PathBuf,
}

pub fn run(args: BenchEncodeArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "encoder benchmark is not available yet (model {})",
        args.model.display()
    )
}
