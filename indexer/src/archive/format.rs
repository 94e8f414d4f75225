//! The archive's format: its manifest (`snapshot.json`), the entries it may hold, their
//! checksums, and the names restore works under.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::collection::INDEX_DIR;
use crate::error::{IndexError, Result};

/// The archive's first entry.
pub const MANIFEST_ENTRY: &str = "snapshot.json";
/// What `snapshot.json`'s `format` says.
pub const FORMAT: &str = "lexlip-snapshot";
/// The archive layout this lexlip writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The file-name ending of archives the server keeps.
pub const EXTENSION: &str = ".snapshot.tar";

/// `snapshot.json`: what an archive holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveManifest {
    /// Always [`FORMAT`].
    pub format: String,
    pub format_version: u32,
    /// The name of the collection it was taken from.
    pub collection: String,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    /// The lexlip that wrote it.
    pub lexlip_version: String,
    /// The collection's term space (as its manifest names it).
    pub term_space: String,
    /// Live documents of the archived commit.
    pub documents: u64,
    /// Segments of the archived commit.
    pub segments: usize,
    /// tantivy's opstamp of the archived commit.
    pub opstamp: u64,
    /// Every other entry, in archive order.
    pub files: Vec<ArchivedFile>,
    /// Size of the whole archive in bytes (filled in when an archive is written or read, not
    /// stored in it).
    #[serde(default, skip_serializing)]
    pub archive_bytes: u64,
}

/// One entry of an archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchivedFile {
    /// Path inside the collection directory (`lexlip.json`, `index/<segment>.idx`, …).
    pub path: String,
    pub bytes: u64,
    /// Lower-case hex SHA-256 of the file's bytes.
    pub sha256: String,
}

impl ArchiveManifest {
    /// Reads an archive's `snapshot.json` (its first entry) without reading the rest: for
    /// listing. [`restore`] checks the whole archive.
    pub fn read(archive: &Path) -> Result<Self> {
        let mut reader = Reader::open(archive)?;
        let (manifest, _) = reader.manifest_and_entries()?;
        Ok(manifest)
    }

    /// Refuses what this lexlip cannot restore: another format, a newer layout, or a file list
    /// with paths outside a collection directory or twice the same path.
    fn check(&self, archive: &Path) -> Result<()> {
        if self.format != FORMAT {
            return Err(bad(
                archive,
                format!("its format is {:?}, not {FORMAT:?}", self.format),
            ));
        }
        if self.format_version != FORMAT_VERSION {
            return Err(bad(
                archive,
                format!(
                    "it has layout version {}; this lexlip reads version {FORMAT_VERSION}",
                    self.format_version
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for f in &self.files {
            if !is_collection_path(&f.path) {
                return Err(bad(
                    archive,
                    format!("it names a file outside a collection: {:?}", f.path),
                ));
            }
            if !seen.insert(f.path.as_str()) {
                return Err(bad(archive, format!("it names {:?} twice", f.path)));
            }
        }
        for needed in [crate::manifest::MANIFEST_FILE, &meta_path()] {
            if !seen.contains(needed) {
                return Err(bad(archive, format!("it lacks {needed}")));
            }
        }
        Ok(())
    }
}

/// An archive file opened for reading.
pub(super) struct Reader<'p> {
    path: &'p Path,
    tar: tar::Archive<std::fs::File>,
    bytes: u64,
}

impl<'p> Reader<'p> {
    pub(super) fn open(path: &'p Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| IndexError::io(path, e))?;
        let bytes = file.metadata().map_err(|e| IndexError::io(path, e))?.len();
        Ok(Self {
            path,
            tar: tar::Archive::new(file),
            bytes,
        })
    }

    /// `snapshot.json`, checked, and the entries after it.
    pub(super) fn manifest_and_entries(
        &mut self,
    ) -> Result<(ArchiveManifest, tar::Entries<'_, std::fs::File>)> {
        let path = self.path;
        let mut entries = self
            .tar
            .entries()
            .map_err(|e| bad(path, format!("not a tar file ({e})")))?;
        let mut manifest = read_manifest_entry(path, &mut entries)?;
        manifest.archive_bytes = self.bytes;
        Ok((manifest, entries))
    }
}

/// Reads the first entry of `entries`, which must be `snapshot.json`, and checks it.
pub(super) fn read_manifest_entry<R: Read>(
    archive: &Path,
    entries: &mut tar::Entries<'_, R>,
) -> Result<ArchiveManifest> {
    let not_ours = || bad(archive, format!("its first entry is not {MANIFEST_ENTRY}"));
    let mut first = match entries.next() {
        Some(Ok(entry)) => entry,
        Some(Err(e)) => return Err(bad(archive, format!("not a tar file ({e})"))),
        None => return Err(bad(archive, "it is empty".to_string())),
    };
    if entry_path(&first).as_deref() != Some(MANIFEST_ENTRY) {
        return Err(not_ours());
    }
    let mut text = Vec::new();
    first
        .by_ref()
        .take(1 << 24)
        .read_to_end(&mut text)
        .map_err(|e| {
            bad(
                archive,
                format!("its {MANIFEST_ENTRY} cannot be read ({e})"),
            )
        })?;
    let manifest: ArchiveManifest = serde_json::from_slice(&text)
        .map_err(|e| bad(archive, format!("its {MANIFEST_ENTRY} is not valid ({e})")))?;
    manifest.check(archive)?;
    Ok(manifest)
}

/// An entry's path as text, when it is valid UTF-8.
pub(super) fn entry_path<R: Read>(entry: &tar::Entry<'_, R>) -> Option<String> {
    let path = entry.path().ok()?;
    path.to_str().map(str::to_string)
}

/// Whether `path` may stand in a collection directory: `lexlip.json`, `vocab.txt`, or one plain
/// file name under `index/` (no `..`, no separators, no hidden files but tantivy's none).
pub(super) fn is_collection_path(path: &str) -> bool {
    let plain = |name: &str| {
        !name.is_empty()
            && !name.starts_with('.')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    match path.split_once('/') {
        None => path == crate::manifest::MANIFEST_FILE || path == crate::collection::VOCAB_FILE,
        Some((dir, name)) => dir == INDEX_DIR && plain(name),
    }
}

/// The error for an archive that cannot be restored.
pub(super) fn bad(archive: &Path, reason: String) -> IndexError {
    IndexError::BadArchive {
        path: archive.to_path_buf(),
        reason,
    }
}

/// tantivy's list of the committed segments, as a path inside a collection (and an archive).
pub(super) fn meta_path() -> String {
    format!("{INDEX_DIR}/meta.json")
}

/// Lower-case hex SHA-256 and length of everything `reader` yields, each chunk also handed to
/// `sink` (unpacking writes it out as it hashes).
pub(super) fn sha256_of(
    mut reader: impl Read,
    mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        sink(&buf[..n])?;
        total += n as u64;
    }
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, total))
}

/// `20261205T134400Z` for `secs` since the Unix epoch (UTC): sortable, safe in file names.
pub fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days to a civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// A sibling of `target` for work in progress: same file system (a rename moves it into
/// place), hidden, and unique to this process and moment.
pub(super) fn sibling(target: &Path, what: &str) -> Result<PathBuf> {
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target.file_name().ok_or_else(|| {
        IndexError::InvalidSetting(format!("{} names no directory", target.display()))
    })?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Ok(parent.join(format!(
        ".{}.{what}-{}-{nanos:x}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_dates() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400), "20000229T000000Z");
        assert_eq!(utc_stamp(1_796_564_640), "20261206T134400Z");
    }

    #[test]
    fn only_collection_files_may_be_named() {
        for ok in [
            "lexlip.json",
            "vocab.txt",
            "index/meta.json",
            "index/0b49.fast",
            "index/ab.3.del",
        ] {
            assert!(is_collection_path(ok), "{ok}");
        }
        for no in [
            "../x",
            "index/../x",
            "index/.managed.json",
            "index/a/b",
            "/etc/passwd",
            "other.txt",
            "index/",
        ] {
            assert!(!is_collection_path(no), "{no}");
        }
    }
}
