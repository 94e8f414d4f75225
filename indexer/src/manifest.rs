//! The collection manifest: what a collection's numbers mean.
//!
//! Stored as `lexlip.json` next to the tantivy files and written atomically (temporary file,
//! fsync, rename), so a crash leaves either the old or the new manifest, never half of one.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use lexlip_proto::{DEFAULT_SCALE, TermSpace};
use serde::{Deserialize, Serialize};

use crate::error::{IndexError, Result};

pub const MANIFEST_FILE: &str = "lexlip.json";
pub const FORMAT_VERSION: u32 = 1;

/// Settings chosen when a collection is created; fixed afterwards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionSettings {
    /// Quantization scale: `impact = floor(scale · w)` (LexLIP: 100).
    #[serde(default = "default_scale")]
    pub scale: f32,
    /// Keep only the K largest weights of each document (LexLIP Table 2); `None` keeps all.
    #[serde(default)]
    pub top_k_terms: Option<usize>,
    /// Dimension of the dense fallback vectors; `None` when dense search is off.
    #[serde(default)]
    pub dense_dim: Option<usize>,
    /// Store a small JPEG thumbnail with each image document (default on). Written to the
    /// manifest only when off, so manifests of collections with the default stay as before.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub thumbnails: bool,
    /// Keep each segment's forward index in a file beside its postings (default on), so a
    /// segment's first search reads it instead of building it from the postings. Taken at
    /// creation only (tantivy fixes an index's files then): [`crate::collection::Collection::has_forward_files`]
    /// says what a collection has. Written to the manifest only when off.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub forward_files: bool,
}

fn default_scale() -> f32 {
    DEFAULT_SCALE
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Default for CollectionSettings {
    fn default() -> Self {
        Self {
            scale: DEFAULT_SCALE,
            top_k_terms: None,
            dense_dim: None,
            thumbnails: true,
            forward_files: true,
        }
    }
}

impl CollectionSettings {
    pub fn validate(&self) -> Result<()> {
        if !self.scale.is_finite() || self.scale <= 0.0 {
            return Err(IndexError::InvalidSetting(format!(
                "scale must be a finite number > 0, got {}",
                self.scale
            )));
        }
        if self.top_k_terms == Some(0) {
            return Err(IndexError::InvalidSetting(
                "top_k_terms must be at least 1".into(),
            ));
        }
        if self.dense_dim == Some(0) {
            return Err(IndexError::InvalidSetting(
                "dense_dim must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Everything recorded about a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    /// The vocabulary the impacts refer to.
    pub term_space: TermSpace,
    #[serde(flatten)]
    pub settings: CollectionSettings,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
}

impl Manifest {
    pub fn new(term_space: TermSpace, settings: CollectionSettings) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            term_space,
            settings,
            created_at: unix_secs(),
        }
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(MANIFEST_FILE)
    }

    pub fn read(dir: &Path) -> Result<Self> {
        let path = Self::path(dir);
        let text = fs::read_to_string(&path).map_err(|e| IndexError::NotACollection {
            path: dir.to_path_buf(),
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| IndexError::NotACollection {
                path: dir.to_path_buf(),
                reason: format!("{} is not a valid manifest: {e}", path.display()),
            })?;
        if manifest.format_version != FORMAT_VERSION {
            return Err(IndexError::UnsupportedFormat {
                path,
                found: manifest.format_version,
                supported: FORMAT_VERSION,
            });
        }
        Ok(manifest)
    }

    /// Atomic write: temp file, fsync, rename, fsync of the directory.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = Self::path(dir);
        let tmp = dir.join(format!(".{MANIFEST_FILE}.tmp"));
        let json = serde_json::to_vec_pretty(self).map_err(|e| IndexError::io(&path, e.into()))?;
        let mut f = fs::File::create(&tmp).map_err(|e| IndexError::io(&tmp, e))?;
        f.write_all(&json).map_err(|e| IndexError::io(&tmp, e))?;
        f.sync_all().map_err(|e| IndexError::io(&tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| IndexError::io(&path, e))?;
        sync_dir(dir);
        Ok(())
    }
}

/// Seconds since the Unix epoch (what manifests and snapshot archives record).
pub(crate) fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Syncs a directory, so that a rename into it survives a crash (best effort: some file
/// systems cannot open a directory for it).
pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}
