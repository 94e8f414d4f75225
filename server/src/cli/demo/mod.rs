//! `lexlip demo`: the emoji collection built with the shipped model, then the search page.
//!
//! It runs the same code as the commands it prints (`lexlip index --manifest …`, `lexlip
//! serve …`), so what a newcomer sees is what those commands give. Every step is kept on
//! disk under `--data`, so a second run reuses them and starts serving at once.

mod emoji;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;

use super::index::{self, IndexArgs};
use super::serve::{self, ServeArgs};

/// The collection the demo builds and serves.
const COLLECTION: &str = "emoji";

/// The model the demo runs unless told otherwise, from the root of a checkout.
const DEFAULT_MODEL: &str = "models/emoji-lex-imagenet";

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Working directory, reused by the next run.
    ///
    /// Downloads, the extracted emoji and the collection (DATA/collections/emoji).
    #[arg(long, default_value = "lexlip-demo")]
    pub data: PathBuf,
    /// The LexLIP model that encodes images, captions and queries.
    ///
    /// The default finds the right emoji first for 88.6 % of the labels.
    #[arg(long, default_value = DEFAULT_MODEL, env = "LEXLIP_MODEL")]
    pub model: PathBuf,
    /// A directory holding the npm tarballs, instead of downloading them.
    ///
    /// emoji-datasource-google-16.0.0.tgz and emojibase-data-17.0.0.tgz, otherwise downloaded
    /// from the npm registry.
    #[arg(long, value_name = "DIR")]
    pub packages: Option<PathBuf>,
    /// Address to serve the page on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Build the collection and stop, without serving.
    #[arg(long)]
    pub no_serve: bool,
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    if !args.model.is_dir() {
        bail!(
            "no model at {}: run `lexlip demo` from the root of a lexlip checkout (the model \
             ships in {DEFAULT_MODEL}) or give --model DIR",
            args.model.display()
        );
    }
    // Before minutes of downloading and indexing: the port must be free to serve on.
    if !args.no_serve {
        crate::http::check_port(args.addr)?;
    }
    let source = args.data.join("emoji");
    let manifest = source.join("manifest.jsonl");
    eprintln!("[1/3] emoji images and labels → {}", source.display());
    let version = source.join("manifest.version");
    let current =
        std::fs::read_to_string(&version).is_ok_and(|v| v.trim() == emoji::MANIFEST_VERSION);
    if manifest.is_file() && current {
        eprintln!("  reusing {}", manifest.display());
    } else {
        if manifest.is_file() {
            eprintln!(
                "  {} was written by an older lexlip: writing it again",
                manifest.display()
            );
        }
        let cache = args.data.join("downloads");
        let packages = args.packages.as_deref();
        let images = emoji::tarball(&emoji::IMAGES, packages, &cache)?;
        let labels = emoji::tarball(&emoji::LABELS, packages, &cache)?;
        let written = emoji::write_manifest(&images, &labels, &source)?;
        std::fs::write(&version, emoji::MANIFEST_VERSION)
            .with_context(|| format!("cannot write {}", version.display()))?;
        eprintln!(
            "  {} emoji with their labels in {}",
            written.emoji,
            written.manifest.display()
        );
    }

    let collections = args.data.join("collections");
    let collection = collections.join(COLLECTION);
    let model = args.model.display().to_string();
    let index_cmd = [
        "--manifest".to_string(),
        manifest.display().to_string(),
        "--model".into(),
        model.clone(),
        "--collection".into(),
        collection.display().to_string(),
    ];
    eprintln!(
        "[2/3] indexing images and captions with {model}: {} index {}",
        program(),
        index_cmd.join(" ")
    );
    index::run(parse::<IndexArgs>(&index_cmd)?)?;

    let serve_cmd = [
        "--data".to_string(),
        args.data.display().to_string(),
        "--model".into(),
        model,
        "--addr".into(),
        args.addr.to_string(),
    ];
    if args.no_serve {
        eprintln!(
            "[3/3] built; serve it with: {} serve {}",
            program(),
            serve_cmd.join(" ")
        );
        return Ok(());
    }
    crate::http::check_port(args.addr)?;
    eprintln!(
        "[3/3] serving: {} serve {}\n  open {} in a browser and search, e.g. \"a dog\" (Ctrl-C stops)",
        program(),
        serve_cmd.join(" "),
        browsable(args.addr)
    );
    serve::run(parse::<ServeArgs>(&serve_cmd)?)
}

/// How to run this binary again, as the printed commands say it: `lexlip` when that name on
/// the PATH is this binary (`cargo install --path server`), else its own path (e.g.
/// `target/release/lexlip` after `cargo run --release`), relative to the working directory
/// when it lies below it.
fn program() -> String {
    let Ok(me) = std::env::current_exe().and_then(|p| p.canonicalize()) else {
        return "lexlip".into();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths)
            .filter_map(|dir| dir.join("lexlip").canonicalize().ok())
            .next()
            .is_some_and(|found| found == me)
    });
    if on_path {
        return "lexlip".into();
    }
    let cwd = std::env::current_dir().and_then(|d| d.canonicalize());
    match cwd
        .ok()
        .and_then(|cwd| me.strip_prefix(cwd).ok().map(|p| p.to_path_buf()))
    {
        Some(relative) => relative.display().to_string(),
        None => me.display().to_string(),
    }
}

/// The address to type into a browser: a wildcard listen address is reached on localhost; a
/// port chosen by the system is only known from the "lexlip listening on" line.
fn browsable(addr: SocketAddr) -> String {
    if addr.port() == 0 {
        "the address on the \"lexlip listening on\" line".to_string()
    } else if addr.ip().is_unspecified() {
        format!("http://localhost:{}", addr.port())
    } else {
        format!("http://{addr}")
    }
}

/// Parses a subcommand's arguments exactly as the command line would.
fn parse<A: clap::Args>(argv: &[String]) -> anyhow::Result<A> {
    #[derive(Parser)]
    struct Wrapper<A: clap::Args> {
        #[command(flatten)]
        inner: A,
    }
    let argv = std::iter::once("lexlip").chain(argv.iter().map(String::as_str));
    Ok(Wrapper::<A>::try_parse_from(argv)?.inner)
}
