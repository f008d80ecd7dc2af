//! The samples reader (`plan --samples`) and the Prometheus answer parser:
//! any text in, never a panic out.

#![no_main]

use deletion_cost::signals::samples::{
    map_series, parse_query_response, parse_samples, read_samples, SignalSpec,
};
use libfuzzer_sys::fuzz_target;

/// 2023-11-14T22:13:20Z in seconds.
const NOW_SECS: f64 = 1_700_000_000.0;

fn spec(index: usize, pod_label: &str, max_age_secs: Option<f64>) -> SignalSpec {
    SignalSpec {
        index,
        pod_label: pod_label.to_string(),
        max_age_secs,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // one, none and several utilisation signals, as policies have
    let spec_sets = [
        vec![],
        vec![spec(0, "pod", Some(300.0))],
        vec![spec(1, "pod", None), spec(3, "instance", Some(0.0))],
    ];
    if let Err(e) = parse_samples("fuzz", text) {
        let _ = e.to_string();
    }
    for specs in &spec_sets {
        for now in [None, Some(NOW_SECS)] {
            match read_samples("fuzz", text, specs, now) {
                Ok(loaded) => {
                    for index in loaded.samples.utilization.keys() {
                        assert!(
                            specs.iter().any(|s| s.index == *index),
                            "samples only for the policy's signals"
                        );
                    }
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        }
    }
    match parse_query_response(text) {
        Ok(resp) => {
            let mapped = map_series(&resp.series, "pod", Some(NOW_SECS), Some(300.0));
            assert!(mapped.without_pod_label <= resp.series.len());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
