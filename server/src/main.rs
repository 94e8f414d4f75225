//! `lexlip`: a search server for image-text retrieval in the lexicon space.
//!
//! The binary is thin: argument parsing and output formatting live in `cli/`, the work in the
//! `lexlip-index` (engine) and `lexlip-model` (encoders) crates; `http/` holds the axum API.

mod cli;
mod http;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(args.log_format);
    match cli::run(args.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
