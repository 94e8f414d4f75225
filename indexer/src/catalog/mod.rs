//! The collections of a data directory: `DATA/collections/NAME`, one directory each. Creating,
//! listing and deleting them by name is done here, so the server never handles collection files
//! itself; [`snapshots`] keeps their snapshot archives in `DATA/snapshots/NAME/`.

pub mod snapshots;

use std::path::{Path, PathBuf};

use lexlip_proto::TermSpace;

use crate::collection::Collection;
use crate::error::{IndexError, Result};
use crate::manifest::{CollectionSettings, Manifest};

/// Sub-directory of the data directory that holds the collections.
pub const COLLECTIONS_DIR: &str = "collections";
/// Sub-directory of the data directory that holds snapshot archives, one folder a collection.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// A data directory's collections.
#[derive(Debug, Clone)]
pub struct Catalog {
    root: PathBuf,
    snapshots: PathBuf,
}

impl Catalog {
    /// The catalog of `data_dir` (its `collections/` directory is created if missing).
    pub fn open(data_dir: &Path) -> Result<Self> {
        let root = data_dir.join(COLLECTIONS_DIR);
        std::fs::create_dir_all(&root).map_err(|e| IndexError::io(&root, e))?;
        Ok(Self {
            root,
            snapshots: data_dir.join(SNAPSHOTS_DIR),
        })
    }

    /// Collection names: 1-64 of `A-Z a-z 0-9 _ - .`, not starting with `.` or `-`.
    pub fn validate_name(name: &str) -> Result<()> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && !name.starts_with(['.', '-']);
        if ok {
            Ok(())
        } else {
            Err(IndexError::InvalidName(name.to_string()))
        }
    }

    /// Where the collection `name` lives.
    pub fn dir_of(&self, name: &str) -> Result<PathBuf> {
        Self::validate_name(name)?;
        Ok(self.root.join(name))
    }

    /// Where an existing collection `name` lives. Collections built by `lexlip index` into this
    /// directory may have names `create` would refuse; any single path component will do.
    fn existing_dir(&self, name: &str) -> Result<PathBuf> {
        let component =
            !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\']);
        if component {
            Ok(self.root.join(name))
        } else {
            Err(IndexError::NoSuchCollection(name.to_string()))
        }
    }

    /// Names of the collections, sorted (directories without a manifest are not collections,
    /// nor are hidden ones: a restore in progress unpacks into one).
    pub fn names(&self) -> Result<Vec<String>> {
        let entries = std::fs::read_dir(&self.root).map_err(|e| IndexError::io(&self.root, e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| IndexError::io(&self.root, e))?;
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if !hidden && Manifest::path(&entry.path()).is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Opens the collection `name`.
    pub fn open_collection(&self, name: &str) -> Result<Collection> {
        let dir = self.existing_dir(name)?;
        if !Manifest::path(&dir).is_file() {
            return Err(IndexError::NoSuchCollection(name.to_string()));
        }
        Collection::open(&dir)
    }

    /// Creates the collection `name`. A directory left over from a failed create or delete (it
    /// has no manifest, so it is not a collection) is cleared first.
    pub fn create(
        &self,
        name: &str,
        term_space: TermSpace,
        settings: CollectionSettings,
        vocab: Option<&[String]>,
    ) -> Result<Collection> {
        let dir = self.dir_of(name)?;
        if Manifest::path(&dir).exists() {
            return Err(IndexError::AlreadyExists(dir));
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| IndexError::io(&dir, e))?;
        }
        Collection::create(&dir, term_space, settings, vocab)
    }

    /// Deletes the collection `name` and its files: the manifest goes first (atomically the
    /// directory stops being a collection), then the rest.
    pub fn delete(&self, name: &str) -> Result<()> {
        let dir = self.existing_dir(name)?;
        let manifest = Manifest::path(&dir);
        if !manifest.is_file() {
            return Err(IndexError::NoSuchCollection(name.to_string()));
        }
        std::fs::remove_file(&manifest).map_err(|e| IndexError::io(&manifest, e))?;
        // A file that appears while the tree is removed (a writer of the collection still
        // finishing) makes one pass fail with "directory not empty"; the next one takes it.
        let mut tries = 0;
        loop {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) if tries < 20 => {
                    tries += 1;
                    tracing::debug!(dir = %dir.display(), error = %e, "removing again");
                    std::thread::sleep(std::time::Duration::from_millis(25));
                }
                Err(e) => return Err(IndexError::io(&dir, e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_list_delete() {
        let tmp = tempfile::tempdir().unwrap();
        let cat = Catalog::open(tmp.path()).unwrap();
        assert!(cat.names().unwrap().is_empty());
        // A leftover directory without a manifest is neither listed nor in the way.
        std::fs::create_dir_all(tmp.path().join("collections/b/index")).unwrap();
        for name in ["b", "a"] {
            cat.create(
                name,
                TermSpace::free("any"),
                CollectionSettings::default(),
                None,
            )
            .unwrap();
        }
        assert_eq!(cat.names().unwrap(), ["a", "b"]);
        assert!(matches!(
            cat.create(
                "a",
                TermSpace::free("any"),
                CollectionSettings::default(),
                None
            ),
            Err(IndexError::AlreadyExists(_))
        ));
        cat.delete("a").unwrap();
        assert_eq!(cat.names().unwrap(), ["b"]);
        assert!(!tmp.path().join("collections/a").exists());
        assert!(matches!(
            cat.delete("a"),
            Err(IndexError::NoSuchCollection(_))
        ));
        assert!(cat.open_collection("b").is_ok());
    }

    #[test]
    fn names_are_validated() {
        for bad in ["", ".hidden", "-x", "a/b", "..", &"x".repeat(65)] {
            assert!(Catalog::validate_name(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "emoji_v1.2", "A-b"] {
            assert!(Catalog::validate_name(good).is_ok(), "{good:?}");
        }
    }
}
