//! The LexLIP objectives on tensors (paper sec. 3.2-3.3). Each is checked against a PyTorch
//! reference written from the paper, on fixed small tensors (`tests/losses_vs_torch.rs`; the
//! fixture is made by `scripts/make_train_fixtures.py`).
//!
//! Sums over the data set in the paper (`Σ_D`) are means over the batch here (and over the masked
//! tokens for the MLM losses), as in every implementation that trains with mini-batches.

use candle_core::{D, DType, Tensor};

use crate::bert::Decoder;
use crate::error::Result;
use crate::lexicon::Flops;
use crate::nn::{Dropout, gather_rows, log_softmax, softmax};

/// `total + weight · loss`, with `loss` named in `parts` (the losses a step logs).
pub(crate) fn add_weighted(
    total: Tensor,
    parts: &mut Vec<(&'static str, Tensor)>,
    name: &'static str,
    loss: Tensor,
    weight: f64,
) -> Result<Tensor> {
    let total = (total + (&loss * weight)?)?;
    parts.push((name, loss));
    Ok(total)
}

/// Subtracted from padding logits before max-pooling raw logits (never relu'd, so padding must
/// lose the max).
const PAD_PENALTY: f64 = 1e9;

/// `max_t S_t` of `(batch, tokens, vocab)` logits over the non-padding tokens (`mask = 0` never
/// wins) → `(batch, vocab)`. The gradient goes to the arg-max token through a gather, which on
/// vocabulary-sized tensors costs one scatter in the backward pass where a differentiated `max`
/// costs a compare, a cast, a product and a sum of the whole input.
pub fn max_pool(logits: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    let arg = match mask {
        Some(m) => {
            let off = ((m.to_dtype(logits.dtype())? - 1.0)? * PAD_PENALTY)?;
            logits
                .detach()
                .broadcast_add(&off.unsqueeze(D::Minus1)?)?
                .argmax_keepdim(1)?
        }
        None => logits.detach().argmax_keepdim(1)?,
    };
    Ok(logits.gather(&arg, 1)?.squeeze(1)?)
}

/// Lexicon weights `p = log(1 + relu(m))` of max-pooled logits `m` ([`max_pool`]); equal to
/// `log(1 + max_t relu(S_t))` (eq. 3, 6) because relu is monotonic.
pub fn splade_pooled(pooled: &Tensor) -> Result<Tensor> {
    Ok((pooled.relu()? + 1.0)?.log()?)
}

/// Lexicon weights `p = log(1 + max_t relu(S_t))` (eq. 3, 6) of `(batch, tokens, vocab)` logits;
/// padding (`mask = 0`) never contributes. Differentiable: the gradient of the max goes to the
/// maximising token.
pub fn splade(logits: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    splade_pooled(&max_pool(logits, mask)?)
}

/// Lexicon-importance distribution `a = softmax(max_t S_t)` over the vocabulary (eq. 8-9).
pub fn lexicon_distribution(logits: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    Ok(softmax(&max_pool(logits, mask)?)?)
}

/// The CBoW bottleneck `b = a · sg(W_te)` (eq. 10): `(batch, vocab) × (vocab, hidden)`, no
/// gradient into the word embeddings.
pub fn bottleneck(distribution: &Tensor, word_embeddings: &Tensor) -> Result<Tensor> {
    Ok(distribution.matmul(&word_embeddings.detach())?)
}

/// Mean cross-entropy of `(rows, classes)` logits against class ids `(rows)` (u32).
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let picked = log_softmax(logits)?.gather(&targets.unsqueeze(1)?, 1)?;
    Ok(picked.mean_all()?.neg()?)
}

/// Masked-LM loss (SelfMLM, eq. 7): the cross-entropy of `(batch, tokens, vocab)` logits at the
/// masked positions `rows` (flattened `b·tokens + t`, u32) against their original ids.
pub fn masked_lm(logits: &Tensor, rows: &Tensor, targets: &Tensor) -> Result<Tensor> {
    cross_entropy(&gather_rows(logits, rows)?, targets)
}

/// Mean absolute error (MaskVLM's MIM, eq. 1; ConLIP's ConMIM, eq. 6; SimMIM's L1).
pub fn l1(predicted: &Tensor, target: &Tensor) -> Result<Tensor> {
    Ok((predicted - target)?.abs()?.mean_all()?)
}

/// What a LexMLM decoder reconstructs: the heavily masked text.
#[derive(Debug, Clone, Copy)]
pub struct DecoderInput<'a> {
    /// `(batch, tokens, hidden)` embeddings of the decoder's masked text.
    pub embedded: &'a Tensor,
    /// `(batch, tokens)` attention mask.
    pub mask: &'a Tensor,
    /// Masked positions (flattened `b·tokens + t`) and their original ids.
    pub rows: &'a Tensor,
    pub targets: &'a Tensor,
}

/// LexMLM (eq. 10-14): the CBoW bottleneck of a lexicon-importance `distribution` replaces
/// `[CLS]` of the masked text, `decoder` reconstructs it; mean cross-entropy at its masks.
pub fn lex_mlm(
    decoder: &Decoder,
    distribution: &Tensor,
    word_embeddings: &Tensor,
    input: &DecoderInput<'_>,
    drop: &Dropout,
) -> Result<Tensor> {
    let b = bottleneck(distribution, word_embeddings)?;
    let logits = decoder.logits(input.embedded, &b, input.mask, input.rows, drop)?;
    cross_entropy(&logits, input.targets)
}

/// SPLADE's FLOPS regulariser `Σ_j (mean_i p_ij)²` of `(batch, vocab)` weights.
pub fn flops(p: &Tensor) -> Result<Tensor> {
    Ok(p.mean(0)?.sqr()?.sum_all()?)
}

/// The parts of a contrastive loss (BaCo or MoCo), each a scalar tensor.
#[derive(Debug, Clone)]
pub struct Contrastive {
    /// Image→text cross-entropy (without the regulariser).
    pub i2t: Tensor,
    pub t2i: Tensor,
    pub flops_image: Tensor,
    pub flops_text: Tensor,
    /// `((i2t + λ_v F(p_v)) + (t2i + λ_l F(p_l))) / 2` (eq. 17 / 23, with a λ per side).
    pub loss: Tensor,
}

fn combine(
    i2t: Tensor,
    t2i: Tensor,
    pv: &Tensor,
    pl: &Tensor,
    lambda: Flops,
) -> Result<Contrastive> {
    let flops_image = flops(pv)?;
    let flops_text = flops(pl)?;
    let loss = (((&i2t + (&flops_image * lambda.image)?)?
        + (&t2i + (&flops_text * lambda.text)?)?)?
        * 0.5)?;
    Ok(Contrastive {
        i2t,
        t2i,
        flops_image,
        flops_text,
        loss,
    })
}

/// The two directions of an in-batch contrastive loss over `(batch, dim)` image and text
/// representations: image `i` and text `i` are the positive pair, the other texts (images) of the
/// batch the negatives; logits are the inner products divided by `tau`. Returns the mean
/// image→text and text→image cross-entropies.
pub fn in_batch(image: &Tensor, text: &Tensor, tau: f64) -> Result<(Tensor, Tensor)> {
    in_batch_masked(image, text, tau, None)
}

/// [`in_batch`] with `mask` `(batch, batch)` added to the logits (e.g. a large negative value
/// where a pair is no negative of another).
pub fn in_batch_masked(
    image: &Tensor,
    text: &Tensor,
    tau: f64,
    mask: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let b = image.dim(0)?;
    let sim = (image.matmul(&text.t()?)? / tau)?;
    let sim = match mask {
        Some(m) => (sim + m)?,
        None => sim,
    };
    let diag = Tensor::arange(0u32, b as u32, image.device())?;
    let i2t = cross_entropy(&sim, &diag)?;
    let t2i = cross_entropy(&sim.t()?.contiguous()?, &diag)?;
    Ok((i2t, t2i))
}

/// In-batch lexicon-contrastive loss with the FLOPS regulariser (BaCo, eq. 15-17).
pub fn baco(pv: &Tensor, pl: &Tensor, tau: f64, lambda: Flops) -> Result<Contrastive> {
    let (i2t, t2i) = in_batch(pv, pl, tau)?;
    combine(i2t, t2i, pv, pl, lambda)
}

/// CLIP's symmetric InfoNCE of L2-normalised `(batch, dim)` embeddings at temperature `tau`:
/// `(i2t + t2i) / 2`, with the two directions.
pub fn info_nce(image: &Tensor, text: &Tensor, tau: f64) -> Result<(Tensor, Tensor, Tensor)> {
    let (i2t, t2i) = in_batch(image, text, tau)?;
    symmetric(i2t, t2i)
}

/// `((i2t + t2i) / 2, i2t, t2i)`: a symmetric loss with its two directions.
pub(crate) fn symmetric(i2t: Tensor, t2i: Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let loss = ((&i2t + &t2i)? * 0.5)?;
    Ok((loss, i2t, t2i))
}

/// GRIT-VLP's ITC consistency (ECCV 2022, eq. 6, without its λ): pair `i`'s image→text
/// distribution over the batch, `p_v2t(i) = softmax_j(s_ij / τ)`, and its text→image one,
/// `p_t2v(i) = softmax_j(s_ji / τ)`, should agree, since image and caption mean the same:
/// `(KL(sg(p_v2t) ‖ p_t2v) + KL(sg(p_t2v) ‖ p_v2t)) / 2`, mean over the batch. Pulling the two
/// together keeps similar pairs, which the grouped sampler puts in one batch, from being
/// pushed apart as if unrelated.
pub fn itc_consistency(image: &Tensor, text: &Tensor, tau: f64) -> Result<Tensor> {
    let sim = (image.matmul(&text.t()?)? / tau)?;
    let v2t = log_softmax(&sim)?;
    let t2v = log_softmax(&sim.t()?.contiguous()?)?;
    let kl = |target: &Tensor, log_q: &Tensor| -> Result<Tensor> {
        let target = target.detach();
        Ok((target.exp()? * (&target - log_q)?)?.sum(1)?.mean_all()?)
    };
    Ok(((kl(&v2t, &t2v)? + kl(&t2v, &v2t)?)? * 0.5)?)
}

/// COOKIE's single-modal contrastive loss (ICCV 2021, eq. 8-10): two views of the same items
/// (two augmentations of an image; a caption and its masked copy), `(batch, dim)` each, as the
/// positive pairs of a symmetric in-batch InfoNCE at `tau`; the other items of the batch are
/// the negatives. The cross-modal [`info_nce`], within one modality.
pub fn single_modal(a: &Tensor, b: &Tensor, tau: f64) -> Result<Tensor> {
    Ok(info_nce(a, b, tau)?.0)
}

/// One direction of a contrastive loss: `queries (b, d)` against `keys (m ≥ b, d)`, whose first
/// `b` rows are the positives (row `i` of the queries with row `i` of the keys) and the rest
/// negatives; logits are inner products over `tau`. InfoNCE, or with `decoupled` ConLIP's DCL
/// (ConLIP, EMNLP 2022 Findings, eq. 10-11, after Yeh et al.): the positive leaves the denominator,
/// `-s_ii / τ + log Σ_{j≠i} exp(s_ij / τ)`, so an easy positive no longer damps the gradient of
/// the negatives. Mean over the queries.
pub fn contrast(queries: &Tensor, keys: &Tensor, tau: f64, decoupled: bool) -> Result<Tensor> {
    let b = queries.dim(0)?;
    let m = keys.dim(0)?;
    let logits = (queries.matmul(&keys.t()?)? / tau)?;
    if !decoupled {
        return cross_entropy(&logits, &Tensor::arange(0u32, b as u32, queries.device())?);
    }
    let eye = Tensor::eye(b, logits.dtype(), logits.device())?;
    let positives = if m > b {
        Tensor::cat(
            &[
                &eye,
                &Tensor::zeros((b, m - b), logits.dtype(), logits.device())?,
            ],
            1,
        )?
    } else {
        eye
    };
    let positive = (&logits * &positives)?.sum(1)?;
    // The positives leave the log-sum-exp: a large negative in their place.
    let negatives = (&logits + (&positives * -1e9)?)?;
    let max = negatives.max_keepdim(D::Minus1)?.detach();
    let lse = (negatives
        .broadcast_sub(&max)?
        .exp()?
        .sum_keepdim(D::Minus1)?
        .log()?
        + max)?
        .squeeze(1)?;
    Ok((lse - positive)?.mean_all()?)
}

/// ConLIP's decoupled contrastive loss in-batch ([`contrast`] with `decoupled`, the other
/// modality's batch as keys), both directions: `((i2t + t2i) / 2, i2t, t2i)` (ConLIP sums the
/// two; halved here to share the scale of [`info_nce`]). Needs at least two pairs.
pub fn dcl(image: &Tensor, text: &Tensor, tau: f64) -> Result<(Tensor, Tensor, Tensor)> {
    symmetric(
        contrast(image, text, tau, true)?,
        contrast(text, image, tau, true)?,
    )
}

/// ConLIP's instance-level loss with MoCo queues (EMNLP 2022 Findings, eq. 9-12): each image
/// against the momentum keys of the batch's texts (its own the positive) and the queue of
/// earlier text keys, and symmetrically; InfoNCE or, `decoupled`, DCL ([`contrast`]). Keys and
/// queues carry no gradient. Returns `((i2t + t2i) / 2, i2t, t2i)`.
#[allow(clippy::too_many_arguments)] // the equation's inputs, each named
pub fn momentum_contrast(
    image: &Tensor,
    text: &Tensor,
    key_image: &Tensor,
    key_text: &Tensor,
    queue_image: Option<&Tensor>,
    queue_text: Option<&Tensor>,
    tau: f64,
    decoupled: bool,
) -> Result<(Tensor, Tensor, Tensor)> {
    let keys = |batch: &Tensor, queue: Option<&Tensor>| -> Result<Tensor> {
        Ok(match queue {
            Some(q) if q.dim(0)? > 0 => Tensor::cat(&[&batch.detach(), &q.detach()], 0)?,
            _ => batch.detach(),
        })
    };
    symmetric(
        contrast(image, &keys(key_text, queue_text)?, tau, decoupled)?,
        contrast(text, &keys(key_image, queue_image)?, tau, decoupled)?,
    )
}

/// Momentum lexicon-contrastive loss (eq. 21-23): each image against the momentum encoding of
/// its text (positive) and the queue of earlier momentum text encodings (negatives), and
/// symmetrically; empty queues leave only the positive.
#[allow(clippy::too_many_arguments)] // the equation's eight inputs, each named
pub fn moco(
    pv: &Tensor,
    pl: &Tensor,
    pv_momentum: &Tensor,
    pl_momentum: &Tensor,
    queue_image: Option<&Tensor>,
    queue_text: Option<&Tensor>,
    tau: f64,
    lambda: Flops,
) -> Result<Contrastive> {
    let side = |q: &Tensor, k: &Tensor, queue: Option<&Tensor>| -> Result<Tensor> {
        let positive = (q * k.detach())?.sum_keepdim(1)?;
        let logits = match queue {
            Some(queue) if queue.dim(0)? > 0 => {
                Tensor::cat(&[&positive, &q.matmul(&queue.detach().t()?)?], 1)?
            }
            _ => positive,
        };
        let logits = (logits / tau)?;
        let zeros = Tensor::zeros(q.dim(0)?, DType::U32, q.device())?;
        cross_entropy(&logits, &zeros)
    };
    let i2t = side(pv, pl_momentum, queue_text)?;
    let t2i = side(pl, pv_momentum, queue_image)?;
    combine(i2t, t2i, pv, pl, lambda)
}

/// Mean number of non-zero weights per row of `(batch, vocab)` weights (sparsity, for the log).
pub fn mean_nonzero(p: &Tensor) -> Result<f64> {
    let nz = p
        .gt(0.0)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    Ok(f64::from(nz) / p.dim(0)?.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};

    use super::*;

    /// The gather-based pool equals candle's differentiated `max` (the plain form of eq. 3/6:
    /// relu, padding zeroed, max over tokens), in value and in gradient.
    #[test]
    fn max_pool_equals_the_plain_max() -> Result<()> {
        let dev = Device::Cpu;
        let logits = Var::from_tensor(&Tensor::randn(0f32, 2.0, (3, 5, 11), &dev)?)?;
        let mask = Tensor::new(
            &[[1u32, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]],
            &dev,
        )?;
        let weights = Tensor::randn(0f32, 1.0, (3, 11), &dev)?;
        let plain = {
            let m = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
            (logits.relu()?.broadcast_mul(&m)?.max(1)? + 1.0)?.log()?
        };
        let fast = splade(&logits, Some(&mask))?;
        let diff = (&plain - &fast)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-6, "values differ by {diff}");
        let g_plain = (&plain * &weights)?.sum_all()?.backward()?;
        let g_fast = (&fast * &weights)?.sum_all()?.backward()?;
        let (Some(a), Some(b)) = (g_plain.get(&logits), g_fast.get(&logits)) else {
            panic!("no gradient reached the logits");
        };
        let diff = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-6, "gradients differ by {diff}");
        assert!(b.abs()?.sum_all()?.to_scalar::<f32>()? > 0.0);
        Ok(())
    }
}
