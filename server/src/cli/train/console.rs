//! `lexlip train`'s observer. On a terminal: a bar for each phase (checking the pictures,
//! filling the embedding caches, the steps with their loss components and ETA). Elsewhere (a log
//! file, a batch job) a bar draws nothing, so the phases write timed lines through the meter and
//! every logged step is a line with its ETA. `--json`: one JSON object per logged step on stdout.

use std::time::Instant;

use indicatif::HumanDuration;
use lexlip_train::{Observer, StepLog, Summary};

use crate::cli::meter::{Meter, Unit};

pub struct Console {
    json: bool,
    /// The phase under way and its meter.
    phase: Option<(Phase, Meter)>,
    /// Where the steps' rate counts from: the first step of this run and when it started.
    clock: Option<(u64, Instant)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Checking,
    Caching,
    Steps,
}

impl Console {
    pub fn new(json: bool) -> Self {
        Self {
            json,
            phase: None,
            clock: None,
        }
    }

    /// The meter of `phase` over `total`, a new one when the phase or its total changes (each
    /// cache section counts apart).
    fn meter(&mut self, phase: Phase, done: u64, total: u64) -> &mut Meter {
        let current = matches!(&self.phase, Some((p, _)) if *p == phase);
        if !current || done == 0 {
            self.end_phase();
            let (what, unit, template) = match phase {
                Phase::Checking => (
                    "checking images",
                    "images",
                    "checking images {bar:30} {human_pos}/{human_len} {per_sec}",
                ),
                Phase::Caching => (
                    "caching embeddings",
                    "rows",
                    "caching embeddings {bar:30} {human_pos}/{human_len} {per_sec} ETA {eta}",
                ),
                Phase::Steps => (
                    "training",
                    "steps",
                    "{bar:30} step {human_pos}/{human_len} ETA {eta} {msg}",
                ),
            };
            let meter = Meter::new(what, Unit::Count(unit), Some(total), template, self.json);
            // The logged steps are the training's lines.
            let meter = if phase == Phase::Steps {
                meter.without_lines()
            } else {
                meter
            };
            self.phase = Some((phase, meter));
        }
        let (_, meter) = self.phase.as_mut().expect("set above");
        meter.set_length(total);
        meter
    }

    fn end_phase(&mut self) {
        if let Some((_, mut meter)) = self.phase.take() {
            meter.finish();
        }
    }

    /// Ends the bar and prints the run's summary (JSON with `--json`).
    pub fn finish(&mut self, summary: &Summary) {
        self.end_phase();
        if self.json {
            println!("{}", serde_json::json!({ "summary": summary }));
            return;
        }
        let what = if summary.already_complete {
            "already complete (nothing to do)"
        } else if summary.interrupted {
            "stopped; the same command resumes"
        } else {
            "done"
        };
        println!(
            "{}: step {} of {} ({} pairs, {} images), {:.1} pairs/s; model in {}",
            what,
            summary.steps_done,
            summary.total_steps,
            summary.pairs,
            summary.images,
            summary.samples_per_s,
            summary.out.display()
        );
        if !summary.skipped.is_empty() {
            println!(
                "skipped: {:?} (of {} items read)",
                summary.skipped, summary.read
            );
        }
    }

    /// The steps still to run at this run's pace, once it has one.
    fn eta(&self, step: u64, total: u64) -> Option<String> {
        let (first, started) = self.clock?;
        let done = step.checked_sub(first).filter(|d| *d > 0)?;
        let per_step = started.elapsed().as_secs_f64() / done as f64;
        let left = per_step * total.saturating_sub(step) as f64;
        Some(HumanDuration(std::time::Duration::from_secs_f64(left)).to_string())
    }
}

/// `name 1.234` pairs of the loss components, in a fixed order.
pub fn describe(log: &StepLog) -> String {
    let mut s = format!("loss {:.3}", log.loss);
    for (k, v) in &log.parts {
        if !k.starts_with("flops") {
            s.push_str(&format!(" {k} {v:.3}"));
        }
    }
    if let (Some(image), Some(text)) = (log.nnz_image, log.nnz_text) {
        s.push_str(&format!(" | nnz img {image:.0} txt {text:.0}"));
    }
    s.push_str(&format!(" | lr {:.2e}", log.lr));
    s
}

impl Observer for Console {
    fn message(&mut self, text: &str) {
        match &self.phase {
            Some((_, meter)) => meter.println(text),
            None => eprintln!("{text}"),
        }
    }

    fn checking(&mut self, done: u64, total: u64) {
        self.meter(Phase::Checking, done, total).set_position(done);
    }

    fn encoding(&mut self, done: u64, total: u64) {
        self.meter(Phase::Caching, done, total).set_position(done);
    }

    fn started(&mut self, start: u64, total: u64) {
        self.clock = Some((start, Instant::now()));
        let meter = self.meter(Phase::Steps, 0, total);
        meter.set_position(start);
        meter.restart_rate();
    }

    fn progress(&mut self, done: u64) {
        if let Some((Phase::Steps, meter)) = &mut self.phase {
            meter.set_position(done);
        }
    }

    fn step(&mut self, log: &StepLog) {
        if self.json {
            if let Ok(line) = serde_json::to_string(log) {
                println!("{line}");
            }
            return;
        }
        let eta = self
            .eta(log.step, log.total_steps)
            .map(|e| format!(", ETA {e}"))
            .unwrap_or_default();
        let line = format!(
            "step {}/{} epoch {:.2} {} | {:.1} pairs/s{eta}",
            log.step,
            log.total_steps,
            log.epoch,
            describe(log),
            log.samples_per_s
        );
        match &mut self.phase {
            Some((Phase::Steps, meter)) if meter.draws_a_bar() => {
                meter.set_message(describe(log));
            }
            Some((_, meter)) => meter.println(&line),
            None => eprintln!("{line}"),
        }
    }
}
