//! Augmented views of the training pictures for the objectives over cached embeddings
//! (`--image-views N`: the adapter and the lexicon heads). Each view is drawn once by the
//! tower objectives' augmentation options, fixed by the seed, encoded like the pictures and
//! cached beside them; a run then trains on every pair `N + 1` times, once through its
//! picture and once through each view. A cached embedding cannot be augmented, so the views
//! are how these objectives see a picture cropped, recoloured or redrawn flat.

use candle_core::{Device, Tensor};
use lexlip_corpus::ImageRef;
use lexlip_model::{ImageProcessor, PreprocessedImage};

use super::rows::{IMAGES, PairRows, TEXTS, image_rows};
use super::{CacheMeta, EmbeddingCache, Section};
use crate::augment::Augment;
use crate::error::{Result, TrainError};
use crate::observe::Observer;
use crate::options::TrainOptions;
use crate::rng::{self, Rng};

/// The views' cache section (and the start of its directory's name).
pub(crate) const VIEWS: &str = "views";

/// What the views of a run are made of and by, for their cache.
pub(crate) struct ViewSpec<'a> {
    /// `--image-views`.
    pub count: usize,
    pub seed: u64,
    pub augment: Augment,
    /// What identifies the pictures' cache (the corpus and the encoder): the views' key adds
    /// the count, the seed and the augmentation to it.
    pub key: serde_json::Value,
    /// The encoder's directory and its rows' width.
    pub model: &'a std::path::Path,
    pub dim: usize,
    /// Pictures per pass through the encoder.
    pub chunk: usize,
}

impl<'a> ViewSpec<'a> {
    /// The views `opts` asks for (none without `--image-views`), drawn for an encoder that
    /// resizes and normalises as `processor`.
    pub fn of(
        opts: &TrainOptions,
        processor: &ImageProcessor,
        key: serde_json::Value,
        model: &'a std::path::Path,
        dim: usize,
        chunk: usize,
    ) -> Option<Self> {
        (opts.model.image_views > 0).then(|| Self {
            count: opts.model.image_views,
            seed: opts.optim.seed,
            augment: Augment::of_options(&opts.data, processor),
            key,
            model,
            dim,
            chunk,
        })
    }
}

/// Opens or builds the cache of `spec.count` views of each of `images` in a directory of
/// `cache_dir` named after what makes them (`views-HASH`), so runs with other views share the
/// pictures' cache: row `k · n + i` is view `k + 1` of picture `i`, augmented with its own
/// stream of the seed and `encode`d as the pictures are.
pub(crate) fn cache(
    cache_dir: &std::path::Path,
    images: &[ImageRef],
    spec: &ViewSpec<'_>,
    encode: impl Fn(&[PreprocessedImage]) -> Result<Vec<f32>>,
    observer: &mut dyn Observer,
) -> Result<EmbeddingCache> {
    let (count, n, augment) = (spec.count, images.len(), &spec.augment);
    let mut key = spec.key.clone();
    key["views"] = serde_json::json!({
        "count": count,
        "seed": spec.seed,
        "crop_scale": augment.crop_scale,
        "jitter": augment.jitter,
        "hflip": augment.hflip,
        "style": augment.style,
    });
    // Rotation and hue joined later: keyed only when on, so earlier caches stay valid.
    if augment.rotate > 0.0 {
        key["views"]["rotate"] = augment.rotate.into();
    }
    if augment.hue > 0.0 {
        key["views"]["hue"] = augment.hue.into();
    }
    let key = crate::fingerprint::sha256_json(&key);
    let dir = cache_dir.join(format!("{VIEWS}-{}", &key[..16]));
    observer.message(&format!(
        "caching {count} augmented views of each of the {n} images in {}",
        dir.display()
    ));
    let meta = CacheMeta::new(spec.model, key, spec.dim, &[(VIEWS, n * count)])?;
    let section = Section {
        name: VIEWS,
        rows: n * count,
        encode: Box::new(|start, end| {
            // Runs of one view at a time.
            let mut out = Vec::new();
            let mut row = start;
            while row < end {
                let (view, first) = (row / n, row % n);
                let last = (first + end - row).min(n);
                out.extend(image_rows(
                    &images[first..last],
                    spec.chunk,
                    |bytes, name| {
                        // The stream's name predates the heads' views: the adapter's caches
                        // and models stay as they were built.
                        let mut rng = Rng::new(&[
                            spec.seed,
                            rng::key("adapter-view"),
                            view as u64,
                            rng::key(name),
                        ]);
                        let pixels = augment
                            .pixels(bytes, name, &mut rng)
                            .map_err(TrainError::Corpus)?;
                        Ok(PreprocessedImage::from_chw(augment.processor.size, pixels)?)
                    },
                    &encode,
                )?);
                row += last - first;
            }
            Ok(out)
        }),
    };
    EmbeddingCache::build(&dir, meta, vec![section], &mut |d, t| {
        observer.encoding(d, t)
    })
}

/// Index `v` of an order over `pairs × (N + 1)` entries: pair `v mod pairs` seen through view
/// `v div pairs` (0: the picture itself).
pub(crate) fn pair_and_view(v: usize, pairs: usize) -> (usize, usize) {
    (v % pairs, v / pairs)
}

/// How a run's start message says it trains each pair once per input (empty without views).
pub(crate) fn pairs_note(views: usize) -> String {
    if views == 0 {
        return String::new();
    }
    format!(" × {} (each picture and its {views} views)", views + 1)
}

/// A batch of pairs drawn from such an order.
pub(crate) struct Drawn {
    /// The captions' rows.
    pub pairs: Vec<usize>,
    /// Their pictures.
    pub images: Vec<usize>,
    /// Which of a picture's inputs each pair reads: 0 the picture itself, `k` its `k`-th view.
    pub views: Vec<usize>,
}

/// A batch's entries of such an order as its pairs, the view each reads and their pictures.
pub(crate) fn drawn(entries: Vec<usize>, rows: &PairRows) -> Drawn {
    let (pairs, views): (Vec<usize>, Vec<usize>) = entries
        .into_iter()
        .map(|v| pair_and_view(v, rows.len()))
        .unzip();
    let images = pairs.iter().map(|&p| rows.image(p) as usize).collect();
    Drawn {
        pairs,
        images,
        views,
    }
}

/// What a batch of drawn pairs reads, on `device`: its pictures' own cached rows (the
/// [`IMAGES`] section of `own`), their augmented views when cached, and its captions' rows (the
/// [`TEXTS`] section of `captions`).
pub(crate) struct PairInputs<'a> {
    own: &'a EmbeddingCache,
    views: Option<&'a EmbeddingCache>,
    captions: &'a EmbeddingCache,
    pub device: Device,
}

impl<'a> PairInputs<'a> {
    pub fn new(
        own: &'a EmbeddingCache,
        views: Option<&'a EmbeddingCache>,
        captions: &'a EmbeddingCache,
        device: &Device,
    ) -> Self {
        Self {
            own,
            views,
            captions,
            device: device.clone(),
        }
    }

    /// A drawn batch's picture rows, each seen through its view ([`batch_rows`]), and its
    /// captions' rows.
    pub fn rows(&self, batch: &Drawn) -> Result<(Tensor, Tensor)> {
        let image = batch_rows(
            self.own,
            IMAGES,
            self.views,
            &batch.images,
            &batch.views,
            &self.device,
        )?;
        let text = self.captions.rows(TEXTS, &batch.pairs, &self.device)?;
        Ok((image, text))
    }
}

/// The image rows of a batch: picture `pictures[j]` itself where `views[j]` is 0, else its view
/// `views[j]` (row `(views[j] − 1) · n + pictures[j]` of `view_cache`, for the `n` pictures of
/// `section` in `images`).
pub(crate) fn batch_rows(
    images: &EmbeddingCache,
    section: &str,
    view_cache: Option<&EmbeddingCache>,
    pictures: &[usize],
    views: &[usize],
    device: &Device,
) -> Result<Tensor> {
    let view_cache = match view_cache {
        Some(cache) if views.iter().any(|&k| k > 0) => cache,
        _ => return images.rows(section, pictures, device),
    };
    let image_count = images.len(section);
    // Each pair's place among the rows read: the pictures' own rows first, then the views'.
    let (mut own, mut viewed, mut at) = (Vec::new(), Vec::new(), Vec::new());
    for (&image, &k) in pictures.iter().zip(views) {
        if k == 0 {
            at.push((false, own.len()));
            own.push(image);
        } else {
            at.push((true, viewed.len()));
            viewed.push((k - 1) * image_count + image);
        }
    }
    let mut parts = Vec::new();
    if !own.is_empty() {
        parts.push(images.rows(section, &own, device)?);
    }
    parts.push(view_cache.rows(VIEWS, &viewed, device)?);
    let order: Vec<u32> = at
        .iter()
        .map(|&(view, j)| (if view { own.len() + j } else { j }) as u32)
        .collect();
    let all = Tensor::cat(&parts, 0)?;
    let order = Tensor::from_vec(order, pictures.len(), device)?;
    Ok(all.index_select(&order, 0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of one section whose row `r` is `[value(r), value(r)]`.
    fn cache(
        dir: &std::path::Path,
        name: &'static str,
        rows: usize,
        value: fn(usize) -> f32,
    ) -> EmbeddingCache {
        let meta = CacheMeta::new(dir, "test".into(), 2, &[(name, rows)]).unwrap();
        let encode = move |s: usize, e: usize| Ok((s..e).flat_map(|r| [value(r); 2]).collect());
        let sections = vec![Section {
            name,
            rows,
            encode: Box::new(encode),
        }];
        EmbeddingCache::build(&dir.join(name), meta, sections, &mut |_, _| {}).unwrap()
    }

    #[test]
    fn a_batch_reads_each_pair_from_its_picture_or_its_view() {
        let tmp = tempfile::tempdir().unwrap();
        // Three pictures, two views each: picture i is i, view k of picture i is 10·k + i.
        let images = cache(tmp.path(), "images", 3, |r| r as f32);
        let views = cache(tmp.path(), VIEWS, 6, |r| (10 * (r / 3 + 1) + r % 3) as f32);
        let pictures = [2, 0, 1, 2, 0];
        let read = |drawn: &[usize]| -> Vec<f32> {
            let x = batch_rows(
                &images,
                "images",
                Some(&views),
                &pictures,
                drawn,
                &Device::Cpu,
            )
            .unwrap();
            x.to_vec2::<f32>().unwrap().iter().map(|r| r[0]).collect()
        };
        assert_eq!(read(&[1, 0, 2, 0, 2]), [12.0, 0.0, 21.0, 2.0, 20.0]);
        // With none drawn, the pictures' own rows.
        assert_eq!(read(&[0; 5]), [2.0, 0.0, 1.0, 2.0, 0.0]);
    }

    #[test]
    fn an_order_entry_is_a_pair_through_a_view() {
        // Four pairs, two views: entries 0-3 the pictures, 4-7 view 1, 8-11 view 2.
        assert_eq!(pair_and_view(2, 4), (2, 0));
        assert_eq!(pair_and_view(5, 4), (1, 1));
        assert_eq!(pair_and_view(11, 4), (3, 2));
    }
}
