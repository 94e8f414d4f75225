//! Ctrl-C and SIGTERM, for the server's graceful shutdown and the batch jobs' clean stop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Resolves at the next Ctrl-C or SIGTERM (an error when signals cannot be watched).
pub async fn interrupted() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

/// A flag set by the first Ctrl-C (or SIGTERM): a batch job stops reading, commits what it read
/// and exits; a second one exits at once (the last commit is kept either way).
pub fn stop_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    if let Ok(runtime) = runtime {
        std::thread::spawn(move || {
            runtime.block_on(async move {
                loop {
                    if interrupted().await.is_err() {
                        return; // no signal handling: the default (exit) stays
                    }
                    if Arc::strong_count(&set) == 1 {
                        // The job is over (`lexlip demo` goes on to serve, which handles
                        // its own signals): nothing to stop here.
                        return;
                    }
                    if set.swap(true, Ordering::Relaxed) {
                        eprintln!("interrupted again: exiting (the last commit is kept)");
                        std::process::exit(130);
                    }
                    eprintln!(
                        "interrupted: committing the batch being written (Ctrl-C again to exit at once)"
                    );
                }
            })
        });
    }
    flag
}
