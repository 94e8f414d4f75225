//! What a training run and its caller tell each other: the caller's stop flag and command line
//! ([`RunControl`]), progress as it happens ([`Observer`], [`StepLog`]) and the outcome
//! ([`Summary`]). Every objective reports through these.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::Serialize;

use crate::data::Corpus;
use crate::options::TrainOptions;

/// What a caller adds to the options: a stop flag (Ctrl-C) and the command line to record.
#[derive(Debug, Clone, Default)]
pub struct RunControl {
    /// Set to stop after the current step (a checkpoint is written; the same command resumes).
    pub stop: Option<Arc<AtomicBool>>,
    /// Recorded in `train.json`.
    pub command_line: Vec<String>,
}

/// One logged step.
#[derive(Debug, Clone, Serialize)]
pub struct StepLog {
    /// Steps done.
    pub step: u64,
    pub total_steps: u64,
    pub epoch: f64,
    pub loss: f64,
    /// Loss components by name (`self_mlm`, `lex_mlm_i2t`, `lex_mlm_t2i`, `baco`, `moco`, …).
    #[serde(flatten)]
    pub parts: BTreeMap<String, f64>,
    /// Mean non-zero terms of the image / text representations (LexLIP only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nnz_image: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nnz_text: Option<f64>,
    pub lr: f64,
    /// Before clipping.
    pub grad_norm: f64,
    /// Pairs per second over this run's steps so far.
    pub samples_per_s: f64,
    pub elapsed_s: f64,
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub out: PathBuf,
    pub phase: u8,
    pub steps_done: u64,
    pub total_steps: u64,
    pub resumed_from: u64,
    /// Stopped (flag or `--stop-at`) before the last step; the same command resumes.
    pub interrupted: bool,
    /// The run had finished before (nothing was trained).
    pub already_complete: bool,
    pub pairs: usize,
    pub images: usize,
    pub read: u64,
    pub skipped: BTreeMap<String, u64>,
    pub seconds: f64,
    pub samples_per_s: f64,
    pub last: Option<StepLog>,
}

impl Summary {
    /// A run about to do steps `start..total` of `corpus`.
    pub(crate) fn starting(
        opts: &TrainOptions,
        phase: u8,
        start: u64,
        total: u64,
        corpus: &Corpus,
    ) -> Self {
        Self {
            out: opts.run.out.clone(),
            phase,
            steps_done: start,
            total_steps: total,
            resumed_from: start,
            interrupted: false,
            already_complete: start >= total,
            pairs: corpus.pairs.len(),
            images: corpus.images.len(),
            read: corpus.read,
            skipped: corpus.skipped.clone(),
            seconds: 0.0,
            samples_per_s: 0.0,
            last: None,
        }
    }

    /// The `status` a finished run's `train.json` records: "interrupted" or "complete".
    pub(crate) fn status(&self) -> &'static str {
        if self.interrupted {
            "interrupted"
        } else {
            "complete"
        }
    }
}

/// Receives progress: the CLI's progress bar and JSON lines, or a test's collector.
pub trait Observer {
    /// A line for the user (what was loaded, skipped items, resume).
    fn message(&mut self, _text: &str) {}
    /// The corpus image check: `done` of `total` images.
    fn checking(&mut self, _done: u64, _total: u64) {}
    /// The frozen text tower's caption cache: `done` of `total` captions encoded.
    fn encoding(&mut self, _done: u64, _total: u64) {}
    /// Training starts (or resumes) at `start` of `total` steps.
    fn started(&mut self, _start: u64, _total: u64) {}
    /// After every step.
    fn progress(&mut self, _done: u64) {}
    /// Every `--log-every` steps and the last one.
    fn step(&mut self, log: &StepLog);
}

/// An observer that ignores everything.
pub struct Silent;

impl Observer for Silent {
    fn step(&mut self, _log: &StepLog) {}
}
