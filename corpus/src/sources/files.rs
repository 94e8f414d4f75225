//! Opening an input's files: plain or gzip text, binary shards, and the directory relative
//! paths start from.

use std::path::{Path, PathBuf};

use super::vectors;
use crate::error::{CorpusError, Result};

/// The directory `path` is in (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A text file's lines, plain or gzip (detected by its magic bytes).
pub(crate) fn open_text(path: &Path) -> Result<Box<dyn std::io::BufRead + Send>> {
    if path.is_dir() {
        return Err(CorpusError::Input(format!(
            "{} is a directory, not a file",
            path.display()
        )));
    }
    vectors::open_lines(path)
}

pub(crate) fn open_file(path: &Path) -> Result<std::fs::File> {
    std::fs::File::open(path).map_err(|e| CorpusError::io(path, e))
}
