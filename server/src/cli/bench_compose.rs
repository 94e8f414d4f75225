//! `lexlip bench compose`: a benchmark corpus of any size composed from registry images
//! (`lexlip_eval::compose`), written as WebDataset shards that `lexlip index --webdataset` and
//! `lexlip train --webdataset` read.

use std::path::PathBuf;
use std::time::Instant;

use lexlip_eval::compose::{ComposeOptions, read_sources, write_shards};

#[derive(clap::Args, Debug)]
pub struct BenchComposeArgs {
    /// Source pictures: JSONL with `image` and `label` (or `captions`).
    ///
    /// `image` relative to the file; such as the `images.jsonl` of
    /// `scripts/build-emoji-corpus.sh`.
    #[arg(long)]
    pub sources: PathBuf,
    /// Only the sources whose `split` is this (e.g. `train`).
    ///
    /// Default: all.
    #[arg(long)]
    pub split: Option<String>,
    /// Output directory for `00000.tar`, `00001.tar`, …
    #[arg(long)]
    pub out: PathBuf,
    /// Pictures to make.
    #[arg(long, default_value_t = 1_000_000)]
    pub images: u64,
    /// Seed: the same seed and sources give byte-identical shards.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Side of the square pictures, pixels.
    #[arg(long, default_value_t = 224)]
    pub size: u32,
    /// Pictures per shard.
    #[arg(long, default_value_t = 10_000)]
    pub per_shard: u64,
    /// JPEG quality, 1-100.
    #[arg(long, default_value_t = 85)]
    pub quality: u8,
}

pub fn run(args: BenchComposeArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let sources = read_sources(&args.sources, args.split.as_deref())?;
    eprintln!(
        "{} source pictures from {}",
        sources.len(),
        args.sources.display()
    );
    let opts = ComposeOptions {
        images: args.images,
        seed: args.seed,
        size: args.size,
        per_shard: args.per_shard,
        quality: args.quality,
    };
    let mut last = Instant::now();
    let shards = write_shards(&sources, &opts, &args.out, &mut |done, total| {
        if done == total || last.elapsed().as_secs() >= 5 {
            eprintln!("{done} / {total} pictures");
            last = Instant::now();
        }
    })?;
    eprintln!(
        "{} pictures in {} shard{} under {} ({:.1} s); index them with `lexlip index --webdataset {}`",
        args.images,
        shards.len(),
        if shards.len() == 1 { "" } else { "s" },
        args.out.display(),
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}
