//! Bringing an archive back: unpacked beside the target and checked there (every entry's
//! size and SHA-256 against `snapshot.json`, then the collection opened and its documents
//! counted), and only then renamed into place. A refused archive leaves nothing behind.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::format::{ArchiveManifest, ArchivedFile, Reader, bad, entry_path, sha256_of, sibling};
use super::write::sync_parent;
use crate::collection::Collection;
use crate::collection::INDEX_DIR;
use crate::error::{IndexError, Result};
use crate::manifest::Manifest;

/// An archive unpacked and checked beside where it goes, not yet in place; dropped without
/// [`Staged::install`], it is removed.
#[derive(Debug)]
pub struct Staged {
    dir: PathBuf,
    manifest: ArchiveManifest,
    installed: bool,
}

/// Restores `archive` as the collection directory `target`. An existing collection there is
/// replaced only when `replace` is set (atomically: the old one stays until the new one is
/// checked and in place); otherwise, or when the archive is refused, nothing changes.
pub fn restore(archive: &Path, target: &Path, replace: bool) -> Result<ArchiveManifest> {
    if !replace && Manifest::path(target).exists() {
        return Err(IndexError::AlreadyExists(target.to_path_buf()));
    }
    stage(archive, target)?.install(target, replace)
}

/// Unpacks and checks `archive` in a hidden sibling of `target` (same file system, so that
/// [`Staged::install`] is a rename).
pub fn stage(archive: &Path, target: &Path) -> Result<Staged> {
    let mut reader = Reader::open(archive)?;
    let (manifest, entries) = reader.manifest_and_entries()?;
    let dir = sibling(target, "restoring")?;
    let staged = Staged {
        dir,
        manifest,
        installed: false,
    };
    let index = staged.dir.join(INDEX_DIR);
    std::fs::create_dir_all(&index).map_err(|e| IndexError::io(&index, e))?;
    let mut expected: HashMap<String, ArchivedFile> = staged
        .manifest
        .files
        .iter()
        .map(|f| (f.path.clone(), f.clone()))
        .collect();
    for entry in entries {
        let mut entry =
            entry.map_err(|e| bad(archive, format!("it is truncated or damaged ({e})")))?;
        let path = entry_path(&entry).unwrap_or_default();
        let Some(listed) = expected.remove(&path) else {
            return Err(bad(
                archive,
                format!("it holds {path:?}, which its snapshot.json does not list (or lists once)"),
            ));
        };
        if entry.header().entry_type() != tar::EntryType::Regular || entry.size() != listed.bytes {
            return Err(bad(
                archive,
                format!(
                    "{path} is not the {} -byte file snapshot.json lists",
                    listed.bytes
                ),
            ));
        }
        let out = staged.dir.join(&path);
        let sha256 = unpack(&mut entry, &out)
            .map_err(|e| bad(archive, format!("{path} cannot be unpacked ({e})")))?;
        if sha256 != listed.sha256 {
            return Err(bad(
                archive,
                format!("{path} does not match its checksum (altered or damaged)"),
            ));
        }
    }
    if let Some(missing) = expected.keys().min() {
        return Err(bad(
            archive,
            format!("it is truncated: {missing} is missing"),
        ));
    }
    staged.check_opens(archive)?;
    Ok(staged)
}

/// Writes `entry` to a new file at `out`, synced; returns the SHA-256 of what it wrote.
fn unpack(entry: &mut impl Read, out: &Path) -> std::io::Result<String> {
    let mut file = File::create_new(out)?;
    let (sha256, _) = sha256_of(entry, |chunk| file.write_all(chunk))?;
    file.sync_all()?;
    Ok(sha256)
}

impl Staged {
    /// The staged collection opens, was built for the term space the archive names, and holds
    /// the documents the archive counts.
    fn check_opens(&self, archive: &Path) -> Result<()> {
        let collection = Collection::open(&self.dir)
            .map_err(|e| bad(archive, format!("its collection does not open ({e})")))?;
        let found = (
            collection.manifest().term_space.to_string(),
            collection.snapshot()?.num_docs(),
        );
        let listed = (self.manifest.term_space.clone(), self.manifest.documents);
        if found != listed {
            return Err(bad(
                archive,
                format!(
                    "its collection is built for {} and holds {} documents; its snapshot.json \
                     says {} and {}",
                    found.0, found.1, listed.0, listed.1
                ),
            ));
        }
        Ok(())
    }

    /// The staged collection's own manifest (its term space and settings).
    pub fn collection_manifest(&self) -> Result<Manifest> {
        Manifest::read(&self.dir)
    }

    /// Moves the staged collection to `target`. A collection there is replaced only with
    /// `replace` (it is moved aside first and removed once the new one is in place); an
    /// empty directory there is taken; anything else there is refused.
    pub fn install(mut self, target: &Path, replace: bool) -> Result<ArchiveManifest> {
        let mut aside = None;
        if Manifest::path(target).exists() {
            if !replace {
                return Err(IndexError::AlreadyExists(target.to_path_buf()));
            }
            let old = sibling(target, "replaced")?;
            std::fs::rename(target, &old).map_err(|e| IndexError::io(target, e))?;
            aside = Some(old);
        } else if target.exists() {
            let empty = std::fs::read_dir(target)
                .map_err(|e| IndexError::io(target, e))?
                .next()
                .is_none();
            if !empty {
                return Err(IndexError::NotACollection {
                    path: target.to_path_buf(),
                    reason: "it exists and holds other files; restore into a new directory"
                        .to_string(),
                });
            }
            std::fs::remove_dir(target).map_err(|e| IndexError::io(target, e))?;
        }
        if let Err(e) = std::fs::rename(&self.dir, target) {
            if let Some(old) = &aside {
                let _ = std::fs::rename(old, target);
            }
            return Err(IndexError::io(target, e));
        }
        self.installed = true;
        sync_parent(target);
        if let Some(old) = aside
            && let Err(e) = std::fs::remove_dir_all(&old)
        {
            tracing::warn!(dir = %old.display(), "removing the replaced collection: {e}");
        }
        Ok(self.manifest.clone())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.installed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
