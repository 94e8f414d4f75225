//! Small generated images, and pictures composed of several.

use std::path::Path;

/// A `size`×`size` PNG whose colours depend on `seed` (different seeds, different images).
pub fn png(seed: u32, size: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(size, size, |x, y| {
        let v = seed
            .wrapping_mul(2_654_435_761)
            .wrapping_add(x * 31 + y * 17);
        image::Rgb([(v >> 3) as u8, (v >> 11) as u8, (v >> 19) as u8])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .expect("encoding a PNG in memory");
    out.into_inner()
}

/// Writes `items` (a picture's path, relative to `sources`' folder or absolute, and its label)
/// as the sources list `sources` and composes pictures of them into WebDataset shards in
/// `shards` with `lexlip bench compose WORDS`: a corpus of several things per picture.
pub fn compose_shards<P: AsRef<Path>>(
    sources: &Path,
    items: impl IntoIterator<Item = (P, String)>,
    shards: &Path,
    words: &str,
) {
    let lines: Vec<String> = items
        .into_iter()
        .map(|(image, label)| serde_json::json!({"image": image.as_ref(), "label": label}))
        .map(|item| item.to_string())
        .collect();
    std::fs::write(sources, lines.join("\n")).expect("writing the sources list");
    let out = crate::lexlip(&crate::line(
        &format!("bench compose {words}"),
        &[("--sources", &sources), ("--out", &shards)],
    ));
    crate::assert_success(&out);
}
