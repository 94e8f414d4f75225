//! `lexlip merge OUT IN...`: one collection from several (e.g. the parts of `--shard i/n` runs).

use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Output collection (created, or extended when it exists and is compatible).
    pub out: PathBuf,
    /// Input collections: same term space, scale and dense dimension.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Then merge the output's segments into one per modality.
    ///
    /// As `lexlip index --merge-segments`: a collection searches fastest in few segments.
    #[arg(long)]
    pub merge_segments: bool,
    /// Print `{"copied": [n per input], "documents": n}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: MergeArgs) -> anyhow::Result<()> {
    let inputs: Vec<&std::path::Path> = args.inputs.iter().map(PathBuf::as_path).collect();
    if inputs.contains(&args.out.as_path()) {
        anyhow::bail!("the output {} is also an input", args.out.display());
    }
    let report = lexlip_pipeline::merge(&args.out, &inputs)?;
    if args.merge_segments {
        lexlip_index::Collection::open(&args.out)?
            .merge_all()
            .with_context(|| format!("merging the segments of {}", args.out.display()))?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"copied": report.copied, "documents": report.documents})
        );
    } else {
        println!(
            "merged {} collections ({:?} documents) into {}: {} documents",
            inputs.len(),
            report.copied,
            args.out.display(),
            report.documents
        );
    }
    Ok(())
}
