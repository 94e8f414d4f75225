//! Whether a write may still commit. The request timeout abandons a request by dropping its
//! future, but a write's blocking work goes on; without a gate it would commit after the client
//! was told 503. The gate settles the race: the write asks to commit, the timeout asks to
//! abandon, and whichever comes first wins — an abandoned write rolls back, and a write that is
//! already committing is waited for and answered as usual.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

const RUNNING: u8 = 0;
const COMMITTING: u8 = 1;
const ABANDONED: u8 = 2;

/// One request's gate (in the request's extensions, put there by the admission middleware).
#[derive(Debug, Clone, Default)]
pub struct CommitGate(Arc<AtomicU8>);

impl CommitGate {
    /// The write's side: true when it may commit (and from now on the request cannot be
    /// abandoned), false when the request was abandoned first.
    pub fn begin_commit(&self) -> bool {
        self.0
            .compare_exchange(RUNNING, COMMITTING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The timeout's side: true when the request is abandoned (no commit will happen), false
    /// when its write is already committing (wait for it).
    pub fn abandon(&self) -> bool {
        match self
            .0
            .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == ABANDONED,
        }
    }

    /// A guard that abandons the request when dropped (the client went away).
    pub fn abandon_on_drop(&self) -> AbandonOnDrop {
        AbandonOnDrop(self.clone())
    }
}

/// A handler takes its request's gate as an argument. Outside the admission middleware (a
/// router built without it) that is a gate nobody abandons.
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for CommitGate {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<CommitGate>()
            .cloned()
            .unwrap_or_default())
    }
}

/// See [`CommitGate::abandon_on_drop`].
pub struct AbandonOnDrop(CommitGate);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_commit_and_abandon_wins() {
        let g = CommitGate::default();
        assert!(g.begin_commit());
        assert!(!g.abandon(), "a committing write cannot be abandoned");
        let g = CommitGate::default();
        assert!(g.abandon());
        assert!(!g.begin_commit(), "an abandoned write must not commit");
        assert!(g.abandon());
        let g = CommitGate::default();
        drop(g.abandon_on_drop());
        assert!(!g.begin_commit());
    }
}
