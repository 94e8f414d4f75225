//! A data directory's snapshot archives: `DATA/snapshots/NAME/NAME-<UTC time>.snapshot.tar`,
//! taken of the collection `NAME`, listed, removed, and restored under any name.

use std::path::PathBuf;

use super::Catalog;
use crate::archive::{self, ArchiveManifest, EXTENSION, Staged};
use crate::collection::Collection;
use crate::error::{IndexError, Result};
use crate::manifest::{Manifest, unix_secs};

/// A snapshot archive the catalog keeps: its file name and what it says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSnapshot {
    pub file: String,
    pub manifest: ArchiveManifest,
}

impl Catalog {
    /// Where the snapshots of the collection `name` are kept.
    fn snapshot_dir(&self, name: &str) -> Result<PathBuf> {
        // The same names as the collections' own folders.
        self.existing_dir(name)?;
        Ok(self.snapshots.join(name))
    }

    /// The path of the snapshot `file` of the collection `name`: a plain file name ending in
    /// `.snapshot.tar` (anything else is no snapshot of ours).
    pub fn snapshot_path(&self, name: &str, file: &str) -> Result<PathBuf> {
        let plain = file.ends_with(EXTENSION)
            && !file.starts_with('.')
            && !file.contains(['/', '\\'])
            && file != EXTENSION;
        let path = self.snapshot_dir(name)?.join(file);
        if plain && path.is_file() {
            Ok(path)
        } else {
            Err(IndexError::NoSuchSnapshot {
                collection: name.to_string(),
                file: file.to_string(),
            })
        }
    }

    /// Writes a snapshot of the collection `name`'s last commit (see [`archive::write`]: safe
    /// while it is written to).
    pub fn take_snapshot(&self, name: &str) -> Result<StoredSnapshot> {
        let collection = self.existing_dir(name)?;
        if !Manifest::path(&collection).is_file() {
            return Err(IndexError::NoSuchCollection(name.to_string()));
        }
        let dir = self.snapshot_dir(name)?;
        std::fs::create_dir_all(&dir).map_err(|e| IndexError::io(&dir, e))?;
        let stem = format!("{name}-{}", archive::utc_stamp(unix_secs()));
        // Two snapshots in one second get -2, -3, …
        let file = (1..)
            .map(|n| match n {
                1 => format!("{stem}{EXTENSION}"),
                n => format!("{stem}-{n}{EXTENSION}"),
            })
            .find(|f| !dir.join(f).exists())
            .unwrap_or_default();
        let manifest = archive::write(&collection, name, &dir.join(&file))?;
        Ok(StoredSnapshot { file, manifest })
    }

    /// The snapshots of the collection `name`, oldest first; `None` when it has no snapshot
    /// folder. An unreadable archive is listed by a warning in the log, not here.
    pub fn snapshots(&self, name: &str) -> Result<Option<Vec<StoredSnapshot>>> {
        let dir = self.snapshot_dir(name)?;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(IndexError::io(&dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| IndexError::io(&dir, e))?;
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.starts_with('.') || !file.ends_with(EXTENSION) {
                continue;
            }
            let written = entry.metadata().and_then(|m| m.modified()).ok();
            match ArchiveManifest::read(&entry.path()) {
                Ok(manifest) => out.push((written, StoredSnapshot { file, manifest })),
                Err(e) => {
                    tracing::warn!(file = %entry.path().display(), "unreadable snapshot: {e}")
                }
            }
        }
        // Taken order: two taken in one second are told apart by their files' times.
        out.sort_by(|(ta, a), (tb, b)| {
            (a.manifest.created_at, ta, &a.file).cmp(&(b.manifest.created_at, tb, &b.file))
        });
        Ok(Some(out.into_iter().map(|(_, s)| s).collect()))
    }

    /// Removes the snapshot `file` of the collection `name`.
    pub fn delete_snapshot(&self, name: &str, file: &str) -> Result<()> {
        let path = self.snapshot_path(name, file)?;
        std::fs::remove_file(&path).map_err(|e| IndexError::io(&path, e))
    }

    /// Unpacks and checks the snapshot `file` of the collection `name` beside where the
    /// collection `into` goes; [`Self::install`] puts it in place.
    pub fn stage_restore(&self, name: &str, file: &str, into: &str) -> Result<Staged> {
        let archive = self.snapshot_path(name, file)?;
        archive::stage(&archive, &self.dir_of(into)?)
    }

    /// Puts a staged collection in place as `into` (replacing one there only with `replace`;
    /// clearing a directory left by a failed create or delete) and opens it.
    pub fn install(&self, staged: Staged, into: &str, replace: bool) -> Result<Collection> {
        let dir = self.dir_of(into)?;
        if dir.exists() && !Manifest::path(&dir).exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| IndexError::io(&dir, e))?;
        }
        staged.install(&dir, replace)?;
        Collection::open(&dir)
    }
}
