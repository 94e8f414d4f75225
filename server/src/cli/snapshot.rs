//! `lexlip snapshot` and `lexlip restore`: a collection directory's last commit to one
//! checksummed archive file and back (the server's snapshot routes write the same files).

use std::path::PathBuf;

use anyhow::Context;
use lexlip_index::archive::{self, ArchiveManifest};

/// `lexlip snapshot` (its help text is on [`super::Command::Snapshot`]).
#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    /// Collection directory.
    #[arg(long, value_name = "DIR")]
    pub collection: PathBuf,
    /// The archive to write (must not exist; by convention NAME.snapshot.tar).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// The collection's name, recorded in the archive (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Print one JSON object (the archive's snapshot.json, with archive_bytes).
    #[arg(long)]
    pub json: bool,
}

/// `lexlip restore` (its help text is on [`super::Command::Restore`]).
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// The archive (from `lexlip snapshot` or the server's snapshots).
    #[arg(long, value_name = "FILE")]
    pub archive: PathBuf,
    /// Collection directory to restore into (must not hold a collection, unless --replace).
    #[arg(long, value_name = "DIR")]
    pub collection: PathBuf,
    /// Replace the collection in --collection (atomically; stop servers using it first).
    #[arg(long)]
    pub replace: bool,
    /// Print one JSON object (the archive's snapshot.json).
    #[arg(long)]
    pub json: bool,
}

pub fn run_snapshot(args: SnapshotArgs) -> anyhow::Result<()> {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => args
            .collection
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "collection".to_string()),
    };
    let made = archive::write(&args.collection, &name, &args.out).with_context(|| {
        format!(
            "snapshot of {} into {}",
            args.collection.display(),
            args.out.display()
        )
    })?;
    report(&made, &args.out.display().to_string(), "wrote", args.json)
}

pub fn run_restore(args: RestoreArgs) -> anyhow::Result<()> {
    let restored =
        archive::restore(&args.archive, &args.collection, args.replace).map_err(|e| match e {
            lexlip_index::IndexError::AlreadyExists(dir) => anyhow::anyhow!(
                "a collection already exists at {}; pass --replace to replace it, or restore \
                 into another directory (nothing was changed)",
                dir.display()
            ),
            other => other.into(),
        })?;
    report(
        &restored,
        &args.collection.display().to_string(),
        "restored",
        args.json,
    )
}

fn report(m: &ArchiveManifest, place: &str, verb: &str, json: bool) -> anyhow::Result<()> {
    if json {
        let mut value = serde_json::to_value(m)?;
        value["archive_bytes"] = m.archive_bytes.into();
        println!("{value}");
    } else {
        println!(
            "{verb} {place}: collection {:?}, {} documents in {} segments, {} files, archive {} bytes",
            m.collection,
            m.documents,
            m.segments,
            m.files.len(),
            m.archive_bytes
        );
    }
    Ok(())
}
