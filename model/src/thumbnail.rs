//! Thumbnails stored with image documents, so a search page can show image hits without the
//! original files (which the server never serves, and may not even have).
//!
//! A thumbnail is the picture the encoder sees — decoded by [`decode_rgb`], transparency
//! composited over white — shrunk so its longest side is at most [`MAX_SIDE`] pixels (never
//! enlarged) and encoded as a baseline JPEG of quality [`QUALITY`]: a few KB for a 64-pixel emoji,
//! ~10 KB at 256 pixels, and every browser shows it. (PNG would keep flat clip art sharper but is
//! several times larger for photos; WebP encoding is lossless-only in the `image` crate.)
//!
//! A JPEG that already fits is its own thumbnail ([`of`]): encoding it again would cost more CPU
//! than the decode (a sixth of `lexlip index`'s time on 224-pixel pictures) and lose detail a
//! second time. It is kept only when a browser shows what the encoder saw and it is not much
//! larger than a re-encoded one: no Exif block (its orientation would turn the picture), one or
//! three colour components, and at most [`REUSE_BITS_PER_PIXEL`].

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
/// The most bits per pixel of a JPEG kept as its own thumbnail (one re-encoded at [`QUALITY`]
/// takes about 1-2 on photos, well under 1 on clip art).
pub const REUSE_BITS_PER_PIXEL: usize = 3;

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

/// The thumbnail of an image whose bytes decoded to `rgb`: the bytes themselves when they are a
/// JPEG that can be kept (see the module docs), else [`encode`] of the pixels.
pub fn of(bytes: &[u8], rgb: &image::RgbImage, input: &str) -> Result<Vec<u8>> {
    let (w, h) = rgb.dimensions();
    if reusable(bytes, w, h) {
        return Ok(bytes.to_vec());
    }
    encode(rgb, input)
}

/// Whether JPEG bytes of a `width × height` picture can be stored as its thumbnail as they are:
/// they fit [`MAX_SIDE`], take at most [`REUSE_BITS_PER_PIXEL`], carry no Exif block and have one
/// or three components (a browser shows them as the decoder read them). Reads only the marker
/// segments before the scan; anything it does not understand says no.
fn reusable(bytes: &[u8], width: u32, height: u32) -> bool {
    let pixels = width as usize * height as usize;
    if fitted_size(width, height) != (width, height)
        || bytes.len() * 8 > pixels * REUSE_BITS_PER_PIXEL
        || !bytes.starts_with(&[0xFF, 0xD8])
    {
        return false;
    }
    let mut at = 2;
    let mut components = None;
    while at + 4 <= bytes.len() {
        if bytes[at] != 0xFF {
            return false;
        }
        let marker = bytes[at + 1];
        if marker == 0xFF {
            at += 1; // fill byte
            continue;
        }
        let len = usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
        let Some(body) = bytes.get(at + 4..at + 2 + len).filter(|_| len >= 2) else {
            return false;
        };
        match marker {
            // APP1 with an Exif header: it may set an orientation the decoder ignored.
            0xE1 if body.starts_with(b"Exif\0\0") => return false,
            // Start of frame (baseline, extended, progressive; not lossless or arithmetic).
            0xC0..=0xC2 => components = body.get(5).copied(),
            0xDA => return matches!(components, Some(1 | 3)),
            _ => {}
        }
        at += 2 + len;
    }
    false
}

/// Decodes image bytes and makes their thumbnail (for documents whose vector is precomputed, so
/// no encoder decodes them).
pub fn from_bytes(bytes: &[u8], input: &str) -> Result<Vec<u8>> {
    of(bytes, &*decode_rgb(bytes, input)?, input)
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

    /// JPEG bytes at `quality`, optionally with an Exif block after the start marker.
    fn jpeg_of(rgb: &image::RgbImage, quality: u8, exif: bool) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        JpegEncoder::new_with_quality(&mut out, quality)
            .encode_image(rgb)
            .unwrap();
        let mut bytes = out.into_inner();
        if exif {
            // APP1 "Exif\0\0" + a big-endian TIFF header: orientation 6 (turned 90°).
            let mut app1 =
                b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0"
                    .to_vec();
            let len = (app1.len() + 2) as u16;
            let mut segment = vec![0xFF, 0xE1];
            segment.extend_from_slice(&len.to_be_bytes());
            segment.append(&mut app1);
            bytes.splice(2..2, segment);
        }
        bytes
    }

    fn gradient(w: u32, h: u32) -> image::RgbImage {
        image::RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([(x * 255 / w) as u8, (y * 255 / h) as u8, 90])
        })
    }

    #[test]
    fn a_jpeg_that_fits_is_its_own_thumbnail() {
        let bytes = jpeg_of(&gradient(224, 160), 85, false);
        let decoded = decode_rgb(&bytes, "scene.jpg").unwrap();
        assert!(reusable(&bytes, 224, 160));
        assert_eq!(of(&bytes, &decoded, "scene.jpg").unwrap(), bytes);
        assert_eq!(from_bytes(&bytes, "scene.jpg").unwrap(), bytes);
    }

    #[test]
    fn other_images_are_encoded_again() {
        let small = gradient(120, 80);
        let again = |bytes: &[u8]| {
            let decoded = decode_rgb(bytes, "x").unwrap();
            let (w, h) = decoded.dimensions();
            assert!(!reusable(bytes, w, h));
            let thumb = of(bytes, &decoded, "x").unwrap();
            assert_ne!(thumb, bytes);
            assert_eq!(thumb, encode(&decoded, "x").unwrap());
        };
        // Too large a picture, an Exif block, too many bits per pixel, and a PNG.
        again(&jpeg_of(&gradient(400, 300), 80, false));
        again(&jpeg_of(&small, 80, true));
        let noise = image::RgbImage::from_fn(120, 80, |x, y| {
            let v = (x.wrapping_mul(7919) ^ y.wrapping_mul(104_729)).wrapping_mul(2_654_435_761);
            image::Rgb([(v >> 8) as u8, (v >> 16) as u8, (v >> 24) as u8])
        });
        again(&jpeg_of(&noise, 100, false));
        let mut png = Cursor::new(Vec::new());
        small.write_to(&mut png, image::ImageFormat::Png).unwrap();
        again(&png.into_inner());
        // Truncated or damaged headers are never kept.
        let good = jpeg_of(&small, 80, false);
        for cut in [2, 4, 20, 100] {
            assert!(!reusable(&good[..cut], 120, 80), "cut at {cut}");
        }
        assert!(!reusable(&[0xFF, 0xD8, 0x00, 0x00, 0x00], 1, 1));
    }

    #[test]
    fn bad_bytes_are_an_image_error() {
        let e = from_bytes(b"not an image", "notes.txt").unwrap_err();
        assert!(matches!(e, ModelError::Image { .. }), "{e}");
        assert!(e.to_string().contains("notes.txt"), "{e}");
    }
}
