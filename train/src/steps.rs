//! The one training loop every objective runs: data order on a prefetching thread, the
//! learning-rate schedule, the optimizer step with clipping, the checks that stop a diverging
//! run, logging, periodic atomic checkpoints and the stop flag (Ctrl-C, `--stop-at`).
//!
//! An objective says only what is its own: how a batch is made ([`Batches`], on the data
//! thread), what the losses of a batch are and what happens after an update, and what its
//! checkpoint holds ([`Objective`]). LexLIP (phase 1 and 2), dense and re-rank runs all step
//! here, so a fix to the loop reaches every one of them.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use lexlip_corpus::Input;

use crate::checkpoint::{self, State};
use crate::error::{Result, TrainError};
use crate::observe::{Observer, RunControl, StepLog, Summary};
use crate::optim::{AdamW, AdamWConfig, Param, clip_scale, grad_norm, learning_rate};
use crate::options::TrainOptions;

/// Batches prepared ahead of the step that uses them.
const PREFETCH: usize = 2;

/// Makes each step's batch, in step order, on the data thread.
pub(crate) trait Batches: Send {
    type Batch: Send;
    fn batch(&mut self, step: u64) -> Result<Self::Batch>;
}

/// What one step computed.
pub(crate) struct Computed {
    /// The loss the gradients come from.
    pub total: Tensor,
    /// Its named parts, logged.
    pub parts: Vec<(&'static str, Tensor)>,
    /// Figures logged beside them (e.g. the re-ranker's ITM accuracy).
    pub figures: Vec<(&'static str, f64)>,
    /// Mean non-zero terms per image / text lexicon (lexicon objectives only).
    pub nnz_image: Option<f64>,
    pub nnz_text: Option<f64>,
}

impl Computed {
    /// A loss and its logged parts, with no figures or lexicon sizes.
    pub fn new(total: Tensor, parts: Vec<(&'static str, Tensor)>) -> Self {
        Self {
            total,
            parts,
            figures: Vec::new(),
            nnz_image: None,
            nnz_text: None,
        }
    }
}

/// What a checkpoint of an objective keeps besides the optimizer: named tensors, and the
/// momentum queue's (position, fill) — (0, 0) for an objective whose only state is its weights.
pub(crate) type Saved = (HashMap<String, Tensor>, (usize, usize));

/// A trainable objective as the loop drives it.
pub(crate) trait Objective {
    type Batch: Send;
    /// The parameters the optimizer updates (in a fixed order: the optimizer's state follows it).
    fn params(&self) -> &[Param];
    /// The losses of step `step` (from 0) on `batch`.
    fn losses(&mut self, step: u64, batch: Self::Batch) -> Result<Computed>;
    /// After the parameters were updated with step `step`'s gradients (momentum queues, the
    /// grouped sampler's next epoch).
    fn updated(&mut self, _step: u64, _observer: &mut dyn Observer) -> Result<()> {
        Ok(())
    }
    /// What a checkpoint keeps besides the optimizer: named tensors, and the momentum queue's
    /// (position, fill).
    fn checkpoint(&self) -> Result<Saved>;
}

/// Creates the output directory and proves it writable before any work.
pub(crate) fn prepare_out(out: &Path) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(TrainError::invalid(format!(
            "--out {} is a file, not a directory",
            out.display()
        )));
    }
    std::fs::create_dir_all(out).map_err(|e| TrainError::io(out, e))?;
    let probe = out.join(".write-probe");
    std::fs::write(&probe, b"").map_err(|e| TrainError::io(&probe, e))?;
    std::fs::remove_file(&probe).map_err(|e| TrainError::io(&probe, e))
}

/// The start of a run over frozen inputs (heads, adapter, re-ranker), once its arguments are
/// checked: the time it starts (its summary's seconds count from it), `--out` made ready
/// ([`prepare_out`]), its corpus input and the device it runs on.
pub(crate) fn begin(opts: &TrainOptions) -> Result<(Instant, Input, Device)> {
    let started = Instant::now();
    prepare_out(&opts.run.out)?;
    let input = crate::data::input(opts)?;
    let device = lexlip_model::device(opts.run.gpu)?;
    Ok((started, input, device))
}

/// Which steps this run does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    /// The first step (where a resumed run starts).
    pub start: u64,
    /// One past the last step this run does (`--stop-at` or the total).
    pub end: u64,
    /// Steps of the whole run.
    pub total: u64,
    pub steps_per_epoch: u64,
}

impl Span {
    /// The span of a run of `total` steps resumed at `start` (0: a fresh run), which stops at
    /// `--stop-at` when given.
    pub(crate) fn new(opts: &TrainOptions, start: u64, total: u64, steps_per_epoch: u64) -> Self {
        Self {
            start,
            end: opts.run.stop_at.unwrap_or(total).min(total),
            total,
            steps_per_epoch,
        }
    }
}

/// What a run over frozen inputs trains: one parameter store, kept in its checkpoints under
/// `group/`, the optimizer's parameters over it, and the steps of an epoch of its order.
pub(crate) struct Trained<'s> {
    pub store: &'s candle_nn::VarMap,
    pub group: &'static str,
    pub params: &'s [Param],
    pub steps_per_epoch: u64,
}

impl<'a> Trained<'a> {
    /// `store`, checkpointed under `group/`, with the optimizer's `params` over it, trained in
    /// `order`.
    pub(crate) fn new(
        store: &'a candle_nn::VarMap,
        group: &'static str,
        params: &'a [Param],
        order: &crate::data::Order,
    ) -> Self {
        Self {
            store,
            group,
            params,
            steps_per_epoch: order.steps_per_epoch(),
        }
    }

    /// The run (started at `started`) that trains this store over `corpus`: the run's
    /// optimizer and steps, resumed from the last checkpoint in `--out` with this `fingerprint`
    /// ([`Trained::resumed_at`]), else from step 0.
    pub(crate) fn resume(
        self,
        opts: &'a TrainOptions,
        control: &'a RunControl,
        started: Instant,
        fingerprint: String,
        corpus: &crate::data::Corpus,
        observer: &mut dyn Observer,
    ) -> Result<Trainer<'a>> {
        let mut adam = optimizer(opts);
        let total = total_steps(opts, self.steps_per_epoch);
        let start = self.resumed_at(opts, &fingerprint, &mut adam, total, observer)?;
        Ok(Trainer {
            opts,
            control,
            span: Span::new(opts, start, total, self.steps_per_epoch),
            summary: Summary::starting(opts, 1, start, total, corpus),
            trained: self,
            fingerprint,
            adam,
            started,
        })
    }

    /// The step a run of this store starts at: that of the last checkpoint in `--out` with
    /// this `fingerprint` (its tensors under `group/` and the optimizer's state restored), else
    /// 0.
    fn resumed_at(
        &self,
        opts: &TrainOptions,
        fingerprint: &str,
        adam: &mut AdamW,
        total: u64,
        observer: &mut dyn Observer,
    ) -> Result<u64> {
        let Some((dir, state)) =
            checkpoint::resumable(&opts.run.out, fingerprint, opts.run.restart)?
        else {
            return Ok(0);
        };
        let all = checkpoint::tensors(&dir)?;
        crate::params::restore(
            self.store,
            &checkpoint::group(&all, self.group),
            &dir.display().to_string(),
        )?;
        adam.restore(state.adam_t, &checkpoint::group(&all, "adam"), self.params)?;
        observer.message(&format!(
            "resuming from {} (step {} of {total})",
            dir.display(),
            state.step
        ));
        Ok(state.step)
    }
}

/// The losses of an objective over one parameter store ([`Trained`]): all that such an
/// objective says itself, the store giving its parameters and checkpoint.
pub(crate) trait Losses {
    type Batch: Send;
    /// The losses of step `step` (from 0) on `batch`.
    fn losses(&mut self, step: u64, batch: Self::Batch) -> Result<Computed>;
}

/// [`Losses`] over one store as the loop drives them.
struct OneStore<'t, 's, L> {
    trained: &'t Trained<'s>,
    objective: &'t mut L,
}

impl<L: Losses> Objective for OneStore<'_, '_, L> {
    type Batch = L::Batch;

    fn params(&self) -> &[Param] {
        self.trained.params
    }

    fn losses(&mut self, step: u64, batch: L::Batch) -> Result<Computed> {
        self.objective.losses(step, batch)
    }

    fn checkpoint(&self) -> Result<Saved> {
        Ok((
            store_tensors(self.trained.store, self.trained.group)?,
            (0, 0),
        ))
    }
}

/// A run over frozen inputs around the loop (heads, adapter, re-ranker): what every such run
/// shares — its options, stop signal, what it trains, fingerprint, optimizer, span, summary and
/// start time — so that an objective sets up only its model and batches, then calls
/// [`Trained::resume`], [`Trainer::steps`] and [`Trainer::finish`].
pub(crate) struct Trainer<'a> {
    pub opts: &'a TrainOptions,
    pub control: &'a RunControl,
    pub trained: Trained<'a>,
    pub fingerprint: String,
    pub adam: AdamW,
    pub span: Span,
    pub summary: Summary,
    pub started: Instant,
}

impl Trainer<'_> {
    /// Runs this run's steps of `objective` ([`run`]).
    pub(crate) fn steps<L: Losses, B: Batches<Batch = L::Batch>>(
        &mut self,
        objective: &mut L,
        batches: B,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        run(
            RunContext {
                opts: self.opts,
                control: self.control,
                fingerprint: &self.fingerprint,
            },
            &mut OneStore {
                trained: &self.trained,
                objective,
            },
            batches,
            &mut self.adam,
            self.span,
            observer,
            &mut self.summary,
        )
    }

    /// Writes the run out ([`write_out`]): the export, complete when `exported` exists, and the
    /// record `train.json` — status, command, seed, fingerprint, options and summary, with what
    /// `inputs` says of the run's inputs (paths and checksums, computed only when written).
    pub(crate) fn finish(
        mut self,
        exported: &std::path::Path,
        export: impl FnOnce() -> Result<()>,
        inputs: impl FnOnce() -> Result<serde_json::Value>,
    ) -> Result<Summary> {
        let (opts, control, fingerprint) = (self.opts, self.control, &self.fingerprint);
        let record = |summary: &Summary| {
            let mut doc = serde_json::json!({
                "status": summary.status(),
                "command": control.command_line,
                "seed": opts.optim.seed,
                "fingerprint": fingerprint,
                "options": opts,
                "summary": summary,
            });
            if let (Some(doc), serde_json::Value::Object(more)) = (doc.as_object_mut(), inputs()?) {
                doc.extend(more);
            }
            checkpoint::write_atomic(
                &opts.run.out.join("train.json"),
                &crate::export::json_bytes(&doc),
            )
        };
        write_out(
            opts,
            &mut self.summary,
            self.started,
            self.span,
            exported,
            export,
            record,
        )?;
        Ok(self.summary)
    }
}

/// What every step of a run reads and never changes: its options, its controls (the stop
/// flag, the command line) and the fingerprint its checkpoints carry.
#[derive(Clone, Copy)]
pub(crate) struct RunContext<'a> {
    pub opts: &'a TrainOptions,
    pub control: &'a RunControl,
    pub fingerprint: &'a str,
}

/// Runs steps `span.start..span.end` of `objective` with batches from `batches`.
pub(crate) fn run<O: Objective, B: Batches<Batch = O::Batch>>(
    context: RunContext,
    objective: &mut O,
    mut batches: B,
    adam: &mut AdamW,
    span: Span,
    observer: &mut dyn Observer,
    summary: &mut Summary,
) -> Result<()> {
    let RunContext {
        opts,
        control,
        fingerprint,
    } = context;
    let Span {
        start, end, total, ..
    } = span;
    let steps_per_epoch = span.steps_per_epoch.max(1);
    let run_start = Instant::now();
    observer.started(start, total);
    std::thread::scope(|scope| -> Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<B::Batch>>(PREFETCH);
        scope.spawn(move || {
            for step in start..end {
                if tx.send(batches.batch(step)).is_err() {
                    return;
                }
            }
        });
        for step in start..end {
            let batch = rx
                .recv()
                .map_err(|_| TrainError::invalid("the data thread stopped"))??;
            let computed = objective.losses(step, batch)?;
            let loss = scalar(&computed.total)?;
            if !loss.is_finite() {
                return Err(TrainError::Diverged {
                    step: step + 1,
                    what: "the loss".into(),
                });
            }
            let params = objective.params();
            let grads = computed.total.backward()?;
            let norm = grad_norm(params, &grads)?;
            if !norm.is_finite() {
                return Err(TrainError::Diverged {
                    step: step + 1,
                    what: "the gradient norm".into(),
                });
            }
            let lr = learning_rate(opts.optim.lr, step, total, opts.optim.warmup);
            adam.step(params, &grads, lr, clip_scale(norm, opts.optim.clip_grad))?;
            std::mem::drop(grads);
            objective.updated(step, observer)?;
            let done = step + 1;
            summary.steps_done = done;
            observer.progress(done);
            let elapsed = run_start.elapsed().as_secs_f64();
            let stopping = control
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed));
            let last = done == end || stopping;
            if done % opts.run.log_every.max(1) == 0 || last {
                let mut parts = BTreeMap::new();
                for (name, t) in &computed.parts {
                    parts.insert((*name).to_string(), scalar(t)?);
                }
                for (name, x) in &computed.figures {
                    parts.insert((*name).to_string(), *x);
                }
                let log = StepLog {
                    step: done,
                    total_steps: total,
                    epoch: done as f64 / steps_per_epoch as f64,
                    loss,
                    parts,
                    nnz_image: computed.nnz_image,
                    nnz_text: computed.nnz_text,
                    lr,
                    grad_norm: norm,
                    samples_per_s: ((done - start) as usize * opts.optim.batch_size) as f64
                        / elapsed.max(1e-9),
                    elapsed_s: elapsed,
                };
                observer.step(&log);
                summary.samples_per_s = log.samples_per_s;
                summary.last = Some(log);
            }
            if done % opts.run.checkpoint_every.max(1) == 0 || last {
                save(opts, objective, adam, fingerprint, done, total)?;
            }
            if stopping {
                break;
            }
        }
        Ok(())
    })
}

/// The optimizer of every objective: AdamW with the run's weight decay.
pub(crate) fn optimizer(opts: &TrainOptions) -> AdamW {
    AdamW::new(AdamWConfig {
        weight_decay: opts.optim.weight_decay,
        ..AdamWConfig::default()
    })
}

/// After the steps of a run: its time and whether it stopped early, then its export (complete
/// when `exported` exists), written when the run moved or it is missing and some step was
/// done, and its `train.json` record, written when the run moved, stopped early or it is
/// missing. A start that finds the run complete rewrites neither, so the record stays that of
/// the run that trained it.
pub(crate) fn write_out(
    opts: &TrainOptions,
    summary: &mut Summary,
    started: Instant,
    span: Span,
    exported: &std::path::Path,
    export: impl FnOnce() -> Result<()>,
    record: impl FnOnce(&Summary) -> Result<()>,
) -> Result<()> {
    summary.seconds = started.elapsed().as_secs_f64();
    summary.interrupted = summary.steps_done < span.total;
    let moved = summary.steps_done > span.start;
    if (moved || !exported.is_file()) && summary.steps_done > 0 {
        export()?;
    }
    if moved || summary.interrupted || !opts.run.out.join("train.json").is_file() {
        record(summary)?;
    }
    Ok(())
}

/// Steps of the whole run: `--steps`, else `--epochs` × the steps of an epoch (at least one).
pub(crate) fn total_steps(opts: &TrainOptions, steps_per_epoch: u64) -> u64 {
    opts.optim
        .steps
        .unwrap_or_else(|| ((opts.optim.epochs * steps_per_epoch as f64).ceil() as u64).max(1))
}

/// The checkpoint tensors of a single parameter store, named `group/NAME`: what
/// [`Trained::resumed_at`] restores.
pub(crate) fn store_tensors(
    store: &candle_nn::VarMap,
    group: &str,
) -> Result<HashMap<String, Tensor>> {
    Ok(crate::params::snapshot(store)?
        .into_iter()
        .map(|(name, t)| (format!("{group}/{name}"), t))
        .collect())
}

/// Writes the checkpoint of `done` steps (atomically; older ones beyond `--keep-checkpoints`
/// are removed).
fn save<O: Objective>(
    opts: &TrainOptions,
    objective: &O,
    adam: &AdamW,
    fingerprint: &str,
    done: u64,
    total: u64,
) -> Result<()> {
    let (mut tensors, (queue_ptr, queue_fill)) = objective.checkpoint()?;
    for (name, t) in adam.state()? {
        tensors.insert(format!("adam/{name}"), t);
    }
    let state = State {
        format: 1,
        step: done,
        total_steps: total,
        fingerprint: fingerprint.to_string(),
        adam_t: adam.t,
        queue_ptr,
        queue_fill,
    };
    checkpoint::save(&opts.run.out, &state, &tensors, opts.run.keep_checkpoints)?;
    Ok(())
}

/// A scalar tensor as a number.
pub(crate) fn scalar(t: &Tensor) -> Result<f64> {
    Ok(f64::from(t.to_dtype(DType::F32)?.to_scalar::<f32>()?))
}
