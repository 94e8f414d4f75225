//! Pixels for the encoders: decoding (bounded by a per-image limit and a process-wide budget),
//! transparency over white, resizing and normalisation of one model family
//! ([`ImageProcessor`]), and the normalised values an encoder reads ([`PreprocessedImage`]).

use std::io::Cursor;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::read_json;
use crate::error::{ModelError, Result};

/// Resizing and normalisation of one model family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageProcessor {
    /// Output side in pixels (square).
    pub size: usize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    /// Resize both sides to `size` (SigLIP's processor) instead of the shorter side, then
    /// centre-crop (BEiT's and CLIP's).
    pub squash: bool,
    /// How pixels are resampled.
    #[serde(default)]
    pub resampler: Resampler,
}

/// How an image is resampled to a model's size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resampler {
    /// The `image` crate's Catmull-Rom (bicubic) filter: what lexlip's own models were trained
    /// with.
    #[default]
    CatmullRom,
    /// Pillow's bicubic resampling, bit for bit, with torchvision's crop offsets
    /// ([`crate::resample`]): what a published PyTorch model saw, so that its vectors here are
    /// the ones its authors measured.
    Pillow,
}

impl ImageProcessor {
    /// BEiT / LexLIP: mean = std = 0.5 (inputs in [-1, 1]).
    pub fn beit(size: usize) -> Self {
        Self {
            size,
            mean: [0.5; 3],
            std: [0.5; 3],
            squash: false,
            resampler: Resampler::CatmullRom,
        }
    }

    /// SigLIP: mean = std = 0.5, both sides resized to `size` (no crop).
    pub fn siglip(size: usize) -> Self {
        Self {
            squash: true,
            ..Self::beit(size)
        }
    }

    /// OpenAI CLIP's normalisation.
    pub fn clip(size: usize) -> Self {
        Self {
            size,
            mean: [0.481_454_66, 0.457_827_5, 0.408_210_73],
            std: [0.268_629_54, 0.261_302_6, 0.275_777_1],
            squash: false,
            resampler: Resampler::CatmullRom,
        }
    }

    /// The same normalisation and crop, resampled as Pillow does ([`Resampler::Pillow`]).
    pub fn with_pillow_resampling(self) -> Self {
        Self {
            resampler: Resampler::Pillow,
            ..self
        }
    }

    /// Overrides mean/std from a Hugging Face `preprocessor_config.json`, if the directory has one.
    pub fn with_preprocessor_config(self, dir: &Path) -> Result<Self> {
        let path = dir.join("preprocessor_config.json");
        if !path.exists() {
            return Ok(self);
        }
        let v = read_json(&path)?;
        let triple = |key: &str| -> Result<Option<[f32; 3]>> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => serde_json::from_value::<[f32; 3]>(x.clone())
                    .map(Some)
                    .map_err(|e| ModelError::config(&path, format!("{key}: {e}"))),
            }
        };
        self.with_mean_std(
            triple("image_mean")?,
            triple("image_std")?,
            &path,
            "image_std",
        )
    }

    /// Overrides the mean and std that are given; a std that is not positive is refused,
    /// naming `std_key` of the configuration at `path`.
    pub(crate) fn with_mean_std(
        mut self,
        mean: Option<[f32; 3]>,
        std: Option<[f32; 3]>,
        path: &Path,
        std_key: &str,
    ) -> Result<Self> {
        if let Some(m) = mean {
            self.mean = m;
        }
        if let Some(s) = std {
            if s.iter().any(|x| *x <= 0.0 || !x.is_finite()) {
                return Err(ModelError::config(
                    path,
                    format!("{std_key} must be positive"),
                ));
            }
            self.std = s;
        }
        Ok(self)
    }

    /// Decodes (JPEG, PNG, WebP, GIF: first frame), converts to RGB, resizes the shorter side to
    /// `size` (bicubic), centre-crops to `size × size` and normalises. `input` names the image in
    /// errors. Pure CPU work with no shared state: call it from as many threads as you like.
    pub fn preprocess_named(&self, bytes: &[u8], input: &str) -> Result<PreprocessedImage> {
        self.preprocess_rgb(&*decode_rgb(bytes, input)?, input)
    }

    /// [`ImageProcessor::preprocess_named`] of pixels already decoded with [`decode_rgb`] (so that
    /// one decode also serves a thumbnail).
    pub fn preprocess_rgb(&self, rgb: &image::RgbImage, input: &str) -> Result<PreprocessedImage> {
        let (w, h) = rgb.dimensions();
        if w == 0 || h == 0 {
            return Err(ModelError::Image {
                input: input.to_string(),
                message: "the image is empty".into(),
            });
        }
        let size = self.size as u32;
        let resized;
        let rgb = if (w, h) == (size, size) {
            rgb
        } else {
            resized = self.resize(rgb);
            &resized
        };
        let n = self.size * self.size;
        let mut data = vec![0f32; 3 * n];
        for (i, px) in rgb.pixels().enumerate() {
            for c in 0..3 {
                data[c * n + i] = (px[c] as f32 / 255.0 - self.mean[c]) / self.std[c];
            }
        }
        Ok(PreprocessedImage {
            size: self.size,
            data,
        })
    }

    /// `rgb` at `size × size`: both sides resized when `squash`, else the shorter side resized
    /// and the middle cropped.
    fn resize(&self, rgb: &image::RgbImage) -> image::RgbImage {
        let (w, h) = rgb.dimensions();
        let size = self.size as u32;
        match (self.resampler, self.squash) {
            (Resampler::Pillow, true) => return crate::resample::pillow_bicubic(rgb, size, size),
            (Resampler::Pillow, false) => return crate::resample::resize_and_crop(rgb, size),
            (Resampler::CatmullRom, true) => {
                return crate::catmull_rom::resize_crop(rgb, (size, size), 0..size, 0..size);
            }
            (Resampler::CatmullRom, false) => {}
        }
        // Shorter side → size, keeping the aspect ratio (as torchvision's Resize(int)).
        let (nw, nh) = if w <= h {
            (
                size,
                ((h as u64 * size as u64) / w as u64).max(size as u64) as u32,
            )
        } else {
            (
                ((w as u64 * size as u64) / h as u64).max(size as u64) as u32,
                size,
            )
        };
        let (x, y) = ((nw - size) / 2, (nh - size) / 2);
        crate::catmull_rom::resize_crop(rgb, (nw, nh), x..x + size, y..y + size)
    }

    /// [`ImageProcessor::preprocess_named`] with the input described by its length.
    pub fn preprocess(&self, bytes: &[u8]) -> Result<PreprocessedImage> {
        self.preprocess_named(bytes, &format!("<{} bytes>", bytes.len()))
    }
}

/// The default of [`set_max_image_pixels`]: 40 megapixels, more than any camera photo.
pub const DEFAULT_MAX_IMAGE_PIXELS: u64 = 40_000_000;

static MAX_IMAGE_PIXELS: AtomicU64 = AtomicU64::new(DEFAULT_MAX_IMAGE_PIXELS);

/// Sets the largest image (width × height) [`decode_rgb`] decodes, for the whole process (the
/// `--max-image-pixels` option). A small file can declare a huge picture (a 500 KB PNG of
/// 13,000 × 13,000 pixels decodes to 500 MB), so the size is checked from the header, before
/// any pixel is decoded.
pub fn set_max_image_pixels(pixels: u64) {
    MAX_IMAGE_PIXELS.store(pixels.max(1), Ordering::Relaxed);
}

/// The current limit of [`set_max_image_pixels`].
pub fn max_image_pixels() -> u64 {
    MAX_IMAGE_PIXELS.load(Ordering::Relaxed)
}

/// The default of [`set_decode_budget`]: 100 megapixels decoded at once in the process (two
/// images of the largest size, [`DEFAULT_MAX_IMAGE_PIXELS`], and more small ones), about 1 GB
/// of decoder buffers at most.
pub const DEFAULT_DECODE_BUDGET_PIXELS: u64 = 100_000_000;
/// How long a decode waits for its share of the budget before it gives up with
/// [`ModelError::Busy`].
const DECODE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

static DECODE_BUDGET: AtomicU64 = AtomicU64::new(DEFAULT_DECODE_BUDGET_PIXELS);
/// Pixels being decoded now, across threads and requests.
static DECODING: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
static DECODED: std::sync::Condvar = std::sync::Condvar::new();

/// Sets how many pixels the whole process decodes at once: images past it wait (up to 20 s,
/// then fail with [`ModelError::Busy`]), so concurrent requests cannot add up to more decoder
/// memory than this allows, whatever the per-image limit.
pub fn set_decode_budget(pixels: u64) {
    DECODE_BUDGET.store(pixels.max(1), Ordering::Relaxed);
}

/// A share of the decode budget, given back when dropped.
#[derive(Debug)]
struct DecodePermit(u64);

impl DecodePermit {
    fn acquire(pixels: u64, input: &str) -> Result<Self> {
        let budget = DECODE_BUDGET.load(Ordering::Relaxed);
        // An image larger than the whole budget decodes alone.
        let want = pixels.min(budget);
        let deadline = std::time::Instant::now() + DECODE_WAIT;
        let mut used = DECODING.lock().unwrap_or_else(|p| p.into_inner());
        while *used + want > budget {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(ModelError::Busy(format!(
                    "image {input}: the server is decoding {} megapixels of other images (its \
                     budget is {}); try again shortly",
                    *used / 1_000_000,
                    budget / 1_000_000
                )));
            }
            used = DECODED
                .wait_timeout(used, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *used += want;
        Ok(Self(want))
    }
}

impl Drop for DecodePermit {
    fn drop(&mut self) {
        let mut used = DECODING.lock().unwrap_or_else(|p| p.into_inner());
        *used -= self.0;
        DECODED.notify_all();
    }
}

/// Decodes an image (JPEG, PNG, WebP, GIF: first frame) to RGB pixels, transparency composited
/// over white ([`rgb_on_white`]). `input` names the image in errors; an empty image is an error,
/// so every later step can rely on at least one pixel, and so is one larger than
/// [`max_image_pixels`] (checked before decoding; the decoder's allocations are bounded too).
///
/// The pixels hold their share of the decode budget ([`set_decode_budget`]) until they are
/// dropped, so the budget bounds the full-size images alive at once (being decoded, thumbnailed
/// or resized), not only the decoding itself.
pub fn decode_rgb(bytes: &[u8], input: &str) -> Result<Decoded> {
    let err = |message: String| ModelError::Image {
        input: input.to_string(),
        message,
    };
    let reader = || {
        image::ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| err(e.to_string()))
    };
    let mut header = reader()?;
    if header.format().is_none() {
        return Err(err(
            "unrecognised image format (expected JPEG, PNG, WebP or GIF)".into(),
        ));
    }
    let max = max_image_pixels();
    header.no_limits();
    let (w, h) = header.into_dimensions().map_err(|e| err(e.to_string()))?;
    let pixels = u64::from(w) * u64::from(h);
    if pixels > max {
        return Err(err(format!(
            "the image is {w} × {h} = {pixels} pixels, more than the {max} this server decodes \
             (--max-image-pixels); send a smaller image"
        )));
    }
    let permit = DecodePermit::acquire(pixels, input)?;
    let mut limits = image::Limits::default();
    // 16-bit RGBA is the widest buffer a decoder fills, plus its working memory.
    limits.max_alloc = Some(max.saturating_mul(8).saturating_add(64 << 20));
    let mut decoder = reader()?;
    decoder.limits(limits);
    let rgb = rgb_on_white(decoder.decode().map_err(|e| err(e.to_string()))?);
    let (w, h) = rgb.dimensions();
    if w == 0 || h == 0 {
        return Err(err("the image is empty".into()));
    }
    Ok(Decoded {
        rgb,
        _permit: permit,
    })
}

/// Full-size decoded pixels and their share of the decode budget (see [`decode_rgb`]).
#[derive(Debug)]
pub struct Decoded {
    rgb: image::RgbImage,
    _permit: DecodePermit,
}

impl std::ops::Deref for Decoded {
    type Target = image::RgbImage;

    fn deref(&self) -> &image::RgbImage {
        &self.rgb
    }
}

/// The RGB pixels of a decoded image, transparent pixels composited over white as a viewer
/// shows them: emoji, clip art and logos are mostly transparent PNGs, and the colour hidden
/// under alpha 0 is arbitrary (often black), so dropping alpha would show the model another
/// picture than the user sees. Training decodes the same way.
pub fn rgb_on_white(image: image::DynamicImage) -> image::RgbImage {
    if !image.color().has_alpha() {
        return image.to_rgb8();
    }
    let rgba = image.to_rgba8();
    image::RgbImage::from_fn(rgba.width(), rgba.height(), |x, y| {
        let [r, g, b, a] = rgba.get_pixel(x, y).0;
        let over =
            |c: u8| ((u32::from(c) * u32::from(a) + 255 * (255 - u32::from(a)) + 127) / 255) as u8;
        image::Rgb([over(r), over(g), over(b)])
    })
}

/// Normalised pixels of one image, channel-first, ready for an encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct PreprocessedImage {
    size: usize,
    data: Vec<f32>,
}

impl PreprocessedImage {
    /// From normalised `(3, size, size)` values (e.g. computed elsewhere).
    pub fn from_chw(size: usize, data: Vec<f32>) -> Result<Self> {
        if data.len() != 3 * size * size {
            return Err(ModelError::Invalid(format!(
                "expected 3·{size}·{size} = {} values, got {}",
                3 * size * size,
                data.len()
            )));
        }
        Ok(Self { size, data })
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// `(3, size, size)` values, channel-first.
    pub fn data(&self) -> &[f32] {
        &self.data
    }
}

/// Stacks images of one size into a `(batch, 3, size, size)` tensor.
pub(crate) fn stack(images: &[PreprocessedImage], size: usize, device: &Device) -> Result<Tensor> {
    let mut flat = Vec::with_capacity(images.len() * 3 * size * size);
    for (i, img) in images.iter().enumerate() {
        if img.size != size {
            return Err(ModelError::Invalid(format!(
                "image {i} was preprocessed to {0}×{0} but the encoder expects {size}×{size}",
                img.size
            )));
        }
        flat.extend_from_slice(&img.data);
    }
    Ok(Tensor::from_vec(
        flat,
        (images.len(), 3, size, size),
        device,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two images that together exceed the budget are decoded one after the other: the second
    /// waits until the first one's pixels are dropped (not merely decoded).
    #[test]
    fn the_decode_budget_makes_large_images_wait_their_turn() {
        use std::sync::atomic::AtomicBool;
        let image = png(image::DynamicImage::new_rgb8(1000, 600));
        set_decode_budget(1_000_000);
        let first = decode_rgb(&image, "first").unwrap();
        let second_in = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let second = decode_rgb(&image, "second").unwrap();
                second_in.store(true, Ordering::SeqCst);
                drop(second);
            });
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert!(
                !second_in.load(Ordering::SeqCst),
                "the second decode started while the first image held 600,000 of 1,000,000 pixels"
            );
            assert_eq!(first.dimensions(), (1000, 600));
            drop(first);
            waiter.join().unwrap();
        });
        assert!(second_in.load(Ordering::SeqCst));
        // An image larger than the whole budget still decodes, alone.
        drop(DecodePermit::acquire(5_000_000, "huge").unwrap());
        set_decode_budget(DEFAULT_DECODE_BUDGET_PIXELS);
    }

    fn png(img: image::DynamicImage) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    /// A PNG that declares `w × h` RGB pixels and carries almost no data: what a
    /// decompression bomb's header looks like.
    fn png_header_only(w: u32, h: u32) -> Vec<u8> {
        fn crc32(bytes: &[u8]) -> u32 {
            let mut crc = 0xffff_ffffu32;
            for &b in bytes {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
                }
            }
            !crc
        }
        let chunk = |kind: &[u8], data: &[u8]| {
            let mut c = (data.len() as u32).to_be_bytes().to_vec();
            let body = [kind, data].concat();
            c.extend_from_slice(&body);
            c.extend_from_slice(&crc32(&body).to_be_bytes());
            c
        };
        let mut ihdr = w.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&h.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        let empty_zlib = [0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0, 0, 0, 1];
        [
            b"\x89PNG\r\n\x1a\n".to_vec(),
            chunk(b"IHDR", &ihdr),
            chunk(b"IDAT", &empty_zlib),
            chunk(b"IEND", &[]),
        ]
        .concat()
    }

    /// A 13,000 × 13,000 PNG of a few dozen bytes is refused from its header, naming the limit,
    /// instead of allocating half a gigabyte; a real image under the limit decodes.
    #[test]
    fn images_over_the_pixel_limit_are_refused_before_decoding() {
        let bomb = png_header_only(13_000, 13_000);
        assert!(bomb.len() < 100);
        let e = decode_rgb(&bomb, "bomb.png").unwrap_err().to_string();
        assert!(e.contains("13000 × 13000 = 169000000 pixels"), "{e}");
        assert!(e.contains("--max-image-pixels"), "{e}");
        assert!(e.contains("bomb.png"), "{e}");
        // Under the limit, the same (broken) file gets to the decoder, which reports its own error.
        let small = png_header_only(64, 64);
        let e = decode_rgb(&small, "small.png").unwrap_err().to_string();
        assert!(!e.contains("--max-image-pixels"), "{e}");
        let real = png(image::DynamicImage::new_rgb8(64, 48));
        assert_eq!(
            decode_rgb(&real, "real.png").unwrap().dimensions(),
            (64, 48)
        );
    }

    /// A transparent PNG whose hidden colour is black is seen as the same picture on white;
    /// half-transparent pixels are blended.
    #[test]
    fn transparency_is_composited_over_white() {
        let rgba = image::RgbaImage::from_fn(8, 8, |x, _| match x {
            0..3 => image::Rgba([0, 0, 0, 0]),
            3..6 => image::Rgba([200, 20, 20, 255]),
            _ => image::Rgba([0, 0, 100, 128]),
        });
        let on_white = image::RgbImage::from_fn(8, 8, |x, _| match x {
            0..3 => image::Rgb([255, 255, 255]),
            3..6 => image::Rgb([200, 20, 20]),
            _ => image::Rgb([127, 127, 177]),
        });
        assert_eq!(
            rgb_on_white(image::DynamicImage::ImageRgba8(rgba.clone())),
            on_white
        );
        let p = ImageProcessor::beit(8);
        let a = p
            .preprocess(&png(image::DynamicImage::ImageRgba8(rgba)))
            .unwrap();
        let b = p
            .preprocess(&png(image::DynamicImage::ImageRgb8(on_white)))
            .unwrap();
        assert_eq!(a.data, b.data);
    }
}
