//! Expansion control on the query side in training (`--query-expansion E`; D2S's query mask,
//! Nguyen et al., ECIR 2024): a caption's lexicon keeps its own content words, weighted by the
//! head, and at most `E` other terms, the strongest, as
//! `lexlip_model::text::TextTerms::expansion` keeps them when the model encodes a query, so the
//! contrastive loss sees the terms the index will. One difference: a query also caps its
//! expansion terms at its weakest own word's weight, and training does not (the heads trained
//! without the cap and searched with it measured best of what was tried: `docs/benchmarks.md`,
//! "Queries that keep the user's words").
//!
//! ```text
//! own    = 1[t ∈ caption tokens] ⊙ words            words: allowed terms, no template words
//! p_l    = full ⊙ own + top_E(full ⊙ words ⊙ (1 − own))
//! ```
//! The gradient reaches the kept terms only, as with a top-k cut. With `--own-floor S` (with or
//! without `--query-expansion`) an own word the head weighs 0 weighs `S` of the caption's
//! strongest own word ([`own_floor`]), as it does in a query.

use candle_core::{DType, Tensor};

use crate::error::Result;
use crate::text::TextTokenizer;

/// `(batch, vocab)` 1 where a vocabulary term is one of the caption's own words: among its
/// tokens `ids` `(batch, tokens)` where `mask` is 1, and a term `words` `(vocab)` allows.
pub fn own_words(ids: &Tensor, mask: &Tensor, words: &Tensor) -> Result<Tensor> {
    let (b, _) = ids.dims2()?;
    let vocab = words.dim(0)?;
    let dtype = words.dtype();
    let hits = Tensor::zeros((b, vocab), dtype, ids.device())?.scatter_add(
        &ids.contiguous()?,
        &mask.to_dtype(dtype)?.contiguous()?,
        1,
    )?;
    Ok(hits.gt(0.0)?.to_dtype(dtype)?.broadcast_mul(words)?)
}

/// The lexicons `full` `(batch, vocab)` cut to their own words (`own`, [`own_words`]) and at
/// most `e` other terms among `words` `(vocab)`, the strongest of each row.
pub fn expansion_control(full: &Tensor, own: &Tensor, words: &Tensor, e: usize) -> Result<Tensor> {
    let mine = full.mul(own)?;
    if e == 0 {
        return Ok(mine);
    }
    let others = full.broadcast_mul(words)?.mul(&own.affine(-1.0, 1.0)?)?;
    let expansion = lexlip_model::pooling::top_k(&others, e)?;
    Ok((mine + expansion)?)
}

/// The text lexicons `p` with the caption's own words (`own`) that the head weighs 0 in `full`
/// (before any cut) raised to `share` of its strongest own word there, as a query keeps them
/// (`own_floor` in a model's `text_terms`). The floor is held fixed: the gradient reaches the
/// image head through the words it lifts, and the text head through the words it weighs.
///
/// ```text
/// p_l = p + share · max_t(full ⊙ own) · own ⊙ 1[full ≤ 0]
/// ```
pub fn own_floor(p: &Tensor, full: &Tensor, own: &Tensor, share: f64) -> Result<Tensor> {
    let strongest = full.mul(own)?.max_keepdim(1)?.detach();
    let zeroed = own.mul(&full.le(0.0)?.to_dtype(own.dtype())?)?;
    Ok(p.add(&zeroed.broadcast_mul(&(strongest * share)?)?)?)
}

/// `words` for [`own_words`]: the allowed terms (`allowed`, 1 or 0 per term) without the
/// `template` ids.
pub fn words_without(allowed: &Tensor, template: &[u32]) -> Result<Tensor> {
    let mut w = allowed.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    for &t in template {
        if let Some(x) = w.get_mut(t as usize) {
            *x = 0.0;
        }
    }
    Ok(Tensor::from_vec(w, allowed.dim(0)?, allowed.device())?.to_dtype(allowed.dtype())?)
}

/// The vocabulary ids of a list of words (`--template-words`, `--grounding-words`): every
/// piece each word tokenizes into ("emoji" is no BERT word: its pieces "em", "##oj", "##i" are
/// what a caption holds).
pub fn word_ids(tokenizer: &TextTokenizer, words: &[String]) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for w in words {
        let pieces = tokenizer.encode(w)?;
        ids.extend(
            pieces
                .into_iter()
                .filter(|&t| t != tokenizer.cls && t != tokenizer.sep),
        );
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};

    use super::*;

    fn dev() -> Device {
        Device::Cpu
    }

    /// Vocabulary of 6: 0 [PAD], 1 "a" (a function word: not allowed), 2 "red", 3 "car",
    /// 4 "apple", 5 "emoji" (a template word). Caption "a red car emoji" → ids [1, 2, 3, 5]
    /// and a padded second caption "apple" → [4, 0, 0, 0].
    fn batch() -> (Tensor, Tensor, Tensor) {
        let ids = Tensor::new(&[[1u32, 2, 3, 5], [4, 0, 0, 0]], &dev()).unwrap();
        let mask = Tensor::new(&[[1u32, 1, 1, 1], [1, 0, 0, 0]], &dev()).unwrap();
        let allowed = Tensor::new(&[0f32, 0.0, 1.0, 1.0, 1.0, 1.0], &dev()).unwrap();
        let words = words_without(&allowed, &[5]).unwrap();
        (ids, mask, words)
    }

    #[test]
    fn own_words_are_the_captions_allowed_tokens() {
        let (ids, mask, words) = batch();
        let own = own_words(&ids, &mask, &words).unwrap();
        assert_eq!(
            own.to_vec2::<f32>().unwrap(),
            vec![
                vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
                vec![0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
            ]
        );
    }

    /// Worked by hand: row 0 keeps red and car, and the strongest other allowed term (apple,
    /// 0.8; "a" and "emoji" weigh more but never count); row 1 keeps apple and red (0.6).
    #[test]
    fn expansion_keeps_own_words_and_the_e_strongest_others() {
        let (ids, mask, words) = batch();
        let own = own_words(&ids, &mask, &words).unwrap();
        let full = Tensor::new(
            &[
                [0.0f32, 2.0, 0.9, 0.2, 0.8, 3.0],
                [0.0, 2.0, 0.6, 0.1, 0.5, 3.0],
            ],
            &dev(),
        )
        .unwrap();
        let p = expansion_control(&full, &own, &words, 1).unwrap();
        assert_eq!(
            p.to_vec2::<f32>().unwrap(),
            vec![
                vec![0.0, 0.0, 0.9, 0.2, 0.8, 0.0],
                vec![0.0, 0.0, 0.6, 0.0, 0.5, 0.0],
            ]
        );
        let p0 = expansion_control(&full, &own, &words, 0).unwrap();
        assert_eq!(
            p0.to_vec2::<f32>().unwrap()[0],
            vec![0.0, 0.0, 0.9, 0.2, 0.0, 0.0]
        );
    }

    /// Worked by hand: row 0's "car" weighs 0 and gets half of "red" (0.9); row 1's only own
    /// word "apple" weighs 0, so its strongest own word is 0 and nothing is lifted.
    #[test]
    fn the_floor_lifts_own_words_weighed_zero() {
        let (ids, mask, words) = batch();
        let own = own_words(&ids, &mask, &words).unwrap();
        let full = Tensor::new(
            &[
                [0.0f32, 2.0, 0.9, 0.0, 0.8, 3.0],
                [0.0, 2.0, 0.6, 0.1, 0.0, 3.0],
            ],
            &dev(),
        )
        .unwrap();
        let p = own_floor(&full, &full, &own, 0.5).unwrap();
        assert_eq!(
            p.to_vec2::<f32>().unwrap(),
            vec![
                vec![0.0, 2.0, 0.9, 0.45, 0.8, 3.0],
                vec![0.0, 2.0, 0.6, 0.1, 0.0, 3.0],
            ]
        );
    }

    /// The gradient of a loss of the cut lexicons, against finite differences of the same
    /// loss: the kept terms get the loss's gradient, the cut ones none.
    #[test]
    fn gradients_match_finite_differences() {
        let (ids, mask, words) = batch();
        let own = own_words(&ids, &mask, &words).unwrap();
        let base = [
            0.1f32, 1.3, 0.9, 0.2, 0.8, 2.5, 0.3, 1.1, 0.6, 0.15, 0.5, 1.7,
        ];
        let target = Tensor::new(&[0.5f32, -1.0, 2.0, 0.7, -0.3, 1.0], &dev()).unwrap();
        let loss_of = |x: &Tensor| -> Tensor {
            let p = expansion_control(x, &own, &words, 1).unwrap();
            p.sqr()
                .unwrap()
                .broadcast_mul(&target)
                .unwrap()
                .sum_all()
                .unwrap()
        };
        let x = Var::from_tensor(&Tensor::from_slice(&base, (2, 6), &dev()).unwrap()).unwrap();
        let grads = loss_of(x.as_tensor()).backward().unwrap();
        let g = grads.get(x.as_tensor()).unwrap().flatten_all().unwrap();
        let g = g.to_vec1::<f32>().unwrap();
        let h = 1e-3f32;
        for i in 0..base.len() {
            let at = |d: f32| {
                let mut v = base;
                v[i] += d;
                let t = Tensor::from_slice(&v, (2, 6), &dev()).unwrap();
                loss_of(&t).to_scalar::<f32>().unwrap()
            };
            let numeric = (at(h) - at(-h)) / (2.0 * h);
            assert!(
                (numeric - g[i]).abs() < 1e-2,
                "term {i}: analytic {} numeric {numeric}",
                g[i]
            );
        }
        // Cut terms: "a" (1), "emoji" (5) of both rows, car (3) of row 1.
        for i in [1, 5, 7, 9, 11] {
            assert_eq!(g[i], 0.0, "term {i} is cut");
        }
    }
}
