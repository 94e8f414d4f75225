//! Writing an archive of a collection's last commit while it keeps being written.
//!
//! tantivy never changes a segment file after writing it, and replaces `index/meta.json` (the
//! list of the committed segments) atomically. A merge that ends, or a commit, writes a new
//! `meta.json` and then removes files the new one no longer names. So: read `meta.json`, open
//! every file it names; once all are open, a removal cannot take their bytes away (they stay
//! readable through the open handles), and what they hold is exactly that commit. A file
//! removed before it was opened means a newer `meta.json` exists: start again from it.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::format::{
    ArchiveManifest, ArchivedFile, FORMAT, FORMAT_VERSION, MANIFEST_ENTRY, meta_path, sha256_of,
    sibling,
};
use crate::collection::INDEX_DIR;
use crate::collection::VOCAB_FILE;
use crate::error::{IndexError, Result};
use crate::manifest::{MANIFEST_FILE, Manifest, sync_dir, unix_secs};

/// Tries at reading a `meta.json` whose files are all still there (each failed try means a
/// merge or commit ended in between).
const MAX_TRIES: usize = 100;
/// The files tantivy writes for every segment.
const SEGMENT_COMPONENTS: [&str; 6] = ["idx", "pos", "term", "store", "fast", "fieldnorm"];

/// What `index/meta.json` says of the commit (the fields an archive needs).
#[derive(Deserialize)]
struct Meta {
    segments: Vec<SegmentMeta>,
    opstamp: u64,
    #[serde(default)]
    persisted_custom_extensions: Vec<String>,
}

#[derive(Deserialize)]
struct SegmentMeta {
    segment_id: String,
    max_doc: u64,
    deletes: Option<Deletes>,
}

#[derive(Deserialize)]
struct Deletes {
    num_deleted_docs: u64,
    opstamp: u64,
}

/// An entry to archive: its bytes in memory, or an open file.
enum Source {
    Bytes(Vec<u8>),
    File(File),
}

/// One commit of a collection, pinned: every file it needs is read or open.
struct Pinned {
    entries: Vec<(String, Source)>,
    meta: Meta,
    manifest: Manifest,
}

/// Writes an archive of the last commit of the collection in `collection_dir` to `out` (which
/// must not exist), taken as `name`. Safe while a server or `lexlip index` writes to the
/// collection; the archive appears at `out` complete (written aside, synced, renamed) or not
/// at all.
pub fn write(collection_dir: &Path, name: &str, out: &Path) -> Result<ArchiveManifest> {
    if out.exists() {
        return Err(IndexError::AlreadyExists(out.to_path_buf()));
    }
    let mut pinned = pin(collection_dir)?;
    let created_at = unix_secs();
    let mut files = Vec::with_capacity(pinned.entries.len());
    for (path, source) in &mut pinned.entries {
        let (sha256, bytes) = match source {
            Source::Bytes(b) => sha256_of(b.as_slice(), |_| Ok(())),
            Source::File(f) => sha256_of(&mut *f, |_| Ok(())).and_then(|r| f.rewind().map(|()| r)),
        }
        .map_err(|e| IndexError::io(collection_dir.join(&*path), e))?;
        files.push(ArchivedFile {
            path: path.clone(),
            bytes,
            sha256,
        });
    }
    let documents = pinned
        .meta
        .segments
        .iter()
        .map(|s| s.max_doc - s.deletes.as_ref().map_or(0, |d| d.num_deleted_docs))
        .sum();
    let mut manifest = ArchiveManifest {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        collection: name.to_string(),
        created_at,
        lexlip_version: env!("CARGO_PKG_VERSION").to_string(),
        term_space: pinned.manifest.term_space.to_string(),
        documents,
        segments: pinned.meta.segments.len(),
        opstamp: pinned.meta.opstamp,
        files,
        archive_bytes: 0,
    };
    let partial = sibling(out, "partial")?;
    let written = write_tar(&partial, &manifest, pinned.entries, created_at)
        .and_then(|()| std::fs::rename(&partial, out).map_err(|e| IndexError::io(out, e)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    sync_parent(out);
    manifest.archive_bytes = std::fs::metadata(out)
        .map_err(|e| IndexError::io(out, e))?
        .len();
    Ok(manifest)
}

/// Reads the collection's manifest and vocabulary and opens every file of its last commit.
fn pin(dir: &Path) -> Result<Pinned> {
    let manifest = Manifest::read(dir)?;
    let read = |path: PathBuf| std::fs::read(&path).map_err(|e| IndexError::io(&path, e));
    let manifest_bytes = read(dir.join(MANIFEST_FILE))?;
    let vocab_path = dir.join(VOCAB_FILE);
    let vocab = if vocab_path.exists() {
        Some(read(vocab_path)?)
    } else {
        None
    };
    let index = dir.join(INDEX_DIR);
    let meta_file = dir.join(meta_path());
    let mut last_missing = None;
    for _ in 0..MAX_TRIES {
        let meta_bytes = read(meta_file.clone())?;
        let meta: Meta =
            serde_json::from_slice(&meta_bytes).map_err(|e| IndexError::NotACollection {
                path: dir.to_path_buf(),
                reason: format!("{} is not valid ({e})", meta_file.display()),
            })?;
        match open_segment_files(&index, &meta) {
            Ok(opened) => {
                let mut entries = vec![(MANIFEST_FILE.to_string(), Source::Bytes(manifest_bytes))];
                if let Some(v) = vocab {
                    entries.push((VOCAB_FILE.to_string(), Source::Bytes(v)));
                }
                entries.push((meta_path(), Source::Bytes(meta_bytes)));
                entries.extend(opened.into_iter().map(|(p, f)| (p, Source::File(f))));
                return Ok(Pinned {
                    entries,
                    meta,
                    manifest,
                });
            }
            Err(missing) => {
                // Unchanged `meta.json` and a file of it missing: the collection is damaged.
                if read(meta_file.clone())? == meta_bytes {
                    return Err(IndexError::NotACollection {
                        path: dir.to_path_buf(),
                        reason: format!("its last commit names {missing}, which is missing"),
                    });
                }
                last_missing = Some(missing);
            }
        }
    }
    Err(IndexError::InvalidSetting(format!(
        "the collection at {} committed or merged {MAX_TRIES} times while its files were \
         being opened (last missing: {}); try again",
        dir.display(),
        last_missing.unwrap_or_default()
    )))
}

/// Opens the files of every segment `meta` names; `Err` names a file that is not there.
fn open_segment_files(
    index: &Path,
    meta: &Meta,
) -> std::result::Result<Vec<(String, File)>, String> {
    let mut opened = Vec::new();
    for segment in &meta.segments {
        let uuid: String = segment.segment_id.chars().filter(|c| *c != '-').collect();
        let mut names: Vec<String> = SEGMENT_COMPONENTS
            .iter()
            .map(|ext| ext.to_string())
            .chain(meta.persisted_custom_extensions.iter().cloned())
            .map(|ext| format!("{uuid}.{ext}"))
            .collect();
        if let Some(d) = &segment.deletes {
            names.push(format!("{uuid}.{}.del", d.opstamp));
        }
        for name in names {
            match File::open(index.join(&name)) {
                Ok(f) => opened.push((format!("{INDEX_DIR}/{name}"), f)),
                Err(_) => return Err(name),
            }
        }
    }
    Ok(opened)
}

/// Writes `snapshot.json` and then `entries`, in that order, to a new file at `path`, synced.
fn write_tar(
    path: &Path,
    manifest: &ArchiveManifest,
    entries: Vec<(String, Source)>,
    mtime: u64,
) -> Result<()> {
    let io = |e: std::io::Error| IndexError::io(path, e);
    let file = File::create_new(path).map_err(io)?;
    let mut tar = tar::Builder::new(BufWriter::with_capacity(1 << 20, file));
    let json = serde_json::to_vec_pretty(manifest).map_err(|e| io(e.into()))?;
    append(
        &mut tar,
        MANIFEST_ENTRY,
        json.len() as u64,
        json.as_slice(),
        mtime,
    )
    .map_err(io)?;
    for ((name, source), listed) in entries.into_iter().zip(&manifest.files) {
        match source {
            Source::Bytes(b) => append(&mut tar, &name, listed.bytes, b.as_slice(), mtime),
            Source::File(f) => append(&mut tar, &name, listed.bytes, f.take(listed.bytes), mtime),
        }
        .map_err(io)?;
    }
    let mut out = tar.into_inner().map_err(io)?;
    out.flush().map_err(io)?;
    let file = out.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    size: u64,
    data: impl Read,
    mtime: u64,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(mtime);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, path, data)
}

/// Syncs the directory holding `path`, so a rename into it survives a crash.
pub(super) fn sync_parent(path: &Path) {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent);
    }
}
