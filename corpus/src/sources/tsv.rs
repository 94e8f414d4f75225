//! LexLIP / ViLT caption TSV: `title<TAB>filepath<TAB>image_id` with a header, several lines
//! (captions) per image. Each image becomes one image document (id = image_id, the first time it
//! is seen) and each caption one text document `IMAGE_ID#N` linked by `metadata.image_id`.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::error::{CorpusError, Result};
use crate::item::{BadItem, ImageRef, Item, SourceItem, link_to_image, reason};

pub fn read(
    path: &Path,
    images_root: &Path,
) -> Result<impl Iterator<Item = SourceItem> + Send + use<>> {
    let mut lines = super::files::open_text(path)?.lines();
    let header = match lines.next() {
        Some(h) => h.map_err(|e| CorpusError::io(path, e))?,
        None => String::new(),
    };
    let cols: Vec<&str> = header.trim_end_matches('\r').split('\t').collect();
    let find = |name: &str| cols.iter().position(|c| c.trim() == name);
    let (Some(title), Some(file), Some(image_id)) =
        (find("title"), find("filepath"), find("image_id"))
    else {
        return Err(CorpusError::Input(format!(
            "{}: the header must name the columns title, filepath and image_id (tab-separated), got {header:?}",
            path.display()
        )));
    };
    let width = cols.len();
    let root = images_root.to_path_buf();
    // Captions seen per image (by id digest: 16 bytes + a count per image).
    let mut captions: HashMap<u128, usize> = HashMap::new();
    let mut line_no = 1usize;
    let path = path.to_path_buf();
    Ok(lines.flat_map(move |line| {
        line_no += 1;
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                return vec![Err(BadItem::new(
                    None,
                    reason::BAD_LINE,
                    format!("{}:{line_no}: {e}", path.display()),
                ))];
            }
        };
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            return Vec::new();
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() != width {
            return vec![Err(BadItem::new(
                None,
                reason::BAD_LINE,
                format!(
                    "{}:{line_no}: {} tab-separated fields, the header has {width}",
                    path.display(),
                    fields.len()
                ),
            ))];
        }
        let id = fields[image_id].trim().to_string();
        if id.is_empty() {
            return vec![Err(BadItem::new(
                None,
                reason::BAD_ID,
                format!("{}:{line_no}: empty image_id", path.display()),
            ))];
        }
        let mut out = Vec::with_capacity(2);
        let n = captions.entry(crate::hash::id_digest(&id)).or_insert(0);
        if *n == 0 {
            let rel = fields[file].trim();
            let mut image = Item::image(id.clone(), ImageRef::File(resolve(&root, rel)));
            image.uri = Some(rel.to_string());
            out.push(Ok(image));
        }
        let caption_id = format!("{id}#{n}");
        *n += 1;
        let caption = fields[title].trim();
        if caption.is_empty() {
            out.push(Err(BadItem::new(
                Some(caption_id),
                reason::EMPTY_CAPTION,
                format!("{}:{line_no}: empty caption", path.display()),
            )
            .in_group(&id)));
        } else {
            let mut text = Item::text(caption_id, id.clone(), caption.to_string());
            link_to_image(&mut text, &id);
            out.push(Ok(text));
        }
        out
    }))
}

fn resolve(root: &Path, rel: &str) -> PathBuf {
    let p = Path::new(rel);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}
