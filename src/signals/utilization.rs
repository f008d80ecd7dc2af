//! Quantisation of a utilisation value into buckets, with hysteresis so a
//! value wobbling on a boundary does not flip the bucket (and cause a patch).

/// Bucket of `value` in `[min, max]` split into `buckets` equal parts, given
/// the bucket it was in last time. Values outside the range clamp to the end
/// buckets. With `previous`, the bucket only changes once the value is more
/// than `hysteresis` (a fraction of a bucket's width) past that bucket's edges.
pub fn quantize(
    value: f64,
    min: f64,
    max: f64,
    buckets: u32,
    previous: Option<u32>,
    hysteresis: f64,
) -> u32 {
    let buckets = buckets.max(1);
    let last = buckets - 1;
    let width = (max - min) / f64::from(buckets);
    if width.is_nan() || width <= 0.0 || !value.is_finite() {
        return 0;
    }
    let raw = ((value - min) / width).floor();
    let bucket = if raw < 0.0 {
        0
    } else if raw >= f64::from(last) {
        last
    } else {
        raw as u32
    };
    match previous {
        Some(p) if p <= last && p != bucket => {
            let lo = min + f64::from(p) * width;
            let hi = lo + width;
            let margin = hysteresis.max(0.0) * width;
            // the end buckets extend to infinity, so only inner edges count
            let below = p > 0 && value < lo - margin;
            let above = p < last && value >= hi + margin;
            if below || above {
                bucket
            } else {
                p
            }
        }
        _ => bucket,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_and_clamping() {
        assert_eq!(quantize(0.0, 0.0, 2.0, 10, None, 0.2), 0);
        assert_eq!(quantize(0.19, 0.0, 2.0, 10, None, 0.2), 0);
        assert_eq!(quantize(0.2, 0.0, 2.0, 10, None, 0.2), 1);
        assert_eq!(quantize(1.99, 0.0, 2.0, 10, None, 0.2), 9);
        assert_eq!(quantize(2.0, 0.0, 2.0, 10, None, 0.2), 9);
        assert_eq!(quantize(50.0, 0.0, 2.0, 10, None, 0.2), 9);
        assert_eq!(quantize(-1.0, 0.0, 2.0, 10, None, 0.2), 0);
        assert_eq!(quantize(f64::NAN, 0.0, 2.0, 10, None, 0.2), 0);
        assert_eq!(quantize(1.0, 0.0, 2.0, 1, None, 0.2), 0);
    }

    #[test]
    fn hysteresis_holds_near_the_edge() {
        // bucket 1 is [0.2, 0.4); margin 0.04
        assert_eq!(quantize(0.41, 0.0, 2.0, 10, Some(1), 0.2), 1);
        assert_eq!(quantize(0.45, 0.0, 2.0, 10, Some(1), 0.2), 2);
        assert_eq!(quantize(0.17, 0.0, 2.0, 10, Some(1), 0.2), 1);
        assert_eq!(quantize(0.15, 0.0, 2.0, 10, Some(1), 0.2), 0);
        // far moves always change
        assert_eq!(quantize(1.9, 0.0, 2.0, 10, Some(1), 0.2), 9);
    }

    proptest! {
        #[test]
        fn always_in_range(v in any::<f64>(), p in proptest::option::of(0u32..20), b in 1u32..20, h in 0.0f64..1.0) {
            let q = quantize(v, 0.0, 2.0, b, p, h);
            prop_assert!(q < b);
        }

        #[test]
        fn in_bucket_drift_never_changes(bucket in 0u32..10, f1 in 0.0f64..1.0, f2 in 0.0f64..1.0) {
            let w = 0.2;
            let v1 = f64::from(bucket) * w + f1 * w * 0.999;
            let v2 = f64::from(bucket) * w + f2 * w * 0.999;
            let q1 = quantize(v1, 0.0, 2.0, 10, None, 0.2);
            prop_assert_eq!(quantize(v2, 0.0, 2.0, 10, Some(q1), 0.2), q1);
        }
    }
}
