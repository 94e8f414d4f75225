//! Snapshot archives: a collection's committed state in one self-describing, checksummed file,
//! made while the collection keeps serving and being written, and brought back under a name.
//!
//! An archive is a plain tar file (`tar tf` lists it). Its first entry, `snapshot.json`
//! ([`ArchiveManifest`]), names every other entry with its size and SHA-256; then come the
//! collection's `lexlip.json`, its `vocab.txt` when it has one, tantivy's `index/meta.json` and
//! the files of the segments that `meta.json` names — nothing a later commit, merge or an
//! uncommitted write added. [`write`] says why that state is consistent; [`restore`] checks
//! everything before the collection appears, so a truncated, altered or foreign archive
//! changes nothing.
//!
//! ```no_run
//! use std::path::Path;
//! use lexlip_index::archive;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let made = archive::write(Path::new("data/collections/photos"), "photos", Path::new("photos.snapshot.tar"))?;
//! println!("{} documents, {} bytes", made.documents, made.archive_bytes);
//! archive::restore(Path::new("photos.snapshot.tar"), Path::new("data/collections/photos-copy"), false)?;
//! # Ok(()) }
//! ```

mod format;
mod restore;
mod write;

pub use format::{
    ArchiveManifest, ArchivedFile, EXTENSION, FORMAT, FORMAT_VERSION, MANIFEST_ENTRY, utc_stamp,
};
pub use restore::{Staged, restore, stage};
pub use write::write;
