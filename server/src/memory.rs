//! The server's heap under long write load, on glibc.
//!
//! Measured with `scripts/soak.py` (docs/benchmarks.md, "Memory at a constant data size"):
//! under hours of adds, deletes and searches glibc's allocator keeps what the request threads
//! free in per-thread arenas and returns little of it, so the resident heap crept up by 80-140
//! MB an hour at 20,000 documents beyond what was live. Fewer arenas and a periodic
//! `malloc_trim` hand that memory back to the system. (What was live grew too, until the
//! collections pruned tantivy's cache of mapped files: `lexlip_index::Collection`.) [`heap`]
//! tells the two apart.

/// Arenas glibc may create (its default is 8 per core).
const ARENAS: i32 = 2;
/// How often freed memory is handed back.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Limits glibc's arenas and starts a thread that trims the heap every few seconds; nothing
/// on other C libraries.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt and malloc_trim only change glibc's allocator settings and release
        // free pages; they take no pointers of ours and are safe to call from any thread.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
        let spawned = std::thread::Builder::new()
            .name("malloc-trim".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TRIM_EVERY);
                    // SAFETY: as above.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no thread to trim the heap: {e}");
        }
    }
}

/// Serves large blocks from the heap, where freed ones are reused, for the commands that
/// encode or train in batches (`index`, `eval`, `encode`, `bench`, `train`).
///
/// A batch of 32 pictures through MobileNetV2, or a training step, allocates and frees
/// activations and vocabulary-sized tensors of tens to hundreds of MB. glibc serves each from a
/// fresh `mmap`, so every batch pays for page faults and zeroing: a fifth of the CPU time in a
/// profile, and half the demo model's throughput at batch 32 (`lexlip bench encode`: 26 against
/// 49 images/s). Memory is not returned between batches; a batch command's peak is unchanged.
/// One arena serves every thread: a thread's own arena grows in heaps of at most 64 MB, so
/// there a larger block is a fresh `mmap` whatever the threshold, and `lexlip index` encodes
/// on such a thread (one arena: the demo's index 54.6 -> 46.3 s, peak RSS 571 -> 480 MiB).
/// The server keeps glibc's defaults and trims instead ([`tune_allocator`]).
pub fn reuse_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; called on the main thread before the
    // command starts its workers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// What the allocator holds: bytes handed out to the program and bytes it keeps free.
///
/// Resident memory alone cannot tell a leak from memory the allocator keeps for reuse; these
/// two can (`GET /metrics`: `lexlip_heap_in_use_bytes`, `lexlip_heap_free_bytes`).
#[derive(Clone, Copy, Debug)]
pub struct Heap {
    /// Live allocations, including those served by their own `mmap`.
    pub in_use: u64,
    /// Freed memory the allocator keeps in its arenas.
    pub free: u64,
}

/// The allocator's figures, where the C library gives them (glibc).
pub fn heap() -> Option<Heap> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads glibc's allocator statistics into a returned struct.
        let info = unsafe { libc::mallinfo2() };
        Some(Heap {
            in_use: (info.uordblks + info.hblkhd) as u64,
            free: info.fordblks as u64,
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::heap;

    /// The live figure moves by what is allocated and freed (other test threads may allocate a
    /// little meanwhile: the margin).
    #[test]
    fn heap_in_use_follows_allocations() {
        const SIZE: u64 = 256 << 20;
        const MARGIN: u64 = 32 << 20;
        let before = heap().unwrap().in_use;
        let block = std::hint::black_box(vec![7u8; SIZE as usize]);
        let during = heap().unwrap().in_use;
        assert!(during + MARGIN >= before + SIZE, "{before} → {during}");
        drop(block);
        let after = heap().unwrap().in_use;
        assert!(after + SIZE <= during + MARGIN, "{during} → {after}");
    }
}
