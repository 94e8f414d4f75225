//! A benchmark corpus of any size from the registry images: each picture places 1-4 source
//! images (emoji, clip art), scaled, turned and sometimes tinted, on a plain background, and its
//! caption names what it shows ("pizza, 2 × red heart and rocket"). LexLIP's Table 2 searches
//! 1,000 test images among a million distractors; this makes the million from our own data.
//!
//! ```text
//! sources.jsonl (label, image) ──▶ picture i = f(seed, i) ──▶ OUT/00000.tar, 00001.tar, …
//!                                                             KEY.jpg  KEY.txt  KEY.json
//! ```
//!
//! Every picture depends only on the seed, its number and the sources, so the same arguments
//! give byte-identical shards (tar headers carry no time or owner), and shards can be made in
//! parallel or resumed one at a time.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::{Rgba, RgbaImage, imageops};
use rayon::prelude::*;
use serde::Serialize;

use lexlip_corpus::sources::webdataset::append_member;
use lexlip_index::synth::Rng;
use lexlip_pipeline::{PipelineError, Result};

/// One source picture and the words that name it.
#[derive(Debug, Clone)]
pub struct Source {
    pub label: String,
    pub image: RgbaImage,
}

/// What to make.
#[derive(Debug, Clone)]
pub struct ComposeOptions {
    pub images: u64,
    pub seed: u64,
    /// Side of the square pictures, pixels.
    pub size: u32,
    pub per_shard: u64,
    /// JPEG quality (1-100).
    pub quality: u8,
}

impl Default for ComposeOptions {
    fn default() -> Self {
        Self {
            images: 1_000_000,
            seed: 0,
            size: 224,
            per_shard: 10_000,
            quality: 85,
        }
    }
}

/// One placed source: which, and how often it appears.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placed {
    pub label: String,
    pub source: usize,
    pub count: usize,
}

/// A composed picture: its encoded JPEG, caption and what it holds.
#[derive(Debug, Clone)]
pub struct Picture {
    pub key: String,
    pub jpeg: Vec<u8>,
    pub caption: String,
    pub placed: Vec<Placed>,
}

/// Reads `image` (relative to the file's folder) and `label` (else the first of `captions`) of
/// every line of a JSONL file such as `scripts/build-emoji-corpus.sh`'s `images.jsonl`; lines
/// whose `split` is given and is not `keep_split` are left out when `keep_split` is set.
pub fn read_sources(path: &Path, keep_split: Option<&str>) -> Result<Vec<Source>> {
    let root = path.parent().unwrap_or(Path::new("."));
    let text = std::fs::read_to_string(path).map_err(|e| PipelineError::io(path, e))?;
    let mut out = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |m: String| PipelineError::Input(format!("{}:{}: {m}", path.display(), n + 1));
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        if let (Some(keep), Some(split)) = (keep_split, v["split"].as_str())
            && keep != split
        {
            continue;
        }
        let label = v["label"].as_str().or(v["captions"][0].as_str());
        let (Some(label), Some(rel)) = (label, v["image"].as_str()) else {
            return Err(bad(
                "each line needs \"image\" and \"label\" (or \"captions\")".into(),
            ));
        };
        let file = root.join(rel);
        let decoded = image::open(&file).map_err(|e| bad(format!("{}: {e}", file.display())))?;
        let mut image = decoded.to_rgba8();
        if !decoded.color().has_alpha() {
            clear_white_surround(&mut image);
        }
        out.push(Source {
            label: label.to_string(),
            image,
        });
    }
    if out.is_empty() {
        return Err(PipelineError::Input(format!(
            "{}: no source images",
            path.display()
        )));
    }
    Ok(out)
}

/// Makes the white around a picture drawn on white transparent (the emoji and clip art of the
/// corpus are stored on white): near-white pixels connected to the border, so white inside the
/// drawing (eyes, highlights) stays.
pub fn clear_white_surround(image: &mut RgbaImage) {
    let (w, h) = image.dimensions();
    let white = |p: &Rgba<u8>| p[0] >= 245 && p[1] >= 245 && p[2] >= 245;
    let mut stack: Vec<(u32, u32)> = Vec::new();
    for x in 0..w {
        stack.extend([(x, 0), (x, h.saturating_sub(1))]);
    }
    for y in 0..h {
        stack.extend([(0, y), (w.saturating_sub(1), y)]);
    }
    while let Some((x, y)) = stack.pop() {
        let p = image.get_pixel_mut(x, y);
        if p[3] == 0 || !white(p) {
            continue;
        }
        p[3] = 0;
        if x > 0 {
            stack.push((x - 1, y));
        }
        if y > 0 {
            stack.push((x, y - 1));
        }
        if x + 1 < w {
            stack.push((x + 1, y));
        }
        if y + 1 < h {
            stack.push((x, y + 1));
        }
    }
}

/// Picture `i`: 1-4 placements of sources (a source may repeat) in the cells of a grid, each
/// scaled to 45-90 % of its cell, turned by a multiple of 90° or mirrored, and tinted one time in
/// four, on a light background.
pub fn compose(sources: &[Source], opts: &ComposeOptions, i: u64) -> Result<Picture> {
    // Each picture's stream starts from a hash of (seed, i): neighbouring pictures are unrelated.
    let mut rng = Rng::new(Rng::new(opts.seed).next_u64() ^ Rng::new(i).next_u64());
    let n = rng.range(1, 4);
    let mut chosen: Vec<usize> = Vec::with_capacity(n);
    for _ in 0..n {
        // One time in three, repeat a source already placed: "2 × red heart".
        let source = match chosen.first() {
            Some(&first) if rng.range(0, 2) == 0 => first,
            _ => rng.range(0, sources.len() - 1),
        };
        chosen.push(source);
    }
    let size = opts.size;
    let light = |rng: &mut Rng| rng.range(190, 255) as u8;
    let background = Rgba([light(&mut rng), light(&mut rng), light(&mut rng), 255]);
    let mut canvas = RgbaImage::from_pixel(size, size, background);
    let side = if n == 1 { 1 } else { 2 };
    let cell = size / side;
    let mut cells: Vec<u32> = (0..side * side).collect();
    for &s in &chosen {
        let slot = cells.swap_remove(rng.range(0, cells.len() - 1));
        let scale = 0.45 + 0.45 * rng.unit();
        let target = ((f64::from(cell) * scale) as u32).max(4);
        let src = &sources[s].image;
        let (w, h) = src.dimensions();
        let fit = f64::from(target) / f64::from(w.max(h).max(1));
        let (tw, th) = (
            ((f64::from(w) * fit) as u32).max(1),
            ((f64::from(h) * fit) as u32).max(1),
        );
        let mut piece = imageops::resize(src, tw, th, imageops::FilterType::Triangle);
        piece = match rng.range(0, 4) {
            0 => imageops::rotate90(&piece),
            1 => imageops::rotate180(&piece),
            2 => imageops::rotate270(&piece),
            3 => imageops::flip_horizontal(&piece),
            _ => piece,
        };
        if rng.range(0, 3) == 0 {
            let tint = [rng.unit(), rng.unit(), rng.unit()].map(|t| 0.5 + 0.5 * t);
            for p in piece.pixels_mut() {
                for c in 0..3 {
                    p[c] = (f64::from(p[c]) * tint[c]) as u8;
                }
            }
        }
        let (pw, ph) = piece.dimensions();
        let (cx, cy) = ((slot % side) * cell, (slot / side) * cell);
        let x = cx + rng.range(0, cell.saturating_sub(pw) as usize) as u32;
        let y = cy + rng.range(0, cell.saturating_sub(ph) as usize) as u32;
        imageops::overlay(&mut canvas, &piece, i64::from(x), i64::from(y));
    }
    let placed = count_placed(sources, &chosen);
    let caption = caption_of(&placed);
    let mut jpeg = Vec::new();
    let rgb = image::DynamicImage::ImageRgba8(canvas).to_rgb8();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut Cursor::new(&mut jpeg), opts.quality)
        .encode_image(&rgb)
        .map_err(|e| PipelineError::Input(format!("encoding picture {i}: {e}")))?;
    Ok(Picture {
        key: format!("{i:09}"),
        jpeg,
        caption,
        placed,
    })
}

/// The distinct sources in order of first placement, with their counts.
fn count_placed(sources: &[Source], chosen: &[usize]) -> Vec<Placed> {
    let mut out: Vec<Placed> = Vec::new();
    for &s in chosen {
        match out.iter_mut().find(|p| p.source == s) {
            Some(p) => p.count += 1,
            None => out.push(Placed {
                label: sources[s].label.clone(),
                source: s,
                count: 1,
            }),
        }
    }
    out
}

/// "pizza", "pizza and rocket", "pizza, 2 × red heart and rocket".
pub fn caption_of(placed: &[Placed]) -> String {
    let parts: Vec<String> = placed
        .iter()
        .map(|p| match p.count {
            1 => p.label.clone(),
            c => format!("{c} × {}", p.label),
        })
        .collect();
    match parts.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// Writes shards `OUT/00000.tar`, … of `opts.images` pictures; a shard that exists is kept (it
/// is complete: shards are renamed into place), so an interrupted run resumes. Returns the shard
/// paths. `progress(done, total)` reports pictures.
pub fn write_shards(
    sources: &[Source],
    opts: &ComposeOptions,
    out: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<PathBuf>> {
    if opts.per_shard == 0 || opts.size < 8 || !(1..=100).contains(&opts.quality) {
        return Err(PipelineError::Input(
            "per-shard must be positive, size at least 8 and quality 1-100".into(),
        ));
    }
    std::fs::create_dir_all(out).map_err(|e| PipelineError::io(out, e))?;
    let mut shards = Vec::new();
    let mut start = 0;
    while start < opts.images {
        let end = (start + opts.per_shard).min(opts.images);
        let path = out.join(format!("{:05}.tar", start / opts.per_shard));
        // A shard appears whole (written aside, then renamed) or not at all.
        if !path.exists() {
            let pictures = (start..end)
                .into_par_iter()
                .map(|i| compose(sources, opts, i))
                .collect::<Result<Vec<_>>>()?;
            write_tar(&path, &pictures)?;
        }
        shards.push(path);
        progress(end, opts.images);
        start = end;
    }
    Ok(shards)
}

/// One shard, written to a temporary name and renamed when complete.
fn write_tar(path: &Path, pictures: &[Picture]) -> Result<()> {
    let tmp = path.with_extension("tar.tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| PipelineError::io(&tmp, e))?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
    let io = |e: std::io::Error| PipelineError::io(path, e);
    for p in pictures {
        let json = serde_json::json!({"objects": p.placed}).to_string();
        for (ext, data) in [
            ("jpg", p.jpeg.as_slice()),
            ("txt", p.caption.as_bytes()),
            ("json", json.as_bytes()),
        ] {
            append_member(&mut tar, &format!("{}.{ext}", p.key), data).map_err(io)?;
        }
    }
    tar.into_inner()
        .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// White connected to the border goes; white enclosed by the drawing stays.
    #[test]
    fn only_the_surrounding_white_is_cleared() {
        let mut img = RgbaImage::from_pixel(7, 7, Rgba([255, 255, 255, 255]));
        for x in 1..6 {
            for y in 1..6 {
                if x == 1 || x == 5 || y == 1 || y == 5 {
                    img.put_pixel(x, y, Rgba([200, 0, 0, 255]));
                }
            }
        }
        clear_white_surround(&mut img);
        assert_eq!(img.get_pixel(0, 0)[3], 0);
        assert_eq!(img.get_pixel(1, 1)[3], 255);
        assert_eq!(img.get_pixel(3, 3), &Rgba([255, 255, 255, 255]));
    }

    #[test]
    fn captions_count_and_join() {
        let p = |label: &str, count| Placed {
            label: label.into(),
            source: 0,
            count,
        };
        assert_eq!(caption_of(&[p("pizza", 1)]), "pizza");
        assert_eq!(
            caption_of(&[p("pizza", 1), p("rocket", 1)]),
            "pizza and rocket"
        );
        assert_eq!(
            caption_of(&[p("pizza", 1), p("red heart", 2), p("rocket", 1)]),
            "pizza, 2 × red heart and rocket"
        );
    }
}
