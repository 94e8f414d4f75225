//! Dynamic batching of encoder calls: concurrent requests are queued, and one worker thread per
//! encoder takes whatever has arrived (up to `max_batch`, waiting at most `max_wait` after the
//! first item) and encodes it as one batch. The queue is bounded: when it is full a request is
//! refused at once (the API answers 503 with Retry-After) instead of waiting without limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::error::ApiError;

/// Batching limits.
#[derive(Debug, Clone, Copy)]
pub struct BatchConfig {
    pub max_batch: usize,
    pub max_wait: Duration,
    /// Items waiting (not yet taken by the worker) before new ones are refused.
    pub queue: usize,
}

type Job<I, O> = (I, oneshot::Sender<Result<O, ApiError>>);

/// A queue in front of one encoder.
pub struct Batcher<I, O> {
    name: &'static str,
    tx: SyncSender<Job<I, O>>,
    depth: Arc<AtomicUsize>,
}

/// Called by the worker with each batch; returns one result per item, in order.
pub type BatchFn<I, O> = Box<dyn Fn(Vec<I>) -> Vec<Result<O, ApiError>> + Send>;

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the worker thread. `observe(batch_len)` is called for every batch (metrics).
    pub fn start(
        name: &'static str,
        config: BatchConfig,
        run: BatchFn<I, O>,
        observe: Box<dyn Fn(usize) + Send>,
    ) -> Self {
        let (tx, rx) = sync_channel::<Job<I, O>>(config.queue.max(1));
        let depth = Arc::new(AtomicUsize::new(0));
        let worker_depth = depth.clone();
        std::thread::Builder::new()
            .name(format!("encode-{name}"))
            .spawn(move || worker(rx, config, run, observe, worker_depth))
            .expect("spawning an encoder thread");
        Self { name, tx, depth }
    }

    /// Items waiting for the worker.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Queues one item and waits for its result.
    pub async fn submit(&self, item: I) -> Result<O, ApiError> {
        let (done, result) = oneshot::channel();
        self.depth.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send((item, done)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.depth.fetch_sub(1, Ordering::Relaxed);
                return Err(ApiError::unavailable(
                    format!("the {} encoder queue is full; retry shortly", self.name),
                    1,
                ));
            }
            Err(TrySendError::Disconnected(_)) => {
                self.depth.fetch_sub(1, Ordering::Relaxed);
                return Err(ApiError::internal(format!(
                    "the {} encoder stopped",
                    self.name
                )));
            }
        }
        result
            .await
            .unwrap_or_else(|_| Err(ApiError::internal("the encoder dropped a request")))
    }
}

fn worker<I, O>(
    rx: Receiver<Job<I, O>>,
    config: BatchConfig,
    run: BatchFn<I, O>,
    observe: Box<dyn Fn(usize) + Send>,
    depth: Arc<AtomicUsize>,
) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let deadline = Instant::now() + config.max_wait;
        while jobs.len() < config.max_batch {
            let now = Instant::now();
            if now >= deadline {
                // Take what is already queued without waiting.
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
                continue;
            }
            match rx.recv_timeout(deadline - now) {
                Ok(job) => jobs.push(job),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        depth.fetch_sub(jobs.len(), Ordering::Relaxed);
        // A client that gave up (timeout, disconnect) no longer needs its item encoded.
        jobs.retain(|(_, done)| !done.is_closed());
        if jobs.is_empty() {
            continue;
        }
        observe(jobs.len());
        let (items, senders): (Vec<I>, Vec<_>) = jobs.into_iter().unzip();
        let n = items.len();
        let mut results = run(items);
        if results.len() != n {
            results = (0..n)
                .map(|_| {
                    Err(ApiError::internal(
                        "encoder returned a wrong number of results",
                    ))
                })
                .collect();
        }
        for (done, r) in senders.into_iter().zip(results) {
            let _ = done.send(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batched results equal one-by-one results, in order, whatever the batching.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn batched_equals_one_by_one_and_batches_form() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        let b = Arc::new(Batcher::<u64, u64>::start(
            "test",
            BatchConfig {
                max_batch: 8,
                max_wait: Duration::from_millis(20),
                queue: 1000,
            },
            Box::new(|items| items.into_iter().map(|x| Ok(x * x + 1)).collect()),
            Box::new(move |n| seen2.lock().unwrap().push(n)),
        ));
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                let b = b.clone();
                tokio::spawn(async move { (i, b.submit(i).await.unwrap()) })
            })
            .collect();
        for t in tasks {
            let (i, out) = t.await.unwrap();
            assert_eq!(out, i * i + 1);
        }
        let sizes = seen.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 64);
        assert!(sizes.iter().all(|&n| n <= 8));
        assert!(sizes.iter().any(|&n| n > 1), "no batch formed: {sizes:?}");
    }

    #[tokio::test]
    async fn full_queue_is_refused_with_retry_after() {
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Mutex::new(gate_rx);
        // The worker says when it holds an item, so the test does not guess with sleeps.
        let (took_tx, mut took_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let b = Arc::new(Batcher::<u64, u64>::start(
            "slow",
            BatchConfig {
                max_batch: 1,
                max_wait: Duration::from_millis(1),
                queue: 2,
            },
            Box::new(move |items| {
                let _ = took_tx.send(());
                let _ = gate.lock().unwrap().recv();
                items.into_iter().map(Ok).collect()
            }),
            Box::new(|_| {}),
        ));
        // One item is taken by the worker (blocked on the gate), two fill the queue.
        let submit = |i: u64| {
            let b = b.clone();
            tokio::spawn(async move { b.submit(i).await })
        };
        let mut pending = vec![submit(0)];
        took_rx.recv().await.unwrap();
        pending.push(submit(1));
        pending.push(submit(2));
        while b.depth() < 2 {
            tokio::task::yield_now().await;
        }
        let refused = b.submit(99).await.unwrap_err();
        assert_eq!(refused.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.retry_after, Some(1));
        for _ in 0..3 {
            gate_tx.send(()).unwrap();
        }
        for p in pending {
            assert!(p.await.unwrap().is_ok());
        }
        // Recovered: accepted again.
        gate_tx.send(()).unwrap();
        assert_eq!(b.submit(5).await.unwrap(), 5);
    }
}
