//! `lexlip model convert`: an official LexLIP Lightning checkpoint → a LexLIP model directory
//! (safetensors, configs, tokenizer) that loads without PyTorch pickles. `lexlip model pair`:
//! published lexicon heads (D2S) and the dense model they read (BLIP) → one model directory.

use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Convert a LexLIP .ckpt into a directory usable with --model.
    Convert(ConvertArgs),
    /// Pair lexicon heads with the dense model they read into one --model directory.
    ///
    /// E.g. D2S over BLIP: one directory usable with --model, for sparse, dense and hybrid
    /// search (docs/d2s-blip.md).
    Pair(PairArgs),
}

#[derive(clap::Args, Debug)]
pub struct PairArgs {
    /// The heads: a D2S model or `lexlip train --objective heads`' heads/.
    ///
    /// E.g. hf:lsr42/d2s_mscoco-blip-dense_q_reg_0.001_d_reg_0.001.
    #[arg(long)]
    pub heads: PathBuf,
    /// The dense model they were trained over.
    ///
    /// E.g. hf:Salesforce/blip-itm-base-coco.
    #[arg(long)]
    pub dense: PathBuf,
    /// Output directory (created; must not exist or be empty).
    ///
    /// It links to the parts' files.
    #[arg(long)]
    pub out: PathBuf,
    /// The heads' tokenizer.json when their directory has none.
    ///
    /// An hf: id fetches it.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct ConvertArgs {
    /// The checkpoint (.ckpt / .pt / .pth).
    pub checkpoint: PathBuf,
    /// Output directory (created; must not exist or be empty).
    pub out: PathBuf,
    /// tokenizer.json of the text encoder (default: next to the .ckpt).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
}

pub fn run(cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::Pair(a) => {
            let heads = super::model_args::resolve_model(&a.heads)?;
            let dense = super::model_args::resolve_model(&a.dense)?;
            let names = (a.heads.display().to_string(), a.dense.display().to_string());
            lexlip_model::pair::write(&lexlip_model::pair::Pair {
                heads: &heads,
                dense: &dense,
                tokenizer: a.tokenizer.as_deref(),
                out: &a.out,
                names: (&names.0, &names.1),
            })
            .with_context(|| format!("pairing {} with {}", names.0, names.1))?;
            println!(
                "wrote {0} (heads {1}, dense {2}); serve it with: lexlip serve --model {0}",
                a.out.display(),
                names.0,
                names.1
            );
            Ok(())
        }
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
