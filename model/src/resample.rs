//! Resampling as Pillow does it, bit for bit: published PyTorch image models were trained on
//! pixels from PIL's `Image.resize(…, BICUBIC)` (directly, or through torchvision's `Resize` of a
//! PIL image), and a model's vectors here are the ones its authors measured only if its pixels
//! are the same.
//!
//! The algorithm is Pillow's 8-bit resampling (libImaging/Resample.c of Pillow 13), written anew:
//! separable passes, each output pixel a window of input pixels weighted by Keys' bicubic kernel
//! (a = -0.5) stretched by the scale when shrinking (antialiasing), weights normalised to sum 1
//! in `f64` and then rounded to 22-bit fixed point; each pass rounds and clips to `u8`. Because
//! of that intermediate rounding the order of the passes matters, and Pillow's rule is kept.

use std::ops::Range;

use image::RgbImage;

/// Fixed-point precision of Pillow's 8-bit passes: 32 bits less 8 for the value and 2 for the
/// overshoot of the kernel's negative lobes.
const PRECISION_BITS: u32 = 22;
/// The rounding term every accumulator starts with (one half in fixed point).
const HALF: i32 = 1 << (PRECISION_BITS - 1);
/// The bicubic kernel is non-zero on (-2, 2).
const SUPPORT: f64 = 2.0;

/// `rgb` resized to `width × height` as Pillow's `Image.resize((width, height), BICUBIC)` of an
/// RGB image. An empty input gives black pixels (Pillow refuses it; lexlip never passes one).
pub fn pillow_bicubic(rgb: &RgbImage, width: u32, height: u32) -> RgbImage {
    if rgb.dimensions() == (width, height) {
        return rgb.clone();
    }
    resample_region(rgb, (width, height), 0..width, 0..height)
}

/// torchvision's `Compose([Resize(size, BICUBIC), CenterCrop(size)])` of a PIL RGB image: the
/// shorter side resized to `size` and the longer to `int(size * long / short)`, then the middle
/// `size × size` cut out at `int(round((long' - size) / 2.0))` (Python rounds halves to even).
///
/// `Resize` always brings the shorter side to exactly `size` (small images are enlarged), so the
/// crop never exceeds the image and `CenterCrop`'s zero padding never applies. Only the pixels
/// the crop keeps are computed: a window depends only on its output position, so they are the
/// ones of the whole resized image, and an extreme aspect ratio costs nothing extra. An empty
/// input gives black pixels.
pub fn resize_and_crop(rgb: &RgbImage, size: u32) -> RgbImage {
    let (w, h) = rgb.dimensions();
    if w == 0 || h == 0 || size == 0 {
        return RgbImage::new(size, size);
    }
    let (nw, nh) = shorter_side_to(w, h, size);
    let (left, top) = (centre_offset(nw, size), centre_offset(nh, size));
    resample_region(rgb, (nw, nh), left..left + size, top..top + size)
}

/// torchvision's `Resize(size)` output size (`_compute_resized_output_size`): the shorter side
/// `size`, the longer `floor(size · long / short)`, which the integer division gives exactly.
fn shorter_side_to(w: u32, h: u32, size: u32) -> (u32, u32) {
    let long = |long: u32, short: u32| {
        let n = u64::from(size) * u64::from(long) / u64::from(short);
        u32::try_from(n).unwrap_or(u32::MAX)
    };
    if w <= h {
        (size, long(h, w))
    } else {
        (long(w, h), size)
    }
}

/// `int(round((len - size) / 2.0))` as torchvision's `center_crop` computes it: Python's `round`
/// takes a half to the even neighbour, so an odd margin of 2k + 1 starts the crop at k or k + 1,
/// whichever is even.
fn centre_offset(len: u32, size: u32) -> u32 {
    let margin = len.saturating_sub(size);
    let half = margin / 2;
    if margin % 2 == 1 && half % 2 == 1 {
        half + 1
    } else {
        half
    }
}

/// Pixels `cols × rows` of `rgb` resized to `out` (Pillow's bicubic), computed without the rest.
fn resample_region(
    rgb: &RgbImage,
    out: (u32, u32),
    cols: Range<u32>,
    rows: Range<u32>,
) -> RgbImage {
    let (in_w, in_h) = rgb.dimensions();
    let (width, height) = (cols.len() as u32, rows.len() as u32);
    if in_w == 0 || in_h == 0 || width == 0 || height == 0 {
        return RgbImage::new(width, height);
    }
    let across = Axis::new(in_w, out.0);
    let down = Axis::new(in_h, out.1);
    let cols = cols.start as usize..cols.end as usize;
    let rows = rows.start as usize..rows.end as usize;
    // Pillow 13 runs the vertical pass first when the height shrinks by more than twice as many
    // pixels as the width (python-pillow/Pillow#9549), else the horizontal one, as Pillow always
    // did before; tall images can differ by a rounding step between the two. The first pass
    // computes only the rows (or columns) the second one reads.
    let dh = i64::from(in_h) - i64::from(out.1);
    let dw = i64::from(in_w) - i64::from(out.0);
    let (src, in_w) = (rgb.as_raw().as_slice(), in_w as usize);
    let data = if dh > 0 && dh > 2 * dw {
        let used = across.span(&cols);
        let tmp = vertical(src, in_w, used.clone(), &down, rows, 0);
        horizontal(&tmp, used.len(), &across, cols, used.start)
    } else {
        let used = down.span(&rows);
        let band = &src[used.start * in_w * 3..used.end * in_w * 3];
        let tmp = horizontal(band, in_w, &across, cols.clone(), 0);
        vertical(&tmp, cols.len(), 0..cols.len(), &down, rows, used.start)
    };
    RgbImage::from_raw(width, height, data).expect("the passes fill width × height pixels")
}

/// The most weights a pass holds at once (256 KiB): every window of an ordinary resize, and a
/// bound when a sliver of millions of pixels is squashed (each output pixel of an axis shrunk
/// n times weighs about 4n input pixels).
const BLOCK_WEIGHTS: usize = 1 << 16;

/// How one axis is resampled, from `in_size` pixels to `out_size`.
#[derive(Debug, Clone, Copy)]
enum Axis {
    /// The size does not change: Pillow skips the pass; output pixel i is input pixel i (a
    /// single weight of 1 here, which changes nothing).
    Identity,
    /// Pillow's `precompute_coeffs`: the kernel stretched by `filterscale` = max(scale, 1).
    Bicubic {
        in_size: u32,
        scale: f64,
        support: f64,
        inv_filterscale: f64,
        /// The most weights a window can have.
        stride: usize,
    },
}

impl Axis {
    fn new(in_size: u32, out_size: u32) -> Self {
        if in_size == out_size {
            return Self::Identity;
        }
        // Pillow's box is `float`: the input size goes through f32 (exact below 2^24).
        let scale = f64::from(in_size as f32) / f64::from(out_size);
        let filterscale = scale.max(1.0);
        let support = SUPPORT * filterscale;
        Self::Bicubic {
            in_size,
            scale,
            support,
            inv_filterscale: 1.0 / filterscale,
            stride: support.ceil() as usize * 2 + 1,
        }
    }

    fn stride(&self) -> usize {
        match self {
            Self::Identity => 1,
            Self::Bicubic { stride, .. } => *stride,
        }
    }

    /// The windows of the output pixels `outputs`, in blocks of at most [`BLOCK_WEIGHTS`].
    fn blocks(&self, outputs: Range<usize>) -> impl Iterator<Item = Windows> + '_ {
        let per_block = (BLOCK_WEIGHTS / self.stride()).max(1);
        let end = outputs.end;
        outputs
            .step_by(per_block)
            .map(move |start| self.windows(start..(start + per_block).min(end)))
    }

    /// The input pixels the windows of `outputs` read (windows move forward with their output
    /// pixel, so the first and the last tell).
    fn span(&self, outputs: &Range<usize>) -> Range<usize> {
        let first = self.windows(outputs.start..outputs.start + 1);
        let last = self.windows(outputs.end - 1..outputs.end);
        first.first[0]..last.first[0] + last.taps[0]
    }

    /// The windows of the output pixels `outputs`: Pillow's `precompute_coeffs` and
    /// `normalize_coeffs_8bpc`, every step in the same `f64` operations so that the rounded
    /// weights are the same integers.
    fn windows(&self, outputs: Range<usize>) -> Windows {
        let &Self::Bicubic {
            in_size,
            scale,
            support,
            inv_filterscale,
            stride,
        } = self
        else {
            return Windows {
                taps: vec![1; outputs.len()],
                weights: vec![1 << PRECISION_BITS; outputs.len()],
                first: outputs.clone().collect(),
                outputs,
                stride: 1,
            };
        };
        let mut windows = Windows {
            outputs: outputs.clone(),
            first: Vec::with_capacity(outputs.len()),
            taps: Vec::with_capacity(outputs.len()),
            weights: vec![0; outputs.len() * stride],
            stride,
        };
        let mut k = vec![0f64; stride];
        for (xx, out) in outputs.zip(windows.weights.chunks_exact_mut(stride)) {
            let center = (xx as f64 + 0.5) * scale;
            // C's `(int)` truncates toward zero, as `as` does; then clamped to the image.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(i64::from(in_size)) as usize;
            let n = xmax.saturating_sub(xmin).min(stride);
            let mut ww = 0.0;
            for (x, w) in k[..n].iter_mut().enumerate() {
                *w = bicubic(((x + xmin) as f64 - center + 0.5) * inv_filterscale);
                ww += *w;
            }
            for (w, o) in k[..n].iter().zip(out.iter_mut()) {
                let w = if ww == 0.0 { *w } else { *w / ww };
                // Rounded half away from zero, then truncated, as Pillow does.
                let scaled = w * f64::from(1u32 << PRECISION_BITS);
                *o = (if w < 0.0 { scaled - 0.5 } else { scaled + 0.5 }) as i32;
            }
            windows.first.push(xmin);
            windows.taps.push(n);
        }
        windows
    }
}

/// The windows of some output pixels of an axis: for each, the first input pixel it reads and
/// the fixed-point weights of it and the following ones. Computed once a pass, so that the
/// pass itself is integer multiply-adds only.
#[derive(Debug)]
struct Windows {
    /// The output pixels these windows make.
    outputs: Range<usize>,
    /// First input pixel of each output pixel.
    first: Vec<usize>,
    /// Number of weights of each output pixel (at most `stride`).
    taps: Vec<usize>,
    /// `stride` weights per output pixel (those past its `taps` unused).
    weights: Vec<i32>,
    stride: usize,
}

impl Windows {
    /// The first input pixel and the weights of the `i`-th output pixel of the block.
    fn window(&self, i: usize) -> (usize, &[i32]) {
        let at = i * self.stride;
        (self.first[i], &self.weights[at..at + self.taps[i]])
    }
}

/// Keys' cubic convolution kernel with a = -0.5, as Pillow evaluates it.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// A fixed-point sum back to a byte, rounded (the sum started at [`HALF`]) and clipped: the
/// kernel's negative lobes overshoot at edges.
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Each row of `src` (`src_w` RGB pixels) resampled along x to the output pixels `outputs` of
/// `axis`, whose input indices are offset by `base` (the first column `src` holds).
fn horizontal(
    src: &[u8],
    src_w: usize,
    axis: &Axis,
    outputs: Range<usize>,
    base: usize,
) -> Vec<u8> {
    let out_w = outputs.len();
    let rows = src.len() / (src_w * 3);
    let mut out = vec![0u8; rows * out_w * 3];
    for windows in axis.blocks(outputs.clone()) {
        let cols =
            (windows.outputs.start - outputs.start) * 3..(windows.outputs.end - outputs.start) * 3;
        for (row, dst) in src
            .chunks_exact(src_w * 3)
            .zip(out.chunks_exact_mut(out_w * 3))
        {
            for (i, px) in dst[cols.clone()].chunks_exact_mut(3).enumerate() {
                let (first, weights) = windows.window(i);
                let at = (first - base) * 3;
                let taps = &row[at..at + weights.len() * 3];
                let mut acc = [HALF; 3];
                for (p, &w) in taps.chunks_exact(3).zip(weights) {
                    acc[0] += i32::from(p[0]) * w;
                    acc[1] += i32::from(p[1]) * w;
                    acc[2] += i32::from(p[2]) * w;
                }
                px.copy_from_slice(&acc.map(clip8));
            }
        }
    }
    out
}

/// The columns `cols` of `src` (`src_w` RGB pixels a row) resampled along y to the output rows
/// `outputs` of `axis`, whose input indices are offset by `base` (the first row `src` holds).
/// Row by row, so the inner loop runs over contiguous bytes with one weight.
fn vertical(
    src: &[u8],
    src_w: usize,
    cols: Range<usize>,
    axis: &Axis,
    outputs: Range<usize>,
    base: usize,
) -> Vec<u8> {
    let row_len = cols.len() * 3;
    let mut out = Vec::with_capacity(outputs.len() * row_len);
    let mut acc = vec![0i32; row_len];
    for windows in axis.blocks(outputs) {
        for i in 0..windows.outputs.len() {
            let (first, weights) = windows.window(i);
            acc.fill(HALF);
            for (t, &w) in weights.iter().enumerate() {
                let at = ((first - base + t) * src_w + cols.start) * 3;
                for (a, &p) in acc.iter_mut().zip(&src[at..at + row_len]) {
                    *a += i32::from(p) * w;
                }
            }
            out.extend(acc.iter().map(|&a| clip8(a)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A deterministic picture with edges and texture, so that windows overshoot and clip.
    fn pattern(w: u32, h: u32, seed: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            let v = |c: u32| {
                let n = x.wrapping_mul(37) ^ y.wrapping_mul(91) ^ c.wrapping_mul(53) ^ seed;
                (n.wrapping_mul(2_654_435_761) >> 24) as u8
            };
            image::Rgb([v(0), v(1), v(2)])
        })
    }

    #[test]
    fn the_same_size_is_the_identity() {
        let img = pattern(13, 7, 1);
        assert_eq!(pillow_bicubic(&img, 13, 7), img);
        // A crop of an image whose shorter side is already the size only cuts.
        let crop = resize_and_crop(&img, 7);
        assert_eq!(crop, image::imageops::crop_imm(&img, 3, 0, 7, 7).to_image());
    }

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for (n, m) in [(1000, 224), (224, 1000), (3, 7), (7, 3), (451, 384), (2, 1)] {
            let w = Axis::new(n, m).windows(0..m as usize);
            for i in 0..w.outputs.len() {
                let sum: i32 = w.window(i).1.iter().sum();
                assert!(
                    (sum - (1 << PRECISION_BITS)).abs() <= w.stride as i32,
                    "{n} → {m}, pixel {i}: {sum}"
                );
            }
        }
    }

    /// Torchvision's centre-crop offset with Python's banker's rounding of halves.
    #[test]
    fn crop_offsets_round_halves_to_even() {
        let offsets: Vec<u32> = (224..232).map(|len| centre_offset(len, 224)).collect();
        // margins 0..8: 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5
        assert_eq!(offsets, [0, 0, 1, 2, 2, 2, 3, 4]);
        assert_eq!(shorter_side_to(1000, 750, 224), (298, 224));
        assert_eq!(shorter_side_to(300, 451, 224), (224, 336));
        assert_eq!(shorter_side_to(512, 512, 224), (224, 224));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Weights summing to one (up to their rounding, far below one step) keep a flat colour.
        #[test]
        fn a_constant_image_stays_constant(
            w in 1u32..60, h in 1u32..60, ow in 1u32..80, oh in 1u32..80, c in any::<[u8; 3]>()
        ) {
            let img = RgbImage::from_pixel(w, h, image::Rgb(c));
            let out = pillow_bicubic(&img, ow, oh);
            prop_assert_eq!(out.dimensions(), (ow, oh));
            prop_assert!(out.pixels().all(|p| p.0 == c));
        }

        /// Rows that are flat stay flat (each output row mixes whole rows), and equal channels
        /// stay equal (every channel gets the same weights).
        #[test]
        fn flat_rows_and_grey_stay_so(
            w in 1u32..50, h in 1u32..50, ow in 1u32..70, oh in 1u32..70, seed in any::<u32>()
        ) {
            let noise = pattern(1, h, seed);
            let img = RgbImage::from_fn(w, h, |_, y| {
                let g = noise.get_pixel(0, y)[0];
                image::Rgb([g, g, g])
            });
            let out = pillow_bicubic(&img, ow, oh);
            for y in 0..oh {
                let first = *out.get_pixel(0, y);
                prop_assert_eq!(first[0], first[1]);
                prop_assert_eq!(first[1], first[2]);
                prop_assert!((0..ow).all(|x| *out.get_pixel(x, y) == first));
            }
        }

        /// The crop computes only the kept pixels, and they are those of the whole resized
        /// image cut at torchvision's offsets, for any shape (tall ones take the vertical pass
        /// first).
        #[test]
        fn the_crop_is_the_middle_of_the_whole_resize(
            w in 1u32..90, h in 1u32..90, size in 1u32..40, seed in any::<u32>()
        ) {
            let img = pattern(w, h, seed);
            let (nw, nh) = shorter_side_to(w, h, size);
            let whole = pillow_bicubic(&img, nw, nh);
            let (x, y) = (centre_offset(nw, size), centre_offset(nh, size));
            let expected = image::imageops::crop_imm(&whole, x, y, size, size).to_image();
            prop_assert_eq!(resize_and_crop(&img, size), expected);
        }
    }
}
