//! `lexlip index` with a corpus input (`--tsv`, `--manifest`, `--webdataset`, `--images`):
//! the batch pipeline of `lexlip-pipeline` with a progress bar, an errors file and a summary.

use std::time::Instant;

use anyhow::{Context, bail};
use lexlip_index::{Collection, CollectionSettings};
use lexlip_model::{Encoders, LoadOptions};
use lexlip_pipeline::{BadItem, Counts, ErrorsFile, Input, Observer, Options};

use super::index::IndexArgs;

struct Report {
    bar: indicatif::ProgressBar,
    errors: Option<ErrorsFile>,
    /// The first progress call (a resumed run starts where the earlier one committed).
    started: bool,
}

impl Observer for Report {
    fn skipped(&mut self, position: u64, bad: &BadItem) -> lexlip_pipeline::Result<()> {
        if let Some(out) = &mut self.errors {
            out.write(&serde_json::json!({
                "position": position, "id": bad.id, "reason": bad.reason, "message": bad.message,
            }))?;
        }
        Ok(())
    }

    fn progress(&mut self, read: u64, _indexed: u64) {
        self.bar.set_position(read);
        if !self.started {
            self.started = true;
            self.bar.reset_eta(); // the rate counts this run's items only
        }
    }

    fn checkpoint(&mut self) -> lexlip_pipeline::Result<u64> {
        self.errors.as_mut().map_or(Ok(0), ErrorsFile::checkpoint)
    }

    fn rewind(&mut self, mark: u64) -> lexlip_pipeline::Result<()> {
        match &mut self.errors {
            Some(out) => out.rewind(mark),
            None => Ok(()),
        }
    }
}

fn input(args: &IndexArgs) -> anyhow::Result<Input> {
    Ok(if let Some(p) = &args.tsv {
        Input::Tsv {
            path: p.clone(),
            images_root: args.images_root.clone(),
        }
    } else if let Some(p) = &args.manifest {
        Input::Manifest(p.clone())
    } else if !args.webdataset.is_empty() {
        Input::WebDataset(args.webdataset.clone())
    } else if let Some(p) = &args.images {
        Input::ImageDir(p.clone())
    } else {
        bail!("give one input: --vectors, --tsv, --manifest, --webdataset or --images")
    })
}

pub fn run(args: IndexArgs) -> anyhow::Result<()> {
    let input = input(&args)?;
    let Some(model_arg) = &args.model else {
        bail!("--tsv, --manifest, --webdataset and --images need --model (the encoders)");
    };
    if args.vocab.is_some() {
        bail!("--vocab is for --vectors; corpus inputs use the model's vocabulary");
    }
    let model_path = super::resolve_model(model_arg)?;
    let device = lexlip_model::device(args.gpu)?;
    let options = LoadOptions {
        tokenizer: args.tokenizer.clone(),
        ..Default::default()
    };
    let encoders = Encoders::load_with(&model_path, &device, &options)
        .with_context(|| format!("loading model {}", model_path.display()))?;
    let space = encoders
        .term_space()
        .cloned()
        .context("the model has no sparse (text or image) encoder")?;
    // Opening the input first means a missing or unreadable input changes nothing. A total for
    // the ETA where counting is cheap (not for tar shards).
    let total = match &input {
        Input::WebDataset(paths) => {
            lexlip_pipeline::sources::webdataset::shards(paths)?;
            None
        }
        other => Some(
            other
                .open()?
                .filter(|i| args.shard.is_none_or(|s| s.holds(i)))
                .count() as u64,
        ),
    };
    let collection = if lexlip_index::Manifest::path(&args.collection).exists() {
        let c = Collection::open(&args.collection)?;
        c.check_term_space(&space)?;
        c
    } else {
        let tokens = encoders
            .text()
            .map(|t| t.vocabulary().tokens().to_vec())
            .or_else(|_| encoders.image().map(|i| i.vocabulary().tokens().to_vec()))?;
        let settings = CollectionSettings {
            scale: args.scale,
            top_k_terms: args.top_k_terms,
            dense_dim: None,
        };
        Collection::create(&args.collection, space, settings, Some(&tokens))?
    };
    let errors = args.errors.as_deref().map(ErrorsFile::open).transpose()?;
    let bar = match total {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(if total.is_some() {
            "{bar:30} {human_pos}/{human_len} items, {per_sec}, ETA {eta}"
        } else {
            "{spinner} {human_pos} items, {per_sec}, {elapsed}"
        })
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    if args.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let options = Options {
        batch_size: args.batch_size.max(1),
        commit_every: args.commit_every.unwrap_or(10_000).max(1),
        shard: args.shard,
        strict: args.strict,
        context: format!(
            "{}|{}|{:?}",
            model_path.display(),
            args.scale,
            args.top_k_terms
        ),
        restart: args.restart,
        stop: Some(super::index::stop_on_signal()),
    };
    let mut report = Report {
        bar,
        errors,
        started: false,
    };
    let start = Instant::now();
    let result = lexlip_pipeline::run(&input, &encoders, &collection, &options, &mut report);
    report.bar.finish_and_clear();
    let summary = result?;
    if summary.already_complete {
        eprintln!(
            "{}: this input was already indexed completely by an earlier run; nothing to do \
             (--restart indexes it again)",
            args.collection.display()
        );
    } else if summary.resumed_from > 0 {
        eprintln!(
            "resumed after input item {} (committed by an earlier run)",
            summary.resumed_from
        );
    }
    let counts = Counts {
        read: summary.read,
        indexed: summary.indexed,
        skipped: summary.skipped,
    };
    super::index::summary(&collection, counts, summary.processed, start, &args, |s| {
        s.stage_seconds = Some(summary.stage_seconds);
        s.resumed_from = (summary.resumed_from > 0).then_some(summary.resumed_from);
        s.already_complete = summary.already_complete;
        s.interrupted = summary.interrupted;
    })
}
