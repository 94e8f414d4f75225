//! The two lexicon heads as they train: their parameters, which start as the backbone's own
//! embedding of every vocabulary word (so a lexicon means something before any step), and the
//! lexicons they give of backbone embeddings.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use lexlip_model::heads::{IMAGE_HEAD, TEXT_HEAD};

use crate::cache::EmbeddingCache;
use crate::cache::rows::{IMAGES, TEXTS, WORDS};
use crate::error::{Result, TrainError};
use crate::optim::Param;
use crate::options::VocabBias;

/// The heads' starting scale: a term's logit is 5 × the cosine between the input and the
/// word, so a word at cosine 0.3 (a close one, for a dense model trained at τ 0.05) starts
/// near weight 1 (`log(1 + 1.5)`) and a lexicon pair's dot product near the tens, where the
/// in-batch softmax at τ ~0.5 is neither flat nor saturated.
pub const INIT_SCALE: f64 = 5.0;

/// The two heads' parameters.
pub struct HeadsModel {
    pub store: VarMap,
    /// `(vocab, dim)` and `(vocab)` per side.
    pub image_weight: Var,
    pub image_bias: Var,
    pub text_weight: Var,
    pub text_bias: Var,
    /// `(dim)` per side: the mean input, subtracted before the head (fixed).
    pub image_center: Tensor,
    pub text_center: Tensor,
    /// `(vocab)`, 1 where a term may carry weight.
    pub allowed: Tensor,
}

impl HeadsModel {
    /// Both heads start as the backbone's embeddings of the vocabulary's words (the cache's
    /// `words`), scaled by [`INIT_SCALE`], each with one bias for all terms: minus the scaled
    /// cosine of an input's `2K`-th nearest allowed word (mean over a sample of the side's
    /// inputs), so a lexicon starts with about `2K` terms whatever the cosines' level.
    ///
    /// Why per side: dense dual encoders leave images and texts in separate cones (the
    /// modality gap), so an image's cosine to every word's text embedding can be negative while
    /// its ranking of the words is right; a zero bias would then start every image lexicon
    /// empty, and relu passes no gradient to an empty lexicon.
    pub fn init(
        cache: &EmbeddingCache,
        allowed: &[f32],
        keep: [usize; 2],
        device: &Device,
    ) -> Result<Self> {
        let vocab = cache.len(WORDS);
        if allowed.len() != vocab {
            return Err(TrainError::invalid(format!(
                "the cache holds {vocab} vocabulary words but the vocabulary has {}",
                allowed.len()
            )));
        }
        let all: Vec<usize> = (0..vocab).collect();
        let unit = cache.rows(WORDS, &all, device)?;
        let allowed_ids: Vec<usize> = (0..vocab).filter(|&t| allowed[t] > 0.0).collect();
        let (image_center, text_center) = (
            mean_row(cache, IMAGES, device)?,
            mean_row(cache, TEXTS, device)?,
        );
        let bias = |section: &str, center: &Tensor, k: usize| -> Result<Tensor> {
            let cut = nearest_cosine(cache, section, center, &unit, &allowed_ids, k, device)?;
            Ok(Tensor::full((-INIT_SCALE * cut) as f32, vocab, device)?)
        };
        let image_bias = bias(IMAGES, &image_center, keep[0])?;
        let text_bias = bias(TEXTS, &text_center, keep[1])?;
        let words = (&unit * INIT_SCALE)?;
        Self::from_tensors(
            [words.clone(), image_bias, words, text_bias],
            [image_center, text_center],
            Tensor::from_slice(allowed, vocab, device)?,
        )
    }

    /// Heads with the given starting weights (image weight and bias, text weight and bias),
    /// fixed centres (image, text) and allowed terms.
    pub fn from_tensors(start: [Tensor; 4], centers: [Tensor; 2], allowed: Tensor) -> Result<Self> {
        let store = VarMap::new();
        let var = |name: String, t: Tensor| -> Result<Var> {
            let v = Var::from_tensor(&t)?;
            store
                .data()
                .lock()
                .map_err(|_| TrainError::invalid("parameter store poisoned"))?
                .insert(name, v.clone());
            Ok(v)
        };
        let [iw, ib, tw, tb] = start;
        Ok(Self {
            image_weight: var(format!("{IMAGE_HEAD}.weight"), iw)?,
            image_bias: var(format!("{IMAGE_HEAD}.bias"), ib)?,
            text_weight: var(format!("{TEXT_HEAD}.weight"), tw)?,
            text_bias: var(format!("{TEXT_HEAD}.bias"), tb)?,
            image_center: centers[0].clone(),
            text_center: centers[1].clone(),
            allowed,
            store,
        })
    }

    /// The parameters the optimizer updates: both heads' weights, and their biases unless
    /// `bias` is [`VocabBias::Fixed`].
    ///
    /// Why a fixed bias: the inputs are centred on the training set's mean, so with one
    /// shared bias every term's mean logit over the training items is that bias, and a term
    /// can lead only the items its weight row points at. A trained per-term bias is a term's
    /// prior instead: measured on `train.tsv`, the clip-art category words (`signs`, `places`,
    /// `computer`) rose 1.8 above the median and `computer` led the lexicons of a quarter of
    /// the unseen concepts' images.
    pub fn params(&self, bias: VocabBias) -> Vec<Param> {
        crate::params::sorted_vars(&self.store)
            .into_iter()
            .filter(|(name, _)| bias == VocabBias::Train || !name.ends_with(".bias"))
            .map(|(name, var)| Param::new(name, var, 1.0))
            .collect()
    }

    /// `(batch, vocab)` lexicons of `(batch, dim)` embeddings through one head, cut to `k`.
    pub fn lexicons(&self, x: &Tensor, image: bool, k: usize) -> Result<Tensor> {
        crate::lexicon::top_k(&self.full_lexicons(x, image)?, k)
    }

    /// The lexicons before the top-K cut `(batch, vocab)`: what grounding trains, so that a
    /// caption word outside an item's K strongest terms still gets the gradient that lifts it
    /// in (after the cut only the K kept terms get any).
    pub fn full_lexicons(&self, x: &Tensor, image: bool) -> Result<Tensor> {
        self.lexicons_of_logits(&self.logits(x, image)?)
    }

    /// The head's logits `W·(x − c) + b` `(batch, vocab)`, before the relu that zeroes (and
    /// stops the gradient of) every term below 0.
    pub fn logits(&self, x: &Tensor, image: bool) -> Result<Tensor> {
        let (w, b, c) = if image {
            (&self.image_weight, &self.image_bias, &self.image_center)
        } else {
            (&self.text_weight, &self.text_bias, &self.text_center)
        };
        Ok(lexlip_model::heads::head_logits(
            x,
            c,
            w.as_tensor(),
            b.as_tensor(),
        )?)
    }

    /// The lexicons `(batch, vocab)` of a head's [`Self::logits`], before the top-K cut.
    pub fn lexicons_of_logits(&self, logits: &Tensor) -> Result<Tensor> {
        Ok(lexlip_model::heads::weights_of_logits(
            logits,
            &self.allowed,
        )?)
    }
}

/// Inputs sampled per side to set the starting biases.
const BIAS_SAMPLE: usize = 512;

/// Rows of `section` read at once.
const CHUNK_ROWS: usize = 4096;

/// The mean row of `section` `(dim)`.
fn mean_row(cache: &EmbeddingCache, section: &str, device: &Device) -> Result<Tensor> {
    let n = cache.len(section);
    let mut sum = Tensor::zeros(cache.meta.dim, DType::F64, device)?;
    for start in (0..n).step_by(CHUNK_ROWS) {
        let rows: Vec<usize> = (start..(start + CHUNK_ROWS).min(n)).collect();
        let part = cache.rows(section, &rows, device)?.to_dtype(DType::F64)?;
        sum = (sum + part.sum(0)?)?;
    }
    Ok((sum / n.max(1) as f64)?.to_dtype(DType::F32)?)
}

/// The mean, over up to [`BIAS_SAMPLE`] evenly spaced rows of `section` less `center`, of a
/// row's dot product with its `k`-th nearest word among `allowed` (`words`: unit rows
/// `(vocab, dim)`).
fn nearest_cosine(
    cache: &EmbeddingCache,
    section: &str,
    center: &Tensor,
    words: &Tensor,
    allowed: &[usize],
    k: usize,
    device: &Device,
) -> Result<f64> {
    let n = cache.len(section);
    if n == 0 || allowed.is_empty() {
        return Ok(0.0);
    }
    let take = n.min(BIAS_SAMPLE);
    let rows: Vec<usize> = (0..take).map(|i| i * n / take).collect();
    let sims = cache
        .rows(section, &rows, device)?
        .broadcast_sub(center)?
        .matmul(&words.t()?)?
        .to_vec2::<f32>()?;
    let k = k.clamp(1, allowed.len());
    let mut sum = 0.0;
    for row in sims {
        let mut v: Vec<f32> = allowed.iter().map(|&t| row[t]).collect();
        let (_, kth, _) = v.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        sum += f64::from(*kth);
    }
    Ok(sum / take as f64)
}
