//! WebDataset tar shards as img2dataset writes them: consecutive members `KEY.jpg` (or png,
//! webp), `KEY.txt` (caption), `KEY.json` (metadata). A sample becomes an image document `KEY`
//! (caption stored, metadata from the JSON) and, with a caption, a text document `KEY#text`
//! linked by `metadata.image_id`.
//!
//! Images are not read here: an image document refers to its member of the shard
//! ([`ImageRef::Member`]), read when it is decoded, so that a reader of millions of samples
//! (training holds every image reference of its corpus) keeps only offsets in memory.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{CorpusError, Result};
use crate::item::{BadItem, ImageRef, Item, SourceItem, link_to_image, reason};

/// The shard files named by `paths`, in order: a `.tar` file; a directory (its `.tar` files,
/// sorted); or a pattern in the file name, as when the shell did not expand it:
/// `shards/*.tar` (`*` and `?`, matches sorted) or `shards/{00000..00099}.tar` (a numeric
/// range, zero-padded like its bounds; every shard must exist).
pub fn shards(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut tars: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| CorpusError::io(p, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file() && f.extension().is_some_and(|e| e == "tar"))
                .collect();
            tars.sort();
            out.extend(tars);
        } else if p.is_file() {
            out.push(p.clone());
        } else if let Some(expanded) = expand(p)? {
            out.extend(expanded);
        } else {
            return Err(CorpusError::Input(format!(
                "{}: no such shard or directory",
                p.display()
            )));
        }
    }
    if out.is_empty() {
        return Err(CorpusError::Input("no .tar shards found".into()));
    }
    Ok(out)
}

/// Expands a pattern in the file name; `None` when there is none.
fn expand(p: &Path) -> Result<Option<Vec<PathBuf>>> {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return Ok(None);
    };
    let dir = super::files::parent_dir(p);
    if let Some((prefix, rest)) = name.split_once('{')
        && let Some((range, suffix)) = rest.split_once('}')
        && let Some((lo, hi)) = range.split_once("..")
        && let (Ok(a), Ok(b)) = (lo.parse::<u64>(), hi.parse::<u64>())
    {
        let width = if lo.starts_with('0') { lo.len() } else { 0 };
        let mut files = Vec::new();
        for n in a.min(b)..=a.max(b) {
            let f = dir.join(format!("{prefix}{n:0width$}{suffix}"));
            if !f.is_file() {
                return Err(CorpusError::Input(format!(
                    "{}: no such shard (from {})",
                    f.display(),
                    p.display()
                )));
            }
            files.push(f);
        }
        return Ok(Some(files));
    }
    if !name.contains(['*', '?']) {
        return Ok(None);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| CorpusError::io(&dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| {
            f.is_file()
                && f.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| wildcard(name.as_bytes(), n.as_bytes()))
        })
        .collect();
    if files.is_empty() {
        return Err(CorpusError::Input(format!(
            "{}: no shard matches",
            p.display()
        )));
    }
    files.sort();
    Ok(Some(files))
}

/// `*` (any run) and `?` (any one byte) matching of a whole name.
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| wildcard(rest, &name[i..])),
        Some((b'?', rest)) => !name.is_empty() && wildcard(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && wildcard(rest, &name[1..]),
    }
}

#[derive(Default)]
struct Sample {
    key: String,
    /// The image member's (offset, length) in the shard.
    image: Option<(u64, u64)>,
    caption: Option<String>,
    json: Option<Vec<u8>>,
}

/// Appends one member `name` holding `data` to a shard being written, with the plain header
/// img2dataset writes (a regular file, mode 0644, time 0: no trace of when or by whom, so equal
/// contents give equal shards).
pub fn append_member<W: std::io::Write>(
    shard: &mut tar::Builder<W>,
    name: &str,
    data: &[u8],
) -> std::io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(0);
    h.set_cksum();
    shard.append_data(&mut h, name, data)
}

/// Samples read ahead of the pipeline (the tar is streamed, never held whole).
const READ_AHEAD: usize = 64;

/// Streams the shards' samples in order from a reader thread.
pub fn read(shards: &[PathBuf]) -> impl Iterator<Item = SourceItem> + Send + use<> {
    let shards = shards.to_vec();
    let (tx, rx) = std::sync::mpsc::sync_channel::<SourceItem>(READ_AHEAD);
    std::thread::spawn(move || {
        for shard in shards {
            let mut emit = |item: SourceItem| tx.send(item).is_ok();
            match read_shard(&shard, &mut emit) {
                Ok(true) => {}
                Ok(false) => return, // the pipeline stopped
                Err(e) => {
                    if !emit(Err(BadItem::new(None, reason::BAD_LINE, e.to_string()))) {
                        return;
                    }
                }
            }
        }
    });
    rx.into_iter()
}

/// Streams one shard's samples into `emit`; false when `emit` refused (the reader is gone).
fn read_shard(shard: &Path, emit: &mut dyn FnMut(SourceItem) -> bool) -> Result<bool> {
    let file = super::files::open_file(shard)?;
    let shard_len = file
        .metadata()
        .map_err(|e| CorpusError::io(shard, e))?
        .len();
    let archive_path = Arc::new(shard.to_path_buf());
    let mut archive = tar::Archive::new(file);
    let mut sample = Sample::default();
    let entries = archive.entries().map_err(|e| CorpusError::io(shard, e))?;
    for entry in entries {
        let mut entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let bad = BadItem::new(
                    None,
                    reason::BAD_LINE,
                    format!("{}: corrupt tar member: {e}", shard.display()),
                );
                if !emit(Err(bad)) {
                    return Ok(false);
                }
                break;
            }
        };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = match entry.path() {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(_) => continue,
        };
        let base = name.rsplit('/').next().unwrap_or(&name).to_string();
        let Some((key, ext)) = base.split_once('.') else {
            continue;
        };
        if key != sample.key {
            if !flush(&archive_path, std::mem::take(&mut sample), emit) {
                return Ok(false);
            }
            sample.key = key.to_string();
        }
        let ext = ext.to_ascii_lowercase();
        let is_image = matches!(ext.as_str(), "jpg" | "jpeg" | "png" | "webp" | "gif");
        let (offset, len) = (entry.raw_file_position(), entry.size());
        let mut data = Vec::new();
        let read = if is_image {
            // Referred to, not read: only check that the shard holds the whole member.
            match offset.checked_add(len) {
                Some(end) if end <= shard_len => Ok(0),
                _ => Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
            }
        } else {
            entry.read_to_end(&mut data)
        };
        if let Err(e) = read {
            let bad = BadItem::new(
                Some(key.to_string()),
                reason::BAD_LINE,
                format!("{}: {name}: {e}", shard.display()),
            );
            if !emit(Err(bad)) {
                return Ok(false);
            }
            continue;
        }
        match ext.as_str() {
            _ if is_image => sample.image = Some((offset, len)),
            "txt" => sample.caption = Some(String::from_utf8_lossy(&data).trim().to_string()),
            "json" => sample.json = Some(data),
            _ => {}
        }
    }
    Ok(flush(&archive_path, sample, emit))
}

/// Emits a finished sample's items; false when `emit` refused.
fn flush(shard: &Arc<PathBuf>, s: Sample, emit: &mut dyn FnMut(SourceItem) -> bool) -> bool {
    if s.key.is_empty() {
        return true;
    }
    let mut out = Vec::with_capacity(2);
    let metadata = s
        .json
        .and_then(|j| serde_json::from_slice::<serde_json::Value>(&j).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    let uri = format!("{}#{}", shard.display(), s.key);
    match s.image {
        Some((offset, len)) => {
            let mut item = Item::image(
                s.key.clone(),
                ImageRef::Member {
                    archive: shard.clone(),
                    offset,
                    len,
                },
            );
            item.text = s.caption.clone();
            item.uri = Some(uri.clone());
            item.metadata = metadata.clone();
            out.push(Ok(item));
            match s.caption {
                Some(c) if !c.is_empty() => {
                    let mut t = Item::text(format!("{}#text", s.key), s.key.clone(), c);
                    t.metadata = metadata;
                    link_to_image(&mut t, &s.key);
                    out.push(Ok(t));
                }
                Some(_) => out.push(Err(BadItem::new(
                    Some(format!("{}#text", s.key)),
                    reason::EMPTY_CAPTION,
                    format!("{uri}: empty caption"),
                )
                .in_group(&s.key))),
                None => {}
            }
        }
        None => out.push(Err(BadItem::new(
            Some(s.key.clone()),
            reason::MISSING_FILE,
            format!("{uri}: sample without an image"),
        ))),
    }
    out.into_iter().all(emit)
}
