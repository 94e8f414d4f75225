//! The checks of [`TrainOptions`] that no type can make: rates in range, sizes positive, options
//! that go together.

use std::ops::{Bound, RangeBounds};

use super::*;

/// The most augmented views `--image-views` caches per picture.
pub const MAX_IMAGE_VIEWS: usize = 16;

/// (0, 1]: a share that cannot be nothing.
const UNIT: (Bound<f64>, Bound<f64>) = (Bound::Excluded(0.0), Bound::Included(1.0));

/// Refuses `value` outside `range`, saying `"{rule}, got {value}"`.
fn in_range(rule: &str, value: f64, range: impl RangeBounds<f64>) -> crate::error::Result<()> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(crate::error::TrainError::Invalid(format!(
            "{rule}, got {value}"
        )))
    }
}

impl TrainOptions {
    /// Checks values that no type can (rates in range, sizes positive).
    pub fn validate(&self) -> crate::error::Result<()> {
        let bad = |m: String| Err(crate::error::TrainError::Invalid(m));
        let inputs = usize::from(self.data.tsv.is_some())
            + usize::from(self.data.manifest.is_some())
            + usize::from(!self.data.webdataset.is_empty());
        if inputs != 1 {
            return bad("give exactly one corpus: --tsv, --manifest or --webdataset".into());
        }
        for (name, v) in [
            ("--mask-rate", self.method.mask_rate),
            ("--decoder-mask-rate", self.method.decoder_mask_rate),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return bad(format!("{name} must be in (0, 1], got {v}"));
            }
        }
        in_range(
            "--image-mask-rate must be in (0, 1]",
            self.method.image_mask_rate,
            UNIT,
        )?;
        let heads = self.method.objective == Objective::Heads;
        let (cw, cw_text, cw_tau) = (
            self.lexicon.caption_words,
            self.lexicon.caption_words_text,
            self.lexicon.caption_words_tau,
        );
        if !(cw >= 0.0
            && cw.is_finite()
            && cw_text >= 0.0
            && cw_text.is_finite()
            && cw_tau > 0.0
            && cw_tau.is_finite())
        {
            return bad(format!(
                "--caption-words and --caption-words-text must be >= 0 and --caption-words-tau \
                 > 0, got {cw}, {cw_text} and {cw_tau}"
            ));
        }
        if !heads && (cw > 0.0 || cw_text > 0.0) {
            return bad(
                "--caption-words and --caption-words-text train the lexicon heads (give \
                 --objective heads); the towers' lexicons are grounded with --grounding"
                    .into(),
            );
        }
        if let Some(share) = self.lexicon.own_floor {
            if !heads {
                return bad(
                    "--own-floor trains the lexicon heads' text side (give --objective heads)"
                        .into(),
                );
            }
            in_range("--own-floor must be a share in (0, 1]", share, UNIT)?;
        }
        if !heads && self.lexicon.query_expansion.is_some() {
            return bad(
                "--query-expansion trains the lexicon heads' text side (give --objective heads);                  any model's queries can be cut the same way when searching (lexlip search,                  serve and eval --query-expansion)"
                    .into(),
            );
        }
        let adapter = self.method.objective == Objective::Adapter;
        if !heads && !adapter && (self.model.backbone.is_some() || self.model.cache.is_some()) {
            return bad(
                "--backbone and --cache are the lexicon heads' and the adapter's (give \
                 --objective heads or adapter)"
                    .into(),
            );
        }
        if !adapter && self.model.image_backbone.is_some() {
            return bad("--image-backbone is the adapter's (give --objective adapter)".into());
        }
        match self.model.image_backbone_size {
            Some(_) if !adapter => {
                return bad(
                    "--image-backbone-size is the adapter's (give --objective adapter)".into(),
                );
            }
            Some(size) if !(32..=1024).contains(&size) => {
                return bad(format!(
                    "--image-backbone-size is a side in pixels from 32 to 1024, got {size}"
                ));
            }
            _ => {}
        }
        if self.model.image_views > 0 && !(adapter || heads) {
            return bad(
                "--image-views is the adapter's and the lexicon heads' (give --objective \
                 adapter or heads)"
                    .into(),
            );
        }
        if self.model.image_views > MAX_IMAGE_VIEWS {
            return bad(format!(
                "--image-views is at most {MAX_IMAGE_VIEWS} (each view is one more pass of every \
                 picture through the image encoder), got {}",
                self.model.image_views
            ));
        }
        if adapter && (self.model.backbone.is_none() || self.model.image_backbone.is_none()) {
            return bad(
                "--objective adapter projects a pretrained image tower beside a dense teacher: \
                 give the teacher as --backbone (from `lexlip train --objective dense`) and the \
                 tower as --image-backbone (scripts/fetch-image-backbone.sh)"
                    .into(),
            );
        }
        if heads {
            if self.model.backbone.is_none() {
                return bad(
                    "--objective heads trains lexicon heads over a frozen dense model: give it \
                     as --backbone (e.g. a directory from `lexlip train --objective dense`)"
                        .into(),
                );
            }
            if self.model.init.is_some()
                || self.model.text_init.is_some()
                || self.model.image_init.is_some()
                || self.method.phase != 1
                || self.method.freeze_text
                || self.method.shared_layers.is_some()
            {
                return bad(
                    "--objective heads trains only its heads over --backbone: --init, \
                     --text-init, --image-init, --phase 2, --freeze-text and --shared-layers \
                     are the tower objectives'"
                        .into(),
                );
            }
            if !(self.lexicon.teacher_tau > 0.0 && self.lexicon.distill >= 0.0) {
                return bad("--teacher-tau must be > 0 and --distill ≥ 0".into());
            }
        }
        if self.method.objective == Objective::Rerank {
            if self.method.shared_layers.is_some() {
                return bad(
                    "--shared-layers is the lexicon objective's; the re-ranker's fusion layers are \
                     --fusion-layers"
                        .into(),
                );
            }
            in_range(
                "--rerank-hard must be in [0, 1]",
                self.method.rerank_hard,
                0.0..=1.0,
            )?;
            if self.method.fusion_layers == 0 || self.method.rerank_negatives == 0 {
                return bad("--fusion-layers and --rerank-negatives must be at least 1".into());
            }
            if !(self.method.rerank_mlm >= 0.0
                && self.method.rerank_mim >= 0.0
                && self.method.rerank_itc >= 0.0)
            {
                return bad("--rerank-mlm, --rerank-mim and --rerank-itc must be ≥ 0".into());
            }
            if self.model.init.is_none() {
                return bad(
                    "--objective rerank trains on top of a lexicon model: give it as --init \
                     (e.g. --init models/emoji-tiny)"
                        .into(),
                );
            }
        }
        let data = &self.data;
        in_range("--dropout must be in [0, 1)", self.optim.dropout, 0.0..1.0)?;
        in_range("--crop-scale must be in (0, 1]", data.crop_scale, UNIT)?;
        in_range(
            "--color-jitter must be in [0, 1)",
            data.color_jitter,
            0.0..1.0,
        )?;
        in_range(
            "--style-augment is a probability in [0, 1]",
            data.style_augment,
            0.0..=1.0,
        )?;
        in_range(
            "--rotate is a largest turn in degrees, 0 to 180",
            data.rotate,
            0.0..=180.0,
        )?;
        in_range(
            "--hue-jitter is a fraction of the colour wheel, 0 to 0.5",
            data.hue_jitter,
            0.0..=0.5,
        )?;
        in_range("--warmup must be in [0, 1)", self.optim.warmup, 0.0..1.0)?;
        in_range(
            "--momentum must be in [0, 1)",
            self.method.momentum,
            0.0..1.0,
        )?;
        if self.method.tau <= 0.0 || !self.method.tau.is_finite() {
            return bad(format!("--tau must be positive, got {}", self.method.tau));
        }
        let flops = [
            Some(self.method.flops_lambda),
            self.lexicon.flops_image,
            self.lexicon.flops_text,
        ];
        if flops
            .iter()
            .flatten()
            .any(|l| !(*l >= 0.0 && l.is_finite()))
            || self.optim.lr <= 0.0
            || self.optim.text_lr.is_some_and(|l| l <= 0.0)
        {
            return bad(
                "--flops-lambda, --flops-image and --flops-text must be >= 0 and learning rates > 0"
                    .into(),
            );
        }
        in_range(
            "--flops-warmup must be in [0, 1)",
            self.lexicon.flops_warmup,
            0.0..1.0,
        )?;
        if !(self.lexicon.grounding >= 0.0 && self.lexicon.grounding.is_finite()) {
            return bad(format!(
                "--grounding must be >= 0, got {}",
                self.lexicon.grounding
            ));
        }
        in_range(
            "--grounding-max-df must be in (0, 1]",
            self.lexicon.grounding_max_df,
            UNIT,
        )?;
        if self
            .lexicon
            .grounding_words
            .iter()
            .any(|w| w.trim().is_empty())
        {
            return bad("--grounding-words has an empty word (write them as man,woman)".into());
        }
        if self.method.freeze_text && self.optim.text_lr.is_some() {
            return bad(
                "--text-lr has no effect with --freeze-text (the text tower is not trained)".into(),
            );
        }
        // Seen from the options alone, before anything touches the disk; an --init without a
        // text tower is refused once it is resolved (`run::train`).
        if self.method.freeze_text && self.model.init.is_none() && self.model.text_init.is_none() {
            return bad(
                "--freeze-text needs a trained text tower: give --text-init or --init".into(),
            );
        }
        if self.optim.batch_size < 2 {
            return bad("--batch-size must be at least 2 (contrastive negatives)".into());
        }
        if self.data.max_length < 3 {
            return bad("--max-length must be at least 3 ([CLS], a token, [SEP])".into());
        }
        if self.method.decoder_layers == 0
            || self.run.checkpoint_every == 0
            || self.run.log_every == 0
        {
            return bad(
                "--decoder-layers, --checkpoint-every and --log-every must be positive".into(),
            );
        }
        if self.optim.steps == Some(0) || (self.optim.steps.is_none() && self.optim.epochs <= 0.0) {
            return bad("--steps / --epochs must be positive".into());
        }
        for (name, v) in [
            ("--itc-consistency", self.method.itc_consistency),
            ("--image-contrastive", self.method.image_contrastive),
            ("--text-contrastive", self.method.text_contrastive),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(format!("{name} must be >= 0, got {v}"));
            }
            if v > 0.0 && self.method.phase == 2 {
                return bad(format!(
                    "{name} adds an in-batch loss to phase 1 (and the dense objective); phase 2 \
                     contrasts against queues"
                ));
            }
        }
        if self.method.text_contrastive > 0.0 && self.method.freeze_text {
            return bad(
                "--text-contrastive trains the text tower, which --freeze-text locks".into(),
            );
        }
        if self.optim.sampler == Sampler::Grouped && self.optim.group_size < self.optim.batch_size {
            return bad(format!(
                "--group-size {} must be at least --batch-size {} (a search space fills \
                 mini-batches)",
                self.optim.group_size, self.optim.batch_size
            ));
        }
        if self.method.objective == Objective::Dense {
            if self.method.phase != 1 {
                return bad(
                    "--objective dense trains in one phase; --phase 2 (MoCo queues) is LexLIP's"
                        .into(),
                );
            }
            if self.method.dense_dim == 0 {
                return bad("--dense-dim must be positive".into());
            }
            if self.method.freeze_text {
                return bad(
                    "--freeze-text is LexLIP's (a frozen lexicon); --objective dense trains both \
                     towers"
                        .into(),
                );
            }
            if self.method.shared_layers.is_some() {
                return bad(
                    "--shared-layers sits before the lexicon heads; the dense objective has none \
                     (give --objective lexlip)"
                        .into(),
                );
            }
        } else if self.method.dense_loss != DenseLoss::Infonce
            || self.method.dense_momentum
            || self.method.dense_token != DenseToken::None
        {
            return bad(
                "--dense-loss, --dense-momentum and --dense-token are the dense objective's; give \
                 --objective dense"
                    .into(),
            );
        }
        if (self.method.phase == 2 || self.method.dense_momentum)
            && (self.method.queue_size == 0
                || !self.method.queue_size.is_multiple_of(self.optim.batch_size))
        {
            return bad(format!(
                "--queue-size {} must be a positive multiple of --batch-size {}",
                self.method.queue_size, self.optim.batch_size
            ));
        }
        Ok(())
    }

    /// These options with a batch that fits a corpus of `pairs` usable pairs, said through
    /// `say`: a small corpus trains with every pair in each batch rather than failing (a queue
    /// keeps a size it divides). `None` when --batch-size already fits.
    pub fn fit_batch(
        &self,
        pairs: usize,
        say: &mut dyn FnMut(&str),
    ) -> crate::error::Result<Option<TrainOptions>> {
        let wanted = self.optim.batch_size;
        if pairs >= wanted {
            return Ok(None);
        }
        let queue = self.method.phase == 2 || self.method.dense_momentum;
        let fits = |b: usize| b >= 2 && (!queue || self.method.queue_size.is_multiple_of(b));
        let Some(batch) = (2..=pairs).rev().find(|&b| fits(b)) else {
            return Err(crate::error::TrainError::Corpus(format!(
                "{pairs} usable (image, caption) pairs, fewer than one batch of 2 (contrastive \
                 negatives{}): add pairs",
                if queue { " dividing --queue-size" } else { "" }
            )));
        };
        let mut fitted = self.clone();
        fitted.optim.batch_size = batch;
        fitted.optim.group_size = fitted.optim.group_size.max(batch);
        fitted.validate()?;
        say(&format!(
            "--batch-size {wanted} is more than the {pairs} usable pairs: training with batches \
             of {batch} (give --batch-size {batch} or less to choose; more pairs give more \
             negatives per step)"
        ));
        Ok(Some(fitted))
    }
}

#[cfg(test)]
mod tests {
    use super::TrainOptions;

    fn options(batch: usize) -> TrainOptions {
        let mut o = TrainOptions::new("o");
        o.data.tsv = Some("t.tsv".into());
        o.optim.batch_size = batch;
        o
    }

    #[test]
    fn a_batch_fits_the_corpus_and_a_queue_it_divides() {
        let mut notes = Vec::new();
        let mut say = |n: &str| notes.push(n.to_string());
        assert!(options(32).fit_batch(40, &mut say).unwrap().is_none());
        let fitted = options(64).fit_batch(40, &mut say).unwrap().unwrap();
        assert_eq!(fitted.optim.batch_size, 40);
        let mut queued = options(64);
        queued.method.phase = 2;
        queued.method.queue_size = 128;
        let fitted = queued.fit_batch(40, &mut say).unwrap().unwrap();
        assert_eq!(
            fitted.optim.batch_size, 32,
            "the largest divisor of 128 up to 40"
        );
        assert!(options(64).fit_batch(1, &mut say).is_err());
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("batches of 40"), "{notes:?}");
    }
}
