//! Bit-exact ports of the Go runtime pieces the log-scale comparison uses:
//! `time.Time.Sub` saturation and `math.Log2` (pure-Go `Log`, which the amd64
//! assembly version mirrors operation for operation). A Rust `f64::log2` can
//! differ by one ulp next to powers of two, which changes the truncated bucket.

/// Go's `t1.Sub(t2)` for nanosecond instants: saturates at the int64 range.
pub fn go_sub_nanos(t1: i128, t2: i128) -> i64 {
    let d = t1 - t2;
    if d > i128::from(i64::MAX) {
        i64::MAX
    } else if d < i128::from(i64::MIN) {
        i64::MIN
    } else {
        d as i64
    }
}

/// Go's `math.Frexp` for finite, non-zero, normal or subnormal inputs.
fn frexp(f: f64) -> (f64, i32) {
    if f == 0.0 || !f.is_finite() {
        return (f, 0);
    }
    let (mut f, mut exp) = (f, 0i32);
    // normalize subnormals
    if f.abs() < f64::MIN_POSITIVE {
        f *= (1u64 << 52) as f64;
        exp = -52;
    }
    let mut x = f.to_bits();
    exp += ((x >> 52) & 0x7ff) as i32 - 1023 + 1;
    x &= !(0x7ffu64 << 52);
    x |= 1022u64 << 52;
    (f64::from_bits(x), exp)
}

/// Go's pure `math.Log` (FreeBSD e_log.c algorithm).
// constants copied verbatim from Go, which keeps the extra digits
#[allow(clippy::excessive_precision)]
fn go_log(x: f64) -> f64 {
    const LN2_HI: f64 = 6.93147180369123816490e-01;
    const LN2_LO: f64 = 1.90821492927058770002e-10;
    const L1: f64 = 6.666666666666735130e-01;
    const L2: f64 = 3.999999999940941908e-01;
    const L3: f64 = 2.857142874366239149e-01;
    const L4: f64 = 2.222219843214978396e-01;
    const L5: f64 = 1.818357216161805012e-01;
    const L6: f64 = 1.531383769920937332e-01;
    const L7: f64 = 1.479819860511658591e-01;
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    if x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    let (mut f1, mut ki) = frexp(x);
    if f1 < std::f64::consts::SQRT_2 / 2.0 {
        f1 *= 2.0;
        ki -= 1;
    }
    let f = f1 - 1.0;
    let k = f64::from(ki);
    let s = f / (2.0 + f);
    let s2 = s * s;
    let s4 = s2 * s2;
    let t1 = s2 * (L1 + s4 * (L3 + s4 * (L5 + s4 * L7)));
    let t2 = s4 * (L2 + s4 * (L4 + s4 * L6));
    let r = t1 + t2;
    let hfsq = 0.5 * f * f;
    k * LN2_HI - ((hfsq - (s * (hfsq + r) + k * LN2_LO)) - f)
}

/// Go's `math.Log2`.
pub fn go_log2(x: f64) -> f64 {
    let (frac, exp) = frexp(x);
    if frac == 0.5 {
        return f64::from(exp - 1);
    }
    go_log(frac) * std::f64::consts::LOG2_E + f64::from(exp)
}

/// One side of upstream's `logarithmicRankDiff`: `int64(math.Log2(float64(d)))`
/// for a positive duration, -1 otherwise.
pub fn log_bucket(d: i64) -> i64 {
    if d <= 0 {
        return -1;
    }
    // d = m * 2^k with m in [1, 2). Unless m is within 2^-30 of 1 or 2, where
    // the float result may round across an integer, truncating Go's Log2
    // gives k: its error is about 1e-14, far below m's distance from them.
    let k = 63 - d.leading_zeros();
    if k > 30 {
        let mantissa = (d >> (k - 30)) & ((1 << 30) - 1);
        if mantissa != 0 && mantissa != (1 << 30) - 1 {
            return k.into();
        }
    }
    // Go converts float64 -> int64 by truncation toward zero.
    go_log2(d as f64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_powers_of_two() {
        for k in 0..63 {
            assert_eq!(log_bucket(1i64 << k), k as i64, "2^{k}");
        }
    }

    #[test]
    fn just_below_powers_of_two_rounds_like_go() {
        // Go: int64(math.Log2(float64(1<<50 - 1))) == 50, not 49, because the
        // float result rounds up to 50.0.
        assert_eq!(log_bucket((1i64 << 50) - 1), 50);
        assert_eq!(log_bucket(3), 1);
        assert_eq!(log_bucket(7), 2);
        assert_eq!(log_bucket(i64::MAX), 63);
    }

    /// The shortcut past the float computation answers as it does, near
    /// every power of two and at random points between.
    #[test]
    fn shortcut_matches_go_log2() {
        let slow = |d: i64| go_log2(d as f64) as i64;
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for k in 0..63u32 {
            let p = 1i64 << k;
            for off in [-(1i64 << 20), -3, -2, -1, 0, 1, 2, 3, 1 << 20] {
                let d = p.saturating_add(off);
                if d > 0 {
                    assert_eq!(log_bucket(d), slow(d), "2^{k} {off:+}");
                }
            }
            for _ in 0..2000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // uniform in [2^k, 2^(k+1))
                let d = p | ((x as i64 & i64::MAX) & (p - 1));
                assert_eq!(log_bucket(d), slow(d), "{d}");
            }
        }
        assert_eq!(log_bucket(i64::MAX), slow(i64::MAX));
    }

    #[test]
    fn non_positive_is_minus_one() {
        assert_eq!(log_bucket(0), -1);
        assert_eq!(log_bucket(-5), -1);
        assert_eq!(log_bucket(i64::MIN), -1);
    }

    #[test]
    fn saturating_sub() {
        assert_eq!(go_sub_nanos(i128::MAX / 2, -(i128::MAX / 2)), i64::MAX);
        assert_eq!(go_sub_nanos(-(i128::MAX / 2), i128::MAX / 2), i64::MIN);
        assert_eq!(go_sub_nanos(10, 3), 7);
    }

    #[test]
    fn matches_std_away_from_powers_of_two() {
        for d in [5i64, 1000, 123_456_789, 86_400_000_000_000] {
            assert_eq!(log_bucket(d), (d as f64).log2() as i64);
        }
    }
}
