//! Image inputs for training: decoding, and augmentation (random resized crop, horizontal flip,
//! rotation, colour and hue jitter, a flat-style redraw) drawn from a per-sample random
//! stream, so a step's pixels are a function of the seed and the step. Without augmentation
//! images go through the inference preprocessing (`lexlip_model::ImageProcessor`: shorter side
//! resized, centre crop), so training sees what encoding will.

use std::io::Cursor;

use image::RgbImage;
use image::imageops::FilterType;
use lexlip_model::ImageProcessor;

use crate::options::DataOptions;
use crate::rng::Rng;

/// Decodes an image (JPEG, PNG, WebP, GIF) to RGB, transparency over white as at inference
/// ([`lexlip_model::image::rgb_on_white`]); the error says why not.
pub fn decode_rgb(bytes: &[u8]) -> Result<RgbImage, String> {
    let reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    if reader.format().is_none() {
        return Err("unrecognised image format (expected JPEG, PNG, WebP or GIF)".into());
    }
    let rgb = lexlip_model::image::rgb_on_white(reader.decode().map_err(|e| e.to_string())?);
    if rgb.width() == 0 || rgb.height() == 0 {
        return Err("the image is empty".into());
    }
    Ok(rgb)
}

/// How training images are turned into pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Augment {
    pub processor: ImageProcessor,
    /// Smallest area fraction of a random resized crop (1 = no crop).
    pub crop_scale: f64,
    /// Brightness/contrast/saturation factors from `[1 - j, 1 + j]` (0 = off).
    pub jitter: f64,
    pub hflip: bool,
    /// Probability of redrawing an image in a flatter style (blurred, then posterized): the
    /// tower then learns shapes and colours rather than one art style's shading (0 = off).
    pub style: f64,
    /// Largest rotation either way, in degrees (0 = off).
    pub rotate: f64,
    /// Largest hue turn either way, as a fraction of the colour wheel (0 = off).
    pub hue: f64,
}

impl Augment {
    /// The augmentation the data options ask for, resized and normalised as `processor`.
    pub fn of_options(data: &DataOptions, processor: &ImageProcessor) -> Self {
        Self {
            processor: processor.clone(),
            crop_scale: data.crop_scale,
            jitter: data.color_jitter,
            hflip: data.hflip,
            style: data.style_augment,
            rotate: data.rotate,
            hue: data.hue_jitter,
        }
    }

    /// None at all: the inference preprocessing.
    pub fn none(processor: &ImageProcessor) -> Self {
        Self {
            processor: processor.clone(),
            crop_scale: 1.0,
            jitter: 0.0,
            hflip: false,
            style: 0.0,
            rotate: 0.0,
            hue: 0.0,
        }
    }

    pub fn is_identity(&self) -> bool {
        self.crop_scale >= 1.0
            && self.jitter <= 0.0
            && !self.hflip
            && self.style <= 0.0
            && self.rotate <= 0.0
            && self.hue <= 0.0
    }

    /// Normalised `(3, size, size)` pixels of an encoded image.
    pub fn pixels(&self, bytes: &[u8], name: &str, rng: &mut Rng) -> Result<Vec<f32>, String> {
        if self.is_identity() {
            return self
                .processor
                .preprocess_named(bytes, name)
                .map(|p| p.data().to_vec())
                .map_err(|e| e.to_string());
        }
        Ok(self.apply(&decode_rgb(bytes)?, rng))
    }

    /// Crop, resize, flip, jitter and restyle a decoded image, then normalise it.
    pub fn apply(&self, rgb: &RgbImage, rng: &mut Rng) -> Vec<f32> {
        let size = self.processor.size as u32;
        let (x, y, w, h) = self.crop_box(rgb.width(), rgb.height(), rng);
        let crop = image::imageops::crop_imm(rgb, x, y, w, h).to_image();
        let mut img = if (w, h) == (size, size) {
            crop
        } else {
            image::imageops::resize(&crop, size, size, FilterType::CatmullRom)
        };
        if self.hflip && rng.uniform() < 0.5 {
            image::imageops::flip_horizontal_in_place(&mut img);
        }
        let n = (size * size) as usize;
        let mut rgbf: Vec<[f32; 3]> = img
            .pixels()
            .map(|p| [0, 1, 2].map(|c| f32::from(p[c]) / 255.0))
            .collect();
        // Each draw is made only when its augmentation is on, so the streams of runs without
        // it are those of before it existed.
        if self.rotate > 0.0 {
            let degrees = self.rotate * (2.0 * rng.uniform() - 1.0);
            rgbf = rotate(&rgbf, size as usize, degrees as f32);
        }
        if self.jitter > 0.0 {
            let mut factor = || (1.0 - self.jitter + 2.0 * self.jitter * rng.uniform()) as f32;
            let (bright, contrast, saturation) = (factor(), factor(), factor());
            let gray = |p: &[f32; 3]| 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
            for p in &mut rgbf {
                *p = p.map(|v| v * bright);
            }
            let mean = rgbf.iter().map(gray).sum::<f32>() / n as f32;
            for p in &mut rgbf {
                *p = p.map(|v| (v - mean) * contrast + mean);
                let g = gray(p);
                *p = p.map(|v| (g + (v - g) * saturation).clamp(0.0, 1.0));
            }
        }
        if self.hue > 0.0 {
            let turn = self.hue * (2.0 * rng.uniform() - 1.0);
            rgbf = hue_turn(&rgbf, turn as f32);
        }
        if self.style > 0.0 && rng.uniform() < self.style {
            let sigma = 0.3 + 0.7 * rng.uniform() as f32;
            let levels = 3 + rng.below(4) as u32;
            rgbf = flat_style(&rgbf, size as usize, sigma, levels);
        }
        let mut data = vec![0f32; 3 * n];
        for (i, p) in rgbf.iter().enumerate() {
            for c in 0..3 {
                data[c * n + i] = (p[c] - self.processor.mean[c]) / self.processor.std[c];
            }
        }
        data
    }

    /// torchvision's RandomResizedCrop box: area fraction in `[crop_scale, 1]`, aspect ratio
    /// log-uniform in `[3/4, 4/3]`, ten tries, else the whole image.
    fn crop_box(&self, w: u32, h: u32, rng: &mut Rng) -> (u32, u32, u32, u32) {
        if self.crop_scale >= 1.0 {
            let side = w.min(h);
            return ((w - side) / 2, (h - side) / 2, side, side);
        }
        let area = f64::from(w) * f64::from(h);
        let (lo, hi) = ((3.0f64 / 4.0).ln(), (4.0f64 / 3.0).ln());
        for _ in 0..10 {
            let target = area * (self.crop_scale + (1.0 - self.crop_scale) * rng.uniform());
            let ratio = (lo + (hi - lo) * rng.uniform()).exp();
            let cw = (target * ratio).sqrt().round() as u32;
            let ch = (target / ratio).sqrt().round() as u32;
            if cw > 0 && ch > 0 && cw <= w && ch <= h {
                let x = rng.below((w - cw + 1) as usize) as u32;
                let y = rng.below((h - ch + 1) as usize) as u32;
                return (x, y, cw, ch);
            }
        }
        (0, 0, w, h)
    }
}

/// A `side`×`side` image of `[0, 1]` RGB pixels turned `degrees` anticlockwise about its
/// centre, sampled bilinearly; what comes in from outside the picture is white, as
/// transparency is at inference.
pub fn rotate(rgb: &[[f32; 3]], side: usize, degrees: f32) -> Vec<[f32; 3]> {
    let (sin, cos) = degrees.to_radians().sin_cos();
    let c = (side as f32 - 1.0) / 2.0;
    let at = |x: isize, y: isize| -> [f32; 3] {
        if x < 0 || y < 0 || x >= side as isize || y >= side as isize {
            [1.0; 3]
        } else {
            rgb[y as usize * side + x as usize]
        }
    };
    let mut out = Vec::with_capacity(side * side);
    for y in 0..side {
        for x in 0..side {
            // The source of (x, y): turned back by `degrees` (y points down, so an
            // anticlockwise turn on screen is clockwise in these coordinates).
            let (dx, dy) = (x as f32 - c, y as f32 - c);
            let sx = c + cos * dx - sin * dy;
            let sy = c + sin * dx + cos * dy;
            let (x0, y0) = (sx.floor(), sy.floor());
            let (fx, fy) = (sx - x0, sy - y0);
            let (x0, y0) = (x0 as isize, y0 as isize);
            let mut p = [0f32; 3];
            for (wx, wy, px, py) in [
                (1.0 - fx, 1.0 - fy, x0, y0),
                (fx, 1.0 - fy, x0 + 1, y0),
                (1.0 - fx, fy, x0, y0 + 1),
                (fx, fy, x0 + 1, y0 + 1),
            ] {
                let w = wx * wy;
                if w > 0.0 {
                    let q = at(px, py);
                    for ch in 0..3 {
                        p[ch] += w * q[ch];
                    }
                }
            }
            out.push(p.map(|v| v.clamp(0.0, 1.0)));
        }
    }
    out
}

/// RGB pixels with their hue turned by `turn` of the colour wheel: a rotation about the grey
/// axis, so greys (and the white background) stay as they are and a third of a turn takes red
/// to green.
pub fn hue_turn(rgb: &[[f32; 3]], turn: f32) -> Vec<[f32; 3]> {
    let (sin, cos) = (turn * std::f32::consts::TAU).sin_cos();
    let (a, b) = ((1.0 - cos) / 3.0, sin / 3f32.sqrt());
    // cos·I + (1 − cos)/3·J + sin/√3·[u]× with u = (1, 1, 1).
    let m = [
        [cos + a, a - b, a + b],
        [a + b, cos + a, a - b],
        [a - b, a + b, cos + a],
    ];
    rgb.iter()
        .map(|p| {
            [0, 1, 2].map(|r| (m[r][0] * p[0] + m[r][1] * p[1] + m[r][2] * p[2]).clamp(0.0, 1.0))
        })
        .collect()
}

/// A flat-colour redraw of a `side`×`side` image of `[0, 1]` RGB pixels: a separable Gaussian
/// blur of `sigma` pixels (edges clamped), then each channel rounded to `levels` evenly spaced
/// values — shading becomes bands of flat colour, as in emoji styles drawn without gradients.
pub fn flat_style(rgb: &[[f32; 3]], side: usize, sigma: f32, levels: u32) -> Vec<[f32; 3]> {
    let radius = (3.0 * sigma).ceil() as isize;
    let kernel: Vec<f32> = (-radius..=radius)
        .map(|d| (-(d * d) as f32 / (2.0 * sigma * sigma)).exp())
        .collect();
    let total: f32 = kernel.iter().sum();
    let at = |i: isize| i.clamp(0, side as isize - 1) as usize;
    let pass = |src: &[[f32; 3]], horizontal: bool| -> Vec<[f32; 3]> {
        let mut out = vec![[0f32; 3]; src.len()];
        for y in 0..side {
            for x in 0..side {
                let mut acc = [0f32; 3];
                for (k, w) in kernel.iter().enumerate() {
                    let d = k as isize - radius;
                    let (sx, sy) = if horizontal {
                        (at(x as isize + d), y)
                    } else {
                        (x, at(y as isize + d))
                    };
                    let p = src[sy * side + sx];
                    for c in 0..3 {
                        acc[c] += w * p[c];
                    }
                }
                out[y * side + x] = acc.map(|v| v / total);
            }
        }
        out
    };
    let step = (levels.max(2) - 1) as f32;
    pass(&pass(rgb, true), false)
        .into_iter()
        .map(|p| p.map(|v| (v.clamp(0.0, 1.0) * step).round() / step))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8])
        })
    }

    #[test]
    fn deterministic_per_stream_and_in_range() {
        let aug = Augment {
            processor: ImageProcessor::beit(16),
            crop_scale: 0.5,
            jitter: 0.3,
            hflip: true,
            style: 0.5,
            rotate: 20.0,
            hue: 0.1,
        };
        let img = gradient(30, 20);
        let a = aug.apply(&img, &mut Rng::new(&[1, 2]));
        let b = aug.apply(&img, &mut Rng::new(&[1, 2]));
        let c = aug.apply(&img, &mut Rng::new(&[1, 3]));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 3 * 16 * 16);
        assert!(a.iter().all(|v| (-1.0..=1.0).contains(v)));
    }

    #[test]
    fn no_augmentation_is_the_inference_preprocessing() {
        let aug = Augment::none(&ImageProcessor::beit(16));
        let mut png = Vec::new();
        gradient(30, 20)
            .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        let got = aug.pixels(&png, "x", &mut Rng::new(&[0])).unwrap();
        let want = aug.processor.preprocess(&png).unwrap();
        assert_eq!(got, want.data());
        assert!(
            aug.pixels(b"not an image", "x", &mut Rng::new(&[0]))
                .is_err()
        );
    }

    #[test]
    fn flat_style_keeps_flat_colours_and_bands_gradients() {
        // A flat image is unchanged by the blur (weights sum to one) and lands on a level.
        let flat = vec![[1.0, 0.5, 0.0]; 8 * 8];
        let out = flat_style(&flat, 8, 0.8, 3);
        assert!(out.iter().all(|p| p == &[1.0, 0.5, 0.0]));
        // A horizontal ramp becomes monotone bands of at most `levels` values.
        let ramp: Vec<[f32; 3]> = (0..16 * 16).map(|i| [(i % 16) as f32 / 15.0; 3]).collect();
        let out = flat_style(&ramp, 16, 0.5, 4);
        let row: Vec<f32> = out[..16].iter().map(|p| p[0]).collect();
        assert!(row.windows(2).all(|w| w[0] <= w[1]));
        let mut values: Vec<u32> = out.iter().map(|p| (p[0] * 3.0).round() as u32).collect();
        values.sort();
        values.dedup();
        assert_eq!(values, vec![0, 1, 2, 3]);
        // Blur by hand at one pixel: a single white dot spreads to its neighbours.
        let mut dot = vec![[0.0f32; 3]; 5 * 5];
        dot[12] = [1.0; 3];
        let (sigma, w1) = (1.0f32, (-0.5f32).exp());
        let norm = 1.0 + 2.0 * w1 + 2.0 * (-2.0f32).exp() + 2.0 * (-4.5f32).exp();
        let centre = 1.0 / (norm * norm);
        let out = flat_style(&dot, 5, sigma, 256);
        assert!((out[12][0] - (centre * 255.0).round() / 255.0).abs() < 1e-6);
        assert!(out[13][0] > 0.0 && out[13][0] < out[12][0]);
    }

    #[test]
    fn rotation_turns_about_the_centre_and_fills_with_white() {
        // A 5×5 image with one dark pixel right of the centre.
        let mut img = vec![[0.5f32; 3]; 25];
        img[2 * 5 + 4] = [0.0; 3];
        let none = rotate(&img, 5, 0.0);
        assert_eq!(none, img);
        // A quarter turn anticlockwise on screen takes it above the centre.
        let quarter = rotate(&img, 5, 90.0);
        assert!(
            quarter[2].iter().all(|v| v.abs() < 1e-5),
            "{:?}",
            quarter[2]
        );
        assert!(quarter[2 * 5 + 4].iter().all(|v| (v - 0.5).abs() < 1e-5));
        // An eighth of a turn brings white into the corners and keeps the centre.
        let eighth = rotate(&img, 5, 45.0);
        assert!(eighth[0].iter().all(|&v| v > 0.9), "{:?}", eighth[0]);
        assert_eq!(eighth[12], img[12]);
    }

    #[test]
    fn a_hue_turn_keeps_greys_and_cycles_primaries() {
        let px = [
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.3, 0.3, 0.3],
            [1.0, 1.0, 1.0],
        ];
        let near = |a: &[f32; 3], b: [f32; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
        let third = hue_turn(&px, 1.0 / 3.0);
        assert!(near(&third[0], [0.0, 1.0, 0.0]), "{:?}", third[0]);
        assert!(near(&third[1], [0.0, 0.0, 1.0]), "{:?}", third[1]);
        assert!(near(&third[2], [0.3, 0.3, 0.3]) && near(&third[3], [1.0; 3]));
        let none = hue_turn(&px, 0.0);
        assert!(none.iter().zip(&px).all(|(a, b)| near(a, *b)));
    }
}
