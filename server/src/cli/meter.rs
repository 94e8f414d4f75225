//! Progress of long work on stderr. On a terminal, an indicatif bar. Elsewhere (a log file, a
//! container, a service) a bar draws nothing, so a line is written every few seconds instead —
//! done, total, rate and ETA — and a last one when the work ends; with `--log-format json` each
//! line is a JSON object shaped like the other log lines:
//!
//! ```text
//! indexing: 512/1,911 items (26 %), 34.2 items/s, ETA 41s
//! {"level":"INFO","target":"lexlip::progress","fields":{"message":"indexing","done":512,
//!  "total":1911,"unit":"items","per_s":34.2,"eta_s":41,"elapsed_s":15.0}}
//! ```
//!
//! `LEXLIP_PROGRESS_SECS` sets the seconds between lines (default 5; 0 writes one per update).

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use indicatif::{BinaryBytes, HumanCount, HumanDuration, ProgressBar, ProgressStyle};

/// Seconds between progress lines when stderr is no terminal.
const DEFAULT_EVERY_SECS: f64 = 5.0;

static JSON_LOGS: OnceLock<bool> = OnceLock::new();

/// Called once by logging's set-up: progress lines follow the log format.
pub fn set_json_logs(json: bool) {
    let _ = JSON_LOGS.set(json);
}

/// What a meter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Things, named in the lines ("items", "queries", "documents").
    Count(&'static str),
    /// Bytes, written in KiB / MiB.
    Bytes,
}

/// A progress bar on a terminal, or timed lines elsewhere.
pub struct Meter {
    bar: ProgressBar,
    lines: Option<Lines>,
}

impl Meter {
    /// A meter for `what` ("indexing"), counting `unit` up to `total` when known; `template` is
    /// the bar's indicatif template. `quiet` hides the bar on a terminal (the lines elsewhere are
    /// still written: they go to stderr, never into a `--json` report on stdout).
    pub fn new(what: &str, unit: Unit, total: Option<u64>, template: &str, quiet: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = if quiet || !terminal {
            ProgressBar::hidden()
        } else {
            let bar = match total {
                Some(n) => ProgressBar::new(n),
                None => ProgressBar::new_spinner(),
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar
        };
        let lines = (!terminal).then(|| Lines::new(what, unit, total));
        Self { bar, lines }
    }

    /// The same meter with no timed lines: for work that writes lines of its own (training's
    /// logged steps).
    pub fn without_lines(mut self) -> Self {
        self.lines = None;
        self
    }

    /// Whether a bar is drawn (a terminal, not quiet).
    pub fn draws_a_bar(&self) -> bool {
        !self.bar.is_hidden()
    }

    pub fn set_position(&mut self, done: u64) {
        self.bar.set_position(done);
        if let Some(l) = &mut self.lines {
            l.done = done;
            l.maybe_write();
        }
    }

    pub fn set_length(&mut self, total: u64) {
        self.bar.set_length(total);
        if let Some(l) = &mut self.lines {
            l.total = Some(total);
        }
    }

    /// A note after the counts (the bar's `{msg}`).
    pub fn set_message(&mut self, message: String) {
        if let Some(l) = &mut self.lines {
            l.message.clone_from(&message);
            l.maybe_write();
        }
        self.bar.set_message(message);
    }

    pub fn tick(&self) {
        self.bar.tick();
    }

    /// The rate and ETA count from here (a resumed run starts where an earlier one stopped).
    pub fn restart_rate(&mut self) {
        self.bar.reset_eta();
        if let Some(l) = &mut self.lines {
            l.base = l.done;
            l.started = Instant::now();
        }
    }

    /// Prints a line without tearing the bar.
    pub fn println(&self, text: &str) {
        self.bar.suspend(|| eprintln!("{text}"));
    }

    /// Clears the bar; elsewhere writes the last line (what was done, in how long).
    pub fn finish(&mut self) {
        self.bar.finish_and_clear();
        if let Some(l) = &mut self.lines
            && !l.finished
        {
            l.finished = true;
            l.write(true);
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// The timed lines of a meter whose stderr is no terminal.
struct Lines {
    what: String,
    unit: Unit,
    total: Option<u64>,
    done: u64,
    /// Where the rate counts from.
    base: u64,
    started: Instant,
    last: Option<Instant>,
    every: Duration,
    json: bool,
    message: String,
    finished: bool,
}

impl Lines {
    fn new(what: &str, unit: Unit, total: Option<u64>) -> Self {
        let secs = std::env::var("LEXLIP_PROGRESS_SECS")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .unwrap_or(DEFAULT_EVERY_SECS);
        Self {
            what: what.to_string(),
            unit,
            total,
            done: 0,
            base: 0,
            started: Instant::now(),
            last: None,
            every: Duration::from_secs_f64(secs),
            json: JSON_LOGS.get().copied().unwrap_or(false),
            message: String::new(),
            finished: false,
        }
    }

    /// Writes a line when the interval has passed since the last one (or the start).
    fn maybe_write(&mut self) {
        let since = self.last.unwrap_or(self.started);
        if since.elapsed() >= self.every {
            self.write(false);
        }
    }

    fn write(&mut self, last: bool) {
        self.last = Some(Instant::now());
        let elapsed = self.started.elapsed().as_secs_f64();
        let per_s =
            (elapsed > 0.0).then(|| (self.done - self.base.min(self.done)) as f64 / elapsed);
        let eta = match (self.total, per_s) {
            (Some(total), Some(rate)) if rate > 0.0 && !last => {
                Some(total.saturating_sub(self.done) as f64 / rate)
            }
            _ => None,
        };
        let line = if self.json {
            self.json_line(per_s, eta, elapsed, last)
        } else {
            self.text_line(per_s, eta, elapsed, last)
        };
        eprintln!("{line}");
    }

    fn amount(&self, n: u64) -> String {
        match self.unit {
            Unit::Count(_) => HumanCount(n).to_string(),
            Unit::Bytes => BinaryBytes(n).to_string(),
        }
    }

    fn text_line(&self, per_s: Option<f64>, eta: Option<f64>, elapsed: f64, last: bool) -> String {
        let unit = match self.unit {
            Unit::Count(name) => format!(" {name}"),
            Unit::Bytes => String::new(),
        };
        let mut line = format!("{}: {}", self.what, self.amount(self.done));
        if let Some(total) = self.total {
            line += &format!("/{}{unit}", self.amount(total));
            if total > 0 {
                line += &format!(" ({:.0} %)", 100.0 * self.done as f64 / total as f64);
            }
        } else {
            line += &unit;
        }
        if let Some(rate) = per_s {
            line += &match self.unit {
                Unit::Count(name) => format!(", {rate:.1} {name}/s"),
                Unit::Bytes => format!(", {}/s", BinaryBytes(rate as u64)),
            };
        }
        if let Some(eta) = eta {
            line += &format!(", ETA {}", HumanDuration(Duration::from_secs_f64(eta)));
        }
        if last {
            line += &format!(
                ", done in {}",
                HumanDuration(Duration::from_secs_f64(elapsed))
            );
        }
        if !self.message.is_empty() {
            line += &format!(" — {}", self.message);
        }
        line
    }

    fn json_line(&self, per_s: Option<f64>, eta: Option<f64>, elapsed: f64, last: bool) -> String {
        let unit = match self.unit {
            Unit::Count(name) => name,
            Unit::Bytes => "bytes",
        };
        let mut fields = serde_json::json!({
            "message": self.what,
            "done": self.done,
            "unit": unit,
            "elapsed_s": (elapsed * 10.0).round() / 10.0,
        });
        if let Some(total) = self.total {
            fields["total"] = total.into();
        }
        if let Some(rate) = per_s {
            fields["per_s"] = ((rate * 10.0).round() / 10.0).into();
        }
        if let Some(eta) = eta {
            fields["eta_s"] = (eta.round() as u64).into();
        }
        if last {
            fields["finished"] = true.into();
        }
        if !self.message.is_empty() {
            fields["note"] = self.message.clone().into();
        }
        serde_json::json!({"level": "INFO", "target": "lexlip::progress", "fields": fields})
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{Lines, Unit};

    fn lines(unit: Unit, total: Option<u64>, done: u64) -> Lines {
        let mut l = Lines::new("indexing", unit, total);
        l.done = done;
        l
    }

    #[test]
    fn a_line_says_done_total_rate_and_eta() {
        let l = lines(Unit::Count("items"), Some(1911), 512);
        let text = l.text_line(Some(34.2), Some(41.0), 15.0, false);
        assert_eq!(
            text,
            "indexing: 512/1,911 items (27 %), 34.2 items/s, ETA 41 seconds"
        );
        let json: serde_json::Value =
            serde_json::from_str(&l.json_line(Some(34.2), Some(41.0), 15.0, false)).unwrap();
        assert_eq!(json["fields"]["done"], 512);
        assert_eq!(json["fields"]["total"], 1911);
        assert_eq!(json["fields"]["eta_s"], 41);
        assert_eq!(json["fields"]["per_s"], 34.2);
        assert_eq!(json["level"], "INFO");
    }

    #[test]
    fn bytes_and_unknown_totals_read_plainly() {
        let mut l = lines(Unit::Bytes, None, 3 << 20);
        l.message = "4000 documents read".into();
        let text = l.text_line(Some((1 << 20) as f64), None, 3.0, true);
        assert_eq!(
            text,
            "indexing: 3.00 MiB, 1.00 MiB/s, done in 3 seconds — 4000 documents read"
        );
    }
}
