//! `lexlip stats`: what a collection holds and what it costs on disk.

use std::path::PathBuf;

use lexlip_index::Collection;

#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// Collection directory.
    #[arg(long)]
    pub collection: PathBuf,
    /// Print one JSON object.
    ///
    /// Keys documents, images, texts, terms, nnz, bytes, bytes_per_nnz, … (docs/cli.md).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: StatsArgs) -> anyhow::Result<()> {
    let c = Collection::open(&args.collection)?;
    let s = c.stats()?;
    if args.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        let m = c.manifest();
        println!("collection     {}", args.collection.display());
        println!("term space     {}", m.term_space);
        println!("scale          {}", m.settings.scale);
        println!(
            "documents      {} ({} images, {} texts)",
            s.documents, s.images, s.texts
        );
        println!("terms          {}", s.terms);
        println!("non-zeros      {}", s.nnz);
        println!(
            "bytes on disk  {} ({:.2} per non-zero)",
            s.bytes, s.bytes_per_nnz
        );
        println!(
            "  index        {} ({:.2} per non-zero; forward index files {})",
            s.index_bytes,
            s.index_bytes_per_nnz,
            if c.has_forward_files() {
                format!("{} bytes", s.forward_file_bytes)
            } else {
                "none: this collection builds them on the heap when searched".to_string()
            }
        );
        println!(
            "    vectors    {} ({:.2} per non-zero: impacts postings and dictionary, forward index \
             files; the rest are the documents' id, modality and metadata keys)",
            s.vector_index_bytes, s.vector_index_bytes_per_nnz
        );
        println!("  stored       {}", s.stored_bytes);
        println!("segments       {}", s.segments);
    }
    Ok(())
}
