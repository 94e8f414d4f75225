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

/// A short description for logs and benchmark reports ("cpu", "cuda:0").
pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".to_string(),
        Device::Cuda(_) => "cuda:0".to_string(),
        Device::Metal(_) => "metal".to_string(),
    }
}
