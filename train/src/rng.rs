//! Deterministic randomness. Every random draw of a run (initial weights, data order, masking,
//! augmentation, dropout) comes from a stream keyed by the seed and *what it is for* (a name, a
//! step, a sample index), never from a stream carried across steps. So the state of step `s` is
//! a pure function of the seed and `s`: a resumed run draws exactly what an uninterrupted one
//! would, with nothing to save but the step.

/// SplitMix64: small, fast, good enough for masks and augmentation, identical on every platform.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

/// Mixes 64 bits (the SplitMix64 finaliser).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 64-bit key for a string (FNV-1a then mixed), to name streams.
pub fn key(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

impl Rng {
    /// The stream for `parts` (e.g. `[seed, key("mask"), step, index]`).
    pub fn new(parts: &[u64]) -> Self {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for p in parts {
            state = mix(state ^ mix(p.wrapping_add(0x9E37_79B9_7F4A_7C15)));
        }
        Self { state }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, 1) as f32 (24 random bits).
    pub fn uniform_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        // Multiply-shift: bias below 2^-32 for the sizes used here.
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A uniformly random permutation of `0..n` (Fisher-Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i + 1);
            p.swap(i, j);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(&[1, 2]).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Rng::new(&[1, 2]).next_u64(), Rng::new(&[2, 1]).next_u64());
        let mut r = Rng::new(&[7]);
        let p = r.permutation(100);
        let mut s = p.clone();
        s.sort();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
        let mean: f64 = (0..10_000).map(|_| r.uniform()).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02);
        let var: f64 = (0..10_000).map(|_| r.normal().powi(2)).sum::<f64>() / 10_000.0;
        assert!((var - 1.0).abs() < 0.05);
        assert!((0..1000).all(|_| r.below(7) < 7));
    }
}
