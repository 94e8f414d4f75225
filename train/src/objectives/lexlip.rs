//! The training loop: prepare (output directory, initial model, corpus), resume from the last
//! checkpoint of the same run, then steps with a prefetching data thread, logging, periodic
//! atomic checkpoints and, at the end, the exported model and `train.json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Tensor};
use lexlip_corpus::Input;

use crate::augment::Augment;
use crate::checkpoint::{self, State};
use crate::data::{self, Corpus, HostBatch, Masking, Order, PatchMasking};
use crate::encoder_pair::{EncoderPair, exported_marker};
use crate::error::{Result, TrainError};
use crate::fingerprint::{sha256_file, sha256_json};
use crate::init::Init;
use crate::lexicon::{FlopsSchedule, Idf, TopKSchedule};
use crate::model::Objectives;
use crate::nn::Dropout;
use crate::observe::{Observer, RunControl, Summary};
use crate::optim::AdamW;
use crate::options::{DenseToken, Objective as ObjectiveKind, TrainOptions};
use crate::rng::{Rng, key};
use crate::sampler::{GroupState, Sampler};
use crate::steps::{Batches, Computed, Objective, Span, prepare_out};
use crate::text::TextTokenizer;
use crate::text_cache::TextCache;

/// Refuses an output directory that holds the exported model of the other objective (a LexLIP
/// directory and a dense one cannot share a directory: loaders would read the wrong one).
fn refuse_other_model(opts: &TrainOptions) -> Result<()> {
    let (other, marker) = match opts.method.objective {
        ObjectiveKind::Lexlip => ("a dense model", exported_marker(ObjectiveKind::Dense)),
        ObjectiveKind::Dense => ("a LexLIP model", exported_marker(ObjectiveKind::Lexlip)),
        ObjectiveKind::Rerank | ObjectiveKind::Heads | ObjectiveKind::Adapter => return Ok(()),
    };
    if opts.run.out.join(marker).is_file() {
        return Err(TrainError::invalid(format!(
            "--out {} holds {other} ({marker}); train --objective {} into another directory",
            opts.run.out.display(),
            format!("{:?}", opts.method.objective).to_lowercase()
        )));
    }
    Ok(())
}

/// The files a corpus reads (for `train.json`): listing files and shards with size and SHA-256.
fn input_files(input: &Input) -> Result<Vec<PathBuf>> {
    Ok(match input {
        Input::Tsv { path, .. } | Input::Manifest(path) => vec![path.clone()],
        Input::WebDataset(paths) => lexlip_corpus::sources::webdataset::shards(paths)?,
        Input::ImageDir(_) => Vec::new(),
    })
}

/// Everything that determines what a run computes.
fn fingerprint_of(opts: &TrainOptions, input: &Input, init: &Init) -> Result<String> {
    Ok(sha256_json(&serde_json::json!({
        "options": opts.fingerprint_json(),
        "input": input.signature()?,
        "text": init.text.from,
        "image": init.image.from,
        "tokenizer": init.tokenizer,
        "vocab": init.vocab.term_space().hash,
    })))
}

/// Trains as `opts` says. Returns when the steps are done, at `--stop-at`, or when `control.stop`
/// is set (after a checkpoint).
/// LexLIP and dense runs (the options already validated).
pub(crate) fn train(
    opts: &TrainOptions,
    control: &RunControl,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let started = Instant::now();
    prepare_out(&opts.run.out)?;
    refuse_other_model(opts)?;
    let input = data::input(opts)?;
    let init = crate::init::resolve(opts, &opts.run.out.join(".init"))?;
    if opts.method.freeze_text && init.text.weights.is_none() {
        return Err(TrainError::invalid(
            "--freeze-text needs a trained text tower, but the text tower starts from scratch: \
             give --text-init or --init with a text model",
        ));
    }
    let tokenizer = TextTokenizer::load(&init.tokenizer, opts.data.max_length)?;
    if tokenizer.vocab != init.vocab.len() {
        return Err(TrainError::invalid(format!(
            "{}: the tokenizer has {} ids but its vocabulary lists {} tokens",
            init.tokenizer.display(),
            tokenizer.vocab,
            init.vocab.len()
        )));
    }
    let head = match opts.method.objective {
        ObjectiveKind::Lexlip => format!("image head: {:?}", init.head_init),
        ObjectiveKind::Dense => format!("dense: [CLS] → {} dims", opts.method.dense_dim),
        ObjectiveKind::Rerank | ObjectiveKind::Heads | ObjectiveKind::Adapter => String::new(),
    };
    observer.message(&format!(
        "text tower: {}; image tower: {} ({}px, patch {}); {head}",
        init.text.from, init.image.from, init.image.config.image_size, init.image.config.patch_size,
    ));
    let corpus = data::load(&input, &tokenizer, &mut |d, t| observer.checking(d, t))?;
    for e in &corpus.examples {
        observer.message(&format!("skipped {e}"));
    }
    let fitted = opts.fit_batch(corpus.pairs.len(), &mut |note| observer.message(note))?;
    let opts = fitted.as_ref().unwrap_or(opts);
    let mut order = Order::new(opts.optim.seed, corpus.pairs.len(), opts.optim.batch_size);
    let steps_per_epoch = order.steps_per_epoch();
    let total = crate::steps::total_steps(opts, steps_per_epoch);
    let device = lexlip_model::device(opts.run.gpu)?;
    let mut model = EncoderPair::build(opts, &init, DType::F32, &device)?;
    if opts.lexicon.grounding > 0.0 {
        let idf = Idf::of_corpus(
            corpus.pairs.iter().map(|p| p.tokens.as_slice()),
            &tokenizer,
            opts.lexicon.grounding_max_df,
            &opts.lexicon.grounding_words,
        )?;
        model.ground(&idf)?;
    }
    let params = model.params(
        opts.method.phase,
        opts.optim.text_lr.unwrap_or(opts.optim.lr) / opts.optim.lr,
    );
    let mut adam = crate::steps::optimizer(opts);
    let fingerprint = fingerprint_of(opts, &input, model.init())?;
    let mut start = 0u64;
    let mut group = GroupState::default();
    if let Some((dir, state)) =
        checkpoint::resumable(&opts.run.out, &fingerprint, opts.run.restart)?
    {
        group = restore(&mut model, &mut adam, &params, &dir, &state)?;
        start = state.step;
        let epoch = start / steps_per_epoch.max(1);
        if opts.optim.sampler == Sampler::Grouped && epoch > 0 {
            match &group.current {
                Some((e, o)) if *e == epoch => order.set(epoch, o),
                _ => {
                    return Err(TrainError::Checkpoint {
                        path: dir,
                        message: format!(
                            "this checkpoint lacks the grouped order of epoch {epoch}; pass \
                             --restart to train again from the start"
                        ),
                    });
                }
            }
        }
        observer.message(&format!(
            "resuming from {} (step {start} of {total})",
            dir.display()
        ));
    }
    let span = Span::new(opts, start, total, steps_per_epoch);
    let mut summary = Summary::starting(opts, opts.method.phase, start, total, &corpus);
    let record = |model: &EncoderPair, summary: &Summary, status: &str| {
        write_train_json(
            opts,
            control,
            &input,
            &corpus,
            model,
            &fingerprint,
            summary,
            status,
        )
    };
    if start < total {
        record(&model, &summary, "running")?;
    }
    if span.start < span.end {
        run_steps(
            &Fixed {
                opts,
                control,
                corpus: &corpus,
                tokenizer: &tokenizer,
                fingerprint: &fingerprint,
                span,
            },
            Moving {
                order: &mut order,
                group: &mut group,
                model: &mut model,
                adam: &mut adam,
                params: &params,
            },
            observer,
            &mut summary,
        )?;
    }
    let marker = opts.run.out.join(exported_marker(opts.method.objective));
    crate::steps::write_out(
        opts,
        &mut summary,
        started,
        span,
        &marker,
        || model.export(&opts.run.out, opts.run.save_dtype, opts.data.max_length),
        |summary| record(&model, summary, summary.status()),
    )?;
    Ok(summary)
}

/// What a LexLIP or dense run steps with and does not change.
struct Fixed<'a> {
    opts: &'a TrainOptions,
    control: &'a RunControl,
    corpus: &'a Corpus,
    tokenizer: &'a TextTokenizer,
    fingerprint: &'a str,
    span: Span,
}

/// What its steps update: the sampler's order, the grouped sampler's state, the model and the
/// optimizer over `params`.
struct Moving<'a> {
    order: &'a mut Order,
    group: &'a mut GroupState,
    model: &'a mut EncoderPair,
    adam: &'a mut AdamW,
    params: &'a [crate::optim::Param],
}

/// LexLIP and dense steps `start..end` on the one training loop ([`crate::steps`]).
fn run_steps(
    fixed: &Fixed,
    moving: Moving,
    observer: &mut dyn Observer,
    summary: &mut Summary,
) -> Result<()> {
    let Fixed {
        opts,
        control,
        corpus,
        tokenizer,
        fingerprint,
        span,
    } = *fixed;
    let Moving {
        order,
        group,
        model,
        adam,
        params,
    } = moving;
    let total = span.total;
    let augment = Augment::of_options(
        &opts.data,
        &lexlip_model::ImageProcessor {
            size: model.image_size(),
            mean: model.init().image.mean,
            std: model.init().image.std,
            squash: false,
            resampler: Default::default(),
        },
    );
    let masking = Masking {
        rate: opts.method.mask_rate,
        decoder_rate: opts.method.decoder_mask_rate,
        second_view: opts.method.image_contrastive > 0.0,
        patches: (opts.method.dense_token != DenseToken::None).then(|| PatchMasking {
            grid: model.image_size() / model.init().image.config.patch_size,
            rate: opts.method.image_mask_rate,
        }),
    };
    let flops = FlopsSchedule::of(opts, total);
    let top_k = TopKSchedule {
        k: opts.lexicon.image_top_k,
        vocab: model.init().vocab.len(),
        warmup_steps: flops.warmup_steps,
    };
    let objectives = Objectives {
        tau: opts.method.tau,
        flops: flops.at(span.start),
        image_top_k: top_k.at(span.start),
        grounding: opts.lexicon.grounding,
        momentum: opts.method.momentum,
        consistency: opts.method.itc_consistency,
        image_contrastive: opts.method.image_contrastive,
        text_contrastive: opts.method.text_contrastive,
        dense_loss: opts.method.dense_loss,
        dense_token: opts.method.dense_token,
    };
    let text_cache = if let Some(model) = model.frozen_text() {
        observer.message(&format!(
            "frozen text tower: encoding the {} captions once",
            corpus.pairs.len()
        ));
        let cache = TextCache::build(model, corpus, tokenizer.pad, &mut |d, t| {
            observer.encoding(d, t)
        })?;
        observer.message(&format!(
            "captions encoded: {:.1} terms per caption",
            cache.mean_nonzero()
        ));
        Some(cache)
    } else {
        None
    };
    let grouped = opts.optim.sampler == Sampler::Grouped;
    // The grouped order of each epoch, made at the end of the one before (`updated`).
    let (order_tx, order_rx) = std::sync::mpsc::channel::<(u64, Vec<u32>)>();
    let batches = PairBatches {
        corpus,
        tokenizer,
        augment,
        masking,
        order: order.clone(),
        order_rx,
        grouped,
        steps_per_epoch: span.steps_per_epoch.max(1),
        seed: opts.optim.seed,
    };
    let mut objective = LexlipSteps {
        opts,
        corpus,
        model,
        params,
        group,
        text_cache,
        objectives,
        flops,
        top_k,
        order_tx,
        grouped,
        steps_per_epoch: span.steps_per_epoch.max(1),
        total,
        last: None,
    };
    crate::steps::run(
        crate::steps::RunContext {
            opts,
            control,
            fingerprint,
        },
        &mut objective,
        batches,
        adam,
        span,
        observer,
        summary,
    )
}

/// The pair batches of LexLIP and dense runs: augmented, masked, in the run's (possibly
/// grouped) order.
struct PairBatches<'a> {
    corpus: &'a Corpus,
    tokenizer: &'a TextTokenizer,
    augment: Augment,
    masking: Masking,
    order: Order,
    order_rx: std::sync::mpsc::Receiver<(u64, Vec<u32>)>,
    grouped: bool,
    steps_per_epoch: u64,
    seed: u64,
}

impl Batches for PairBatches<'_> {
    type Batch = HostBatch;

    fn batch(&mut self, step: u64) -> Result<HostBatch> {
        let epoch = step / self.steps_per_epoch;
        while self.grouped && epoch > 0 && !self.order.has(epoch) {
            match self.order_rx.recv() {
                Ok((e, o)) => self.order.set(e, &o),
                Err(_) => return Err(TrainError::invalid("the grouped order did not arrive")),
            }
        }
        let indices = self.order.batch(step);
        data::make_batch(
            self.corpus,
            &indices,
            step,
            self.seed,
            &self.augment,
            self.tokenizer,
            self.masking,
        )
    }
}

/// LexLIP (phase 1 and 2) and dense steps.
struct LexlipSteps<'a> {
    opts: &'a TrainOptions,
    corpus: &'a Corpus,
    model: &'a mut EncoderPair,
    params: &'a [crate::optim::Param],
    group: &'a mut GroupState,
    text_cache: Option<TextCache>,
    objectives: Objectives,
    flops: FlopsSchedule,
    top_k: TopKSchedule,
    order_tx: std::sync::mpsc::Sender<(u64, Vec<u32>)>,
    grouped: bool,
    steps_per_epoch: u64,
    total: u64,
    /// The last step's momentum keys, queued after the update.
    last: Option<crate::encoder_pair::Keys>,
}

impl Objective for LexlipSteps<'_> {
    type Batch = HostBatch;

    fn params(&self) -> &[crate::optim::Param] {
        self.params
    }

    fn losses(&mut self, step: u64, host: HostBatch) -> Result<Computed> {
        let opts = self.opts;
        let mut batch = host.to_device(self.model.device())?;
        if let Some(cache) = &self.text_cache {
            batch.text_lexicon = Some(cache.batch(&host.pairs, self.model.device())?);
        }
        let drop = Dropout::new(
            opts.optim.dropout,
            Rng::new(&[opts.optim.seed, key("dropout"), step]),
        );
        self.objectives.flops = self.flops.at(step);
        self.objectives.image_top_k = self.top_k.at(step);
        let (losses, keys) = self
            .model
            .step(opts.method.phase, &batch, &drop, &self.objectives)?;
        // Representations are kept only for an epoch that a grouped one follows.
        if self.grouped
            && (step / self.steps_per_epoch + 1) * self.steps_per_epoch < self.total
            && let Some((image, text)) = &losses.features
        {
            self.group.collect(&host.pairs, image, text)?;
        }
        self.last = Some(keys);
        Ok(Computed {
            nnz_image: losses.nnz_image,
            nnz_text: losses.nnz_text,
            ..Computed::new(losses.total, losses.parts)
        })
    }

    fn updated(&mut self, step: u64, observer: &mut dyn Observer) -> Result<()> {
        if let Some(keys) = self.last.take() {
            self.model.enqueue(keys)?;
        }
        let done = step + 1;
        if self.grouped && done.is_multiple_of(self.steps_per_epoch) && done < self.total {
            let t = Instant::now();
            let epoch = done / self.steps_per_epoch - 1;
            let next = self.group.next_epoch(
                epoch,
                self.opts.optim.seed,
                self.corpus.pairs.len(),
                self.opts.optim.batch_size,
                self.opts.optim.group_size,
            )?;
            observer.message(&format!(
                "grouped sampler: epoch {}'s mini-batches from {} pairs in {:.1} s; mean \
                 similarity of in-batch negatives {:.3} (epoch {} had {:.3})",
                epoch + 2,
                self.corpus.pairs.len(),
                t.elapsed().as_secs_f64(),
                next.after,
                epoch + 1,
                next.before
            ));
            // The data thread is gone when this run stops here; the next one reads the order
            // from the checkpoint.
            let _ = self.order_tx.send((epoch + 1, next.order));
        }
        Ok(())
    }

    fn checkpoint(&self) -> Result<crate::steps::Saved> {
        let mut tensors: HashMap<String, Tensor> = HashMap::new();
        for (group, store) in self.model.stores() {
            for (name, t) in crate::params::snapshot(store)? {
                tensors.insert(format!("{group}/{name}"), t);
            }
        }
        tensors.extend(self.group.tensors()?);
        let mut queue = (0, 0);
        if let Some((queue_image, queue_text)) = self.model.queues() {
            if let Some(rows) = queue_image.rows()? {
                tensors.insert("queue/image".into(), rows.copy()?);
            }
            if let Some(rows) = queue_text.rows()? {
                tensors.insert("queue/text".into(), rows.copy()?);
            }
            queue = (queue_image.ptr, queue_image.fill);
        }
        Ok((tensors, queue))
    }
}

fn restore(
    model: &mut EncoderPair,
    adam: &mut AdamW,
    params: &[crate::optim::Param],
    dir: &Path,
    state: &State,
) -> Result<GroupState> {
    let all = checkpoint::tensors(dir)?;
    let group = |prefix: &str| checkpoint::group(&all, prefix);
    for (name, store) in model.stores() {
        crate::params::restore(store, &group(name), &format!("{} ({name})", dir.display()))?;
    }
    adam.restore(state.adam_t, &group("adam"), params)?;
    if let Some((queue_image, queue_text)) = model.queues_mut() {
        queue_image.restore(all.get("queue/image"), state.queue_ptr, state.queue_fill)?;
        queue_text.restore(all.get("queue/text"), state.queue_ptr, state.queue_fill)?;
    }
    GroupState::from_tensors(&all)
}

#[allow(clippy::too_many_arguments)]
fn write_train_json(
    opts: &TrainOptions,
    control: &RunControl,
    input: &Input,
    corpus: &Corpus,
    model: &EncoderPair,
    fingerprint: &str,
    summary: &Summary,
    status: &str,
) -> Result<()> {
    let init = model.init();
    let image_head = match opts.method.objective {
        ObjectiveKind::Lexlip => Some(format!("{:?}", init.head_init).to_lowercase()),
        ObjectiveKind::Dense
        | ObjectiveKind::Rerank
        | ObjectiveKind::Heads
        | ObjectiveKind::Adapter => None,
    };
    let mut files = Vec::new();
    for f in input_files(input)? {
        let bytes = std::fs::metadata(&f)
            .map_err(|e| TrainError::io(&f, e))?
            .len();
        files.push(serde_json::json!({"path": f, "bytes": bytes, "sha256": sha256_file(&f)?}));
    }
    let image_bytes: u64 = corpus.images.iter().map(|r| r.encoded_len()).sum();
    let doc = serde_json::json!({
        "status": status,
        "command": control.command_line,
        "seed": opts.optim.seed,
        "phase": opts.method.phase,
        "fingerprint": fingerprint,
        "options": opts,
        "init": {
            "text": init.text.from,
            "image": init.image.from,
            "image_head": image_head,
            "tokenizer": init.tokenizer,
            "shared_layers": init.shared.as_ref().map(|s| serde_json::json!({
                "layers": s.config.num_hidden_layers,
                "from": if s.pretrained { init.text.from.as_str() } else { "random" },
            })),
        },
        "data": {
            "input": input.describe(),
            "files": files,
            "images": corpus.images.len(),
            "image_bytes": image_bytes,
            "pairs": corpus.pairs.len(),
            "read": corpus.read,
            "skipped": corpus.skipped,
        },
        "summary": summary,
        "updated_unix_s": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    });
    let mut text =
        serde_json::to_string_pretty(&doc).map_err(|e| TrainError::invalid(e.to_string()))?;
    text.push('\n');
    checkpoint::write_atomic(&opts.run.out.join("train.json"), text.as_bytes())
}
