//! JSONL manifest: `{"id", "image"?: path, "text"?: "...", "uri"?, "metadata"?: {...}}` per line.
//! A line with an image gives an image document `id` (its text stored as caption) and, with a
//! text, a text document `id#text` linked by `metadata.image_id`; a line with only a text gives a
//! text document `id`. Image paths are relative to the manifest's directory.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::Result;
use crate::item::{BadItem, ImageRef, Item, SourceItem, link_to_image, reason};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: String,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    metadata: serde_json::Map<String, serde_json::Value>,
}

pub fn read(path: &Path) -> Result<impl Iterator<Item = SourceItem> + Send + use<>> {
    let root = super::files::parent_dir(path);
    let path: PathBuf = path.to_path_buf();
    let lines = super::files::open_text(&path)?.lines();
    let mut line_no = 0usize;
    Ok(lines.flat_map(move |line| {
        line_no += 1;
        let at = format!("{}:{line_no}", path.display());
        let bad_line = |e: &dyn std::fmt::Display| {
            vec![Err(BadItem::new(
                None,
                reason::BAD_LINE,
                format!("{at}: {e}"),
            ))]
        };
        let line = match line {
            Ok(l) => l,
            Err(e) => return bad_line(&e),
        };
        if line.trim().is_empty() {
            return Vec::new();
        }
        let l: Line = match serde_json::from_str(&line) {
            Ok(l) => l,
            Err(e) => return bad_line(&e),
        };
        if l.id.trim().is_empty() {
            return vec![Err(BadItem::new(
                None,
                reason::BAD_ID,
                format!("{at}: empty id"),
            ))];
        }
        let mut out = Vec::new();
        match (&l.image, &l.text) {
            (None, None) => out.push(Err(BadItem::new(
                Some(l.id.clone()),
                reason::BAD_LINE,
                format!("{at}: neither image nor text"),
            ))),
            (Some(img), text) => {
                let mut item = Item::image(l.id.clone(), ImageRef::File(root.join(img)));
                item.text = text.clone();
                item.uri = l.uri.clone().or_else(|| Some(img.clone()));
                item.metadata = l.metadata.clone();
                out.push(Ok(item));
                if let Some(t) = text {
                    out.push(caption(
                        format!("{}#text", l.id),
                        &l.id,
                        t,
                        &l.metadata,
                        &at,
                    ));
                }
            }
            (None, Some(t)) => {
                let mut r = caption(l.id.clone(), &l.id, t, &l.metadata, &at);
                if let Ok(item) = &mut r {
                    item.metadata.remove("image_id");
                    item.uri = l.uri.clone();
                }
                out.push(r);
            }
        }
        out
    }))
}

fn caption(
    id: String,
    image_id: &str,
    text: &str,
    metadata: &serde_json::Map<String, serde_json::Value>,
    at: &str,
) -> SourceItem {
    if text.trim().is_empty() {
        return Err(
            BadItem::new(Some(id), reason::EMPTY_CAPTION, format!("{at}: empty text"))
                .in_group(image_id),
        );
    }
    let mut item = Item::text(id, image_id.to_string(), text.to_string());
    item.metadata = metadata.clone();
    link_to_image(&mut item, image_id);
    Ok(item)
}
