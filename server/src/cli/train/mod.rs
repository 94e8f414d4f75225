//! `lexlip train`: LexLIP pre-training on the user's image-text pairs (`lexlip-train`), with a
//! progress bar (or `--json` lines), a clean stop on Ctrl-C and resume from the last checkpoint.

mod console;

use anyhow::Context;
use lexlip_train::{RunControl, TrainOptions};

use console::Console;

use super::model_args::resolve_model;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example (the emoji corpus of scripts/build-emoji-corpus.sh, text tower from a \
SPLADE model):\n  lexlip train --tsv data/emoji/train.tsv --text-init splade-tiny \
--image-config tiny \\\n    --out models/mine"
)]
pub struct TrainArgs {
    #[command(flatten)]
    pub options: TrainOptions,
}

pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let mut opts = args.options;
    for init in [
        &mut opts.model.init,
        &mut opts.model.text_init,
        &mut opts.model.image_init,
        &mut opts.model.backbone,
    ] {
        if let Some(path) = init.as_mut() {
            *path = resolve_model(path)?;
        }
    }
    let ctl = RunControl {
        stop: Some(crate::signal::stop_flag()),
        command_line: std::env::args().collect(),
    };
    let mut console = Console::new(opts.run.json);
    let summary = lexlip_train::train(&opts, &ctl, &mut console)
        .with_context(|| format!("training into {}", opts.run.out.display()))?;
    console.finish(&summary);
    if summary.interrupted && !summary.already_complete && opts.run.stop_at.is_none() {
        anyhow::bail!(
            "stopped at step {} of {}; run the same command to resume",
            summary.steps_done,
            summary.total_steps
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use lexlip_train::TrainOptions;

    #[derive(clap::Parser)]
    struct Line {
        #[command(flatten)]
        train: super::TrainArgs,
    }

    /// The command's defaults are the library's: a flag's `default_value` and
    /// `TrainOptions::new` are written apart and must not drift.
    #[test]
    fn the_commands_defaults_are_the_librarys() {
        let parsed = Line::try_parse_from(["train", "--out", "o"]).unwrap();
        assert_eq!(parsed.train.options, TrainOptions::new("o"));
    }
}
