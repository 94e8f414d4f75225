//! Readers, one per input format. Each yields items in a deterministic order (resume and
//! sharding rely on it) and never stops on a bad record: it yields a [`BadItem`] instead.

mod files;
pub mod image_dir;
pub mod manifest;
pub mod tsv;
pub mod vectors;
pub mod webdataset;

use std::path::PathBuf;

use crate::error::{CorpusError, Result};
use crate::item::SourceItem;
use files::parent_dir;

/// The input of a run.
#[derive(Debug, Clone)]
pub enum Input {
    /// LexLIP / ViLT TSV `title<TAB>filepath<TAB>image_id` with a header (plain or gzip); image
    /// paths relative to `images_root` (default: the TSV's directory).
    Tsv {
        path: PathBuf,
        images_root: Option<PathBuf>,
    },
    /// JSONL `{"id", "image"?, "text"?, "uri"?, "metadata"?}` (plain or gzip); image paths
    /// relative to the file.
    Manifest(PathBuf),
    /// img2dataset WebDataset shards (`.tar` files, directories of them, or patterns).
    WebDataset(Vec<PathBuf>),
    /// Every image under a directory (recursive); id = relative path.
    ImageDir(PathBuf),
}

impl Input {
    /// Opens the reader.
    pub fn open(&self) -> Result<Box<dyn Iterator<Item = SourceItem> + Send>> {
        Ok(match self {
            Input::Tsv { path, images_root } => {
                let root = images_root.clone().unwrap_or_else(|| parent_dir(path));
                Box::new(tsv::read(path, &root)?)
            }
            Input::Manifest(path) => Box::new(manifest::read(path)?),
            Input::WebDataset(paths) => Box::new(webdataset::read(&webdataset::shards(paths)?)),
            Input::ImageDir(root) => Box::new(image_dir::read(root)?),
        })
    }

    /// A stable description (part of the resume fingerprint).
    pub fn describe(&self) -> String {
        format!("{self:?}")
    }

    /// The description plus the size and modification time of every input file (for a
    /// directory of images, of every image under it), so that a changed input is never taken
    /// for the one an earlier run indexed.
    pub fn signature(&self) -> Result<String> {
        let mut out = self.describe();
        let files: Vec<PathBuf> = match self {
            Input::Tsv { path, .. } | Input::Manifest(path) => vec![path.clone()],
            Input::WebDataset(paths) => webdataset::shards(paths)?,
            Input::ImageDir(root) => image_dir::files(root)?,
        };
        out.push_str(&files_signature(&files)?);
        Ok(out)
    }
}

/// The path, size and modification time of every file of `files`, hashed (`|N files|HASH`):
/// what tells a changed file from the one an earlier run read, for inputs and for the model
/// that encoded them.
pub fn files_signature(files: &[PathBuf]) -> Result<String> {
    let mut h = crate::hash::fnv1a(b"");
    for f in files {
        let m = std::fs::metadata(f).map_err(|e| CorpusError::io(f, e))?;
        let modified = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let entry = format!("{}|{}|{modified};", f.display(), m.len());
        h ^= crate::hash::fnv1a(entry.as_bytes());
        h = h.rotate_left(5).wrapping_mul(0x0100_0000_01b3);
    }
    Ok(format!("|{} files|{h:016x}", files.len()))
}
