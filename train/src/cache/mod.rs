//! The frozen encoders' embeddings, computed once and kept on disk, so training the lexicon
//! heads (`--objective heads`) or the adapter (`--objective adapter`) touches no image again.
//! [`rows`] fills a cache from a corpus; [`views`] caches augmented views of its pictures.
//!
//! ```text
//! cache.json             {"format": 1, "backbone": "<sha256>", "corpus": "<sha256>", "dim": 256,
//!                         "shard_rows": 4096, "sections": {"images": 11724, "texts": 39887, …}}
//! images-00000.f32       rows of `dim` little-endian f32, `shard_rows` per shard (the last fewer)
//! images-00000.f32.sha256
//! texts-00000.f32 …
//! ```
//!
//! Each shard is written to a temporary file and renamed, then its SHA-256 beside it: a
//! killed build leaves only whole shards, and the next start encodes the missing ones (the
//! encoder is deterministic, so the resumed cache has the bytes an uninterrupted build
//! writes). Opening checks every shard's size and hash, and the backbone and corpus
//! fingerprints, and refuses a cache made by another backbone or from another corpus.
//! Shards are memory-mapped: a batch reads its rows from the page cache.

pub mod rows;
pub(crate) mod views;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use memmap2::Mmap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::checkpoint::write_atomic;
use crate::error::{Result, TrainError};

/// Rows per shard.
pub const SHARD_ROWS: usize = 4096;
const FORMAT: u32 = 1;

/// `cache.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheMeta {
    pub format: u32,
    /// SHA-256 of the backbone's files ([`fingerprint_dir`]).
    pub backbone: String,
    /// The backbone directory the cache was built from (for messages).
    pub backbone_path: PathBuf,
    /// What the rows are of (the corpus and the vocabulary).
    pub corpus: String,
    pub dim: usize,
    pub shard_rows: usize,
    /// Rows per section.
    pub sections: BTreeMap<String, usize>,
}

/// An opened cache: every section's shards, memory-mapped.
pub struct EmbeddingCache {
    pub meta: CacheMeta,
    sections: BTreeMap<String, Vec<Mmap>>,
}

/// A run's state beside the model it wrote: not part of the model.
const RUN_STATE: [&str; 2] = ["checkpoints", "cache"];

/// SHA-256 over a model directory's files, those of its subdirectories too (relative names and
/// contents; a flat directory's as before subdirectories counted), so a cache knows the
/// backbone that made it: a fused model keeps its weights in subdirectories. A run's
/// checkpoints and caches are left out.
pub fn fingerprint_dir(dir: &Path) -> Result<String> {
    fn files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir).map_err(|e| TrainError::io(dir, e))? {
            let path = entry.map_err(|e| TrainError::io(dir, e))?.path();
            let state = path
                .file_name()
                .is_some_and(|n| RUN_STATE.iter().any(|s| n == *s));
            if state {
                continue;
            }
            if path.is_dir() {
                files(&path, out)?;
            } else if path.is_file() {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut names = Vec::new();
    files(dir, &mut names)?;
    names.sort();
    let mut h = Sha256::new();
    for p in names {
        let mut f = File::open(&p).map_err(|e| TrainError::io(&p, e))?;
        let name = p.strip_prefix(dir).unwrap_or(&p);
        h.update(name.as_os_str().as_encoded_bytes());
        h.update([0]);
        std::io::copy(&mut f, &mut h).map_err(|e| TrainError::io(&p, e))?;
    }
    Ok(format!("{:x}", h.finalize()))
}

fn shard_path(dir: &Path, section: &str, i: usize) -> PathBuf {
    dir.join(format!("{section}-{i:05}.f32"))
}

fn hash_path(shard: &Path) -> PathBuf {
    let mut s = shard.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> TrainError {
    TrainError::invalid(format!(
        "{}: corrupt embedding cache shard ({why}); remove it and start again to encode it anew",
        path.display()
    ))
}

/// What a section holds and how its rows are made: `encode(start, end)` gives rows
/// `start..end`, `dim` values each.
pub struct Section<'a> {
    pub name: &'static str,
    pub rows: usize,
    #[allow(clippy::type_complexity)]
    pub encode: Box<dyn FnMut(usize, usize) -> Result<Vec<f32>> + 'a>,
}

impl EmbeddingCache {
    /// Opens the cache in `dir`, first encoding what it lacks. `meta` says what it must hold;
    /// a `cache.json` there that says otherwise (another backbone, corpus or dimension) is
    /// refused, nothing written. `progress(done, total)` counts rows.
    pub fn build(
        dir: &Path,
        meta: CacheMeta,
        mut sections: Vec<Section<'_>>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Self> {
        let meta_path = dir.join("cache.json");
        if meta_path.is_file() {
            read_meta(&meta_path, &meta)?;
        } else {
            std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
            let mut text = serde_json::to_string_pretty(&meta)
                .map_err(|e| TrainError::invalid(e.to_string()))?;
            text.push('\n');
            write_atomic(&meta_path, text.as_bytes())?;
        }
        let total: usize = sections.iter().map(|s| s.rows).sum();
        let mut done = 0usize;
        for section in &mut sections {
            for (i, start) in (0..section.rows).step_by(meta.shard_rows).enumerate() {
                let end = (start + meta.shard_rows).min(section.rows);
                let path = shard_path(dir, section.name, i);
                if !(path.is_file() && hash_path(&path).is_file()) {
                    let rows = (section.encode)(start, end)?;
                    if rows.len() != (end - start) * meta.dim {
                        return Err(TrainError::invalid(format!(
                            "the backbone gave {} values for {} rows of {} dims",
                            rows.len(),
                            end - start,
                            meta.dim
                        )));
                    }
                    let bytes: Vec<u8> = rows.iter().flat_map(|x| x.to_le_bytes()).collect();
                    write_atomic(&path, &bytes)?;
                    let digest = format!("{:x}\n", Sha256::digest(&bytes));
                    write_atomic(&hash_path(&path), digest.as_bytes())?;
                }
                done += end - start;
                progress(done as u64, total as u64);
            }
        }
        Self::open(dir, &meta)
    }

    /// Opens a complete cache holding what `want` says.
    pub fn open(dir: &Path, want: &CacheMeta) -> Result<Self> {
        let meta = read_meta(&dir.join("cache.json"), want)?;
        let mut sections = BTreeMap::new();
        for (name, &rows) in &meta.sections {
            let mut maps = Vec::new();
            for (i, start) in (0..rows).step_by(meta.shard_rows).enumerate() {
                let n = (start + meta.shard_rows).min(rows) - start;
                let path = shard_path(dir, name, i);
                let file = File::open(&path).map_err(|e| TrainError::io(&path, e))?;
                // SAFETY: the shard is only read; the cache's files are written once (atomic
                // renames) and never changed in place.
                let map = unsafe { Mmap::map(&file) }.map_err(|e| TrainError::io(&path, e))?;
                if map.len() != n * meta.dim * 4 {
                    return Err(corrupt(
                        &path,
                        format!("{} bytes, expected {}", map.len(), n * meta.dim * 4),
                    ));
                }
                let want_hash = std::fs::read_to_string(hash_path(&path))
                    .map_err(|e| TrainError::io(hash_path(&path), e))?;
                if format!("{:x}", Sha256::digest(&map[..])) != want_hash.trim() {
                    return Err(corrupt(&path, "its SHA-256 differs from the one written"));
                }
                maps.push(map);
            }
            sections.insert(name.clone(), maps);
        }
        Ok(Self { meta, sections })
    }

    /// Rows `indices` of `section` as a `(len, dim)` f32 tensor.
    pub fn rows(&self, section: &str, indices: &[usize], device: &Device) -> Result<Tensor> {
        let maps = self
            .sections
            .get(section)
            .ok_or_else(|| TrainError::invalid(format!("the cache has no {section:?} section")))?;
        let (dim, per) = (self.meta.dim, self.meta.shard_rows);
        let mut out = Vec::with_capacity(indices.len() * dim);
        for &i in indices {
            let map = maps.get(i / per).ok_or_else(|| {
                TrainError::invalid(format!("row {i} is past the {section:?} section"))
            })?;
            let at = (i % per) * dim * 4;
            let bytes = map.get(at..at + dim * 4).ok_or_else(|| {
                TrainError::invalid(format!("row {i} is past the {section:?} section"))
            })?;
            out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        Ok(Tensor::from_vec(out, (indices.len(), dim), device)?)
    }

    /// Rows in `section`.
    pub fn len(&self, section: &str) -> usize {
        self.meta.sections.get(section).copied().unwrap_or(0)
    }
}

/// The `cache.json` at `path`, refused unless it holds what `want` says.
fn read_meta(path: &Path, want: &CacheMeta) -> Result<CacheMeta> {
    let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
    let found: CacheMeta = serde_json::from_str(&text).map_err(|e| {
        TrainError::invalid(format!("{}: not an embedding cache: {e}", path.display()))
    })?;
    check_same(path, &found, want)?;
    Ok(found)
}

fn check_same(path: &Path, found: &CacheMeta, want: &CacheMeta) -> Result<()> {
    let refuse = |what: &str| {
        Err(TrainError::invalid(format!(
            "{}: this embedding cache was made {what}; give another --cache directory or \
             remove this one",
            path.display()
        )))
    };
    if found.format != FORMAT {
        return refuse(&format!(
            "in format {} (this lexlip reads {FORMAT})",
            found.format
        ));
    }
    if found.backbone != want.backbone {
        return refuse(&format!(
            "by another backbone ({}, not {})",
            found.backbone_path.display(),
            want.backbone_path.display()
        ));
    }
    if found.corpus != want.corpus || found.sections != want.sections {
        return refuse("from another corpus or vocabulary");
    }
    if found.dim != want.dim || found.shard_rows != want.shard_rows {
        return refuse(&format!(
            "with {} dims in shards of {}",
            found.dim, found.shard_rows
        ));
    }
    Ok(())
}

impl CacheMeta {
    pub fn new(
        backbone: &Path,
        corpus: String,
        dim: usize,
        sections: &[(&str, usize)],
    ) -> Result<Self> {
        Ok(Self {
            format: FORMAT,
            backbone: fingerprint_dir(backbone)?,
            backbone_path: backbone.to_path_buf(),
            corpus,
            dim,
            shard_rows: SHARD_ROWS,
            sections: sections
                .iter()
                .map(|(n, r)| ((*n).to_string(), *r))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fused model's weights live in subdirectories: a change there is another backbone. A
    /// run's checkpoints and caches beside the model are not part of it.
    #[test]
    fn a_fingerprint_covers_subdirectories_but_not_run_state() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.join("adapter")).unwrap();
        std::fs::write(dir.join("adapter/model.safetensors"), [1u8, 2]).unwrap();
        let before = fingerprint_dir(dir).unwrap();
        for state in RUN_STATE {
            std::fs::create_dir_all(dir.join(state)).unwrap();
            std::fs::write(dir.join(state).join("x"), [9u8]).unwrap();
        }
        assert_eq!(fingerprint_dir(dir).unwrap(), before);
        std::fs::write(dir.join("adapter/model.safetensors"), [1u8, 3]).unwrap();
        assert_ne!(fingerprint_dir(dir).unwrap(), before);
    }
}
