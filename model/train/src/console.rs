//! The command line's observer: an indicatif progress bar with the loss components and ETA, or
//! (`--json`) one JSON object per logged step on stdout. When stderr is no terminal (a log file,
//! a service, a batch job) the bar draws nothing, so messages and every logged step are written
//! as plain lines instead.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::observe::{Observer, StepLog, Summary};

pub struct Console {
    bar: ProgressBar,
    json: bool,
}

impl Console {
    pub fn new(json: bool) -> Self {
        let bar = ProgressBar::hidden();
        if !json {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        Self { bar, json }
    }

    fn style(&self, template: &str) {
        if let Ok(s) = ProgressStyle::with_template(template) {
            self.bar.set_style(s);
        }
    }

    /// Clears the bar and prints the run's summary (JSON with `--json`).
    pub fn finish(&self, summary: &Summary) {
        self.bar.finish_and_clear();
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
        if self.json || self.bar.is_hidden() {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    fn checking(&mut self, done: u64, total: u64) {
        if done == 0 || self.bar.length() != Some(total) {
            self.bar.set_length(total);
            self.style("checking images {bar:30} {human_pos}/{human_len} {per_sec}");
        }
        self.bar.set_position(done);
    }

    fn encoding(&mut self, done: u64, total: u64) {
        if done == 0 || self.bar.length() != Some(total) {
            self.bar.set_length(total);
            self.style("encoding captions {bar:30} {human_pos}/{human_len} {per_sec}");
        }
        self.bar.set_position(done);
    }

    fn started(&mut self, start: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(start);
        self.bar.reset_eta();
        self.style("{bar:30} step {human_pos}/{human_len} ETA {eta} {msg}");
    }

    fn progress(&mut self, done: u64) {
        self.bar.set_position(done);
    }

    fn step(&mut self, log: &StepLog) {
        if self.json {
            if let Ok(line) = serde_json::to_string(log) {
                println!("{line}");
            }
        } else if self.bar.is_hidden() {
            eprintln!(
                "step {}/{} epoch {:.2} {} | {:.1} pairs/s",
                log.step,
                log.total_steps,
                log.epoch,
                describe(log),
                log.samples_per_s
            );
        } else {
            self.bar.set_message(describe(log));
        }
    }
}
