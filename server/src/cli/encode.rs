//! `lexlip encode`: text or image → sparse lexicon terms.

#[derive(clap::Args, Debug)]
pub struct EncodeArgs {
    /// A LexLIP checkpoint or model directory.
    #[arg(long)]
    pub model: std::path::PathBuf,
}

pub fn run(args: EncodeArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "encoding is not available yet (model {})",
        args.model.display()
    )
}
