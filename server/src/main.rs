//! `lexlip`: a search server for image-text retrieval in the lexicon space.

use lexlip_server::cli;

fn main() -> std::process::ExitCode {
    lexlip_model::settle_cpu_threads();
    let args = cli::parse();
    cli::init_logging(args.log_format);
    match cli::run(args.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
