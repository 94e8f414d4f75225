//! Every image file under a directory, recursively, in path order; id = the path relative to
//! the directory (with `/`).

use std::path::{Path, PathBuf};

use crate::error::{CorpusError, Result};
use crate::item::{ImageRef, Item, SourceItem};

const EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "webp", "gif"];

pub fn read(root: &Path) -> Result<impl Iterator<Item = SourceItem> + Send + use<>> {
    if !root.is_dir() {
        return Err(CorpusError::Input(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let files = files(root)?;
    let root = root.to_path_buf();
    Ok(files.into_iter().map(move |path| {
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let mut item = Item::image(rel.clone(), ImageRef::File(path));
        item.uri = Some(rel);
        Ok(item)
    }))
}

/// The image files under `root`, sorted.
pub fn files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    walk(root, &mut files)?;
    files.sort();
    Ok(files)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| CorpusError::io(dir, e))? {
        let entry = entry.map_err(|e| CorpusError::io(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| CorpusError::io(&path, e))?;
        if kind.is_dir() {
            walk(&path, out)?;
        } else if path
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .is_some_and(|e| EXTENSIONS.contains(&e.as_str()))
        {
            out.push(path);
        }
    }
    Ok(())
}
