//! `lexlip export`: a collection in the bulk format of another engine (see
//! `lexlip_pipeline::export` and docs/deploy.md).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use lexlip_index::Collection;
use lexlip_pipeline::export::{ExportOptions, Format, export};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    /// Anserini JsonVectorCollection lines (what `lexlip index --vectors` reads).
    Jsonl,
    /// OpenSearch `_bulk` NDJSON for a `rank_features` field `terms`.
    Opensearch,
    /// Elasticsearch `_bulk` NDJSON for a `sparse_vector` field `terms`.
    Elasticsearch,
    /// Qdrant points (one per line) with a sparse vector of term ids.
    Qdrant,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Collection directory.
    #[arg(long)]
    pub collection: PathBuf,
    #[arg(long, value_enum)]
    pub format: FormatArg,
    /// OpenSearch/Elasticsearch index, or Qdrant sparse vector name.
    ///
    /// Default: the collection directory's name for an index, `lexlip` for Qdrant.
    #[arg(long)]
    pub name: Option<String>,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Qdrant: where to write the term list [default: OUT.vocab.txt].
    ///
    /// For a collection built without a vocabulary: the list of its terms (line i is term id
    /// i).
    #[arg(long)]
    pub vocab_out: Option<PathBuf>,
}

pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let collection = Collection::open(&args.collection)?;
    let format = match args.format {
        FormatArg::Jsonl => Format::Jsonl,
        FormatArg::Opensearch => Format::OpenSearch,
        FormatArg::Elasticsearch => Format::Elasticsearch,
        FormatArg::Qdrant => Format::Qdrant,
    };
    let name = args.name.clone().unwrap_or_else(|| match format {
        Format::Qdrant => "lexlip".into(),
        _ => args
            .collection
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_else(|| "lexlip".into()),
    });
    let vocab_out = args.vocab_out.clone().or_else(|| {
        args.out.as_ref().map(|o| {
            let mut name = o.as_os_str().to_owned();
            name.push(".vocab.txt");
            PathBuf::from(name)
        })
    });
    let options = ExportOptions {
        format,
        name,
        vocab_out: vocab_out.clone(),
    };
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let n = export(&collection, &options, &mut out)?;
    eprintln!("exported {n} documents");
    let derived = !collection
        .dir()
        .join(lexlip_index::collection::VOCAB_FILE)
        .is_file();
    if let Some(v) = vocab_out.filter(|_| derived && matches!(format, Format::Qdrant)) {
        eprintln!("term ids are the line numbers (from 0) of {}", v.display());
    }
    Ok(())
}
