//! Choosing where the encoders run.

use candle_core::Device;

use crate::error::Result;

/// The first CUDA GPU when `prefer_gpu` is set, the crate was built with the `cuda` feature and a
/// GPU is present; the CPU otherwise.
pub fn device(prefer_gpu: bool) -> Result<Device> {
    if prefer_gpu && candle_core::utils::cuda_is_available() {
        return Ok(Device::new_cuda(0)?);
    }
    Ok(Device::Cpu)
}

/// Sets `RAYON_NUM_THREADS` to the thread count candle chooses, once, unless the user set a
/// count.
/// candle asks for that count at every matrix product and, without the variable, reads
/// `/proc/cpuinfo` to find it (`num_cpus::get_physical`): a fifth of a text query's time at
/// batch 1. rayon's global pool is built here with rayon's own default (every logical CPU), so
/// the variable changes nothing but candle's cost of reading it.
///
/// Call it first thing in `main`: setting the environment while another thread reads it is
/// undefined behaviour, and the pool's threads start only after the variable is set.
pub fn settle_cpu_threads() {
    // A count candle reads (a positive integer) is the user's choice; 0 (rayon: "the default")
    // or anything else is none.
    let given = std::env::var("RAYON_NUM_THREADS").ok();
    if given
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n > 0)
    {
        return;
    }
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    let candle = candle_core::utils::get_num_threads();
    // SAFETY: no other thread of the process exists yet (the caller's promise above).
    unsafe { std::env::set_var("RAYON_NUM_THREADS", candle.to_string()) };
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(logical)
        .build_global();
}

/// A short description for logs and benchmark reports ("cpu", "cuda:0").
pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".to_string(),
        Device::Cuda(_) => "cuda:0".to_string(),
        Device::Metal(_) => "metal".to_string(),
    }
}
