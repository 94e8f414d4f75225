//! The towers' hot loops for f32 on the CPU, where candle's generic ops leave speed behind:
//! a linear layer whose bias, residual and GELU are folded into the matrix product (one pass
//! over the output instead of three single-threaded ones), and attention computed one head of
//! one input at a time, in parallel, straight from the projection's output with strided matrix
//! products (no head-splitting copies, and a score matrix per head that stays in cache instead
//! of a `(batch, heads, tokens, tokens)` tensor). The matrix products are candle's own CPU
//! kernel (the `gemm` crate).
//!
//! Each entry returns `None` where it does not apply (another device or dtype, a
//! non-contiguous tensor); the caller then runs candle's ops, which compute the same thing.

use candle_core::{DType, Device, Storage, Tensor};
use rayon::prelude::*;

/// Output elements per parallel chunk of element-wise work.
const CHUNK: usize = 1 << 14;
/// Below this many rows a linear layer's product is computed transposed (measured on AVX2 and
/// AVX-512 CPUs: up to twice as fast for a text's ~15 tokens, slower from about 200 rows).
const TRANSPOSE_BELOW: usize = 192;

/// Runs `f` on the f32 elements of a contiguous CPU tensor; `None` for any other tensor.
fn with_f32<T>(t: &Tensor, f: impl FnOnce(&[f32]) -> T) -> Option<T> {
    if t.dtype() != DType::F32 {
        return None;
    }
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return None;
    };
    let all = cpu.as_slice::<f32>().ok()?;
    let (start, end) = layout.contiguous_offsets()?;
    Some(f(&all[start..end]))
}

fn parallelism(flops: usize) -> gemm::Parallelism {
    let threads = rayon::current_num_threads();
    if threads > 1 && flops >= 1 << 20 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    }
}

/// One operand of [`matmul`]: element `(r, c)` at `ptr + r · row + c · col`.
#[derive(Clone, Copy)]
pub(crate) struct Strided<P> {
    pub ptr: P,
    pub row: usize,
    pub col: usize,
}

/// `dst = lhs · rhs` (or `dst += lhs · rhs` with `accumulate`) for `(m × k) · (k × n)` strided
/// operands: candle's CPU kernel with its arguments named.
///
/// # Safety
/// Every element each operand's strides reach for those sizes lies inside a live buffer; `dst`
/// does not overlap the other two and nothing else touches it during the call.
pub(crate) unsafe fn matmul(
    (m, n, k): (usize, usize, usize),
    dst: Strided<*mut f32>,
    accumulate: bool,
    lhs: Strided<*const f32>,
    rhs: Strided<*const f32>,
    parallelism: gemm::Parallelism,
) {
    // SAFETY: the caller's contract is gemm's.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.ptr,
            dst.col as isize,
            dst.row as isize,
            accumulate,
            lhs.ptr,
            lhs.col as isize,
            lhs.row as isize,
            rhs.ptr,
            rhs.col as isize,
            rhs.row as isize,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// What is folded into a linear layer's output.
#[derive(Clone, Copy)]
pub(crate) enum Epilogue<'a> {
    None,
    /// The exact (erf) GELU of the output.
    Gelu,
    /// OpenAI CLIP's QuickGELU of the output, `x·σ(1.702·x)`.
    QuickGelu,
    /// The output plus this tensor (a residual), of the output's shape.
    Add(&'a Tensor),
}

/// `epilogue(x Wᵀ + b)` over the last dimension of `x`, for `W: (out, in)`, `b: (out,)`.
pub(crate) fn linear(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    epilogue: Epilogue,
) -> Option<candle_core::Result<Tensor>> {
    let (n, k) = weight.dims2().ok()?;
    let dims = x.dims();
    let (&last, lead) = dims.split_last()?;
    if last != k || bias.dims() != [n] {
        return None;
    }
    let m: usize = lead.iter().product();
    let mut shape = lead.to_vec();
    shape.push(n);
    let residual = match epilogue {
        Epilogue::Add(r) if r.dims() == shape.as_slice() => Some(r),
        Epilogue::Add(_) => return None,
        _ => None,
    };
    let mut out = with_f32(x, |xs| {
        with_f32(weight, |ws| {
            with_f32(bias, |bs| match residual {
                Some(r) => with_f32(r, |rs| affine(xs, ws, bs, Some(rs), m, n, k)),
                None => Some(affine(xs, ws, bs, None, m, n, k)),
            })
        })
    })
    .flatten()
    .flatten()
    .flatten()?;
    match epilogue {
        Epilogue::Gelu => out.par_chunks_mut(CHUNK).for_each(|c| {
            vectorised(|| c.iter_mut().for_each(|v| *v = gelu(*v)));
        }),
        Epilogue::QuickGelu => out.par_chunks_mut(CHUNK).for_each(|c| {
            vectorised(|| c.iter_mut().for_each(|v| *v = quick_gelu(*v)));
        }),
        Epilogue::None | Epilogue::Add(_) => {}
    }
    Some(Tensor::from_vec(out, shape, &Device::Cpu))
}

/// `x Wᵀ + b (+ r)` for row-major `x: (m, k)`, `W: (n, k)`, `r: (m, n)`.
fn affine(
    x: &[f32],
    w: &[f32],
    b: &[f32],
    residual: Option<&[f32]>,
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    if n == 0 {
        return out;
    }
    out.par_chunks_mut(n)
        .enumerate()
        .for_each(|(i, row)| match residual {
            Some(r) => {
                for ((o, &bj), &rj) in row.iter_mut().zip(b).zip(&r[i * n..(i + 1) * n]) {
                    *o = bj + rj;
                }
            }
            None => row.copy_from_slice(b),
        });
    if m == 0 || k == 0 {
        return out;
    }
    // gemm computes dst = dst + lhs · rhs for strided operands; `read_dst` keeps the bias (and
    // residual) already in `out`. Few rows (a short text, the class tokens of a last layer) go
    // faster as the transposed problem, out ᵀ = W xᵀ: the weights then stream as the long side.
    let (rows, cols, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs) =
        if m < TRANSPOSE_BELOW {
            (n, m, n, 1, w, 1, k, x, k, 1)
        } else {
            (m, n, 1, n, x, 1, k, w, k, 1)
        };
    // SAFETY: `out` is (m × n) row-major, written as (rows × cols) with the strides given: as
    // itself, or as its transpose (element (j, i) at i · n + j). `x` is (m × k) row-major, `w`
    // is (n × k) row-major; each is read either as itself (row stride k) or transposed
    // (element (kk, j) at j · k + kk), all inside the slices. The three buffers are distinct
    // and outlive the call.
    unsafe {
        matmul(
            (rows, cols, k),
            Strided {
                ptr: out.as_mut_ptr(),
                row: dst_rs,
                col: dst_cs,
            },
            true,
            Strided {
                ptr: lhs.as_ptr(),
                row: lhs_rs,
                col: lhs_cs,
            },
            Strided {
                ptr: rhs.as_ptr(),
                row: rhs_rs,
                col: rhs_cs,
            },
            parallelism(m * n * k),
        );
    }
    out
}

/// Rows of one operand of attention: head `h` of input `i` is the `d` columns from
/// `start + i · batch + h · d`, its rows `row` apart.
#[derive(Clone, Copy)]
struct Rows<'a> {
    data: &'a [f32],
    batch: usize,
    row: usize,
    start: usize,
}

impl Rows<'_> {
    /// The first element of head `h` of input `i`, with `rows` rows of `d` after it checked to
    /// lie inside the buffer.
    fn head(&self, i: usize, h: usize, d: usize, rows: usize) -> *const f32 {
        let first = self.start + i * self.batch + h * d;
        assert!(rows == 0 || first + (rows - 1) * self.row + d <= self.data.len());
        self.data[first..].as_ptr()
    }
}

/// Multi-head self-attention of `(batch, tokens, 3 hidden)` projections (queries, pre-scaled,
/// then keys, then values): `(batch, tokens, hidden)`. `keys`: which keys each query attends.
pub(crate) fn self_attention(
    qkv: &Tensor,
    heads: usize,
    keys: Keys,
) -> Option<candle_core::Result<Tensor>> {
    let (b, n, three_h) = qkv.dims3().ok()?;
    let h = three_h / 3;
    let out = with_f32(qkv, |data| {
        let at = |start| Rows {
            data,
            batch: n * three_h,
            row: three_h,
            start,
        };
        attend([at(0), at(h), at(2 * h)], (b, n, n), heads, h, keys)
    })?;
    Some(Tensor::from_vec(out, (b, n, h), &Device::Cpu))
}

/// Attention of the first position only: `q: (batch, 1, hidden)` (pre-scaled) against
/// `kv: (batch, tokens, 2 hidden)` (keys, then values): `(batch, 1, hidden)`.
pub(crate) fn first_attention(
    q: &Tensor,
    kv: &Tensor,
    heads: usize,
    lengths: Option<&[usize]>,
) -> Option<candle_core::Result<Tensor>> {
    let (b, one, h) = q.dims3().ok()?;
    let (bk, n, two_h) = kv.dims3().ok()?;
    if one != 1 || bk != b || two_h != 2 * h {
        return None;
    }
    let out = with_f32(q, |qs| {
        with_f32(kv, |kvs| {
            let q = Rows {
                data: qs,
                batch: h,
                row: h,
                start: 0,
            };
            let at = |start| Rows {
                data: kvs,
                batch: n * two_h,
                row: two_h,
                start,
            };
            let keys = lengths.map_or(Keys::All, Keys::Lengths);
            attend([q, at(0), at(h)], (b, 1, n), heads, h, keys)
        })
    })
    .flatten()?;
    Some(Tensor::from_vec(out, (b, 1, h), &Device::Cpu))
}

/// Which keys the queries of attention attend.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keys<'a> {
    All,
    /// The real tokens of each input; the rest are padding no query attends to.
    Lengths(&'a [usize]),
    /// Query `r` attends keys `0..=r` only (a decoder's mask: CLIP's text tower).
    Causal,
}

/// `softmax(q kᵀ) v` per input and head, in parallel; `(batch, queries, keys)` sizes.
/// Returns `(batch, queries, hidden)` row-major.
fn attend(
    [q, k, v]: [Rows; 3],
    (b, nq, nk): (usize, usize, usize),
    heads: usize,
    hidden: usize,
    mask: Keys,
) -> Vec<f32> {
    let d = hidden / heads.max(1);
    let keys_of = |i: usize| match mask {
        Keys::Lengths(l) => l.get(i).copied().unwrap_or(nk).min(nk),
        Keys::All | Keys::Causal => nk,
    };
    let parts: Vec<Vec<f32>> = (0..b * heads)
        .into_par_iter()
        .map(|task| {
            let (i, h) = (task / heads, task % heads);
            let keys = keys_of(i);
            let mut ctx = vec![0f32; nq * d];
            if keys == 0 || nq == 0 || d == 0 {
                return ctx;
            }
            let mut scores = vec![0f32; nq * keys];
            let (qp, kp, vp) = (
                q.head(i, h, d, nq),
                k.head(i, h, d, keys),
                v.head(i, h, d, keys),
            );
            // SAFETY: `scores` is (nq × keys) row-major; the left-hand side is the head's
            // queries, (nq × d) with row stride q.row; the right-hand side is the keys
            // transposed, element (kk, j) at kp + j · k.row + kk. `Rows::head` checked both
            // ranges lie inside their buffers, which outlive the call and are only read.
            unsafe {
                matmul(
                    (nq, keys, d),
                    Strided {
                        ptr: scores.as_mut_ptr(),
                        row: keys,
                        col: 1,
                    },
                    false,
                    Strided {
                        ptr: qp,
                        row: q.row,
                        col: 1,
                    },
                    Strided {
                        ptr: kp,
                        row: 1,
                        col: k.row,
                    },
                    gemm::Parallelism::None,
                );
            }
            match mask {
                // Row r's keys past r weigh exactly 0, as the reference's -inf scores make them.
                Keys::Causal => vectorised(|| {
                    for (r, row) in scores.chunks_exact_mut(keys).enumerate() {
                        let (seen, ahead) = row.split_at_mut((r + 1).min(keys));
                        softmax(seen);
                        ahead.fill(0.0);
                    }
                }),
                Keys::All | Keys::Lengths(_) => {
                    vectorised(|| scores.chunks_exact_mut(keys).for_each(softmax))
                }
            }
            // SAFETY: `ctx` is (nq × d) row-major; the left-hand side is `scores`, (nq × keys)
            // row-major; the right-hand side is the head's values, (keys × d) with row stride
            // v.row, checked by `Rows::head` to lie inside their buffer.
            unsafe {
                matmul(
                    (nq, d, keys),
                    Strided {
                        ptr: ctx.as_mut_ptr(),
                        row: d,
                        col: 1,
                    },
                    false,
                    Strided {
                        ptr: scores.as_ptr(),
                        row: keys,
                        col: 1,
                    },
                    Strided {
                        ptr: vp,
                        row: v.row,
                        col: 1,
                    },
                    gemm::Parallelism::None,
                );
            }
            ctx
        })
        .collect();
    let mut out = vec![0f32; b * nq * hidden];
    if nq * hidden == 0 {
        return out;
    }
    out.par_chunks_mut(nq * hidden)
        .enumerate()
        .for_each(|(i, o)| {
            for (h, part) in parts[i * heads..(i + 1) * heads].iter().enumerate() {
                for (r, src) in part.chunks_exact(d).enumerate() {
                    o[r * hidden + h * d..r * hidden + (h + 1) * d].copy_from_slice(src);
                }
            }
        });
    out
}

/// Runs `f` compiled for the widest vector unit the CPU has, so that the loops inlined into it
/// vectorise to that width: AVX-512, else AVX2 with FMA, else the baseline (SSE2 on x86-64).
#[inline(always)]
fn vectorised<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx2") && has!("fma") {
            // SAFETY: the CPU has the features `on_avx512` is compiled for.
            return unsafe { on_avx512(f) };
        }
        if has!("avx2") && has!("fma") {
            // SAFETY: the CPU has the features `on_avx2` is compiled for.
            return unsafe { on_avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn on_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn on_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// In-place softmax of one row of scores.
#[inline(always)]
fn softmax(row: &mut [f32]) {
    let max = lanes(row, f32::NEG_INFINITY, |a, b| if a > b { a } else { b });
    for x in row.iter_mut() {
        *x = exp(*x - max);
    }
    let inv = 1.0 / lanes(row, 0.0, |a, b| a + b);
    for x in row.iter_mut() {
        *x *= inv;
    }
}

/// A reduction over eight interleaved accumulators (so that it vectorises), then over those.
#[inline(always)]
fn lanes(xs: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = f(*a, x);
        }
    }
    let mut r = init;
    for a in acc {
        r = f(r, a);
    }
    for &x in tail {
        r = f(r, x);
    }
    r
}

/// `e^x` to about one ulp, branch-free so that loops over it vectorise: `x = n ln 2 + r` with
/// `|r| ≤ ln 2 / 2`, `e^r` by its Taylor polynomial to degree 7 (remainder below 1e-8), `2^n`
/// written into the exponent bits. Inputs below -87 give `e^-87` (≈ 1.6e-38) rather than
/// less: a softmax weight of nothing either way.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5 · 2^23: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = if x < -87.0 { -87.0 } else { x };
    let x = if x > 88.0 { 88.0 } else { x };
    // n = round(x / ln 2), in the low mantissa bits of `shifted` (|n| < 2^22).
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // 2^n: n + 127 in the exponent bits.
    let biased = shifted
        .to_bits()
        .wrapping_sub(ROUND.to_bits())
        .wrapping_add(127);
    p * f32::from_bits(biased << 23)
}

/// QuickGELU, `x·σ(1.702·x) = x / (1 + e^(-1.702·x))`, with [`exp`].
#[inline(always)]
pub(crate) fn quick_gelu(x: f32) -> f32 {
    x / (1.0 + exp(-1.702 * x))
}

/// The exact GELU, `x Φ(x) = x (1 + erf(x / √2)) / 2`, with `1 + erf` written as `erfc(-z)`
/// (no cancellation for negative inputs) and `erfc` by the Chebyshev fit of Numerical Recipes
/// (`erfcc`, fractional error below 1.2e-7 everywhere).
#[inline(always)]
fn gelu(x: f32) -> f32 {
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_204
                                + t * (1.488_515_9 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    // erfc(|x| / √2); erfc(-y) = 2 - erfc(y).
    let tail = t * exp(poly - z * z);
    let one_plus_erf = if x < 0.0 { tail } else { 2.0 - tail };
    0.5 * x * one_plus_erf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32) / 500.0 - 1.0)
            .collect()
    }

    /// Both orientations of the product (few rows, many rows), with each epilogue, against
    /// the textbook loops.
    #[test]
    fn linear_matches_the_definition() {
        let (n, k) = (24, 40);
        for m in [1, 7, TRANSPOSE_BELOW + 9] {
            let (x, w, b, r) = (
                values(m * k, 1),
                values(n * k, 2),
                values(n, 3),
                values(m * n, 4),
            );
            let t =
                |v: &[f32], shape: &[usize]| Tensor::from_slice(v, shape, &Device::Cpu).unwrap();
            let (xt, wt, bt, rt) = (t(&x, &[m, k]), t(&w, &[n, k]), t(&b, &[n]), t(&r, &[m, n]));
            for (name, epilogue) in [
                ("none", Epilogue::None),
                ("gelu", Epilogue::Gelu),
                ("quick_gelu", Epilogue::QuickGelu),
                ("add", Epilogue::Add(&rt)),
            ] {
                let got = linear(&xt, &wt, &bt, epilogue).unwrap().unwrap();
                let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let dot: f32 = (0..k).map(|kk| x[i * k + kk] * w[j * k + kk]).sum();
                        let y = dot + b[j];
                        let expected = match name {
                            "gelu" => gelu(y),
                            "quick_gelu" => y / (1.0 + (-1.702 * y).exp()),
                            "add" => y + r[i * n + j],
                            _ => y,
                        };
                        let d = (got[i * n + j] - expected).abs();
                        assert!(d < 1e-4, "m {m} {name} ({i}, {j}): {d}");
                    }
                }
            }
        }
    }

    #[test]
    fn exp_is_accurate() {
        let mut worst = 0f64;
        for i in 0..=20_000 {
            let x = -87.0 + 175.0 * i as f32 / 20_000.0;
            let rel = ((exp(x) as f64 - (x as f64).exp()) / (x as f64).exp()).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert!(exp(-1e30) < 1e-37 && exp(f32::MIN) >= 0.0);
    }

    #[test]
    fn gelu_is_the_exact_gelu() {
        let mut worst = 0f32;
        for i in 0..=20_000 {
            let x = -12.0 + 24.0 * i as f32 / 20_000.0;
            // candle's erf (a port of Boost's) as the reference.
            let reference = (candle_core::cpu::erf::erf_f64(x as f64 / std::f64::consts::SQRT_2)
                + 1.0)
                * 0.5
                * x as f64;
            worst = worst.max((gelu(x) as f64 - reference).abs() as f32);
        }
        assert!(worst < 1e-6, "absolute error {worst}");
        assert_eq!(gelu(0.0), 0.0);
        assert!(gelu(-100.0).abs() < 1e-30);
        assert_eq!(gelu(100.0), 100.0);
    }
}
