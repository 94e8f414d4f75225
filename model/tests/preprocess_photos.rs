//! lexlip's Pillow resampling ([`lexlip_model::resample`]) against the preprocessing published
//! PyTorch models ran, on real photos (scikit-image's samples, from PyPI:
//! `scripts/fetch-test-photos.sh`) through the real decode path, and on small synthetic shapes
//! the photos do not cover. The reference (`fixtures/preprocess.json`,
//! `scripts/make_preprocess_fixtures.py`) is VDR's torchvision transform (Resize(224, BICUBIC),
//! CenterCrop(224), CLIP's normalisation) and BLIP's Hugging Face processor (384 × 384, bicubic,
//! CLIP's normalisation) on PIL images: resized bytes and normalised values must be the same,
//! bit for bit, wherever lexlip decodes the same pixels as PIL. That is every PNG, but not the
//! JPEGs: the image crate's decoder (zune-jpeg) is not libjpeg-turbo and differs by a step or
//! three on about 1 % of the values, so JPEGs are held to a bound (`JPEG_*_BOUND*`).
//!
//! transformers 5's default `BlipImageProcessor` resizes with torchvision on a uint8 tensor, not
//! with Pillow; it is measured too, with a bound, since it is neither what BLIP was trained on
//! nor what lexlip reproduces.
//!
//! The photos have no alpha channel: lexlip composites transparency over white where PIL's
//! `convert("RGB")` drops it, so a transparent image would be two different pictures.

// The photos' fetch helper is the end-to-end harness's, as the models' are (lexlip-model's
// `tests/common` includes the same file and does not re-export it, hence no `mod common` here).
#[allow(dead_code)]
#[path = "../../tests/src/models.rs"]
mod models;

use image::RgbImage;
use lexlip_model::image::{Resampler, decode_rgb};
use lexlip_model::{ImageProcessor, PreprocessedImage, resample};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn fixture_json(name: &str) -> Value {
    let path = models::fixtures().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The normalised values as the reference hashed them: float32, little-endian, channel-first.
fn values_sha256(img: &PreprocessedImage) -> String {
    let bytes: Vec<u8> = img.data().iter().flat_map(|v| v.to_le_bytes()).collect();
    sha256(&bytes)
}

/// VDR's preprocessing: CLIP's at 224 (shorter side, then the middle), resampled as Pillow.
fn vdr() -> ImageProcessor {
    ImageProcessor::clip(224).with_pillow_resampling()
}

/// BLIP's: both sides to 384 without a crop, CLIP's normalisation, resampled as Pillow.
fn blip() -> ImageProcessor {
    ImageProcessor {
        squash: true,
        ..ImageProcessor::clip(384)
    }
    .with_pillow_resampling()
}

/// The fixture's sample positions among `n` values: the k-th at `k·step + (k·7919) mod step`.
fn positions(n: usize, count: usize) -> impl Iterator<Item = usize> {
    let step = n / count;
    (0..count).map(move |k| k * step + (k * 7919) % step)
}

/// The normalised values at the sample positions.
fn samples(img: &PreprocessedImage, count: usize) -> Vec<f32> {
    positions(img.data().len(), count)
        .map(|i| img.data()[i])
        .collect()
}

/// How `ours` compares with one processor's reference entry: the largest difference at the
/// sample positions, how many samples differ, and the difference of the sums (a value).
fn compare(ours: &PreprocessedImage, reference: &Value, count: usize) -> (f32, usize, f64) {
    let (ours_at, expected) = (samples(ours, count), f32s(&reference["samples"]));
    let differing = ours_at
        .iter()
        .zip(&expected)
        .filter(|(a, b)| a != b)
        .count();
    let sum: f64 = ours.data().iter().map(|v| f64::from(*v)).sum();
    let sum_diff = (sum - reference["sum"].as_f64().unwrap()).abs() / ours.data().len() as f64;
    (max_abs_diff(&ours_at, &expected), differing, sum_diff)
}

/// One step of a uint8 pixel after CLIP's normalisation, at its widest (the smallest std).
fn step() -> f32 {
    let std = f32s(&fixture_json("preprocess.json")["std"]);
    1.0 / 255.0 / std.into_iter().fold(f32::INFINITY, f32::min)
}

/// How far lexlip's JPEG decoder (zune-jpeg, through the image crate) may be from PIL's
/// (libjpeg-turbo) on one value: zune-jpeg does not aim at libjpeg-turbo's exact output, and
/// these photos differ by up to 3 steps on about 1 % of their values (measured on the whole
/// images with scripts/make_preprocess_fixtures.py's environment).
const JPEG_DECODE_BOUND: u8 = 3;
/// How far the resized pixels of a JPEG may then be: the decoder's differences mostly average
/// out (1 step at most for VDR, 2 for BLIP, on about 1 % of the values, measured likewise).
const JPEG_RESIZED_BOUND_STEPS: f32 = 2.0;

/// Each PNG photo decoded by lexlip is the picture PIL decodes, resized and cropped to the very
/// bytes VDR's and BLIP's references feed their normalisation, and normalised to the very
/// float32 values (bound: 0). JPEGs decode slightly differently (zune-jpeg is not
/// libjpeg-turbo), so theirs are held to [`JPEG_RESIZED_BOUND_STEPS`] instead, and become exact
/// like the PNGs' should the decoders ever agree. Catmull-Rom, lexlip's default, is shown for
/// comparison.
#[test]
fn photos_preprocess_exactly_as_the_references() {
    let fx = fixture_json("preprocess.json");
    let count = fx["samples"].as_u64().unwrap() as usize;
    let dir = models::photos_dir();
    let photos = fx["photos"].as_array().unwrap();
    assert_eq!(photos.len(), 5);
    for photo in photos {
        let name = photo["file"].as_str().unwrap();
        let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let decoded = decode_rgb(&bytes, name).unwrap();
        assert_eq!(
            (u64::from(decoded.width()), u64::from(decoded.height())),
            (
                photo["width"].as_u64().unwrap(),
                photo["height"].as_u64().unwrap()
            )
        );
        let exact = sha256(decoded.as_raw()) == photo["decoded_sha256"].as_str().unwrap();
        assert!(
            exact || name.ends_with(".jpg"),
            "{name}: lexlip decodes other pixels than PIL"
        );
        if !exact {
            let expected = photo["decoded_samples"].as_array().unwrap();
            let at = positions(decoded.as_raw().len(), count);
            let diffs: Vec<u8> = at
                .zip(expected)
                .map(|(i, e)| decoded.as_raw()[i].abs_diff(e.as_u64().unwrap() as u8))
                .collect();
            let worst = diffs.iter().copied().max().unwrap_or(0);
            let differing = diffs.iter().filter(|d| **d != 0).count();
            eprintln!(
                "{name}: decoded differently from PIL, {differing} of {count} samples, by {worst} \
                 steps at most"
            );
            assert!(worst <= JPEG_DECODE_BOUND, "{name}: {worst} steps");
        }
        type Resize = fn(&RgbImage) -> RgbImage;
        let cases: [(&str, ImageProcessor, Resize); 2] = [
            ("vdr", vdr(), |rgb| resample::resize_and_crop(rgb, 224)),
            ("blip", blip(), |rgb| {
                resample::pillow_bicubic(rgb, 384, 384)
            }),
        ];
        for (key, processor, resize) in cases {
            let reference = &photo["processors"][key];
            let resized_exact =
                sha256(resize(&decoded).as_raw()) == reference["resized_sha256"].as_str().unwrap();
            let ours = processor.preprocess_named(&bytes, name).unwrap();
            let (worst, differing, sum_diff) = compare(&ours, reference, count);
            let catmull_rom = ImageProcessor {
                resampler: Resampler::CatmullRom,
                ..processor.clone()
            };
            let catmull_rom = catmull_rom.preprocess_named(&bytes, name).unwrap();
            let (cr_worst, cr_differing, _) = compare(&catmull_rom, reference, count);
            eprintln!(
                "{name} {key}: resized bytes {}, max |Δ| {worst:e} ({differing} of {count} \
                 samples differ), |Δ sum| / n {sum_diff:e}; Catmull-Rom: max |Δ| \
                 {cr_worst:.4} ({cr_differing} differ)",
                if resized_exact { "equal" } else { "differ" },
            );
            if exact {
                assert!(resized_exact, "{name}, {key}: the resized pixels differ");
                assert_eq!(worst, 0.0, "{name}, {key}");
                assert!(
                    sum_diff < 1e-9,
                    "{name}, {key}: sums differ by {sum_diff:e} a value"
                );
                assert_eq!(
                    values_sha256(&ours),
                    reference["pixels_sha256"].as_str().unwrap(),
                    "{name}, {key}: the normalised values differ from the reference"
                );
            } else {
                let bound = JPEG_RESIZED_BOUND_STEPS * step() + 1e-6;
                assert!(worst <= bound, "{name}, {key}: {worst} > {bound}");
                assert!(
                    sum_diff < 1e-3,
                    "{name}, {key}: sums differ by {sum_diff:e} a value"
                );
            }
        }
    }
}

/// transformers 5's default `BlipImageProcessor` resizes with torchvision's antialiased bicubic
/// on a uint8 tensor: a few values per thousand differ from Pillow's by one or two steps, and
/// its normalisation (`(x - 255·mean) / (255·std)`) by a float32 rounding. lexlip is within
/// those two steps of it (2 / 255 / min(std) plus the rounding) on PNGs, and within the JPEG
/// decoders' difference more on JPEGs.
#[test]
fn the_torchvision_blip_processor_is_within_two_steps() {
    let fx = fixture_json("preprocess.json");
    let count = fx["samples"].as_u64().unwrap() as usize;
    let dir = models::photos_dir();
    for photo in fx["photos"].as_array().unwrap() {
        let name = photo["file"].as_str().unwrap();
        let reference = &photo["processors"]["blip-torchvision"];
        // JPEGs add the decoders' differences (see JPEG_RESIZED_BOUND_STEPS).
        let steps = if name.ends_with(".jpg") {
            2.0 + JPEG_RESIZED_BOUND_STEPS
        } else {
            2.0
        };
        let bound = steps * step() + 1e-6;
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let ours = blip().preprocess_named(&bytes, name).unwrap();
        let (worst, _, sum_diff) = compare(&ours, reference, count);
        let beyond_rounding = samples(&ours, count)
            .iter()
            .zip(f32s(&reference["samples"]))
            .filter(|(a, b)| (*a - b).abs() > 1e-6)
            .count();
        eprintln!(
            "{name} blip-torchvision: max |Δ| {worst:.5} (bound {bound:.5}), {beyond_rounding} \
             of {count} samples off by more than float rounding, |Δ sum| / n {sum_diff:e}; the \
             fixture measured its uint8 pixels against Pillow's: max {} steps, on a fraction {}",
            reference["uint8_max_diff_vs_pillow"], reference["uint8_fraction_diff_vs_pillow"]
        );
        assert!(worst <= bound, "{name}: {worst} > {bound}");
        assert!(
            sum_diff < 1e-3,
            "{name}: sums differ by {sum_diff:e} a value"
        );
    }
}

/// The noise picture of `make_preprocess_fixtures.pattern`.
fn pattern(w: u32, h: u32, seed: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        let v = |c: u32| {
            let n = x.wrapping_mul(37) ^ y.wrapping_mul(91) ^ c.wrapping_mul(53) ^ seed;
            (n.wrapping_mul(2_654_435_761) >> 24) as u8
        };
        image::Rgb([v(0), v(1), v(2)])
    })
}

/// Shapes the photos do not cover, against Pillow 13 and torchvision on noise (where every
/// window overshoots and clips): enlarging, one axis only, a single pixel, tall images (whose
/// vertical pass Pillow 13 runs first), crop margins that round half to even either way, an
/// image smaller than the crop. No download needed.
#[test]
fn synthetic_shapes_resample_exactly_as_pillow() {
    let fx = fixture_json("preprocess.json");
    let cases = fx["synthetic"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let n = |key: &str| case[key].as_u64().unwrap() as u32;
        let out = |i: usize| case["out"][i].as_u64().unwrap() as u32;
        let img = pattern(n("width"), n("height"), n("seed"));
        let resized = match case["op"].as_str().unwrap() {
            "pillow_bicubic" => resample::pillow_bicubic(&img, out(0), out(1)),
            "resize_and_crop" => resample::resize_and_crop(&img, out(0)),
            op => panic!("unknown operation {op}"),
        };
        assert_eq!(resized.dimensions(), (out(0), out(1)), "{case}");
        assert_eq!(
            sha256(resized.as_raw()),
            case["out_sha256"].as_str().unwrap(),
            "{case}"
        );
    }
}
