//! Thumbnails stored with image documents, so a search page can show image hits without the
//! original files (which the server never serves, and may not even have).
//!
//! A thumbnail is the picture the encoder sees — decoded by [`decode_rgb`], transparency
//! composited over white — shrunk so its longest side is at most [`MAX_SIDE`] pixels (never
//! enlarged) and encoded as a baseline JPEG of quality [`QUALITY`]: a few KB for a 64-pixel emoji,
//! ~10 KB at 256 pixels, and every browser shows it. (PNG would keep flat clip art sharper but is
//! several times larger for photos; WebP encoding is lossless-only in the `image` crate.)

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;

use crate::error::{ModelError, Result};
use crate::image::decode_rgb;

/// Longest side of a thumbnail, in pixels.
pub const MAX_SIDE: u32 = 256;
/// JPEG quality of thumbnails (1-100).
pub const QUALITY: u8 = 80;
/// The media type of the bytes [`encode`] writes.
pub const CONTENT_TYPE: &str = "image/jpeg";

/// The size a `width × height` image is shrunk to: the longest side at most [`MAX_SIDE`], the
/// aspect ratio kept (rounded, at least one pixel), never enlarged.
pub fn fitted_size(width: u32, height: u32) -> (u32, u32) {
    let longest = width.max(height);
    if longest <= MAX_SIDE {
        return (width, height);
    }
    let scale = |side: u32| {
        ((u64::from(side) * u64::from(MAX_SIDE) + u64::from(longest) / 2) / u64::from(longest))
            .max(1) as u32
    };
    (scale(width), scale(height))
}

/// The thumbnail of decoded pixels (see the module docs). `input` names the image in errors.
pub fn encode(rgb: &image::RgbImage, input: &str) -> Result<Vec<u8>> {
    let (w, h) = rgb.dimensions();
    if w == 0 || h == 0 {
        return Err(ModelError::Image {
            input: input.to_string(),
            message: "the image is empty".into(),
        });
    }
    let (tw, th) = fitted_size(w, h);
    // `thumbnail` averages every source pixel into its target (a box filter): sharp enough for
    // shrinking, and much faster than a bicubic resize of a large photo.
    let small;
    let pixels = if (tw, th) == (w, h) {
        rgb
    } else {
        small = image::imageops::thumbnail(rgb, tw, th);
        &small
    };
    let mut out = Cursor::new(Vec::new());
    JpegEncoder::new_with_quality(&mut out, QUALITY)
        .encode_image(pixels)
        .map_err(|e| ModelError::Image {
            input: input.to_string(),
            message: format!("cannot encode its thumbnail: {e}"),
        })?;
    Ok(out.into_inner())
}

/// Decodes image bytes and makes their thumbnail (for documents whose vector is precomputed, so
/// no encoder decodes them).
pub fn from_bytes(bytes: &[u8], input: &str) -> Result<Vec<u8>> {
    encode(&*decode_rgb(bytes, input)?, input)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(jpeg: &[u8]) -> image::DynamicImage {
        image::load_from_memory_with_format(jpeg, image::ImageFormat::Jpeg).unwrap()
    }

    #[test]
    fn longest_side_is_capped_and_never_enlarged() {
        assert_eq!(fitted_size(600, 300), (256, 128));
        assert_eq!(fitted_size(300, 600), (128, 256));
        assert_eq!(fitted_size(256, 256), (256, 256));
        assert_eq!(fitted_size(64, 64), (64, 64));
        assert_eq!(fitted_size(1, 1), (1, 1));
        assert_eq!(fitted_size(10_000, 3), (256, 1));
        assert_eq!(fitted_size(1000, 333), (256, 85));
    }

    #[test]
    fn thumbnails_are_small_jpegs_of_the_composited_picture() {
        // A transparent square with an opaque red centre: white around red once composited.
        let rgba = image::RgbaImage::from_fn(600, 300, |x, y| {
            if (250..350).contains(&x) && (100..200).contains(&y) {
                image::Rgba([220, 10, 10, 255])
            } else {
                image::Rgba([0, 0, 0, 0])
            }
        });
        let rgb = crate::image::rgb_on_white(image::DynamicImage::ImageRgba8(rgba));
        let jpeg = encode(&rgb, "test").unwrap();
        let img = decode(&jpeg).to_rgb8();
        assert_eq!(img.dimensions(), (256, 128));
        let corner = img.get_pixel(2, 2).0;
        assert!(corner.iter().all(|&c| c > 240), "corner {corner:?}");
        let centre = img.get_pixel(128, 64).0;
        assert!(centre[0] > 180 && centre[1] < 60, "centre {centre:?}");
    }

    #[test]
    fn small_images_keep_their_size_and_stay_a_few_kb() {
        let rgb = image::RgbImage::from_fn(64, 64, |x, y| {
            image::Rgb([(x * 4) as u8, (y * 4) as u8, 128])
        });
        let jpeg = encode(&rgb, "test").unwrap();
        assert_eq!(decode(&jpeg).to_rgb8().dimensions(), (64, 64));
        assert!(jpeg.len() < 6_000, "{} bytes", jpeg.len());
    }

    #[test]
    fn bad_bytes_are_an_image_error() {
        let e = from_bytes(b"not an image", "notes.txt").unwrap_err();
        assert!(matches!(e, ModelError::Image { .. }), "{e}");
        assert!(e.to_string().contains("notes.txt"), "{e}");
    }
}
