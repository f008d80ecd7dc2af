//! `--prices` read again when the file changes. A ConfigMap mounted as a
//! volume (the prices component, the chart) is updated in place by the
//! kubelet within about a minute of an edit; the next scale-ins are priced
//! with the new prices, without a restart. A file that no longer reads (a
//! bad edit, a ConfigMap gone) keeps the prices before it, and says why
//! once per change.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::SharedPrices;
use crate::input::{parse_prices, read_bounded, Expect, PricesError};
use crate::metrics::Metrics;
use crate::plan::prices::Prices;

/// How often the file is read again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(30);

/// The largest prices file read (as `run` reads it at start).
pub const MAX_BYTES: u64 = 16 << 20;

/// What a new reading of the file means (pure): `None` when its text is the
/// last one read, else the prices it holds or why not.
pub fn reread(source: &str, last: Option<&str>, text: &str) -> Option<Result<Prices, PricesError>> {
    (last != Some(text)).then(|| parse_prices(source, text))
}

/// The file's text, bounded as every input is.
fn read_text(path: &Path) -> Result<String, String> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    read_bounded(&name, file, MAX_BYTES, size, Expect::Text).map_err(|e| e.to_string())
}

/// Reads `path` every [`RELOAD_EVERY`] until `stop`, and replaces `shared`
/// when its text changed and reads.
pub async fn follow(
    path: PathBuf,
    shared: SharedPrices,
    metrics: Arc<Metrics>,
    stop: impl Future<Output = ()> + Send,
) {
    let source = path.display().to_string();
    // the text `run` started with is the one to compare against
    let mut last = read_text(&path).ok();
    let mut last_error: Option<String> = None;
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(RELOAD_EVERY) => {}
        }
        let text = match read_text(&path) {
            Ok(t) => t,
            Err(e) => {
                if last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(error = %e, "the prices file does not read: the prices before it stay");
                    metrics.prices_reload("failed");
                    last_error = Some(e);
                }
                continue;
            }
        };
        last_error = None;
        match reread(&source, last.as_deref(), &text) {
            None => {}
            Some(Ok(prices)) => {
                tracing::info!(
                    prices = %source,
                    billing_classes = prices.billing_classes.len(),
                    instance_types = prices.instance_types.len(),
                    "the prices file changed: the next scale-ins are priced with it"
                );
                shared.set(prices);
                metrics.prices_reload("ok");
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the prices file changed but does not read: the prices before it stay");
                metrics.prices_reload("failed");
            }
        }
        last = Some(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_changed_text_is_read_again_and_a_bad_one_says_why() {
        let a = "billingClasses: {spot: 0.04}\n";
        assert!(reread("p.yaml", Some(a), a).is_none());
        let new = reread("p.yaml", Some(a), "billingClasses: {spot: 0.05}\n")
            .expect("changed")
            .expect("reads");
        assert_eq!(
            new.price_of(None, Some("spot")).map(|(m, _)| m.to_string()),
            Some("0.05".into())
        );
        let bad = reread("p.yaml", Some(a), "billingClasses: {spot: -1}\n")
            .expect("changed")
            .unwrap_err();
        assert!(
            bad.to_string()
                .starts_with("p.yaml: billingClasses.spot: must be a price per hour"),
            "{bad}"
        );
        // never read before (the file did not read at start): any text is new
        assert!(reread("p.yaml", None, a).is_some());
    }

    #[tokio::test]
    async fn an_edited_file_replaces_the_prices_and_a_bad_edit_keeps_them() {
        tokio::time::pause();
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("prices.yaml");
        std::fs::write(&path, "billingClasses: {spot: 0.04}\n").expect("written");
        let shared =
            SharedPrices::new(parse_prices("x", "billingClasses: {spot: 0.04}").expect("prices"));
        let metrics = Arc::new(Metrics::new(1.0, Box::new(Default::default)));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(follow(
            path.clone(),
            shared.clone(),
            metrics.clone(),
            async {
                let _ = rx.await;
            },
        ));
        let spot = |s: &SharedPrices| {
            s.get()
                .price_of(None, Some("spot"))
                .map(|(m, _)| m.to_string())
        };
        // let the task read the first text before the edit
        tokio::task::yield_now().await;
        std::fs::write(&path, "billingClasses: {spot: 0.05}\n").expect("written");
        tokio::time::sleep(RELOAD_EVERY + Duration::from_secs(1)).await;
        assert_eq!(spot(&shared), Some("0.05".into()));
        std::fs::write(&path, "billingClasses: {spot: lots}\n").expect("written");
        tokio::time::sleep(RELOAD_EVERY).await;
        assert_eq!(
            spot(&shared),
            Some("0.05".into()),
            "a bad edit keeps the prices"
        );
        let text = metrics.encode();
        assert!(
            text.contains("deletion_cost_prices_reloads_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("deletion_cost_prices_reloads_total{result=\"failed\"} 1"),
            "{text}"
        );
        let _ = tx.send(());
        task.await.expect("the task ends");
    }
}
