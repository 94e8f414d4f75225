//! Dense encoders for the fallback index: texts and images into one embedding space.

use candle_core::{DType, Tensor};
use lexlip_proto::DenseVector;

use crate::error::Result;
use crate::pixels::{ImageProcessor, PreprocessedImage};

/// Texts and images → L2-normalised dense vectors whose inner product is the cosine similarity.
/// Implementations are `Send + Sync` so a server can share one across request handlers.
pub trait DenseEncoder: Send + Sync {
    /// Embedding dimension.
    fn dim(&self) -> usize;
    /// One unit-length vector per text, in input order.
    fn encode_texts(&self, texts: &[&str]) -> Result<Vec<DenseVector>>;
    /// How this encoder's images are resized and normalised.
    fn image_processor(&self) -> &ImageProcessor;
    /// Decodes and preprocesses an image for this encoder; `input` names it in errors.
    fn preprocess_image(&self, bytes: &[u8], input: &str) -> Result<PreprocessedImage> {
        self.image_processor().preprocess_named(bytes, input)
    }
    /// The image tower's embeddings `(batch, dim)` of stacked pixels `(batch, 3, size, size)` on
    /// [`Self::device`].
    fn image_features(&self, pixels: &Tensor) -> Result<Tensor>;
    fn device(&self) -> &candle_core::Device;
    /// One unit-length vector per image, in input order.
    fn encode_images(&self, images: &[PreprocessedImage]) -> Result<Vec<DenseVector>> {
        image_embeddings(images, self.image_processor().size, self.device(), |px| {
            self.image_features(px)
        })
    }
}

/// Unit-length embeddings of token ids, right-padded with `pad` to the longest row
/// ([`crate::tokens::pad_batch`]) on `device`, through a tower's `features` (`(batch, dim)`).
pub(crate) fn text_embeddings(
    ids: &[Vec<u32>],
    pad: u32,
    device: &candle_core::Device,
    features: impl Fn(&Tensor) -> candle_core::Result<Tensor>,
) -> Result<Vec<DenseVector>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, _mask) = crate::tokens::pad_batch(ids, pad, device)?;
    unit_rows(&features(&ids)?)
}

/// Unit-length embeddings of preprocessed images: stacked into `(batch, 3, size, size)` pixels on
/// `device`, through a tower's `features` (`(batch, dim)`).
pub(crate) fn image_embeddings(
    images: &[PreprocessedImage],
    size: usize,
    device: &candle_core::Device,
    features: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Vec<DenseVector>> {
    if images.is_empty() {
        return Ok(Vec::new());
    }
    unit_rows(&features(&crate::pixels::stack(images, size, device)?)?)
}

/// Unit-length embeddings of `texts` through a tower's `features` (`(batch, dim)`); none for
/// no text, without running the tower.
pub(crate) fn unit_text_rows(
    texts: &[&str],
    features: impl FnOnce(&[&str]) -> Result<Tensor>,
) -> Result<Vec<DenseVector>> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    unit_rows(&features(texts)?)
}

/// The rows of a `(batch, dim)` embedding tensor as unit-length vectors (in f32).
pub(crate) fn unit_rows(t: &Tensor) -> Result<Vec<DenseVector>> {
    let rows = t.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    rows.into_iter()
        .map(|r| Ok(DenseVector::new(r)?.normalized()))
        .collect()
}
