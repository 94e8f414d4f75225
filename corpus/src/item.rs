//! What readers produce: items to index, or bad items with the reason they are skipped.

use std::path::PathBuf;
use std::sync::Arc;

use lexlip_proto::Modality;

/// Where an item's image comes from.
#[derive(Debug, Clone)]
pub enum ImageRef {
    /// A file on disk (read in the decode stage).
    File(PathBuf),
    /// Bytes already read; `name` identifies it in errors.
    Bytes { name: String, bytes: Arc<Vec<u8>> },
    /// `len` bytes at `offset` of an uncompressed tar archive (a WebDataset shard), read when
    /// the image is decoded: a corpus of millions of images holds none of them in memory.
    Member {
        archive: Arc<PathBuf>,
        offset: u64,
        len: u64,
    },
}

impl ImageRef {
    pub fn name(&self) -> String {
        match self {
            ImageRef::File(p) => p.display().to_string(),
            ImageRef::Bytes { name, .. } => name.clone(),
            ImageRef::Member {
                archive, offset, ..
            } => format!("{} (member at byte {offset})", archive.display()),
        }
    }

    /// The image's encoded bytes, read from disk unless they are held already.
    pub fn read(&self) -> std::io::Result<std::borrow::Cow<'_, [u8]>> {
        use std::io::{Read, Seek, SeekFrom};
        match self {
            ImageRef::File(p) => Ok(std::fs::read(p)?.into()),
            ImageRef::Bytes { bytes, .. } => Ok(bytes.as_slice().into()),
            ImageRef::Member {
                archive,
                offset,
                len,
            } => {
                let mut file = std::fs::File::open(archive.as_path())?;
                file.seek(SeekFrom::Start(*offset))?;
                let mut out = Vec::with_capacity(usize::try_from(*len).unwrap_or(0));
                file.take(*len).read_to_end(&mut out)?;
                if out.len() as u64 != *len {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "the archive ends {} bytes into a {len}-byte member",
                            out.len()
                        ),
                    ));
                }
                Ok(out.into())
            }
        }
    }

    /// The encoded size in bytes (a file's from its metadata; 0 when it cannot be read).
    pub fn encoded_len(&self) -> u64 {
        match self {
            ImageRef::File(p) => std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
            ImageRef::Bytes { bytes, .. } => bytes.len() as u64,
            ImageRef::Member { len, .. } => *len,
        }
    }
}

/// One document to index.
#[derive(Debug, Clone)]
pub struct Item {
    pub id: String,
    /// Items of one group (an image and its captions) always land in the same shard.
    pub group: String,
    pub modality: Modality,
    /// Text documents: the text to encode. Image documents: an optional caption, stored only.
    pub text: Option<String>,
    /// Image documents: the image to encode.
    pub image: Option<ImageRef>,
    pub uri: Option<String>,
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl Item {
    pub fn text(id: String, group: String, text: String) -> Self {
        Item {
            id,
            group,
            modality: Modality::Text,
            text: Some(text),
            image: None,
            uri: None,
            metadata: serde_json::Map::new(),
        }
    }

    pub fn image(id: String, image: ImageRef) -> Self {
        Item {
            group: id.clone(),
            id,
            modality: Modality::Image,
            text: None,
            image: Some(image),
            uri: None,
            metadata: serde_json::Map::new(),
        }
    }
}

/// Why an item is skipped. `reason` is a short class used as the summary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadItem {
    pub id: Option<String>,
    /// The item's group when it differs from its id (a caption's image), for `--shard`.
    pub group: Option<String>,
    pub reason: &'static str,
    pub message: String,
}

impl BadItem {
    pub fn new(id: Option<String>, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            id,
            group: None,
            reason,
            message: message.into(),
        }
    }

    /// Puts the bad item in a group (a caption in its image's), so that it is reported by the
    /// shard that holds the group.
    pub fn in_group(mut self, group: &str) -> Self {
        self.group = Some(group.to_string());
        self
    }

    /// The group the item belongs to: its own id unless set.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref().or(self.id.as_deref())
    }
}

pub type SourceItem = Result<Item, BadItem>;

/// Links a caption document to its image.
pub fn link_to_image(item: &mut Item, image_id: &str) {
    item.metadata.insert(
        "image_id".into(),
        serde_json::Value::String(image_id.to_string()),
    );
}

/// Reasons used across readers and stages.
pub mod reason {
    pub const BAD_LINE: &str = "bad_line";
    pub const BAD_ID: &str = "bad_id";
    pub const MISSING_FILE: &str = "missing_file";
    pub const CORRUPT_IMAGE: &str = "corrupt_image";
    pub const EMPTY_CAPTION: &str = "empty_caption";
    pub const DUPLICATE_ID: &str = "duplicate_id";
    pub const ENCODE: &str = "encode";
    pub const VECTOR: &str = "vector";
}
