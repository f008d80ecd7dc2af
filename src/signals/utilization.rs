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
    let bucket = bucket_of(value, min, max, buckets);
    match previous {
        Some(p) if p <= last && p != bucket => {
            let (lo, hi) = (edge(min, max, buckets, p), edge(min, max, buckets, p + 1));
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

/// The lower edge of bucket `i`: `min + (max - min) * i / buckets`, the
/// number a user writes down for it (0.6 for the seventh of ten over 0..1).
fn edge(min: f64, max: f64, buckets: u32, i: u32) -> f64 {
    min + (max - min) * f64::from(i) / f64::from(buckets)
}

/// The bucket `value` falls in, a value on an edge in the upper one:
/// `(value - min) / width` can land a hair below an edge it is on
/// (0.6 / 0.1 = 5.999...), so the estimate is checked against the edges.
fn bucket_of(value: f64, min: f64, max: f64, buckets: u32) -> u32 {
    let last = buckets - 1;
    let raw = ((value - min) * f64::from(buckets) / (max - min)).floor();
    let mut b = if raw < 0.0 {
        0
    } else if raw >= f64::from(last) {
        last
    } else {
        raw as u32
    };
    while b < last && value >= edge(min, max, buckets, b + 1) {
        b += 1;
    }
    while b > 0 && value < edge(min, max, buckets, b) {
        b -= 1;
    }
    b
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

    #[test]
    fn a_value_on_an_edge_lands_in_the_upper_bucket() {
        // 0.6 / 0.1 is 5.999... in floating point
        assert_eq!(quantize(0.6, 0.0, 1.0, 10, None, 0.0), 6);
        assert_eq!(quantize(0.3, 0.0, 1.0, 10, None, 0.0), 3);
        assert_eq!(quantize(0.7, 0.0, 1.0, 10, None, 0.0), 7);
        assert_eq!(quantize(0.5999999, 0.0, 1.0, 10, None, 0.0), 5);
    }

    proptest! {
        /// Every edge, written as a user writes it, starts its bucket.
        #[test]
        fn edges_land_in_the_upper_bucket(
            min in -100i32..100, span in 1i32..1000, scale in prop::sample::select(vec![1.0, 0.1, 0.01, 0.001]),
            buckets in 1u32..50, i in 0u32..50,
        ) {
            prop_assume!(i < buckets);
            let (lo, hi) = (f64::from(min) * scale, f64::from(min + span) * scale);
            let on_edge = edge(lo, hi, buckets, i);
            prop_assert_eq!(quantize(on_edge, lo, hi, buckets, None, 0.0), i);
        }

        /// A larger value never lands in a lower bucket.
        #[test]
        fn buckets_grow_with_the_value(a in -1.0f64..3.0, b in -1.0f64..3.0, buckets in 1u32..30) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(quantize(lo, 0.0, 2.0, buckets, None, 0.0) <= quantize(hi, 0.0, 2.0, buckets, None, 0.0));
        }

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
