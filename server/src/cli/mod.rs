//! Command-line interface: one module per subcommand.

mod bench;
mod bench_compose;
mod bench_encode;
mod bench_engine;
mod bench_scale;
mod bench_search;
mod demo;
mod encode;
mod eval;
mod export;
mod forward_args;
mod index;
mod merge;
pub(crate) mod meter;
mod model;
pub mod model_args;
mod search;
mod serve;
mod snapshot;
mod stats;
mod train;

use clap::{Parser, Subcommand, ValueEnum};

/// The widest help text (`-h`, `--help`) in columns: narrower terminals wrap narrower.
const HELP_WIDTH: usize = 99;

#[derive(Parser, Debug)]
#[command(
    name = "lexlip",
    version,
    about = "Image-text retrieval in the lexicon space: index, search, serve.",
    max_term_width = HELP_WIDTH
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "LEXLIP_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// Parses the command line (exits with clap's message on bad arguments), then gives `lexlip
/// train` its objective's defaults for the options the line left out
/// ([`lexlip_train::TrainOptions::apply_objective_defaults`]).
pub fn parse() -> Cli {
    parse_from(std::env::args_os())
}

/// [`parse`] over given arguments (the program name first).
pub fn parse_from<I, T>(args: I) -> Cli
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches_from(args);
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Command::Train(train), Some(("train", sub))) = (&mut cli.command, matches.subcommand())
    {
        train.options.apply_objective_defaults(|id| {
            sub.value_source(id)
                .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue)
        });
    }
    cli
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build the emoji demo collection and serve its search page: the one command to try lexlip.
    ///
    /// With the shipped model (models/emoji-lex-imagenet).
    Demo(demo::DemoArgs),
    /// Serve the HTTP API: collections under --data, queries encoded with the given models.
    Serve(serve::ServeArgs),
    /// Build or extend a collection from vectors, or from a corpus encoded with --model.
    ///
    /// Precomputed vectors (Anserini JSONL), or a corpus (TSV, JSONL manifest, WebDataset
    /// shards, image directory) encoded with --model. docs/cli.md has the details.
    Index(index::IndexArgs),
    /// Combine compatible collections (e.g. the parts of --shard runs) into one.
    Merge(merge::MergeArgs),
    /// Write a collection's documents and impacts for another engine.
    ///
    /// Anserini JSONL, OpenSearch / Elasticsearch bulk, Qdrant points (docs/deploy.md).
    Export(export::ExportArgs),
    /// Search a collection with a text, an image or a vector, or run a batch into a TREC run.
    Search(search::SearchArgs),
    /// Documents, terms and bytes of a collection.
    Stats(stats::StatsArgs),
    /// Archive a collection's last commit into one checksummed file (safe while it is written).
    ///
    /// Safe while `lexlip serve` or `lexlip index` writes to the collection: the archive holds
    /// the last commit, not what is being written. Restore it with `lexlip restore`, or put it
    /// in a server's DATA/snapshots/NAME/ and POST /v1/collections/NAME/snapshots/FILE/restore.
    Snapshot(snapshot::SnapshotArgs),
    /// Bring back a collection from a snapshot archive (checked before anything changes).
    ///
    /// The archive is unpacked beside --collection and every file checked against its SHA-256
    /// before the collection appears; a truncated, altered or foreign archive is refused and
    /// nothing changes. An existing collection there is replaced only with --replace.
    Restore(snapshot::RestoreArgs),
    /// Encode a text or an image into sparse lexicon terms.
    Encode(encode::EncodeArgs),
    /// Evaluate a model on a test corpus: recall both ways, index bytes and search QPS.
    ///
    /// Text→image and image→text R@1/5/10, index bytes and non-zeros per item and search QPS,
    /// for full vectors and a top-K sweep (LexLIP, ICCV 2023, Tables 1 and 2), through real
    /// collections. docs/cli.md has the details.
    Eval(eval::EvalArgs),
    /// Benchmarks: the engine on synthetic data, the encoders.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Model directories: convert a LexLIP checkpoint, or pair heads with a dense model.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Train a model on image-text pairs; resumes from the checkpoint in --out.
    ///
    /// A LexLIP model (phase 1: lexicon-bottlenecked pre-training; phase 2: momentum
    /// lexicon-contrastive) or, by --objective, a dense baseline, a re-ranker, lexicon heads or
    /// an image adapter. Killed or stopped (Ctrl-C), the same command resumes from the last
    /// checkpoint in --out. docs/training.md explains the recipes, docs/cli.md the options.
    // Boxed: its options make it several times larger than the other commands.
    Train(Box<train::TrainArgs>),
    /// Print the HTTP API's OpenAPI document (JSON).
    Openapi,
}

pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    meter::set_json_logs(matches!(format, LogFormat::Json));
    let filter = EnvFilter::try_from_env("LEXLIP_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

pub fn run(command: Command) -> anyhow::Result<()> {
    if matches!(
        command,
        Command::Index(_)
            | Command::Encode(_)
            | Command::Eval(_)
            | Command::Bench(_)
            | Command::Train(_)
    ) {
        crate::memory::reuse_large_allocations();
    }
    match command {
        Command::Demo(args) => demo::run(args),
        Command::Index(args) => index::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Export(args) => export::run(args),
        Command::Search(args) => search::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Snapshot(args) => snapshot::run_snapshot(args),
        Command::Restore(args) => snapshot::run_restore(args),
        Command::Encode(args) => encode::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Serve(args) => serve::run(args),
        Command::Model(cmd) => model::run(cmd),
        Command::Train(args) => train::run(*args),
        Command::Openapi => {
            let doc = crate::http::openapi::document();
            println!("{}", serde_json::to_string_pretty(&doc)?);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Command, parse_from};

    fn train(args: &[&str]) -> lexlip_train::TrainOptions {
        let line = ["lexlip", "train", "--out", "o"].iter().chain(args);
        match parse_from(line.copied()).command {
            Command::Train(t) => t.options,
            other => panic!("{other:?}"),
        }
    }

    /// `--objective heads` takes the heads' defaults for what the line leaves out and keeps
    /// what it gives; the tower objectives keep theirs.
    #[test]
    fn heads_take_their_own_defaults_unless_given() {
        let towers = train(&[]);
        assert_eq!(
            (towers.method.tau, towers.optim.lr, towers.optim.batch_size),
            (0.05, 1e-4, 32)
        );
        let heads = train(&["--objective", "heads"]);
        let d = lexlip_train::options::defaults::HEADS_DEFAULTS;
        assert_eq!(heads.method.tau, d.tau);
        assert_eq!(heads.optim.lr, d.lr);
        assert_eq!(heads.optim.batch_size, d.batch_size);
        assert_eq!(heads.optim.epochs, d.epochs);
        assert_eq!(heads.method.flops_lambda, d.flops_lambda);
        assert_eq!(heads.lexicon.grounding, d.grounding);
        let given = train(&["--objective", "heads", "--tau", "0.2", "--batch-size", "7"]);
        assert_eq!((given.method.tau, given.optim.batch_size), (0.2, 7));
        assert_eq!(given.optim.lr, d.lr);
    }

    /// Every command's `-h` and `--help`, each with its path (`lexlip bench engine`).
    fn helps() -> Vec<(String, String, String)> {
        fn walk(cmd: &mut clap::Command, path: String, out: &mut Vec<(String, String, String)>) {
            let (short, long) = (cmd.render_help(), cmd.render_long_help());
            out.push((path.clone(), short.to_string(), long.to_string()));
            for sub in cmd.get_subcommands_mut() {
                let path = format!("{path} {}", sub.get_name());
                walk(sub, path, out);
            }
        }
        use clap::CommandFactory;
        let mut cli = super::Cli::command().term_width(super::HELP_WIDTH);
        cli.build();
        let mut out = Vec::new();
        walk(&mut cli, "lexlip".into(), &mut out);
        out
    }

    /// Help fits in 99 columns, `lexlip train -h` stays short, and papers are cited by name.
    #[test]
    fn help_is_narrow_short_and_names_its_papers() {
        let helps = helps();
        assert!(helps.len() > 20, "{} commands", helps.len());
        let mut wide = Vec::new();
        for (path, short, long) in &helps {
            for (flag, text) in [("-h", short), ("--help", long)] {
                for line in text.lines().filter(|l| l.chars().count() >= 100) {
                    wide.push(format!("{path} {flag}: {line}"));
                }
                assert!(
                    !text.to_lowercase().contains("paper 0"),
                    "{path} {flag} cites a paper by number"
                );
            }
        }
        assert!(
            wide.is_empty(),
            "lines of 100 characters or more:\n{}",
            wide.join("\n")
        );
        let train = &helps.iter().find(|(p, ..)| p == "lexlip train").unwrap().1;
        let lines = train.lines().count();
        assert!(
            lines < TRAIN_SHORT_HELP_LINES,
            "lexlip train -h has {lines} lines"
        );
    }

    /// `lexlip train -h` as the binary prints it (the terminal's width, at most 99 columns).
    #[test]
    fn train_short_help_fits_99_columns() {
        use clap::CommandFactory;
        let err = super::Cli::command()
            .try_get_matches_from(["lexlip", "train", "-h"])
            .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp);
        let text = err.render().to_string();
        assert!(text.contains("--objective"), "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 99, "{line}");
        }
    }

    /// `lexlip train -h` had 170 lines (66 of them wider than 100 columns) before it was cut
    /// down to one line per option (118).
    const TRAIN_SHORT_HELP_LINES: usize = 120;
}
