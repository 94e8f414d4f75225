//! One step's losses over a batch of cached embeddings (the module's doc, [`super`], writes
//! them out): the sparse in-batch InfoNCE, distillation of the dense model's ranking, FLOPS,
//! caption-word grounding and likelihood, with expansion control and the own-word floor on the
//! text side when asked.

use candle_core::Tensor;

use super::model::HeadsModel;
use crate::error::{Result, TrainError};
use crate::expansion::{expansion_control, own_floor};
use crate::lexicon::{caption_words, grounding};
use crate::losses::{add_weighted, flops, in_batch};
use crate::nn::log_softmax;

/// The inputs of one step's losses.
pub struct StepInputs<'a> {
    /// `(batch, dim)` unit-length backbone embeddings.
    pub image: &'a Tensor,
    pub text: &'a Tensor,
    /// Grounding targets ([`crate::lexicon::grounding_targets`]).
    pub bags: &'a Tensor,
    pub has: &'a Tensor,
    /// With expansion control or the own-word floor: each caption's own words
    /// ([`crate::expansion::own_words`]) and the terms that may weigh at all.
    pub own: Option<(&'a Tensor, &'a Tensor)>,
}

/// The weights of one step's losses.
#[derive(Debug, Clone, Copy)]
pub struct StepWeights {
    pub image_k: usize,
    pub text_k: usize,
    /// Expansion control's E on the text side (`--query-expansion`), instead of `text_k`.
    pub text_expansion: Option<usize>,
    /// The own-word floor's share on the text side (`--own-floor`).
    pub own_floor: Option<f64>,
    pub tau: f64,
    pub teacher_tau: f64,
    pub distill: f64,
    pub flops_image: f64,
    pub flops_text: f64,
    pub grounding: f64,
    /// Weights (image, text side) and temperature of the caption-word likelihood.
    pub caption_words: f64,
    pub caption_words_text: f64,
    pub caption_words_tau: f64,
}

/// KL(softmax(teacher) ‖ softmax(student)) per row, mean over rows: the student's in-batch
/// ranking pulled toward the dense model's.
pub fn distillation(teacher: &Tensor, student: &Tensor) -> Result<Tensor> {
    let t = log_softmax(teacher)?.detach();
    let s = log_softmax(student)?;
    Ok(t.exp()?.mul(&(&t - &s)?)?.sum(1)?.mean_all()?)
}

/// One step's losses.
pub struct HeadsLosses {
    /// What the gradients come from.
    pub total: Tensor,
    /// Its named parts.
    pub parts: Vec<(&'static str, Tensor)>,
    /// Mean non-zero terms per image and per text lexicon.
    pub nnz: (f64, f64),
}

/// One step's losses (see the module's doc).
pub fn step_losses(model: &HeadsModel, x: &StepInputs<'_>, w: StepWeights) -> Result<HeadsLosses> {
    let (logits_v, logits_l) = (model.logits(x.image, true)?, model.logits(x.text, false)?);
    let (full_v, full_l) = (
        model.lexicons_of_logits(&logits_v)?,
        model.lexicons_of_logits(&logits_l)?,
    );
    let pv = crate::lexicon::top_k(&full_v, w.image_k)?;
    let pl = match (w.text_expansion, x.own) {
        (Some(e), Some((own, words))) => expansion_control(&full_l, own, words, e)?,
        (Some(_), None) => {
            return Err(TrainError::invalid(
                "expansion control needs the captions' own words",
            ));
        }
        (None, _) => crate::lexicon::top_k(&full_l, w.text_k)?,
    };
    let pl = match (w.own_floor, x.own) {
        (Some(share), Some((own, _))) => own_floor(&pl, &full_l, own, share)?,
        (Some(_), None) => {
            return Err(TrainError::invalid(
                "the own-word floor needs the captions' own words",
            ));
        }
        (None, _) => pl,
    };
    let (i2t, t2i) = in_batch(&pv, &pl, w.tau)?;
    let student = (pv.matmul(&pl.t()?)? / w.tau)?;
    let teacher = (x.image.matmul(&x.text.t()?)? / w.teacher_tau)?;
    let kd = ((distillation(&teacher, &student)?
        + distillation(&teacher.t()?.contiguous()?, &student.t()?.contiguous()?)?)?
        * 0.5)?;
    let (fv, fl) = (flops(&pv)?, flops(&pl)?);
    let mut total = (((&i2t + &t2i)? * 0.5)? + (&kd * w.distill)?)?;
    total = ((total + (&fv * w.flops_image)?)? + (&fl * w.flops_text)?)?;
    let mut parts = vec![
        ("i2t", i2t),
        ("t2i", t2i),
        ("distill", kd),
        ("flops_image", fv),
        ("flops_text", fl),
    ];
    if w.grounding > 0.0 {
        let gv = grounding(&full_v, x.bags, x.has, w.tau)?;
        let gl = grounding(&full_l, x.bags, x.has, w.tau)?;
        total = (total + ((&gv + &gl)? * w.grounding)?)?;
        parts.push(("ground_image", gv));
        parts.push(("ground_text", gl));
    }
    for (name, logits, weight) in [
        ("caption_words", &logits_v, w.caption_words),
        ("caption_words_text", &logits_l, w.caption_words_text),
    ] {
        if weight > 0.0 {
            let cw = caption_words(logits, &model.allowed, x.bags, x.has, w.caption_words_tau)?;
            total = add_weighted(total, &mut parts, name, cw, weight)?;
        }
    }
    let nnz = (
        crate::losses::mean_nonzero(&pv)?,
        crate::losses::mean_nonzero(&pl)?,
    );
    Ok(HeadsLosses { total, parts, nnz })
}
