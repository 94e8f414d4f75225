//! The `image` crate's Catmull-Rom resize (`imageops::resize(…, FilterType::CatmullRom)`, what
//! lexlip's own models were trained with), bit for bit, at the cost of the pixels a crop keeps.
//!
//! `image` resizes in two separable passes, rows first: each kept output row is a weighted sum
//! of input rows in `f32` (kept unrounded), then each output pixel a weighted sum of that row's
//! columns, clamped to 0..=255 and rounded. It computes every pixel of the resized image, through
//! a generic pixel type with a fourth channel; the crop then throws most of a wide photo away.
//! Here the same sums run in the same order over plain RGB rows, for the kept rows and columns
//! only: a window depends on its output position alone, so the kept pixels are unchanged, and
//! an index of small pictures spends its decoding time on decoding.

use std::ops::Range;

use image::RgbImage;

/// The Catmull-Rom kernel reaches 2 input pixels either side (before stretching).
const SUPPORT: f32 = 2.0;

/// `image::imageops::crop_imm(&resize(rgb, width, height, CatmullRom), cols.start, rows.start,
/// …)`, without computing the pixels the crop drops. `cols` and `rows` lie within `width ×
/// height`; an empty input gives black pixels (as `image` does).
pub fn resize_crop(
    rgb: &RgbImage,
    (width, height): (u32, u32),
    cols: Range<u32>,
    rows: Range<u32>,
) -> RgbImage {
    let (w, h) = rgb.dimensions();
    let (out_w, out_h) = (cols.len() as u32, rows.len() as u32);
    if w == 0 || h == 0 {
        return RgbImage::new(out_w, out_h);
    }
    if (width, height) == (w, h) {
        return image::imageops::crop_imm(rgb, cols.start, rows.start, out_w, out_h).to_image();
    }
    let across: Vec<Window> = cols.map(|x| Window::new(x, w, width)).collect();
    let down: Vec<Window> = rows.map(|y| Window::new(y, h, height)).collect();
    // Only the input columns some kept output column reads need the first pass.
    let span = match (across.first(), across.last()) {
        (Some(a), Some(b)) => a.left..b.left + b.weights.len() as u32,
        _ => 0..0,
    };
    let stride = 3 * span.len();
    let n_rows = down.len();
    let src = rgb.as_raw();
    let row_bytes = 3 * w as usize;
    // First pass, a row at a time (vectorised along the row), stored column by column so that
    // the second pass is vectorised along the column.
    let mut line = vec![0f32; stride];
    let mut columns = vec![0f32; stride * n_rows];
    for (y, window) in down.iter().enumerate() {
        line.fill(0.0);
        for (i, &weight) in window.weights.iter().enumerate() {
            let start = (window.left as usize + i) * row_bytes + 3 * span.start as usize;
            for (acc, &p) in line.iter_mut().zip(&src[start..start + stride]) {
                *acc += f32::from(p) * weight;
            }
        }
        for (k, &v) in line.iter().enumerate() {
            columns[k * n_rows + y] = v;
        }
    }
    let mut data = vec![0u8; 3 * (out_w * out_h) as usize];
    let mut acc = vec![0f32; n_rows];
    for (x, window) in across.iter().enumerate() {
        let first = 3 * (window.left - span.start) as usize;
        for c in 0..3 {
            acc.fill(0.0);
            for (i, &weight) in window.weights.iter().enumerate() {
                let k = first + 3 * i + c;
                for (a, &v) in acc.iter_mut().zip(&columns[k * n_rows..(k + 1) * n_rows]) {
                    *a += v * weight;
                }
            }
            for (y, &a) in acc.iter().enumerate() {
                data[3 * (y * out_w as usize + x) + c] = a.clamp(0.0, 255.0).round() as u8;
            }
        }
    }
    RgbImage::from_raw(out_w, out_h, data).unwrap_or_else(|| RgbImage::new(out_w, out_h))
}

/// The input pixels one output position reads, and their normalised weights, as `image`
/// computes them (`f32` throughout, in its order).
struct Window {
    left: u32,
    weights: Vec<f32>,
}

impl Window {
    /// Output position `out` of `new_len` from an input of `len` pixels.
    fn new(out: u32, len: u32, new_len: u32) -> Self {
        let ratio = len as f32 / new_len as f32;
        let stretch = if ratio < 1.0 { 1.0 } else { ratio };
        let support = SUPPORT * stretch;
        let centre = (out as f32 + 0.5) * ratio;
        let left = ((centre - support).floor() as i64).clamp(0, i64::from(len) - 1);
        let right = ((centre + support).ceil() as i64).clamp(left + 1, i64::from(len));
        let centre = centre - 0.5;
        let mut weights: Vec<f32> = (left..right)
            .map(|i| catmull_rom((i as f32 - centre) / stretch))
            .collect();
        let mut sum = 0.0;
        for w in &weights {
            sum += w;
        }
        for w in &mut weights {
            *w /= sum;
        }
        Self {
            left: left as u32,
            weights,
        }
    }
}

/// Mitchell-Netravali's cubic with B = 0, C = 1/2, its coefficients as `image` evaluates them.
fn catmull_rom(x: f32) -> f32 {
    let a = x.abs();
    let k = if a < 1.0 {
        9.0 * a.powi(3) + -15.0 * a.powi(2) + 6.0
    } else if a < 2.0 {
        -3.0 * a.powi(3) + 15.0 * a.powi(2) + -24.0 * a + 12.0
    } else {
        0.0
    };
    k / 6.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::imageops::FilterType;
    use proptest::prelude::*;

    fn picture(w: u32, h: u32, seed: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            let v = (x * 31 + y * 17 + seed).wrapping_mul(2_654_435_761) >> 8;
            // Hard edges and flat runs both: the kernel's negative lobes overshoot on edges.
            image::Rgb([
                (v & 0xff) as u8,
                ((v >> 8) & 0xff) as u8,
                if x % 3 == 0 { 255 } else { 0 },
            ])
        })
    }

    proptest! {
        /// Every kept pixel equals the `image` crate's resize followed by the crop, shrinking and
        /// enlarging, square and not.
        #[test]
        fn equals_image_resize_then_crop(
            (w, h) in (1u32..48, 1u32..48),
            (nw, nh) in (1u32..60, 1u32..60),
            crop in (0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.0),
            seed in 0u32..1000,
        ) {
            let rgb = picture(w, h, seed);
            let cut = |a: f64, b: f64, n: u32| {
                let (lo, hi) = ((a.min(b) * n as f64) as u32, (a.max(b) * n as f64) as u32);
                lo.min(n - 1)..(hi + 1).min(n).max(lo.min(n - 1) + 1)
            };
            let cols = cut(crop.0, crop.1, nw);
            let rows = cut(crop.2, crop.3, nh);
            let whole = image::imageops::resize(&rgb, nw, nh, FilterType::CatmullRom);
            let expected = image::imageops::crop_imm(
                &whole, cols.start, rows.start, cols.len() as u32, rows.len() as u32,
            ).to_image();
            prop_assert_eq!(resize_crop(&rgb, (nw, nh), cols, rows), expected);
        }
    }

    #[test]
    fn a_photo_to_a_model_size() {
        let rgb = picture(640, 480, 7);
        let whole = image::imageops::resize(&rgb, 298, 224, FilterType::CatmullRom);
        let expected = image::imageops::crop_imm(&whole, 37, 0, 224, 224).to_image();
        assert_eq!(resize_crop(&rgb, (298, 224), 37..261, 0..224), expected);
    }
}
