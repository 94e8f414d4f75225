//! `lexlip model convert`: an official LexLIP Lightning checkpoint → a LexLIP model directory
//! (safetensors, configs, tokenizer) that loads without PyTorch pickles.

use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Convert a LexLIP .ckpt into a directory usable with --model.
    Convert(ConvertArgs),
}

#[derive(clap::Args, Debug)]
pub struct ConvertArgs {
    /// The checkpoint (.ckpt / .pt / .pth).
    pub checkpoint: PathBuf,
    /// Output directory (created; must not exist or be empty).
    pub out: PathBuf,
    /// tokenizer.json of the text encoder (default: next to the checkpoint).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
}

pub fn run(cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::Convert(a) => {
            if a.out.exists()
                && std::fs::read_dir(&a.out)
                    .map(|mut d| d.next().is_some())
                    .unwrap_or(true)
            {
                anyhow::bail!(
                    "{} exists and is not empty; choose a new output directory",
                    a.out.display()
                );
            }
            lexlip_model::convert_checkpoint(&a.checkpoint, &a.out, a.tokenizer.as_deref())
                .with_context(|| format!("converting {}", a.checkpoint.display()))?;
            println!("wrote {}", a.out.display());
            Ok(())
        }
    }
}
