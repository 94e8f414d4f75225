//! Resampling as Pillow does it (PLACEHOLDER until the Pillow-exact version lands: these use
//! the `image` crate's Catmull-Rom filter).

use image::RgbImage;
use image::imageops::FilterType;

/// `rgb` resized to `width × height` as Pillow's `Image.resize(…, BICUBIC)`.
pub fn pillow_bicubic(rgb: &RgbImage, width: u32, height: u32) -> RgbImage {
    image::imageops::resize(rgb, width, height, FilterType::CatmullRom)
}

/// torchvision's `Resize(size)` then `CenterCrop(size)` of a PIL image.
pub fn resize_and_crop(rgb: &RgbImage, size: u32) -> RgbImage {
    let (w, h) = rgb.dimensions();
    let (nw, nh) = if w <= h {
        (
            size,
            ((u64::from(h) * u64::from(size)) / u64::from(w)) as u32,
        )
    } else {
        (
            ((u64::from(w) * u64::from(size)) / u64::from(h)) as u32,
            size,
        )
    };
    let resized = pillow_bicubic(rgb, nw, nh);
    image::imageops::crop_imm(&resized, (nw - size) / 2, (nh - size) / 2, size, size).to_image()
}
