//! Stopping a search from outside: the caller keeps a [`Cancel`] and sets it (a request timed
//! out, its client went away); the search checks it between blocks and between terms, so it
//! stops within milliseconds and returns [`IndexError::Cancelled`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{IndexError, Result};

/// A shared cancellation flag. Clones share it; the default one is never set by anybody.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every search holding this flag to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(Cancelled)` once the flag is set.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(IndexError::Cancelled)
        } else {
            Ok(())
        }
    }

    /// A guard that sets the flag when dropped: keep it inside the future that awaits the
    /// search, and dropping that future (a timeout, a closed connection) stops the search.
    pub fn on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

/// Two flags are equal when they are the same flag.
impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Sets its [`Cancel`] when dropped (see [`Cancel::on_drop`]).
#[derive(Debug)]
pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
